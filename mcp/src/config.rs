//! The upstream servers file (`mcp.json`), in the shape MCP clients already use.
//!
//! ```json
//! {
//!   "mcpServers": {
//!     "github": { "command": "github-mcp-server", "args": ["stdio"], "env": { "GITHUB_TOKEN": "..." } },
//!     "docs": { "url": "https://docs.example.com/mcp", "headers": { "Authorization": "Bearer ..." } }
//!   }
//! }
//! ```
//!
//! A server with `command` is started as a child process and spoken to over stdio (`args`,
//! `env` added to the inherited environment, `cwd` relative to the file's folder); a server
//! with `url` is spoken to over streamable HTTP (`headers` sent with every request). `type`
//! may say which (`stdio`, `http` or `streamable-http`). Anything else is refused, naming the
//! server and the field: a typo must not silently drop a credential or a server.
//!
//! Each server becomes a namespace of the guest named by its key, sanitised as tool names are
//! (`my-docs` → `my_docs`; a key the guest needs, such as `console`, gets a `_` suffix).

use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::oauth::OAuthConfig;
use execbox_host::{check_provider_name, parse_window, sanitize_tool_name, RateLimit};

/// The parsed `mcp.json`: the upstream servers in file order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct McpConfig {
    /// The servers, in the order the file lists them.
    pub servers: Vec<UpstreamConfig>,
}

/// One upstream MCP server.
#[derive(Clone, PartialEq, Eq)]
pub struct UpstreamConfig {
    /// The key in `mcpServers`, as written (used in messages).
    pub name: String,
    /// The guest namespace: the key sanitised into a provider name.
    pub namespace: String,
    /// How to reach it.
    pub transport: UpstreamTransport,
    /// What execbox's policy adds to each of its tools: every tool also needs the permission
    /// `namespace:tool` (see [`UpstreamConfig::permission`]).
    pub policy: UpstreamPolicy,
    /// The `mcp.json` it is read from (named in what to do: `execbox mcp login NAME --config
    /// FILE`).
    pub source: PathBuf,
}

/// The policy fields of one server in `mcp.json` (execbox's own; MCP clients have none):
/// `"rateLimit": {"requests": 60, "window": "1m"}` limits each of its tools, per principal;
/// `"requireApproval": ["create_issue"]` (tool names as the server lists them or as
/// `execute_code`'s index shows them, or `["*"]`) makes those calls wait for an approval; a
/// name that is no tool's, or means two, makes the server unavailable, saying why.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UpstreamPolicy {
    /// At most this many calls of each tool per window, per principal.
    pub rate_limit: Option<RateLimit>,
    /// The tools whose calls need an approval; `*` is every tool.
    pub require_approval: Vec<String>,
}

impl UpstreamConfig {
    /// The permission a principal needs to see and call `tool` (as the server lists it) of
    /// this server: `namespace:tool`, so a policy grants `github:create_issue`, or
    /// `github:*` for the whole server.
    pub fn permission(&self, tool: &str) -> String {
        format!("{}:{tool}", self.namespace)
    }
}

/// How an upstream server is reached.
#[derive(Clone, PartialEq, Eq)]
pub enum UpstreamTransport {
    /// A child process speaking MCP on its stdin and stdout.
    Stdio {
        /// The program: a path, or a name looked up on `PATH` as a shell would.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables added to the inherited environment.
        env: Vec<(String, String)>,
        /// Its working directory (resolved against the config file's folder); ours if `None`.
        cwd: Option<PathBuf>,
    },
    /// A streamable HTTP endpoint.
    Http {
        /// The endpoint, `http://` or `https://`.
        url: String,
        /// Headers sent with every request (credentials, usually).
        headers: Vec<(String, String)>,
        /// How to sign in with OAuth, when the `oauth` field says (a sign-in of `execbox mcp
        /// login` is used without it too).
        oauth: Option<OAuthConfig>,
    },
}

// Environment values and headers usually hold credentials: never print them.
impl fmt::Debug for UpstreamConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstreamConfig")
            .field("name", &self.name)
            .field("namespace", &self.namespace)
            .field("transport", &self.transport)
            .field("policy", &self.policy)
            .finish()
    }
}

impl fmt::Debug for UpstreamTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UpstreamTransport::Stdio {
                command,
                args,
                env,
                cwd,
            } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("args", args)
                .field("env", &env.iter().map(|(k, _)| k).collect::<Vec<_>>())
                .field("cwd", cwd)
                .finish(),
            UpstreamTransport::Http {
                url,
                headers,
                oauth,
            } => f
                .debug_struct("Http")
                .field("url", url)
                .field(
                    "headers",
                    &headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
                )
                .field("oauth", oauth)
                .finish(),
        }
    }
}

/// Why an `mcp.json` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum McpConfigError {
    /// The file cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not JSON.
    #[error("{path} is not valid JSON: {message}")]
    Json {
        /// The file.
        path: PathBuf,
        /// The parser's message, with line and column.
        message: String,
    },
    /// The JSON does not describe servers; `server` and `field` say where.
    #[error("{path}: {}{message}", where_(.server, .field))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The server's key, when the fault is inside one server.
        server: Option<String>,
        /// The field (a JSON path below the server, or from the top).
        field: Option<String>,
        /// What is wrong and what is expected.
        message: String,
    },
}

fn where_(server: &Option<String>, field: &Option<String>) -> String {
    match (server, field) {
        (Some(s), Some(f)) => format!("server {s:?}, field {f:?}: "),
        (Some(s), None) => format!("server {s:?}: "),
        (None, Some(f)) => format!("field {f:?}: "),
        (None, None) => String::new(),
    }
}

const STDIO_FIELDS: &[&str] = &[
    "type",
    "command",
    "args",
    "env",
    "cwd",
    "rateLimit",
    "requireApproval",
];
const HTTP_FIELDS: &[&str] = &[
    "type",
    "url",
    "headers",
    "oauth",
    "rateLimit",
    "requireApproval",
];

impl McpConfig {
    /// Reads and parses `path`; a relative `cwd` resolves against the file's folder.
    pub fn load(path: impl AsRef<Path>) -> Result<McpConfig, McpConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| McpConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let base = path
            .parent()
            .map(Path::to_owned)
            .unwrap_or_else(|| PathBuf::from("."));
        McpConfig::parse(&text, path, &base)
    }

    /// Parses the text of an `mcp.json`; `path` names it in errors, `base` resolves `cwd`.
    pub fn parse(text: &str, path: &Path, base: &Path) -> Result<McpConfig, McpConfigError> {
        let value: Value = serde_json::from_str(text).map_err(|e| McpConfigError::Json {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        let invalid =
            |server: Option<&str>, field: Option<&str>, message: String| McpConfigError::Invalid {
                path: path.to_owned(),
                server: server.map(str::to_owned),
                field: field.map(str::to_owned),
                message,
            };
        let Value::Object(top) = value else {
            return Err(invalid(
                None,
                None,
                format!(
                    "expected an object with \"mcpServers\"; got {}",
                    kind(&value)
                ),
            ));
        };
        if let Some(unknown) = top.keys().find(|k| *k != "mcpServers") {
            return Err(invalid(
                None,
                Some(unknown),
                "unknown field; the only top-level field is \"mcpServers\"".into(),
            ));
        }
        let servers = match top.get("mcpServers") {
            Some(Value::Object(servers)) => servers,
            Some(other) => {
                return Err(invalid(
                    None,
                    Some("mcpServers"),
                    format!("expected an object of servers by name; got {}", kind(other)),
                ))
            }
            None => return Err(invalid(
                None,
                Some("mcpServers"),
                "missing; write {\"mcpServers\": {\"NAME\": {\"command\": ...} | {\"url\": ...}}}"
                    .into(),
            )),
        };
        let mut out: Vec<UpstreamConfig> = Vec::with_capacity(servers.len());
        for (name, entry) in servers {
            let err = |field: Option<&str>, message: String| invalid(Some(name), field, message);
            let namespace = namespace_for(name).map_err(|m| err(None, m))?;
            if let Some(other) = out.iter().find(|s| s.namespace == namespace) {
                return Err(err(
                    None,
                    format!(
                        "its namespace {namespace:?} is also the namespace of server {:?}; rename one",
                        other.name
                    ),
                ));
            }
            let Value::Object(entry) = entry else {
                return Err(err(
                    None,
                    format!(
                        "expected an object with \"command\" or \"url\"; got {}",
                        kind(entry)
                    ),
                ));
            };
            let transport =
                parse_server(entry, base).map_err(|(field, m)| err(field.as_deref(), m))?;
            let policy = parse_policy(entry).map_err(|(field, m)| err(field.as_deref(), m))?;
            out.push(UpstreamConfig {
                name: name.clone(),
                namespace,
                transport,
                policy,
                source: path.to_owned(),
            });
        }
        Ok(McpConfig { servers: out })
    }
}

/// The namespace of a server key: sanitised like a tool name, then suffixed with `_` while
/// the guest needs the name (`console` → `console_`).
pub fn namespace_for(key: &str) -> Result<String, String> {
    if key.is_empty() {
        return Err("the server name is empty; give it a name".into());
    }
    let mut name = sanitize_tool_name(key);
    while check_provider_name(&name).is_err() {
        name.push('_');
    }
    Ok(name)
}

type FieldError = (Option<String>, String);

/// How to reach one server (an entry of `mcpServers`), every field of it checked.
fn parse_server(entry: &Map<String, Value>, base: &Path) -> Result<UpstreamTransport, FieldError> {
    let transport = transport_of(entry)?;
    check_fields(entry, transport)?;
    if transport == "stdio" {
        parse_stdio(entry, base)
    } else {
        parse_http(entry, base)
    }
}

/// Which transport a server uses, `"stdio"` or `"http"`: its `type` when given, otherwise
/// whether it has a `command` or a `url` (never both).
fn transport_of(entry: &Map<String, Value>) -> Result<&'static str, FieldError> {
    let declared = match entry.get("type") {
        None => None,
        Some(Value::String(t)) => Some(match t.as_str() {
            "stdio" => "stdio",
            "http" | "streamable-http" | "streamableHttp" | "streamable_http" => "http",
            "sse" => {
                return Err((
                    Some("type".into()),
                    "the SSE transport is not supported; use the server's streamable HTTP \
                     endpoint (\"type\": \"http\")"
                        .into(),
                ))
            }
            other => {
                return Err((
                    Some("type".into()),
                    format!("unknown transport {other:?}; expected \"stdio\" or \"http\""),
                ))
            }
        }),
        Some(other) => {
            return Err((
                Some("type".into()),
                format!("expected \"stdio\" or \"http\"; got {}", kind(other)),
            ))
        }
    };
    match (
        declared,
        entry.contains_key("command"),
        entry.contains_key("url"),
    ) {
        (_, true, true) => Err((
            None,
            "has both \"command\" (stdio) and \"url\" (HTTP); keep one".into(),
        )),
        (Some("stdio"), _, _) | (None, true, false) => Ok("stdio"),
        (Some(_), _, _) | (None, false, true) => Ok("http"),
        (None, false, false) => Err((
            None,
            "needs \"command\" (a stdio server) or \"url\" (a streamable HTTP server)".into(),
        )),
    }
}

/// Refuses a field the server's transport does not have, saying whether it belongs to the
/// other transport or to neither.
fn check_fields(entry: &Map<String, Value>, transport: &str) -> Result<(), FieldError> {
    let allowed = if transport == "stdio" {
        STDIO_FIELDS
    } else {
        HTTP_FIELDS
    };
    for key in entry.keys() {
        if !allowed.contains(&key.as_str()) {
            let known = STDIO_FIELDS.contains(&key.as_str()) || HTTP_FIELDS.contains(&key.as_str());
            let message = if known {
                format!(
                    "not a field of a {} server; its fields are {}",
                    if transport == "stdio" {
                        "stdio"
                    } else {
                        "streamable HTTP"
                    },
                    allowed.join(", ")
                )
            } else {
                format!("unknown field; the fields are {}", allowed.join(", "))
            };
            return Err((Some(key.clone()), message));
        }
    }
    Ok(())
}

/// A stdio server: `command`, `args`, `env`, and `cwd` relative to `base`.
fn parse_stdio(entry: &Map<String, Value>, base: &Path) -> Result<UpstreamTransport, FieldError> {
    let command = match entry.get("command") {
        Some(Value::String(c)) if !c.trim().is_empty() => c.clone(),
        Some(Value::String(_)) => return Err((Some("command".into()), "is empty".into())),
        Some(other) => {
            return Err((
                Some("command".into()),
                format!("expected a string; got {}", kind(other)),
            ))
        }
        None => return Err((Some("command".into()), "missing".into())),
    };
    let args = match entry.get("args") {
        None => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s.clone()),
                other => Err((
                    Some("args".into()),
                    format!("args[{i}]: expected a string; got {}", kind(other)),
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err((
                Some("args".into()),
                format!("expected an array of strings; got {}", kind(other)),
            ))
        }
    };
    let env = string_map(entry.get("env"), "env")?;
    let cwd = match entry.get("cwd") {
        None => None,
        Some(Value::String(c)) if !c.is_empty() => Some(base.join(c)),
        Some(other) => {
            return Err((
                Some("cwd".into()),
                format!("expected a non-empty string; got {}", kind(other)),
            ))
        }
    };
    Ok(UpstreamTransport::Stdio {
        command,
        args,
        env,
        cwd,
    })
}

/// A streamable HTTP server: an `http(s)://` `url` and the `headers` sent with each request.
fn parse_http(entry: &Map<String, Value>, base: &Path) -> Result<UpstreamTransport, FieldError> {
    let url = match entry.get("url") {
        Some(Value::String(u)) => u.clone(),
        Some(other) => {
            return Err((
                Some("url".into()),
                format!("expected a string; got {}", kind(other)),
            ))
        }
        None => return Err((Some("url".into()), "missing".into())),
    };
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err((
            Some("url".into()),
            format!("expected an http:// or https:// URL; got {url:?}"),
        ));
    }
    let headers = string_map(entry.get("headers"), "headers")?;
    for (name, value) in &headers {
        check_header(name, value)?;
    }
    let oauth = match entry.get("oauth") {
        None => None,
        Some(value) => {
            Some(crate::oauth::config::parse(value, base).map_err(|(field, m)| (Some(field), m))?)
        }
    };
    Ok(UpstreamTransport::Http {
        url,
        headers,
        oauth,
    })
}

/// Refuses a header that is not valid HTTP, or that the MCP transport sets itself.
fn check_header(name: &str, value: &str) -> Result<(), FieldError> {
    let valid_name = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if !valid_name {
        return Err((
            Some("headers".into()),
            format!("{name:?} is not a valid HTTP header name"),
        ));
    }
    let reserved = [
        "accept",
        "mcp-session-id",
        "mcp-protocol-version",
        "last-event-id",
    ];
    if reserved.iter().any(|r| name.eq_ignore_ascii_case(r)) {
        return Err((
            Some("headers".into()),
            format!("{name:?} is set by the MCP transport itself; remove it"),
        ));
    }
    if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        return Err((
            Some("headers".into()),
            format!("the value of {name:?} contains a line break or NUL"),
        ));
    }
    Ok(())
}

fn parse_policy(entry: &Map<String, Value>) -> Result<UpstreamPolicy, FieldError> {
    let field = |name: &str, message: String| (Some(name.to_owned()), message);
    let rate_limit = match entry.get("rateLimit") {
        None => None,
        Some(Value::Object(limit)) => {
            const USAGE: &str =
                "write {\"requests\": 60, \"window\": \"1m\"} (window: 30s, 5m, 1h or 1d)";
            if let Some(unknown) = limit.keys().find(|k| *k != "requests" && *k != "window") {
                return Err(field(
                    "rateLimit",
                    format!("unknown field {unknown:?}; {USAGE}"),
                ));
            }
            let requests = match limit.get("requests").and_then(Value::as_u64) {
                Some(n) if n >= 1 && n <= u64::from(u32::MAX) => n as u32,
                _ => {
                    return Err(field(
                        "rateLimit",
                        format!("\"requests\" must be a whole number from 1; {USAGE}"),
                    ))
                }
            };
            let window = match limit.get("window") {
                Some(Value::String(w)) => parse_window(w).map_err(|m| field("rateLimit", m))?,
                _ => {
                    return Err(field(
                        "rateLimit",
                        format!("\"window\" must be a string; {USAGE}"),
                    ))
                }
            };
            Some(RateLimit::new(requests, window).map_err(|e| field("rateLimit", e.to_string()))?)
        }
        Some(other) => {
            return Err(field(
                "rateLimit",
                format!(
                    "expected an object {{\"requests\", \"window\"}}; got {}",
                    kind(other)
                ),
            ))
        }
    };
    let require_approval = match entry.get("requireApproval") {
        None => Vec::new(),
        Some(Value::Array(names)) => names
            .iter()
            .map(|n| match n {
                Value::String(s) if !s.is_empty() => Ok(s.clone()),
                other => Err(field(
                    "requireApproval",
                    format!("expected tool names (or \"*\"); got {}", kind(other)),
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(field(
                "requireApproval",
                format!(
                    "expected an array of tool names (or [\"*\"]); got {}",
                    kind(other)
                ),
            ))
        }
    };
    Ok(UpstreamPolicy {
        rate_limit,
        require_approval,
    })
}

fn string_map(
    value: Option<&Value>,
    field: &'static str,
) -> Result<Vec<(String, String)>, FieldError> {
    match value {
        None => Ok(Vec::new()),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                other => Err((
                    Some(field.into()),
                    format!("{k:?}: expected a string; got {}", kind(other)),
                )),
            })
            .collect(),
        Some(other) => Err((
            Some(field.into()),
            format!("expected an object of strings; got {}", kind(other)),
        )),
    }
}

/// `a string`, `an array`, ... for messages.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<McpConfig, McpConfigError> {
        McpConfig::parse(text, Path::new("mcp.json"), Path::new("/base"))
    }

    #[test]
    fn rate_limits_and_approvals_are_read_and_checked() {
        let config = parse(
            r#"{"mcpServers": {"gh": {"command": "gh-mcp", "rateLimit": {"requests": 3, "window": "1m"}, "requireApproval": ["create_issue"]}}}"#,
        )
        .unwrap();
        let gh = &config.servers[0];
        assert_eq!(gh.policy.rate_limit, Some("3 per 1m".parse().unwrap()));
        assert_eq!(gh.policy.require_approval, ["create_issue"]);
        assert_eq!(gh.permission("create_issue"), "gh:create_issue");
        for (bad, expected) in [
            (
                r#"{"rateLimit": {"requests": 0, "window": "1m"}}"#,
                r#"server "gh", field "rateLimit": "requests" must be a whole number from 1"#,
            ),
            (
                r#"{"rateLimit": {"requests": 3, "window": "soon"}}"#,
                r#"field "rateLimit": "soon" is not a window"#,
            ),
            (
                r#"{"rateLimit": {"requests": 3, "window": "1m", "burst": 2}}"#,
                r#"unknown field "burst""#,
            ),
            (
                r#"{"requireApproval": "create_issue"}"#,
                r#"field "requireApproval": expected an array of tool names"#,
            ),
        ] {
            let mut server: Value = serde_json::from_str(bad).unwrap();
            server["command"] = "gh-mcp".into();
            let text = serde_json::json!({"mcpServers": {"gh": server}}).to_string();
            let message = parse(&text).unwrap_err().to_string();
            assert!(message.contains(expected), "{message}");
        }
    }

    fn error(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn both_transports_parse_in_file_order() {
        let config = parse(
            r#"{"mcpServers": {
                "git-hub": {"command": "gh-mcp", "args": ["stdio"], "env": {"T": "x"}, "cwd": "srv"},
                "docs": {"type": "http", "url": "https://d.example/mcp", "headers": {"Authorization": "Bearer t"}}
            }}"#,
        )
        .unwrap();
        assert_eq!(config.servers.len(), 2);
        assert_eq!(config.servers[0].name, "git-hub");
        assert_eq!(config.servers[0].namespace, "git_hub");
        assert_eq!(
            config.servers[0].transport,
            UpstreamTransport::Stdio {
                command: "gh-mcp".into(),
                args: vec!["stdio".into()],
                env: vec![("T".into(), "x".into())],
                cwd: Some(PathBuf::from("/base/srv")),
            }
        );
        assert_eq!(
            config.servers[1].transport,
            UpstreamTransport::Http {
                url: "https://d.example/mcp".into(),
                headers: vec![("Authorization".into(), "Bearer t".into())],
                oauth: None,
            }
        );
        // Credentials stay out of debug output.
        let debug = format!("{config:?}");
        assert!(
            !debug.contains("Bearer t") && !debug.contains("\"x\""),
            "{debug}"
        );
    }

    #[test]
    fn namespaces_are_sanitised_keys() {
        assert_eq!(namespace_for("my-docs").unwrap(), "my_docs");
        assert_eq!(namespace_for("1password").unwrap(), "_1password");
        assert_eq!(namespace_for("console").unwrap(), "console_");
        assert_eq!(namespace_for("default").unwrap(), "default_");
        assert!(namespace_for("").is_err());
    }

    #[test]
    fn errors_name_the_server_and_the_field() {
        assert_eq!(
            error(r#"{"mcpServers": {"gh": {"command": "x", "agrs": []}}}"#),
            "mcp.json: server \"gh\", field \"agrs\": unknown field; the fields are type, \
             command, args, env, cwd, rateLimit, requireApproval"
        );
        assert_eq!(
            error(r#"{"mcpServers": {"gh": {"command": "x", "args": "stdio"}}}"#),
            "mcp.json: server \"gh\", field \"args\": expected an array of strings; got a string"
        );
        assert_eq!(
            error(r#"{"mcpServers": {"gh": {"command": "x", "env": {"A": 1}}}}"#),
            "mcp.json: server \"gh\", field \"env\": \"A\": expected a string; got a number"
        );
        assert_eq!(
            error(r#"{"mcpServers": {"d": {"url": "ftp://x"}}}"#),
            "mcp.json: server \"d\", field \"url\": expected an http:// or https:// URL; got \"ftp://x\""
        );
        assert_eq!(
            error(r#"{"mcpServers": {"d": {"url": "http://x", "cwd": "/"}}}"#),
            "mcp.json: server \"d\", field \"cwd\": not a field of a streamable HTTP server; its \
             fields are type, url, headers, oauth, rateLimit, requireApproval"
        );
        assert_eq!(
            error(r#"{"mcpServers": {"d": {"url": "http://x", "oauth": {"scope": ["a"]}}}}"#),
            "mcp.json: server \"d\", field \"oauth.scope\": unknown field; the fields are \
             client_id, client_secret, scopes, grant, client_metadata_url, private_key, \
             signing_algorithm, issuer"
        );
        assert_eq!(
            error(r#"{"mcpServers": {"d": {"command": "x", "oauth": {}}}}"#),
            "mcp.json: server \"d\", field \"oauth\": not a field of a stdio server; its fields \
             are type, command, args, env, cwd, rateLimit, requireApproval"
        );
        assert_eq!(
            error(r#"{"mcpServers": {"d": {"type": "sse", "url": "http://x"}}}"#),
            "mcp.json: server \"d\", field \"type\": the SSE transport is not supported; use the \
             server's streamable HTTP endpoint (\"type\": \"http\")"
        );
        assert_eq!(
            error(r#"{"mcpServers": {"d": {}}}"#),
            "mcp.json: server \"d\": needs \"command\" (a stdio server) or \"url\" (a streamable \
             HTTP server)"
        );
        assert_eq!(
            error(r#"{"mcpServers": {"a-b": {"command": "x"}, "a_b": {"command": "y"}}}"#),
            "mcp.json: server \"a_b\": its namespace \"a_b\" is also the namespace of server \
             \"a-b\"; rename one"
        );
        assert_eq!(
            error(r#"{"servers": {}}"#),
            "mcp.json: field \"servers\": unknown field; the only top-level field is \"mcpServers\""
        );
        assert!(error("{\"mcpServers\": ").starts_with("mcp.json is not valid JSON: EOF"));
        assert_eq!(
            error(r#"{"mcpServers": {"d": {"url": "http://x", "headers": {"a b": "c"}}}}"#),
            "mcp.json: server \"d\", field \"headers\": \"a b\" is not a valid HTTP header name"
        );
    }
}
