//! The two configuration files of the capability system, `capability.yaml` and
//! `executor.yaml`: their format, strict parsing (through `yaml.rs`) and checks.
//!
//! ```yaml
//! # capabilities/<name>/capability.yaml
//! name: triage-issues          # required; the folder's name
//! type: script                 # required; routed to the executor supporting this type
//! version: 1.0.0               # optional
//! description: Label new issues
//! entry: index.js              # `script`: the program, relative to this folder (required)
//! tools: tools.yaml            # `script`: its tools file, relative to this folder (optional)
//! input_schema: { type: object }   # optional; params are checked against it before anything runs
//! output_schema: { type: object }  # optional; results are checked against it
//! timeout_ms: 30000            # optional; default 30000
//! permissions: [issues:write]  # optional; the caller must hold every one
//! author: ops                  # optional
//! config: {}                   # optional; free-form, passed on to the executor
//! ```
//!
//! ```yaml
//! # executors/<name>/executor.yaml
//! name: report-executor        # required; the folder's name
//! version: 1.0.0
//! description: Builds reports
//! supportedTypes: [report]     # required, at least one
//! command: ./run.py            # required outside the built-in root; relative to this folder
//! args: []
//! env: {}
//! timeout_seconds: 600         # optional; a ceiling on every execution it runs
//! author: ops
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use execbox_host::{check_command, check_permission, resolve_command, yaml, Schema};

/// The default time limit of a capability without `timeout_ms` (30 s).
pub const DEFAULT_CAPABILITY_TIMEOUT_MS: u64 = 30_000;

/// The largest time limit of a capability or an execution (24 h).
pub const MAX_CAPABILITY_TIMEOUT_MS: u64 = 86_400_000;

/// A `capability.yaml`, as written.
#[derive(Clone, Debug, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CapabilityDef {
    pub name: String,
    #[serde(rename = "type")]
    pub capability_type: String,
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub entry: Option<String>,
    #[serde(default)]
    pub tools: Option<String>,
    #[serde(default)]
    pub input_schema: Option<Value>,
    #[serde(default)]
    pub output_schema: Option<Value>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub permissions: Vec<String>,
    #[serde(default)]
    pub author: Option<String>,
    #[serde(default)]
    pub config: Option<Value>,
}

/// An `executor.yaml`, as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExecutorDef {
    pub name: String,
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(rename = "supportedTypes")]
    pub supported_types: Vec<String>,
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
    #[serde(default)]
    pub author: Option<String>,
}

/// A checked capability.
#[derive(Clone, Debug)]
pub(crate) struct CapabilityConfig {
    pub def: CapabilityDef,
    /// The folder holding `capability.yaml`.
    pub dir: PathBuf,
    /// `entry`, resolved against the folder.
    pub entry: Option<PathBuf>,
    /// `tools`, resolved against the folder.
    pub tools: Option<PathBuf>,
    pub timeout_ms: u64,
}

/// How an executor runs its capabilities.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ExecutorKind {
    /// The built-in QuickJS executor of `script` capabilities.
    Script,
    /// A command, per the external executor protocol.
    External {
        command: PathBuf,
        args: Vec<String>,
        env: Vec<(String, String)>,
    },
}

/// A checked executor.
#[derive(Clone, Debug)]
pub(crate) struct ExecutorConfig {
    pub def: ExecutorDef,
    /// The folder holding `executor.yaml` (a virtual path for the built-in root).
    pub dir: PathBuf,
    pub kind: ExecutorKind,
}

/// A name of a capability or an executor: it is a folder name, so no separators, no dots
/// first, nothing odd.
fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "name `{name}` is not a valid name: use ASCII letters, digits, `-`, `_` and `.` (not first), at most 128 characters"
        ))
    }
}

/// A path inside `dir` from a relative path given in a config file.
fn inside(dir: &Path, field: &str, value: &str) -> Result<PathBuf, String> {
    let p = Path::new(value);
    if value.is_empty()
        || p.is_absolute()
        || p.components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return Err(format!(
            "{field}: `{value}` must be a relative path inside the capability's folder"
        ));
    }
    let joined = dir.join(p);
    // Through symbolic links too: a link to a file elsewhere (`entry: key -> ~/.ssh/id_rsa`)
    // would read it as the capability's own.
    match (joined.canonicalize(), dir.canonicalize()) {
        (Ok(real), Ok(real_dir)) if !real.starts_with(&real_dir) => Err(format!(
            "{field}: `{value}` leads outside the capability's folder (to {}) through a symbolic link; keep the file inside the folder",
            real.display()
        )),
        (Ok(real), Ok(_)) => Ok(real),
        _ => Ok(joined),
    }
}

/// Reads and checks `dir/capability.yaml`; `folder` is the folder's name.
pub(crate) fn load_capability(dir: &Path, folder: &str) -> Result<CapabilityConfig, String> {
    let file = dir.join("capability.yaml");
    let def: CapabilityDef = yaml::from_file(&file).map_err(|e| e.to_string())?;
    let fail = |m: String| format!("{}: {m}", file.display());
    check_name(&def.name).map_err(fail)?;
    if def.name != folder {
        return Err(fail(format!(
            "name `{}` differs from its folder `{folder}`; rename one so they agree",
            def.name
        )));
    }
    if def.capability_type.trim().is_empty() {
        return Err(fail("type: must not be empty (e.g. `type: script`)".into()));
    }
    let entry = def
        .entry
        .as_deref()
        .map(|e| inside(dir, "entry", e))
        .transpose()
        .map_err(fail)?;
    let tools = def
        .tools
        .as_deref()
        .map(|t| inside(dir, "tools", t))
        .transpose()
        .map_err(fail)?;
    if def.capability_type == "script" {
        match &entry {
            None => {
                return Err(fail(
                    "entry: is required for a `script` capability (e.g. `entry: index.js`)".into(),
                ))
            }
            Some(p) if !p.is_file() => {
                return Err(fail(format!("entry: {} does not exist", p.display())))
            }
            Some(_) => {}
        }
    }
    if let Some(t) = &tools {
        if !t.is_file() {
            return Err(fail(format!("tools: {} does not exist", t.display())));
        }
    }
    for (field, schema) in [
        ("input_schema", &def.input_schema),
        ("output_schema", &def.output_schema),
    ] {
        if let Some(s) = schema {
            Schema::compile(s)
                .map_err(|e| fail(format!("{field}: not a usable JSON Schema: {e}")))?;
        }
    }
    for p in &def.permissions {
        check_permission(p).map_err(|e| fail(format!("permissions: {e}")))?;
    }
    let timeout_ms = def.timeout_ms.unwrap_or(DEFAULT_CAPABILITY_TIMEOUT_MS);
    if timeout_ms == 0 || timeout_ms > MAX_CAPABILITY_TIMEOUT_MS {
        return Err(fail(format!(
            "timeout_ms: must be above 0 and at most {MAX_CAPABILITY_TIMEOUT_MS}, got {timeout_ms}"
        )));
    }
    Ok(CapabilityConfig {
        def,
        dir: dir.to_path_buf(),
        entry,
        tools,
        timeout_ms,
    })
}

/// Checks an executor definition read from `file` (in folder `dir`, named `folder`);
/// `builtin`: whether it is the built-in root's, where no `command` means the script executor.
pub(crate) fn check_executor(
    def: ExecutorDef,
    dir: &Path,
    file: &Path,
    folder: &str,
    builtin: bool,
) -> Result<ExecutorConfig, String> {
    let fail = |m: String| format!("{}: {m}", file.display());
    check_name(&def.name).map_err(fail)?;
    if def.name != folder {
        return Err(fail(format!(
            "name `{}` differs from its folder `{folder}`; rename one so they agree",
            def.name
        )));
    }
    if def.supported_types.is_empty() || def.supported_types.iter().any(|t| t.trim().is_empty()) {
        return Err(fail(
            "supportedTypes: must list at least one non-empty type (e.g. `supportedTypes: [report]`)".into(),
        ));
    }
    if def.timeout_seconds == Some(0) {
        return Err(fail("timeout_seconds: must be above 0".into()));
    }
    let kind = match &def.command {
        None if builtin => ExecutorKind::Script,
        None => {
            return Err(fail(
                "command: is required (the program that runs this executor's capabilities, e.g. `command: ./run.py`)".into(),
            ))
        }
        Some(command) => {
            if command.trim().is_empty() {
                return Err(fail("command: must not be empty".into()));
            }
            for (k, v) in &def.env {
                if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
                    return Err(fail(format!("env.{k}: is not a valid environment variable")));
                }
            }
            if def.args.iter().any(|a| a.contains('\0')) {
                return Err(fail("args: must not contain NUL".into()));
            }
            let resolved = resolve_command(command, dir);
            check_command(&resolved, def.env.get("PATH").map(String::as_str))
                .map_err(|e| fail(format!("command: {e}")))?;
            ExecutorKind::External {
                command: resolved,
                args: def.args.clone(),
                env: def.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            }
        }
    };
    Ok(ExecutorConfig {
        def,
        dir: dir.to_path_buf(),
        kind,
    })
}

/// Reads and checks `dir/executor.yaml`.
pub(crate) fn load_executor(dir: &Path, folder: &str) -> Result<ExecutorConfig, String> {
    let file = dir.join("executor.yaml");
    let def: ExecutorDef = yaml::from_file(&file).map_err(|e| e.to_string())?;
    check_executor(def, dir, &file, folder, false)
}

/// Parses a built-in executor from its embedded text.
pub(crate) fn builtin_executor(text: &str, name: &str) -> Result<ExecutorConfig, String> {
    let dir = PathBuf::from(format!("<builtin>/executors/{name}"));
    let file = dir.join("executor.yaml");
    let def: ExecutorDef = yaml::from_str(text, &file).map_err(|e| e.to_string())?;
    check_executor(def, &dir, &file, name, true)
}
