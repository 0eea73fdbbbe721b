//! The registry: capabilities and executors discovered from three roots, project over global
//! over built-in, with the invalid ones skipped (and reported by [`Registry::issues`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use super::config::{self, CapabilityConfig, ExecutorConfig, ExecutorKind};
use super::records::{CapabilityError, CapabilityErrorCode};

/// The built-in root, shipped in the binary: (executor folder, its `executor.yaml`).
const BUILTIN_EXECUTORS: &[(&str, &str)] = &[(
    "script",
    include_str!("builtin/executors/script/executor.yaml"),
)];

/// Where a capability or an executor comes from, highest priority first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The project's `.execbox/`.
    Project,
    /// `$EXECBOX_HOME`, else `$XDG_CONFIG_HOME/execbox`, else `~/.config/execbox`.
    Global,
    /// Shipped in the binary.
    Builtin,
}

impl Source {
    /// `project`, `global` or `builtin`.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Project => "project",
            Source::Global => "global",
            Source::Builtin => "builtin",
        }
    }
}

/// The roots to discover from. Each holds `capabilities/<name>/capability.yaml` and
/// `executors/<name>/executor.yaml`; the built-in root is always there.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RegistryRoots {
    /// The project root: a `.execbox/` folder.
    pub project: Option<PathBuf>,
    /// The global root.
    pub global: Option<PathBuf>,
}

impl RegistryRoots {
    /// The project's `.execbox/`: inside `project` when given (the project folder, or the
    /// `.execbox` folder itself), else the first found walking up from `cwd`; and the global
    /// root from the environment ([`RegistryRoots::global_root`]).
    pub fn discover(cwd: &Path, project: Option<&Path>) -> RegistryRoots {
        let project = match project {
            Some(dir) if dir.file_name().is_some_and(|n| n == ".execbox") => {
                Some(dir.to_path_buf())
            }
            Some(dir) => Some(dir.join(".execbox")),
            None => cwd
                .ancestors()
                .map(|d| d.join(".execbox"))
                .find(|d| d.is_dir()),
        };
        RegistryRoots {
            project: project.map(|p| std::path::absolute(&p).unwrap_or(p)),
            global: Self::global_root(),
        }
    }

    /// `$EXECBOX_HOME`, else `$XDG_CONFIG_HOME/execbox`, else `$HOME/.config/execbox`
    /// (`None` when none of these variables is set).
    pub fn global_root() -> Option<PathBuf> {
        let var = |name| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        var("EXECBOX_HOME")
            .or_else(|| var("XDG_CONFIG_HOME").map(|d| d.join("execbox")))
            .or_else(|| var("HOME").map(|d| d.join(".config").join("execbox")))
    }
}

/// A capability of the registry, as listed.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CapabilityInfo {
    /// Its name.
    pub name: String,
    /// Its type.
    #[serde(rename = "type")]
    pub capability_type: String,
    /// Its version.
    pub version: Option<String>,
    /// What it does.
    pub description: Option<String>,
    /// Its folder.
    pub path: PathBuf,
    /// Which root it comes from.
    pub source: Source,
    /// Permissions needed to start it.
    pub permissions: Vec<String>,
    /// Its `input_schema`.
    pub input_schema: Option<Value>,
    /// Its `output_schema`.
    pub output_schema: Option<Value>,
    /// Its time limit.
    pub timeout_ms: u64,
    /// The executor that runs it now, if any supports its type.
    pub executor: Option<String>,
}

/// An executor of the registry, as listed.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutorInfo {
    /// Its name.
    pub name: String,
    /// Its version.
    pub version: Option<String>,
    /// What it does.
    pub description: Option<String>,
    /// The types it supports.
    pub supported_types: Vec<String>,
    /// The types it is chosen for (those no higher-priority executor claims).
    pub active_types: Vec<String>,
    /// Its folder.
    pub path: PathBuf,
    /// Which root it comes from.
    pub source: Source,
    /// The command it runs; `None` for a built-in executor.
    pub command: Option<PathBuf>,
    /// Its time ceiling, in seconds.
    pub timeout_seconds: Option<u64>,
    /// Its author.
    pub author: Option<String>,
}

/// A configuration the registry skipped, and why.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigIssue {
    /// `INVALID_CAPABILITY_CONFIG` or `INVALID_EXECUTOR_CONFIG`.
    pub code: CapabilityErrorCode,
    /// The folder.
    pub path: PathBuf,
    /// Its root.
    pub source: Source,
    /// Why it was skipped, naming the file, line and column when known.
    pub message: String,
}

#[derive(Clone, Debug)]
pub(crate) struct Capability {
    pub config: CapabilityConfig,
    pub source: Source,
}

#[derive(Clone, Debug)]
pub(crate) struct ExecutorEntry {
    pub config: ExecutorConfig,
    pub source: Source,
}

/// Capabilities and executors by name, types mapped to executors, and what was skipped.
/// Built once by [`Registry::load`]; reload by loading again.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    roots: RegistryRoots,
    capabilities: BTreeMap<String, Capability>,
    executors: BTreeMap<String, ExecutorEntry>,
    /// type -> executor name.
    types: BTreeMap<String, String>,
    issues: Vec<ConfigIssue>,
}

impl Registry {
    /// Discovers everything under `roots` (plus the built-in root). Never fails: an
    /// unreadable or invalid configuration is skipped with a warning and listed in
    /// [`Registry::issues`].
    pub fn load(roots: RegistryRoots) -> Registry {
        let mut registry = Registry {
            roots: roots.clone(),
            ..Registry::default()
        };
        // Lowest priority first: a higher root replaces by name and takes over types.
        for (name, text) in BUILTIN_EXECUTORS {
            match config::builtin_executor(text, name) {
                Ok(config) => registry.add_executor(config, Source::Builtin),
                Err(message) => registry.skip(
                    CapabilityErrorCode::InvalidExecutorConfig,
                    PathBuf::from(format!("<builtin>/executors/{name}")),
                    Source::Builtin,
                    message,
                ),
            }
        }
        for (root, source) in [
            (&roots.global, Source::Global),
            (&roots.project, Source::Project),
        ] {
            if let Some(root) = root {
                registry.load_root(root, source);
            }
        }
        registry
    }

    fn skip(&mut self, code: CapabilityErrorCode, path: PathBuf, source: Source, message: String) {
        tracing::warn!(%code, source = source.as_str(), "skipped {}: {message}", path.display());
        self.issues.push(ConfigIssue {
            code,
            path,
            source,
            message,
        });
    }

    fn add_executor(&mut self, config: ExecutorConfig, source: Source) {
        let name = config.def.name.clone();
        // A replaced executor of a lower root gives up its types.
        if self.executors.contains_key(&name) {
            self.types.retain(|_, e| *e != name);
        }
        for t in &config.def.supported_types {
            match self.types.get(t) {
                Some(other)
                    if *other != name
                        && self
                            .executors
                            .get(other)
                            .is_some_and(|e| e.source == source) =>
                {
                    tracing::warn!(
                        "executors `{other}` and `{name}` of the {} root both support type `{t}`; `{other}` keeps it",
                        source.as_str()
                    );
                }
                _ => {
                    self.types.insert(t.clone(), name.clone());
                }
            }
        }
        self.executors
            .insert(name, ExecutorEntry { config, source });
    }

    fn load_root(&mut self, root: &Path, source: Source) {
        for (kind, code) in [
            ("executors", CapabilityErrorCode::InvalidExecutorConfig),
            ("capabilities", CapabilityErrorCode::InvalidCapabilityConfig),
        ] {
            let dir = root.join(kind);
            let entries = match std::fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    self.skip(
                        code,
                        dir.clone(),
                        source,
                        format!("cannot read {}: {e}", dir.display()),
                    );
                    continue;
                }
            };
            let mut folders: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect();
            folders.sort();
            for folder in folders {
                let name = folder
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                if kind == "executors" {
                    match config::load_executor(&folder, &name) {
                        Ok(config) => self.add_executor(config, source),
                        Err(message) => self.skip(code, folder, source, message),
                    }
                } else {
                    match config::load_capability(&folder, &name) {
                        Ok(config) => {
                            self.capabilities
                                .insert(name, Capability { config, source });
                        }
                        Err(message) => self.skip(code, folder, source, message),
                    }
                }
            }
        }
    }

    /// The roots it was loaded from.
    pub fn roots(&self) -> &RegistryRoots {
        &self.roots
    }

    /// What was skipped, and why.
    pub fn issues(&self) -> &[ConfigIssue] {
        &self.issues
    }

    /// Every capability, by name.
    pub fn capabilities(&self) -> Vec<CapabilityInfo> {
        self.capabilities.values().map(|c| self.info(c)).collect()
    }

    /// One capability.
    pub fn capability(&self, name: &str) -> Option<CapabilityInfo> {
        self.capabilities.get(name).map(|c| self.info(c))
    }

    fn info(&self, c: &Capability) -> CapabilityInfo {
        let d = &c.config.def;
        CapabilityInfo {
            name: d.name.clone(),
            capability_type: d.capability_type.clone(),
            version: d.version.clone(),
            description: d.description.clone(),
            path: c.config.dir.clone(),
            source: c.source,
            permissions: d.permissions.clone(),
            input_schema: d.input_schema.clone(),
            output_schema: d.output_schema.clone(),
            timeout_ms: c.config.timeout_ms,
            executor: self.types.get(&d.capability_type).cloned(),
        }
    }

    /// Every executor, by name.
    pub fn executors(&self) -> Vec<ExecutorInfo> {
        self.executors
            .values()
            .map(|e| {
                let d = &e.config.def;
                ExecutorInfo {
                    name: d.name.clone(),
                    version: d.version.clone(),
                    description: d.description.clone(),
                    supported_types: d.supported_types.clone(),
                    active_types: self
                        .types
                        .iter()
                        .filter(|(_, n)| **n == d.name)
                        .map(|(t, _)| t.clone())
                        .collect(),
                    path: e.config.dir.clone(),
                    source: e.source,
                    command: match &e.config.kind {
                        ExecutorKind::Script => None,
                        ExecutorKind::External { command, .. } => Some(command.clone()),
                    },
                    timeout_seconds: d.timeout_seconds,
                    author: d.author.clone(),
                }
            })
            .collect()
    }

    /// The name of the executor chosen for `capability_type`.
    pub fn executor_for_type(&self, capability_type: &str) -> Option<&str> {
        self.types.get(capability_type).map(String::as_str)
    }

    /// The capability named `name` (of `capability_type` when given) and its executor, or
    /// `CAPABILITY_NOT_FOUND` / `EXECUTOR_NOT_FOUND`.
    pub(crate) fn resolve(
        &self,
        name: &str,
        capability_type: Option<&str>,
    ) -> Result<(&Capability, &ExecutorEntry), CapabilityError> {
        let not_found = |extra: String| {
            let known: Vec<&str> = self.capabilities.keys().map(String::as_str).collect();
            CapabilityError::new(
                CapabilityErrorCode::CapabilityNotFound,
                format!(
                    "no capability `{name}`{extra}; the registry has {}; add capabilities/{name}/capability.yaml to a root (`execbox capabilities check` lists skipped ones)",
                    if known.is_empty() { "none".to_string() } else { known.join(", ") }
                ),
            )
        };
        let capability = self
            .capabilities
            .get(name)
            .ok_or_else(|| not_found(String::new()))?;
        let actual = &capability.config.def.capability_type;
        if let Some(wanted) = capability_type {
            if wanted != actual {
                return Err(not_found(format!(
                    " of type `{wanted}` (it has type `{actual}`)"
                )));
            }
        }
        let executor = self
            .types
            .get(actual)
            .and_then(|n| self.executors.get(n))
            .ok_or_else(|| {
                CapabilityError::new(
                    CapabilityErrorCode::ExecutorNotFound,
                    format!(
                        "no executor supports type `{actual}` (capability `{name}`); add executors/<name>/executor.yaml with `supportedTypes: [{actual}]` to a root"
                    ),
                )
            })?;
        Ok((capability, executor))
    }
}
