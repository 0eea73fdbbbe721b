//! The `oauth` field of an HTTP server in `mcp.json`: how execbox signs in to it.
//!
//! ```json
//! "github": {
//!   "url": "https://api.githubcopilot.com/mcp/",
//!   "oauth": {"client_id": "Iv1.abc", "client_secret": {"env": "GITHUB_OAUTH_SECRET"}, "scopes": ["repo"]}
//! }
//! ```
//!
//! Every field is optional: without any, `execbox mcp login NAME` discovers the server's
//! authorization server and registers itself. Secrets are read when used (a missing variable
//! makes that one server unavailable, saying which), and never printed.

use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// How execbox signs in to one HTTP server.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct OAuthConfig {
    /// A client registered beforehand with the authorization server; else the server's
    /// client ID metadata document support or dynamic registration is used.
    pub client_id: Option<String>,
    /// That client's secret (a confidential client).
    pub client_secret: Option<Secret>,
    /// The scopes to ask for; else those the server's challenge or metadata name.
    pub scopes: Vec<String>,
    /// How tokens are obtained.
    pub grant: Grant,
    /// An `https://` URL of a client ID metadata document execbox is known by, used as the
    /// client ID where the authorization server supports such documents.
    pub client_metadata_url: Option<String>,
    /// A PEM private key for `private_key_jwt` client authentication (client credentials).
    pub private_key: Option<Secret>,
    /// The JWS algorithm of `private_key`: `ES256` (default) or `RS256`.
    pub signing_algorithm: SigningAlgorithm,
    /// The authorization server the client belongs to (its issuer identifier): when set,
    /// execbox signs in with no other, whatever the MCP server names, so a configured secret
    /// or key only ever reaches its own server.
    pub issuer: Option<String>,
}

/// How tokens are obtained.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Grant {
    /// A person signs in once with `execbox mcp login` (authorization code with PKCE).
    #[default]
    AuthorizationCode,
    /// execbox gets tokens itself with the client's own credentials (headless deployments).
    ClientCredentials,
}

/// The JWS algorithm of a `private_key_jwt` client assertion.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SigningAlgorithm {
    /// ECDSA with P-256 and SHA-256.
    #[default]
    Es256,
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    Rs256,
}

impl SigningAlgorithm {
    /// The name in a JWS header.
    pub fn name(self) -> &'static str {
        match self {
            SigningAlgorithm::Es256 => "ES256",
            SigningAlgorithm::Rs256 => "RS256",
        }
    }
}

/// A secret written in `mcp.json`: the value itself, or where to read it.
#[derive(Clone, PartialEq, Eq)]
pub enum Secret {
    /// Written in the file.
    Literal(String),
    /// `{"env": "NAME"}`: an environment variable of execbox.
    Env(String),
    /// `{"file": "PATH"}`: a file (relative to the config's folder), without a final newline.
    File(PathBuf),
}

// Secrets are never printed, only where they come from.
impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Secret::Literal(_) => f.write_str("Literal(..)"),
            Secret::Env(name) => write!(f, "Env({name})"),
            Secret::File(path) => write!(f, "File({})", path.display()),
        }
    }
}

impl fmt::Debug for OAuthConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OAuthConfig")
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret)
            .field("scopes", &self.scopes)
            .field("grant", &self.grant)
            .field("client_metadata_url", &self.client_metadata_url)
            .field("private_key", &self.private_key)
            .field("signing_algorithm", &self.signing_algorithm)
            .field("issuer", &self.issuer)
            .finish()
    }
}

impl Secret {
    /// The secret's value; `field` names it in the error.
    pub fn read(&self, field: &str) -> Result<String, String> {
        match self {
            Secret::Literal(value) => Ok(value.clone()),
            Secret::Env(name) => match std::env::var(name) {
                Ok(value) if !value.is_empty() => Ok(value),
                _ => Err(format!(
                    "oauth.{field}: the environment variable {name} is not set; set it where \
                     execbox runs"
                )),
            },
            Secret::File(path) => match std::fs::read_to_string(path) {
                Ok(value) => Ok(value.trim_end_matches(['\n', '\r']).to_owned()),
                Err(e) => Err(format!(
                    "oauth.{field}: cannot read {}: {e}",
                    path.display()
                )),
            },
        }
    }
}

const FIELDS: &[&str] = &[
    "client_id",
    "client_secret",
    "scopes",
    "grant",
    "client_metadata_url",
    "private_key",
    "signing_algorithm",
    "issuer",
];

/// Parses the `oauth` field; `base` resolves `{"file": ...}` paths. The error names the field
/// below `oauth` (`oauth.scopes`).
pub(crate) fn parse(value: &Value, base: &Path) -> Result<OAuthConfig, (String, String)> {
    let fail = |field: &str, message: String| (format!("oauth.{field}"), message);
    let Value::Object(map) = value else {
        return Err((
            "oauth".into(),
            format!(
                "expected an object such as {{\"client_id\": \"...\", \"scopes\": [...]}} (or {{}}); \
                 got {}",
                kind(value)
            ),
        ));
    };
    if let Some(unknown) = map.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(fail(
            unknown,
            format!("unknown field; the fields are {}", FIELDS.join(", ")),
        ));
    }
    let string = |field: &str| -> Result<Option<String>, (String, String)> {
        match map.get(field) {
            None => Ok(None),
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.clone())),
            Some(other) => Err(fail(
                field,
                format!("expected a non-empty string; got {}", kind(other)),
            )),
        }
    };
    let secret = |field: &str| secret(map, field, base).map_err(|m| fail(field, m));
    let scopes = match map.get("scopes") {
        None => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|s| match s {
                Value::String(s) if !s.is_empty() && !s.contains(char::is_whitespace) => {
                    Ok(s.clone())
                }
                other => Err(fail(
                    "scopes",
                    format!("expected scope names without spaces; got {}", show(other)),
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(fail(
                "scopes",
                format!("expected an array of scope names; got {}", kind(other)),
            ))
        }
    };
    let grant = match string("grant")?.as_deref() {
        None | Some("authorization_code") => Grant::AuthorizationCode,
        Some("client_credentials") => Grant::ClientCredentials,
        Some(other) => {
            return Err(fail(
                "grant",
                format!("expected \"authorization_code\" or \"client_credentials\"; got {other:?}"),
            ))
        }
    };
    let signing_algorithm = match string("signing_algorithm")?.as_deref() {
        None | Some("ES256") => SigningAlgorithm::Es256,
        Some("RS256") => SigningAlgorithm::Rs256,
        Some(other) => {
            return Err(fail(
                "signing_algorithm",
                format!("expected \"ES256\" or \"RS256\"; got {other:?}"),
            ))
        }
    };
    let client_metadata_url = string("client_metadata_url")?;
    if let Some(url) = &client_metadata_url {
        let parsed = url::Url::parse(url).ok();
        let https_with_path = parsed
            .as_ref()
            .is_some_and(|u| u.scheme() == "https" && u.path() != "/" && u.host().is_some());
        if !https_with_path {
            return Err(fail(
                "client_metadata_url",
                format!(
                    "expected an https:// URL with a path (the metadata document); got {url:?}"
                ),
            ));
        }
    }
    let issuer = string("issuer")?;
    if let Some(issuer) = &issuer {
        let web = url::Url::parse(issuer)
            .is_ok_and(|u| matches!(u.scheme(), "https" | "http") && u.host().is_some());
        if !web {
            return Err(fail(
                "issuer",
                format!("expected the authorization server's https:// URL; got {issuer:?}"),
            ));
        }
    }
    let config = OAuthConfig {
        client_id: string("client_id")?,
        client_secret: secret("client_secret")?,
        scopes,
        grant,
        client_metadata_url,
        private_key: secret("private_key")?,
        signing_algorithm,
        issuer,
    };
    if config.client_secret.is_some() && config.client_id.is_none() {
        return Err(fail(
            "client_secret",
            "a client secret needs the \"client_id\" it belongs to".into(),
        ));
    }
    if config.private_key.is_some() && config.client_secret.is_some() {
        return Err(fail(
            "private_key",
            "give either \"client_secret\" or \"private_key\", not both".into(),
        ));
    }
    if config.grant == Grant::ClientCredentials {
        if config.client_id.is_none() {
            return Err(fail(
                "client_id",
                "missing; client credentials need the client's ID".into(),
            ));
        }
        if config.client_secret.is_none() && config.private_key.is_none() {
            return Err(fail(
                "grant",
                "client credentials need \"client_secret\" or \"private_key\"".into(),
            ));
        }
    } else if config.private_key.is_some() {
        return Err(fail(
            "private_key",
            "a private key is used with \"grant\": \"client_credentials\" only".into(),
        ));
    }
    Ok(config)
}

/// A secret field: a string, `{"env": "NAME"}` or `{"file": "PATH"}`.
fn secret(map: &Map<String, Value>, field: &str, base: &Path) -> Result<Option<Secret>, String> {
    const USAGE: &str = "write the value, {\"env\": \"VARIABLE\"} or {\"file\": \"PATH\"}";
    match map.get(field) {
        None => Ok(None),
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(Secret::Literal(s.clone()))),
        Some(Value::Object(o)) if o.len() == 1 => match o.iter().next() {
            Some((k, Value::String(v))) if k == "env" && !v.is_empty() => {
                Ok(Some(Secret::Env(v.clone())))
            }
            Some((k, Value::String(v))) if k == "file" && !v.is_empty() => {
                Ok(Some(Secret::File(base.join(v))))
            }
            _ => Err(format!("expected a secret; {USAGE}")),
        },
        Some(other) => Err(format!("expected a secret; {USAGE}; got {}", kind(other))),
    }
}

fn show(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        other => kind(other).into(),
    }
}

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
    use serde_json::json;

    fn parsed(value: Value) -> Result<OAuthConfig, String> {
        parse(&value, Path::new("/etc/execbox")).map_err(|(field, m)| format!("{field}: {m}"))
    }

    #[test]
    fn every_field_is_read() {
        let config = parsed(json!({
            "client_id": "abc", "client_secret": {"env": "SECRET"}, "scopes": ["repo", "read:org"],
            "client_metadata_url": "https://execbox.dev/client.json",
            "issuer": "https://login.example.com/tenant"
        }))
        .unwrap();
        assert_eq!(
            config.issuer.as_deref(),
            Some("https://login.example.com/tenant")
        );
        assert_eq!(config.client_id.as_deref(), Some("abc"));
        assert_eq!(config.client_secret, Some(Secret::Env("SECRET".into())));
        assert_eq!(config.scopes, ["repo", "read:org"]);
        assert_eq!(config.grant, Grant::AuthorizationCode);
        let headless = parsed(json!({
            "grant": "client_credentials", "client_id": "svc",
            "private_key": {"file": "key.pem"}, "signing_algorithm": "RS256"
        }))
        .unwrap();
        assert_eq!(headless.grant, Grant::ClientCredentials);
        assert_eq!(
            headless.private_key,
            Some(Secret::File(PathBuf::from("/etc/execbox/key.pem")))
        );
        assert_eq!(headless.signing_algorithm, SigningAlgorithm::Rs256);
        assert_eq!(parsed(json!({})).unwrap(), OAuthConfig::default());
    }

    #[test]
    fn mistakes_name_the_field() {
        let cases = [
            (json!([]), "oauth: expected an object"),
            (json!({"client": "x"}), "oauth.client: unknown field"),
            (json!({"scopes": "repo"}), "oauth.scopes: expected an array"),
            (
                json!({"scopes": ["a b"]}),
                "oauth.scopes: expected scope names",
            ),
            (
                json!({"grant": "password"}),
                "oauth.grant: expected \"authorization_code\"",
            ),
            (
                json!({"client_secret": "s"}),
                "oauth.client_secret: a client secret needs",
            ),
            (
                json!({"client_secret": {"vault": "x"}}),
                "oauth.client_secret: expected a secret",
            ),
            (
                json!({"grant": "client_credentials"}),
                "oauth.client_id: missing",
            ),
            (
                json!({"grant": "client_credentials", "client_id": "x"}),
                "oauth.grant: client credentials need",
            ),
            (
                json!({"client_metadata_url": "http://x.example/c.json"}),
                "oauth.client_metadata_url: expected an https:// URL",
            ),
            (
                json!({"private_key": {"env": "K"}}),
                "oauth.private_key: a private key is used",
            ),
            (
                json!({"issuer": "login.example.com"}),
                "oauth.issuer: expected the authorization",
            ),
        ];
        for (value, expected) in cases {
            let error = parsed(value.clone()).unwrap_err();
            assert!(error.starts_with(expected), "{value}: {error}");
        }
    }

    #[test]
    fn secrets_are_never_printed() {
        let config = parsed(json!({"client_id": "a", "client_secret": "hunter2"})).unwrap();
        assert!(!format!("{config:?}").contains("hunter2"));
        std::env::remove_var("EXECBOX_TEST_UNSET_SECRET");
        let missing = Secret::Env("EXECBOX_TEST_UNSET_SECRET".into()).read("client_secret");
        assert!(missing
            .unwrap_err()
            .contains("EXECBOX_TEST_UNSET_SECRET is not set"));
    }
}
