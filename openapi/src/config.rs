//! The configuration of one OpenAPI provider, as a tools file writes it, and its secrets.
//!
//! ```yaml
//! openapi: ./api.github.com.json      # a path (an https URL later); JSON or YAML
//! base_url: https://api.github.com    # overrides the document's servers
//! auth:
//!   bearer: { env: GITHUB_TOKEN }     # or { file: PATH }
//! operations: { include: ["issues/*"], exclude: ["*delete*"] }
//! headers: { X-GitHub-Api-Version: "2022-11-28" }
//! timeout_ms: 30000
//! max_response_bytes: 8388608
//! ```
//!
//! Secrets are named here (`{env: NAME}`, `{file: PATH}`), never written; [`Secret::resolve`]
//! reads them on the host when the provider is built, into a [`SecretValue`] whose `Debug`
//! shows nothing of it.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::OpenApiError;

/// Default `timeout_ms`: 30 s per call.
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;

/// Default `max_response_bytes`: 8 MiB, half the protocol's largest message.
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 8 * 1024 * 1024;

/// The largest `max_response_bytes` accepted: 15 MiB, so an answer still fits in one protocol
/// message (16 MiB) with its envelope.
pub const MAX_RESPONSE_BYTES_CEILING: u64 = 15 * 1024 * 1024;

/// The largest `timeout_ms` accepted: one hour.
pub const MAX_TIMEOUT_MS: u64 = 3_600_000;

/// One OpenAPI provider.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OpenApiConfig {
    /// The OpenAPI document: a path (relative to the tools file's folder) or an https URL.
    pub openapi: String,
    /// The API's base URL, overriding the document's `servers`.
    #[serde(default)]
    pub base_url: Option<String>,
    /// How calls authenticate; none by default.
    #[serde(default)]
    pub auth: Option<AuthConfig>,
    /// Which operations become tools; all by default.
    #[serde(default)]
    pub operations: Operations,
    /// Headers sent with every call (after the operation's own header parameters).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The time limit of one call, connection to last byte, in milliseconds.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// The largest answer read, in bytes; a larger one fails the call.
    #[serde(default = "default_max_response_bytes")]
    pub max_response_bytes: u64,
}

fn default_timeout_ms() -> u64 {
    DEFAULT_TIMEOUT_MS
}

fn default_max_response_bytes() -> u64 {
    DEFAULT_MAX_RESPONSE_BYTES
}

impl OpenApiConfig {
    /// A configuration of the document at `openapi` with every default.
    pub fn new(openapi: impl Into<String>) -> Self {
        OpenApiConfig {
            openapi: openapi.into(),
            base_url: None,
            auth: None,
            operations: Operations::default(),
            headers: BTreeMap::new(),
            timeout_ms: DEFAULT_TIMEOUT_MS,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        }
    }

    /// Checks the values serde cannot: limits in range, a usable base URL.
    pub fn check(&self) -> Result<(), OpenApiError> {
        if self.timeout_ms == 0 || self.timeout_ms > MAX_TIMEOUT_MS {
            return Err(OpenApiError::config(
                "timeout_ms",
                format!(
                    "{} is out of range: give a number of milliseconds from 1 to {MAX_TIMEOUT_MS}",
                    self.timeout_ms
                ),
            ));
        }
        if self.max_response_bytes == 0 || self.max_response_bytes > MAX_RESPONSE_BYTES_CEILING {
            return Err(OpenApiError::config(
                "max_response_bytes",
                format!(
                    "{} is out of range: give a number of bytes from 1 to {MAX_RESPONSE_BYTES_CEILING} \
                     (an answer must fit in one protocol message)",
                    self.max_response_bytes
                ),
            ));
        }
        if let Some(base) = &self.base_url {
            crate::http::check_base_url(base).map_err(|m| OpenApiError::config("base_url", m))?;
        }
        for name in self.headers.keys() {
            if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(OpenApiError::config(
                    "headers",
                    format!("{name:?} is not a valid HTTP header name"),
                ));
            }
        }
        Ok(())
    }
}

/// `operations: {include, exclude}`: globs (`*` any run of characters, `?` one) matched on
/// each operation's `operationId`, its tool name and its tags.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Operations {
    /// An operation is kept when one of these matches (every operation when empty).
    #[serde(default)]
    pub include: Vec<String>,
    /// An operation is left out when one of these matches, whatever `include` says.
    #[serde(default)]
    pub exclude: Vec<String>,
}

/// How calls authenticate. Exactly one kind.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum AuthConfig {
    /// `Authorization: Bearer <secret>`.
    Bearer(Secret),
    /// A key in a header or in the query string.
    ApiKey(ApiKey),
    /// `Authorization: Basic` from a user name and a password.
    Basic(Basic),
    /// OAuth2 client credentials: a token fetched from `token_url`, cached until it expires.
    Oauth2ClientCredentials(ClientCredentials),
}

/// Where a secret is read from: `{env: NAME}` or `{file: PATH}`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Secret {
    /// An environment variable of the host process.
    Env(String),
    /// A file (relative to the tools file's folder); one trailing line break is dropped.
    File(PathBuf),
}

/// `api_key: {in, name, env | file}`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ApiKey {
    /// `header` or `query`.
    #[serde(rename = "in")]
    pub location: ApiKeyLocation,
    /// The header or query parameter name.
    pub name: String,
    /// The key, from an environment variable.
    #[serde(default)]
    pub env: Option<String>,
    /// The key, from a file.
    #[serde(default)]
    pub file: Option<PathBuf>,
}

impl ApiKey {
    /// The secret `env` or `file` names: exactly one of them.
    pub fn secret(&self) -> Result<Secret, OpenApiError> {
        match (&self.env, &self.file) {
            (Some(env), None) => Ok(Secret::Env(env.clone())),
            (None, Some(file)) => Ok(Secret::File(file.clone())),
            _ => Err(OpenApiError::config(
                "auth.api_key",
                "give the key as exactly one of `env: NAME` or `file: PATH`",
            )),
        }
    }
}

/// Where an API key goes.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ApiKeyLocation {
    /// A request header.
    Header,
    /// A query parameter.
    Query,
}

/// `basic: {username, password}`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Basic {
    /// The user name.
    pub username: Secret,
    /// The password.
    pub password: Secret,
}

/// `oauth2_client_credentials: {token_url, client_id, client_secret, scopes}`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClientCredentials {
    /// The token endpoint (https, or http on a loopback address).
    pub token_url: String,
    /// The client id (not a secret), sent with the secret as HTTP basic authentication.
    pub client_id: String,
    /// The client secret.
    pub client_secret: Secret,
    /// The scopes asked for, space-separated in the request; none by default.
    #[serde(default)]
    pub scopes: Vec<String>,
}

/// A secret's value, read on the host. `Debug` and `Display` print `[redacted]`.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretValue(String);

impl SecretValue {
    /// Wraps a value read elsewhere.
    pub fn new(value: impl Into<String>) -> Self {
        SecretValue(value.into())
    }

    /// The value, for the request that needs it (never for a message).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl fmt::Display for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// `[A-Za-z_][A-Za-z0-9_]*`: what shells export.
fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl Secret {
    /// Reads the secret: the variable must be set and not empty, the file readable and not
    /// empty. `field` names it in errors (`auth.bearer`); `base_dir` resolves a relative file.
    pub fn resolve(&self, field: &str, base_dir: &Path) -> Result<SecretValue, OpenApiError> {
        match self {
            // A name that is no variable name is likely a secret pasted in its place: it is
            // not shown.
            Secret::Env(name) if !is_variable_name(name) => Err(OpenApiError::config(
                field,
                "`env:` takes the name of an environment variable (letters, digits and `_`), \
                 not the secret itself (what is written is not shown)",
            )),
            Secret::Env(name) => match std::env::var(name) {
                Ok(value) if !value.is_empty() => Ok(SecretValue(value)),
                Ok(_) => Err(OpenApiError::config(
                    field,
                    format!("the environment variable {name} is empty; set it to the secret"),
                )),
                Err(std::env::VarError::NotPresent) => Err(OpenApiError::config(
                    field,
                    format!(
                        "the environment variable {name} is not set; export it, or give the \
                         secret as `file: PATH`"
                    ),
                )),
                Err(std::env::VarError::NotUnicode(_)) => Err(OpenApiError::config(
                    field,
                    format!("the environment variable {name} is not valid UTF-8"),
                )),
            },
            Secret::File(path) => {
                let path = if path.is_relative() {
                    base_dir.join(path)
                } else {
                    path.clone()
                };
                let text = std::fs::read_to_string(&path).map_err(|e| {
                    OpenApiError::config(
                        field,
                        format!("cannot read the secret file {}: {e}", path.display()),
                    )
                })?;
                let value = text
                    .strip_suffix('\n')
                    .map(|t| t.strip_suffix('\r').unwrap_or(t))
                    .unwrap_or(&text);
                if value.is_empty() {
                    return Err(OpenApiError::config(
                        field,
                        format!("the secret file {} is empty", path.display()),
                    ));
                }
                Ok(SecretValue(value.to_string()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<OpenApiConfig, String> {
        execbox_host::yaml::from_str(text, Path::new("tools.yaml")).map_err(|e| e.to_string())
    }

    #[test]
    fn the_issue_example_parses() {
        let config = parse(
            r#"
openapi: ./api.github.com.json
base_url: https://api.github.com
auth:
  bearer: { env: GITHUB_TOKEN }
operations: { include: ["issues/*", "repos/get*"], exclude: ["*delete*"] }
headers: { X-GitHub-Api-Version: "2022-11-28" }
timeout_ms: 30000
max_response_bytes: 8388608
"#,
        )
        .unwrap();
        assert_eq!(
            config.auth,
            Some(AuthConfig::Bearer(Secret::Env("GITHUB_TOKEN".into())))
        );
        assert_eq!(config.operations.include, ["issues/*", "repos/get*"]);
        assert_eq!(config.headers["X-GitHub-Api-Version"], "2022-11-28");
        config.check().unwrap();
    }

    #[test]
    fn every_auth_kind_parses() {
        let api_key =
            parse("openapi: a.json\nauth:\n  api_key: { in: query, name: key, env: KEY }\n")
                .unwrap();
        let Some(AuthConfig::ApiKey(key)) = api_key.auth else {
            panic!("api_key")
        };
        assert_eq!(key.location, ApiKeyLocation::Query);
        assert_eq!(key.secret().unwrap(), Secret::Env("KEY".into()));
        let basic = parse(
            "openapi: a.json\nauth:\n  basic: { username: { env: U }, password: { file: p.txt } }\n",
        )
        .unwrap();
        assert!(matches!(basic.auth, Some(AuthConfig::Basic(_))));
        let oauth = parse(
            "openapi: a.json\nauth:\n  oauth2_client_credentials:\n    token_url: https://t.example/token\n    client_id: app\n    client_secret: { env: S }\n    scopes: [read, write]\n",
        )
        .unwrap();
        let Some(AuthConfig::Oauth2ClientCredentials(cc)) = oauth.auth else {
            panic!("oauth2")
        };
        assert_eq!(cc.scopes, ["read", "write"]);
    }

    #[test]
    fn unknown_fields_and_bad_values_are_refused_with_their_place() {
        let err = parse("openapi: a.json\ntimeout: 5\n").unwrap_err();
        assert!(err.contains("timeout"), "{err}");
        assert!(err.contains("timeout_ms"), "{err}");
        let err = parse("openapi: a.json\nauth:\n  bearer: { environment: X }\n").unwrap_err();
        assert!(err.contains("environment"), "{err}");
        let err = parse("openapi: a.json\nauth:\n  api_key: { in: cookie, name: k, env: K }\n")
            .unwrap_err();
        assert!(err.contains("cookie"), "{err}");
        let config = parse("openapi: a.json\ntimeout_ms: 0\n").unwrap();
        let err = config.check().unwrap_err().to_string();
        assert!(
            err.contains("timeout_ms") && err.contains("from 1"),
            "{err}"
        );
        let config = parse("openapi: a.json\nbase_url: ftp://x\n").unwrap();
        let err = config.check().unwrap_err().to_string();
        assert!(err.contains("base_url"), "{err}");
        let key = ApiKey {
            location: ApiKeyLocation::Header,
            name: "k".into(),
            env: Some("A".into()),
            file: Some("b".into()),
        };
        assert!(key
            .secret()
            .unwrap_err()
            .to_string()
            .contains("exactly one"));
    }

    #[test]
    fn secrets_come_from_files_and_never_show_in_debug() {
        let dir = std::env::temp_dir().join(format!("execbox-openapi-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("token"), "s3cr3t-file-value\n").unwrap();
        let value = Secret::File("token".into())
            .resolve("auth.bearer", &dir)
            .unwrap();
        assert_eq!(value.expose(), "s3cr3t-file-value");
        assert_eq!(format!("{value:?} {value}"), "[redacted] [redacted]");
        let err = Secret::File("missing".into())
            .resolve("auth.bearer", &dir)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("auth.bearer: cannot read the secret file"),
            "{err}"
        );
        let err = Secret::Env("EXECBOX_OPENAPI_SURELY_UNSET".into())
            .resolve("auth.bearer", &dir)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("EXECBOX_OPENAPI_SURELY_UNSET is not set"),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
