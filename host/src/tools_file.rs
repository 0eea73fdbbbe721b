//! The YAML tools file: its format, parsing and checks. Running the commands it declares is
//! [`CommandTool`]'s job (`external.rs`, which has the request envelope and the result table).
//!
//! This is a stable, versioned contract: later versions only add optional fields, or come
//! with a new `version`.
//!
//! # The tools file (version 1)
//!
//! ```yaml
//! version: 1                         # required; this execbox reads version 1
//! providers:                         # required; provider name -> provider
//!   text:                            # a JavaScript identifier: the guest's namespace
//!     description: Text utilities    # optional; JSDoc of the namespace
//!     tools:                         # required; tool name -> tool (names are sanitised)
//!       word_count:
//!         description: Count words   # optional
//!         command: ./word_count.py   # required; the program to run
//!         args: []                   # optional; arguments, always passed
//!         env: { LANG: C.UTF-8 }     # optional; added to the inherited environment
//!         timeout_seconds: 10        # optional; default 30, at most 86400
//!         input_schema: { type: object, required: [text], properties: { text: { type: string } } }
//!         output_schema: { type: object }   # optional
//!         permissions: [text:read]   # optional; the caller must hold every one (see the policy)
//!         rate_limit: { requests: 100, window: 1h }   # optional; per principal; 30s, 5m, 1h, 1d
//!         requires_approval: false   # optional; true: each call waits for approval
//! ```
//!
//! - A `command` containing a `/` that is not absolute is resolved against the directory of
//!   the tools file; a bare name (`python3`) is looked up in `PATH` (the tool's own `env`
//!   `PATH` if it sets one, as when it runs). Commands run in the tools file's folder, so
//!   relative `args` (`command: python3`, `args: [./tools/plain.py]`) and files the command
//!   opens resolve against it whatever folder the host was started in (a desktop MCP client
//!   may start `execbox mcp` in `/`).
//! - `args` and `env` values may be strings, numbers or booleans (numbers and booleans are
//!   passed as their YAML text).
//! - The file is read strictly (`yaml.rs`): an unknown field (``inputSchema``, ``timeout``),
//!   a duplicate key, a value of the wrong type, more than one document or an alias bomb is
//!   an error naming the file, the line and column and the YAML path, with a "did you mean"
//!   for a misspelt field: ``tools.yaml:9:9: providers.text.tools.word_count: unknown field
//!   `inputSchema`; did you mean `input_schema`? (expected one of ...)``. A file written for
//!   a newer execbox, using fields this one does not know, is refused the same way rather
//!   than run without them.
//! - A provider may instead be of a [`ProviderKind`] registered by a crate the host does not
//!   depend on: `openapi: ./api.json` with `execbox-openapi`'s kind ([`ToolsFile::register_kind`],
//!   [`ToolsFile::load_with`]). Its fields go to the kind as JSON; `description`,
//!   `permissions`, `rate_limit` and `requires_approval` are read here and apply to each of
//!   its tools; a kind's error names the field and is placed at its line.
//! - [`ToolsFile::load_checked`] (what the CLI uses) also checks every command: it must exist
//!   and be executable, resolved as it would be when it runs; the error names the provider,
//!   the tool and the path. [`ToolsFile::load`] leaves that to the first call.

use std::collections::HashSet;
use std::ffi::OsString;
use std::fmt;
use std::io;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;
use serde_saphyr::Spanned;

use crate::command_tool::{CommandTool, DEFAULT_TIMEOUT, MAX_TIMEOUT};
use crate::names::check_provider_name;
use crate::program;
use crate::provider_kind::ProviderKind;
use crate::requirements::{check_permission, parse_window, RateLimit};
use crate::tool::{Provider, Tool};
use crate::yaml::{self, Position, YamlError};

/// The tools file version this host reads.
pub const TOOLS_FILE_VERSION: u64 = 1;

/// The YAML tools file: see the [module docs](self) for the format.
#[derive(Debug, Clone, Copy)]
pub struct ToolsFile;

/// Why a tools file cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ToolsFileError {
    /// The file cannot be read.
    #[error("cannot read tools file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The file is not YAML of the expected shape; the message holds the YAML path.
    #[error("{}{}: {message}", path.display(), Position(*line, *column))]
    Syntax {
        /// The file.
        path: PathBuf,
        /// What is wrong, and the YAML path of the value when known.
        message: String,
        /// 1-based line, when known.
        line: Option<usize>,
        /// 1-based column, when known.
        column: Option<usize>,
    },
    /// The file parses but a value is not acceptable.
    #[error("{}: {at}: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The YAML path of the value, e.g. `providers.text.tools.x.timeout_seconds`.
        at: String,
        /// What is wrong.
        message: String,
    },
    /// A tool's command does not exist or cannot be run ([`ToolsFile::load_checked`]).
    #[error(
        "{}{}: providers.{provider}.tools.{tool}: {problem}",
        path.display(),
        Position(*line, *column)
    )]
    Command {
        /// The file.
        path: PathBuf,
        /// 1-based line of the `command` value, when known.
        line: Option<u32>,
        /// 1-based column of the `command` value, when known.
        column: Option<u32>,
        /// The provider.
        provider: String,
        /// The tool's original name.
        tool: String,
        /// What is wrong with the command, naming it as resolved.
        problem: String,
    },
}

impl From<YamlError> for ToolsFileError {
    fn from(e: YamlError) -> Self {
        match e {
            YamlError::Read { path, source } => ToolsFileError::Read { path, source },
            YamlError::Invalid {
                path,
                line,
                column,
                at,
                message,
            } => ToolsFileError::Syntax {
                path,
                message: if at.is_empty() || at == "." {
                    message
                } else {
                    format!("{at}: {message}")
                },
                line: line.and_then(|l| usize::try_from(l).ok()),
                column: column.and_then(|c| usize::try_from(c).ok()),
            },
        }
    }
}

/// A command to check, and where it was declared.
struct DeclaredCommand {
    provider: String,
    tool: String,
    command: PathBuf,
    /// The tool's own `env` `PATH`, if it sets one.
    path_env: Option<String>,
    line: Option<u32>,
    column: Option<u32>,
}

impl ToolsFile {
    /// Reads and checks a tools file; relative commands resolve against its directory.
    /// Whether each command exists is left to its first call; [`ToolsFile::load_checked`]
    /// checks that too.
    pub fn load(path: impl AsRef<Path>) -> Result<Vec<Provider>, ToolsFileError> {
        Self::load_with(path, &registered())
    }

    /// Makes `kind` read by [`ToolsFile::load`], [`ToolsFile::load_checked`] and
    /// [`ToolsFile::parse`] in this process: a program linking `execbox-openapi` registers
    /// its kind once at startup, and every tools file it reads (`execbox run`, `mcp`,
    /// capabilities) may then declare `openapi:` providers. A kind whose marker is already
    /// registered is not added twice.
    pub fn register_kind(kind: &'static dyn ProviderKind) {
        let mut kinds = KINDS.write().unwrap_or_else(|e| e.into_inner());
        if !kinds.iter().any(|k| k.marker() == kind.marker()) {
            kinds.push(kind);
        }
    }

    /// [`ToolsFile::load`], also reading providers of the given [`ProviderKind`]s
    /// (`openapi:` with `execbox-openapi`'s kind).
    pub fn load_with(
        path: impl AsRef<Path>,
        kinds: &[&dyn ProviderKind],
    ) -> Result<Vec<Provider>, ToolsFileError> {
        let path = path.as_ref();
        let (providers, _) = Self::read(path, kinds)?;
        Ok(providers)
    }

    /// [`ToolsFile::load`], and every command must exist and be executable (resolved as when
    /// it runs: against the file's directory when it has a `/`, else on `PATH`).
    pub fn load_checked(path: impl AsRef<Path>) -> Result<Vec<Provider>, ToolsFileError> {
        Self::load_checked_with(path, &registered())
    }

    /// [`ToolsFile::load_checked`], also reading providers of the given [`ProviderKind`]s.
    pub fn load_checked_with(
        path: impl AsRef<Path>,
        kinds: &[&dyn ProviderKind],
    ) -> Result<Vec<Provider>, ToolsFileError> {
        let path = path.as_ref();
        let (providers, commands) = Self::read(path, kinds)?;
        for c in commands {
            check_command(&c.command, c.path_env.as_deref()).map_err(|problem| {
                ToolsFileError::Command {
                    path: path.to_path_buf(),
                    line: c.line,
                    column: c.column,
                    provider: c.provider,
                    tool: c.tool,
                    problem,
                }
            })?;
        }
        Ok(providers)
    }

    fn read(
        path: &Path,
        kinds: &[&dyn ProviderKind],
    ) -> Result<(Vec<Provider>, Vec<DeclaredCommand>), ToolsFileError> {
        let text = read_text(path)?;
        let dir = yaml::base_dir(path);
        Self::parse_all(&text, path, &dir, kinds)
    }

    /// Checks the text of a tools file. `path` is only used in error messages; relative
    /// commands resolve against `base_dir`. Commands are not looked for.
    pub fn parse(
        text: &str,
        path: &Path,
        base_dir: &Path,
    ) -> Result<Vec<Provider>, ToolsFileError> {
        Self::parse_with(text, path, base_dir, &registered())
    }

    /// [`ToolsFile::parse`], also reading providers of the given [`ProviderKind`]s.
    pub fn parse_with(
        text: &str,
        path: &Path,
        base_dir: &Path,
        kinds: &[&dyn ProviderKind],
    ) -> Result<Vec<Provider>, ToolsFileError> {
        Ok(Self::parse_all(text, path, base_dir, kinds)?.0)
    }

    fn parse_all(
        text: &str,
        path: &Path,
        base_dir: &Path,
        kinds: &[&dyn ProviderKind],
    ) -> Result<(Vec<Provider>, Vec<DeclaredCommand>), ToolsFileError> {
        let invalid = |at: String, message: String| ToolsFileError::Invalid {
            path: path.to_path_buf(),
            at,
            message,
        };
        if text.trim().is_empty() {
            return Err(invalid(
                "(file)".into(),
                "the file is empty; expected `version: 1` and `providers`".into(),
            ));
        }
        let file: FileDef = yaml::from_str(text, path)?;
        match &file.version {
            Some(v) if v.as_u64() == Some(TOOLS_FILE_VERSION) => {}
            Some(v) => {
                return Err(invalid(
                    "version".into(),
                    format!(
                        "unsupported version {v}; this execbox reads version {TOOLS_FILE_VERSION}"
                    ),
                ));
            }
            None => {
                return Err(invalid(
                    "version".into(),
                    format!("is required (write `version: {TOOLS_FILE_VERSION}`)"),
                ))
            }
        }
        let mut providers = Vec::with_capacity(file.providers.0.len());
        let mut commands = Vec::new();
        for (pname, pdef) in file.providers.0 {
            let at = format!("providers.{pname}");
            check_provider_name(&pname).map_err(|reason| invalid(at.clone(), reason))?;
            let ProviderDef {
                description,
                tools,
                other,
            } = pdef;
            let Some(tools) = tools else {
                let mut provider = kind_provider(&pname, other, kinds, path, base_dir)?;
                if let Some(d) = description {
                    provider = provider.description(d);
                }
                providers.push(provider);
                continue;
            };
            if let Some((field, value)) = other.into_iter().next() {
                let expected = ["description", "tools"];
                let message = match kinds.iter().find(|k| k.fields().contains(&field.as_str())) {
                    Some(kind) => format!(
                        "`{field}` is a field of `{}` providers, and this provider has `tools`; \
                         a provider has either `tools` or `{}`",
                        kind.marker(),
                        kind.marker()
                    ),
                    None => yaml::unknown_field_message(&field, &expected),
                };
                return Err(syntax_at(path, &format!("{at}: {message}"), &value));
            }
            let mut provider = Provider::new(pname.clone());
            if let Some(d) = description {
                provider = provider.description(d);
            }
            for (tname, tdef) in tools.0 {
                let at = format!("{at}.tools.{tname}");
                let command_text = &tdef.command.value;
                if command_text.trim().is_empty() {
                    return Err(invalid(format!("{at}.command"), "must not be empty".into()));
                }
                let timeout = match tdef.timeout_seconds {
                    None => DEFAULT_TIMEOUT,
                    Some(secs) => Duration::try_from_secs_f64(secs)
                        .ok()
                        .filter(|d| !d.is_zero() && *d <= MAX_TIMEOUT)
                        .ok_or_else(|| {
                            invalid(
                                format!("{at}.timeout_seconds"),
                                format!(
                                    "must be a number of seconds above 0 and at most {}, got {secs}",
                                    MAX_TIMEOUT.as_secs()
                                ),
                            )
                        })?,
                };
                if tdef.args.iter().any(|a| a.0.contains('\0')) {
                    return Err(invalid(format!("{at}.args"), "must not contain NUL".into()));
                }
                let command = resolve_command(command_text, base_dir);
                let mut path_env = None;
                let mut handler = CommandTool::new(pname.clone(), tname.clone(), command.clone())
                    .args(tdef.args.into_iter().map(|a| OsString::from(a.0)))
                    .current_dir(base_dir)
                    .timeout(timeout);
                for (k, v) in tdef.env.0 {
                    if k.is_empty() || k.contains('=') || k.contains('\0') || v.0.contains('\0') {
                        return Err(invalid(
                            format!("{at}.env.{k}"),
                            "is not a valid environment variable".into(),
                        ));
                    }
                    if k == "PATH" {
                        path_env = Some(v.0.clone());
                    }
                    handler = handler.env(k, v.0);
                }
                let mut tool = Tool::from_handler(tname.clone(), handler);
                if let Some(d) = tdef.description {
                    tool = tool.description(d);
                }
                if let Some(s) = tdef.input_schema {
                    tool = tool.input_schema(s);
                }
                if let Some(s) = tdef.output_schema {
                    tool = tool.output_schema(s);
                }
                for permission in &tdef.permissions {
                    check_permission(permission)
                        .map_err(|m| invalid(format!("{at}.permissions"), m))?;
                }
                if !tdef.permissions.is_empty() {
                    tool = tool.permissions(tdef.permissions);
                }
                if let Some(limit) = tdef.rate_limit {
                    let window = parse_window(&limit.window)
                        .map_err(|m| invalid(format!("{at}.rate_limit.window"), m))?;
                    let limit = RateLimit::new(limit.requests, window)
                        .map_err(|e| invalid(format!("{at}.rate_limit"), e.to_string()))?;
                    tool = tool.rate_limit(limit);
                }
                if tdef.requires_approval {
                    tool = tool.requires_approval(true);
                }
                provider = provider.tool(tool);
                let location = tdef.command.referenced;
                commands.push(DeclaredCommand {
                    provider: pname.clone(),
                    tool: tname,
                    command,
                    path_env,
                    line: u32::try_from(location.line()).ok().filter(|l| *l > 0),
                    column: u32::try_from(location.column()).ok().filter(|c| *c > 0),
                });
            }
            providers.push(provider);
        }
        Ok((providers, commands))
    }
}

/// The kinds [`ToolsFile::register_kind`] registered.
static KINDS: std::sync::RwLock<Vec<&'static dyn ProviderKind>> =
    std::sync::RwLock::new(Vec::new());

fn registered() -> Vec<&'static dyn ProviderKind> {
    KINDS.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// The fields every kind of provider shares, read by the host: the policy's requirements,
/// applied to each of the provider's tools.
const SHARED_FIELDS: [&str; 4] = [
    "description",
    "permissions",
    "rate_limit",
    "requires_approval",
];

/// Provider `name` of a [`ProviderKind`], told by its marker among `fields`.
fn kind_provider(
    name: &str,
    fields: Vec<(String, Spanned<Value>)>,
    kinds: &[&dyn ProviderKind],
    path: &Path,
    base_dir: &Path,
) -> Result<Provider, ToolsFileError> {
    let at = format!("providers.{name}");
    let Some(kind) = kinds
        .iter()
        .find(|k| fields.iter().any(|(f, _)| f == k.marker()))
    else {
        let mut markers = vec!["`tools` (commands)".to_string()];
        markers.extend(kinds.iter().map(|k| format!("`{}`", k.marker())));
        if let Some((field, value)) = fields.iter().find(|(f, _)| f == "openapi") {
            return Err(syntax_at(
                path,
                &format!(
                    "{at}.{field}: OpenAPI providers are built by execbox-openapi, which this \
                     program does not include; run it with the execbox command, or give the \
                     provider `tools`"
                ),
                value,
            ));
        }
        let message = match fields.first() {
            None => format!("expected {}", markers.join(" or ")),
            Some((field, _)) => {
                let mut expected = vec!["tools"];
                expected.extend(SHARED_FIELDS);
                expected.extend(kinds.iter().flat_map(|k| k.fields().iter().copied()));
                format!(
                    "{}; a provider needs {}",
                    yaml::unknown_field_message(field, &expected),
                    markers.join(" or ")
                )
            }
        };
        return Err(match fields.first() {
            Some((_, value)) => syntax_at(path, &format!("{at}: {message}"), value),
            None => ToolsFileError::Invalid {
                path: path.to_path_buf(),
                at,
                message,
            },
        });
    };
    let mut own = serde_json::Map::new();
    let mut shared = Vec::new();
    for (field, value) in &fields {
        if SHARED_FIELDS.contains(&field.as_str()) {
            shared.push((field.as_str(), value));
        } else if kind.fields().contains(&field.as_str()) {
            own.insert(field.clone(), value.value.clone());
        } else {
            let mut expected = kind.fields().to_vec();
            expected.extend(SHARED_FIELDS);
            return Err(syntax_at(
                path,
                &format!("{at}: {}", yaml::unknown_field_message(field, &expected)),
                value,
            ));
        }
    }
    let spanned = |field: &str| fields.iter().find(|(f, _)| f == field).map(|(_, v)| v);
    let built = kind.build(name, Value::Object(own), base_dir);
    let provider = built.map_err(|e| {
        let top = e.at.split('.').next().unwrap_or_default();
        let full = if e.at.is_empty() {
            at.clone()
        } else {
            format!("{at}.{}", e.at)
        };
        let message = format!("{full}: {}", e.message);
        match spanned(top).or_else(|| spanned(kind.marker())) {
            Some(value) => syntax_at(path, &message, value),
            None => ToolsFileError::Syntax {
                path: path.to_path_buf(),
                message,
                line: None,
                column: None,
            },
        }
    })?;
    let mut permissions = Vec::new();
    let mut rate_limit = None;
    let mut requires_approval = false;
    for (field, value) in shared {
        let bad = |message: String| syntax_at(path, &format!("{at}.{field}: {message}"), value);
        match field {
            "permissions" => {
                permissions = serde_json::from_value::<Vec<String>>(value.value.clone())
                    .map_err(|_| bad("expected a list of permissions".into()))?;
                for permission in &permissions {
                    check_permission(permission).map_err(bad)?;
                }
            }
            "rate_limit" => {
                let def =
                    serde_json::from_value::<RateLimitDef>(value.value.clone()).map_err(|_| {
                        bad("expected a mapping like `{ requests: 100, window: 1h }`".into())
                    })?;
                let window = parse_window(&def.window).map_err(bad)?;
                rate_limit =
                    Some(RateLimit::new(def.requests, window).map_err(|e| bad(e.to_string()))?);
            }
            "requires_approval" => {
                requires_approval = value
                    .value
                    .as_bool()
                    .ok_or_else(|| bad("expected true or false".into()))?;
            }
            _ => {}
        }
    }
    if permissions.is_empty() && rate_limit.is_none() && !requires_approval {
        return Ok(provider);
    }
    let mut with = Provider::new(provider.name().to_string());
    if let Some(d) = provider.get_description() {
        with = with.description(d.to_string());
    }
    for tool in provider.tools() {
        let mut tool = tool.clone();
        if !permissions.is_empty() {
            tool = tool.permissions(permissions.clone());
        }
        if let Some(limit) = &rate_limit {
            tool = tool.rate_limit(*limit);
        }
        if requires_approval {
            tool = tool.requires_approval(true);
        }
        with = with.tool(tool);
    }
    Ok(with)
}

/// A [`ToolsFileError::Syntax`] at where `value` was written.
fn syntax_at(path: &Path, message: &str, value: &Spanned<Value>) -> ToolsFileError {
    let location = value.referenced;
    ToolsFileError::Syntax {
        path: path.to_path_buf(),
        message: message.to_string(),
        line: usize::try_from(location.line()).ok().filter(|l| *l > 0),
        column: usize::try_from(location.column()).ok().filter(|c| *c > 0),
    }
}

fn read_text(path: &Path) -> Result<String, ToolsFileError> {
    let read_error = |source| ToolsFileError::Read {
        path: path.to_path_buf(),
        source,
    };
    let size = std::fs::metadata(path).map_err(read_error)?.len();
    if size > yaml::MAX_FILE_BYTES {
        return Err(read_error(io::Error::other(format!(
            "the file is {size} bytes, more than the {} a tools file may have",
            yaml::MAX_FILE_BYTES
        ))));
    }
    std::fs::read_to_string(path).map_err(read_error)
}

/// `command` as given, or joined to `base_dir` when it is a relative path with a `/`.
pub fn resolve_command(command: &str, base_dir: &Path) -> PathBuf {
    let p = Path::new(command);
    if p.is_relative() && command.contains('/') {
        let rest: PathBuf = p
            .components()
            .filter(|c| !matches!(c, std::path::Component::CurDir))
            .collect();
        base_dir.join(rest)
    } else {
        p.to_path_buf()
    }
}

/// Whether `command` (resolved by [`resolve_command`]) can be run: a path must be an
/// executable file; a bare name must be one in a folder of `PATH` (`path_env`, else this
/// process's), found by [`program::search_path`] as when it runs (empty and relative entries
/// of `PATH` are ignored).
pub fn check_command(command: &Path, path_env: Option<&str>) -> Result<(), String> {
    if command.components().count() > 1 || command.is_absolute() {
        return program::check_executable(command).map_err(|why| format!("command {}", why));
    }
    let search = match path_env {
        Some(p) => OsString::from(p),
        None => std::env::var_os("PATH").unwrap_or_default(),
    };
    match program::search_path(command.as_os_str(), &search) {
        Ok(_) => Ok(()),
        Err(e) => Err(match &e.skipped {
            Some(why) => format!("command `{}` found on PATH, but {why}", command.display()),
            None => format!(
                "command `{}` is not found on PATH ({}{})",
                command.display(),
                search.to_string_lossy(),
                e.ignored_note()
            ),
        }),
    }
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a tools file mapping with `version` and `providers`"
)]
struct FileDef {
    version: Option<Value>,
    providers: OrderedMap<ProviderDef>,
}

/// A provider as written: `description`, and either `tools` (commands) or the fields of a
/// [`ProviderKind`], each kept as YAML read into JSON with where it was written, to be checked
/// once the file is read (which fields belong to which kind is not known while reading).
struct ProviderDef {
    description: Option<String>,
    tools: Option<OrderedMap<ToolDef>>,
    /// Every other field, in document order.
    other: Vec<(String, Spanned<Value>)>,
}

impl<'de> Deserialize<'de> for ProviderDef {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ProviderDef;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a provider mapping with `tools` or `openapi`")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut seen = HashSet::new();
                let mut def = ProviderDef {
                    description: None,
                    tools: None,
                    other: Vec::new(),
                };
                while let Some(key) = map.next_key::<Scalar>()? {
                    if !seen.insert(key.0.clone()) {
                        return Err(de::Error::custom(format!("duplicate key {:?}", key.0)));
                    }
                    match key.0.as_str() {
                        "description" => def.description = Some(map.next_value()?),
                        "tools" => def.tools = Some(map.next_value()?),
                        _ => {
                            let value = map.next_value::<Spanned<Value>>()?;
                            def.other.push((key.0, value));
                        }
                    }
                }
                Ok(def)
            }
        }
        deserializer.deserialize_map(V)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a tool mapping with `command`")]
struct ToolDef {
    description: Option<String>,
    command: Spanned<String>,
    #[serde(default)]
    args: Vec<Scalar>,
    #[serde(default)]
    env: OrderedMap<Scalar>,
    timeout_seconds: Option<f64>,
    input_schema: Option<Value>,
    output_schema: Option<Value>,
    #[serde(default)]
    permissions: Vec<String>,
    rate_limit: Option<RateLimitDef>,
    #[serde(default)]
    requires_approval: bool,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping like `{ requests: 100, window: 1h }`"
)]
struct RateLimitDef {
    requests: u32,
    window: String,
}

/// A YAML mapping with string keys, in document order, refusing duplicate keys.
struct OrderedMap<T>(Vec<(String, T)>);

impl<T> Default for OrderedMap<T> {
    fn default() -> Self {
        OrderedMap(Vec::new())
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for OrderedMap<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = OrderedMap<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(OrderedMap(Vec::new()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut seen = HashSet::new();
                let mut entries = Vec::new();
                while let Some(key) = map.next_key::<Scalar>()? {
                    if !seen.insert(key.0.clone()) {
                        return Err(de::Error::custom(format!("duplicate key {:?}", key.0)));
                    }
                    let value = map.next_value::<T>()?;
                    entries.push((key.0, value));
                }
                Ok(OrderedMap(entries))
            }
        }
        deserializer.deserialize_map(V(PhantomData))
    }
}

/// A string, number or boolean, as text.
struct Scalar(String);

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string, number or boolean")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Scalar, E> {
                Ok(Scalar(v))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
        }
        deserializer.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<Provider>, ToolsFileError> {
        ToolsFile::parse(text, Path::new("tools.yaml"), Path::new("/base"))
    }

    #[test]
    fn a_full_file_loads_in_order_with_defaults() {
        let providers = parse(
            r#"
version: 1
providers:
  text:
    description: Text utilities
    tools:
      word-count:
        description: Count words
        command: ./wc.py
        args: [--json, 5, true, 2.5]
        env: { A: b, N: 1 }
        timeout_seconds: 2.5
        input_schema: { type: object, required: [text], properties: { text: { type: string } } }
      upper:
        command: python3
        permissions: ["text:write"]
        rate_limit: { requests: 100, window: 1h }
        requires_approval: true
  data:
    tools: {}
"#,
        )
        .unwrap();
        assert_eq!(providers.len(), 2);
        assert_eq!(providers[0].name(), "text");
        assert_eq!(providers[0].get_description(), Some("Text utilities"));
        let tools = providers[0].tools();
        assert_eq!(tools[0].name(), "word-count");
        assert_eq!(
            tools[0].get_input_schema().unwrap()["required"],
            serde_json::json!(["text"])
        );
        assert!(tools[0].requirements().is_empty());
        assert_eq!(tools[1].name(), "upper");
        let policy = tools[1].requirements();
        assert_eq!(policy.permissions, ["text:write"]);
        assert_eq!(policy.rate_limit.unwrap().to_string(), "100 per 1h");
        assert!(policy.requires_approval);
        assert!(providers[1].tools().is_empty());
        let debug = format!("{:?}", tools[0].handler().timeout());
        assert_eq!(debug, "Some(2.5s)");
    }

    #[test]
    fn yaml_scalars_load_as_serde_yaml_loaded_them() {
        // YAML 1.2: `yes`, `no`, `on` are strings; numbers keep their types in schemas.
        let providers = parse(
            "version: 1\nproviders:\n  t:\n    tools:\n      x:\n        command: a\n        \
             input_schema: { enum: [yes, no, on, 1, 1.5, null, ~, \"2\"] }\n",
        )
        .unwrap();
        assert_eq!(
            providers[0].tools()[0].get_input_schema().unwrap()["enum"],
            serde_json::json!(["yes", "no", "on", 1, 1.5, null, null, "2"])
        );
    }

    #[test]
    fn commands_with_a_slash_resolve_against_the_file() {
        assert_eq!(
            resolve_command("./x.py", Path::new("/base")),
            Path::new("/base/x.py")
        );
        assert_eq!(
            resolve_command("bin/x", Path::new("/base")),
            Path::new("/base/bin/x")
        );
        assert_eq!(
            resolve_command("python3", Path::new("/base")),
            Path::new("python3")
        );
        assert_eq!(
            resolve_command("/usr/bin/x", Path::new("/base")),
            Path::new("/usr/bin/x")
        );
    }

    #[test]
    fn errors_name_the_file_and_the_place() {
        let tool = |extra: &str| {
            format!(
                "version: 1\nproviders:\n  t:\n    tools:\n      x:\n        command: a\n{extra}"
            )
        };
        let cases = [
            ("", "tools.yaml: (file): the file is empty".to_string()),
            ("providers: {}", "tools.yaml: version: is required".into()),
            ("version: 2\nproviders: {}", "tools.yaml: version: unsupported version 2".into()),
            ("version: 1", "missing field `providers`".into()),
            (
                "version: 1\nproviders:\n  text:\n    tools:\n      x:\n        args: []\n",
                "providers.text.tools.x: missing field `command`".into(),
            ),
            (
                "version: 1\nproviders:\n  my-tools:\n    tools: {}\n",
                "tools.yaml: providers.my-tools: must be a JavaScript identifier".into(),
            ),
            (
                "version: 1\nproviders:\n  t:\n    tools:\n      x: { command: a, timeout_seconds: 0 }\n",
                "tools.yaml: providers.t.tools.x.timeout_seconds: must be a number of seconds above 0".into(),
            ),
            (
                "version: 1\nproviders:\n  t:\n    tools:\n      x: { command: a, timeout_seconds: nope }\n",
                "tools.yaml:5:".into(),
            ),
            (
                "version: 1\nproviders:\n  t:\n    tools:\n      x: { command: a }\n      x: { command: b }\n",
                "tools.yaml:6:7: providers.t.tools: duplicate key `x`".into(),
            ),
            (
                "version: 1\nproviders:\n  t:\n    tools:\n      x: { command: \" \" }\n",
                "providers.t.tools.x.command: must not be empty".into(),
            ),
            ("version: 1\nproviders: [", "tools.yaml:".into()),
            (
                "version: 1\nfuture_field: 1\nproviders: {}\n",
                "tools.yaml:2:1: unknown field `future_field` (expected one of `version`, `providers`)".into(),
            ),
            (
                &tool("        inputSchema: {}\n"),
                "tools.yaml:7:9: providers.t.tools.x: unknown field `inputSchema`; did you mean `input_schema`?".into(),
            ),
            (
                &tool("        timeout: 10\n"),
                "tools.yaml:7:9: providers.t.tools.x: unknown field `timeout`".into(),
            ),
            (
                &tool("        permissions: [\"a:*\"]\n"),
                "tools.yaml: providers.t.tools.x.permissions: \"a:*\": a permission a tool requires cannot contain `*`".into(),
            ),
            (
                &tool("        rate_limit: { requests: 3, window: 1w }\n"),
                "tools.yaml: providers.t.tools.x.rate_limit.window: \"1w\" is not a window".into(),
            ),
            (
                &tool("        rate_limit: { requests: 0, window: 1m }\n"),
                "tools.yaml: providers.t.tools.x.rate_limit: invalid rate limit: `requests` must be at least 1".into(),
            ),
            (
                &tool("        rate_limit: { requests: 3, per: 1m }\n"),
                "unknown field `per`".into(),
            ),
        ];
        for (text, want) in cases {
            let got = parse(text).unwrap_err().to_string();
            assert!(got.contains(&want), "{text:?}\n  got: {got}\n want: {want}");
        }
    }

    /// A kind marked `fake:` whose tools are named by `tools_named` (a list of names); `fail`
    /// makes it refuse at the given path.
    struct FakeKind;

    impl ProviderKind for FakeKind {
        fn marker(&self) -> &'static str {
            "fake"
        }

        fn fields(&self) -> &'static [&'static str] {
            &["fake", "tools_named", "fail"]
        }

        fn build(
            &self,
            name: &str,
            fields: Value,
            base_dir: &Path,
        ) -> Result<Provider, crate::KindError> {
            if let Some(at) = fields.get("fail").and_then(Value::as_str) {
                return Err(crate::KindError::new(at, "refused as asked"));
            }
            assert_eq!(base_dir, Path::new("/base"));
            assert!(fields.get("description").is_none() && fields.get("permissions").is_none());
            let mut provider = Provider::new(name).description("from the kind");
            for tool in fields["tools_named"].as_array().into_iter().flatten() {
                let tool = tool.as_str().unwrap().to_string();
                provider = provider.tool(Tool::new(tool, |_, _| async { Ok(Value::Null) }));
            }
            Ok(provider)
        }
    }

    fn parse_fake(text: &str) -> Result<Vec<Provider>, ToolsFileError> {
        ToolsFile::parse_with(
            text,
            Path::new("tools.yaml"),
            Path::new("/base"),
            &[&FakeKind],
        )
    }

    #[test]
    fn a_kind_builds_its_providers_and_the_shared_fields_apply_to_every_tool() {
        let providers = parse_fake(
            "version: 1\nproviders:\n  f:\n    fake: yes\n    tools_named: [a, b]\n    \
             permissions: [\"f:use\"]\n    rate_limit: { requests: 2, window: 1m }\n    \
             requires_approval: true\n  plain:\n    tools: { x: { command: a } }\n",
        )
        .unwrap();
        assert_eq!(providers.len(), 2);
        let f = &providers[0];
        assert_eq!(f.get_description(), Some("from the kind"));
        assert_eq!(f.tools().len(), 2);
        for tool in f.tools() {
            let needs = tool.requirements();
            assert_eq!(needs.permissions, ["f:use"]);
            assert_eq!(needs.rate_limit.map(|l| l.requests()), Some(2));
            assert!(needs.requires_approval);
        }
        let described =
            parse_fake("version: 1\nproviders:\n  f:\n    description: ours\n    fake: 1\n")
                .unwrap();
        assert_eq!(described[0].get_description(), Some("ours"));
    }

    #[test]
    fn kind_mistakes_name_the_place_and_the_field() {
        let cases = [
            (
                "version: 1\nproviders:\n  f:\n    fake: 1\n    fail: fail.inner\n",
                "tools.yaml:5:11: providers.f.fail.inner: refused as asked",
            ),
            (
                // A path under no field written: the provider's marker.
                "version: 1\nproviders:\n  f:\n    fake: 1\n    fail: deep.inner\n",
                "tools.yaml:4:11: providers.f.deep.inner: refused as asked",
            ),
            (
                "version: 1\nproviders:\n  f:\n    fake: 1\n    tols_named: []\n",
                "tools.yaml:5:17: providers.f: unknown field `tols_named`; did you mean `tools_named`?",
            ),
            (
                "version: 1\nproviders:\n  f:\n    tools: {}\n    fail: x\n",
                "tools.yaml:5:11: providers.f: `fail` is a field of `fake` providers, and this \
                 provider has `tools`; a provider has either `tools` or `fake`",
            ),
            (
                "version: 1\nproviders:\n  f:\n    description: nothing else\n",
                "tools.yaml: providers.f: expected `tools` (commands) or `fake`",
            ),
            (
                "version: 1\nproviders:\n  f:\n    fake: 1\n    requires_approval: maybe\n",
                "tools.yaml:5:24: providers.f.requires_approval: expected true or false",
            ),
            (
                "version: 1\nproviders:\n  f:\n    fake: 1\n    permissions: [\"f:*\"]\n",
                "providers.f.permissions: \"f:*\": a permission a tool requires cannot contain `*`",
            ),
        ];
        for (text, want) in cases {
            let got = parse_fake(text).unwrap_err().to_string();
            assert!(got.contains(want), "{text:?}\n  got: {got}\n want: {want}");
        }
        // Without the kind, an OpenAPI provider says what would read it.
        let got = parse("version: 1\nproviders:\n  g:\n    openapi: ./api.json\n")
            .unwrap_err()
            .to_string();
        assert!(
            got.contains("tools.yaml:4:14: providers.g.openapi: OpenAPI providers are built by execbox-openapi"),
            "{got}"
        );
    }

    #[test]
    fn commands_are_checked_as_they_would_run() {
        assert!(check_command(Path::new("/bin/sh"), None).is_ok());
        assert!(check_command(Path::new("sh"), None).is_ok());
        let e = check_command(Path::new("sh"), Some("/nonexistent")).unwrap_err();
        assert_eq!(e, "command `sh` is not found on PATH (/nonexistent)");
        let e = check_command(Path::new("/no/such/tool"), None).unwrap_err();
        assert_eq!(e, "command /no/such/tool does not exist");
        let e = check_command(Path::new("/"), None).unwrap_err();
        assert_eq!(e, "command / is a directory, not a program");
    }

    #[test]
    fn a_bare_command_is_not_looked_for_in_empty_or_relative_path_entries() {
        // The test runs in the crate's folder, whose `src` is a folder: an empty entry read as
        // the current folder would find it (and say it is not a program).
        for path in ["", ":", "/nonexistent:", "."] {
            let e = check_command(Path::new("src"), Some(path)).unwrap_err();
            assert_eq!(
                e,
                format!(
                    "command `src` is not found on PATH ({path}; empty and relative entries of \
                     PATH are not searched)"
                )
            );
        }
    }
}
