//! Credentials on the host side: applied to each request, cached (OAuth2 tokens), and kept
//! out of every message ([`Redactor`]).

use std::fmt;
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use reqwest::header::{HeaderName, HeaderValue, AUTHORIZATION};
use serde_json::Value;

use crate::config::{ApiKeyLocation, AuthConfig, SecretValue};
use crate::error::OpenApiError;

/// The largest answer read from a token endpoint: 64 KiB.
const MAX_TOKEN_RESPONSE_BYTES: usize = 64 * 1024;

/// A token is fetched again this long before it expires (or at half its lifetime, if
/// shorter), so no call goes out with a token that expires on the way.
const EXPIRY_MARGIN: Duration = Duration::from_secs(30);

/// How long a token without `expires_in` is kept: one hour.
const DEFAULT_TOKEN_LIFETIME: Duration = Duration::from_secs(3600);

/// Every secret value known to one provider, and every token fetched for it: replaced by
/// `[redacted]` in any text that may reach the guest, an error or a log line.
#[derive(Clone, Default)]
pub struct Redactor(Arc<RwLock<Vec<String>>>);

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Redactor([redacted])")
    }
}

impl Redactor {
    /// Adds a value to hide.
    pub fn add(&self, secret: &str) {
        if secret.is_empty() {
            return;
        }
        let mut secrets = self.0.write().unwrap_or_else(|e| e.into_inner());
        if !secrets.iter().any(|s| s == secret) {
            secrets.push(secret.to_string());
            // Longest first, so a secret containing another is hidden whole.
            secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        }
    }

    /// `text` with every known secret replaced, in each form an echo may take: as it is,
    /// percent-encoded (upper or lower case hex), and escaped as in a JSON string (`\/`,
    /// `\u002b`).
    pub fn redact(&self, text: &str) -> String {
        let secrets = self.0.read().unwrap_or_else(|e| e.into_inner());
        let mut out = text.to_string();
        for secret in secrets.iter() {
            for form in forms(secret) {
                if out.contains(form.as_str()) {
                    out = out.replace(form.as_str(), "[redacted]");
                }
            }
        }
        out
    }

    /// Redacts every string of a JSON value in place (an API that echoes a credential).
    pub fn redact_value(&self, value: &mut Value) {
        if self.0.read().unwrap_or_else(|e| e.into_inner()).is_empty() {
            return;
        }
        let mut stack = vec![value];
        while let Some(v) = stack.pop() {
            match v {
                Value::String(s) => {
                    let redacted = self.redact(s);
                    if redacted != *s {
                        *s = redacted;
                    }
                }
                Value::Array(items) => stack.extend(items.iter_mut()),
                Value::Object(map) => {
                    // A key may echo a secret too.
                    if map.keys().any(|k| self.redact(k) != *k) {
                        let entries = std::mem::take(map);
                        for (k, v) in entries {
                            map.insert(self.redact(&k), v);
                        }
                    }
                    stack.extend(map.values_mut());
                }
                _ => {}
            }
        }
    }
}

/// The forms of `secret` an echo may carry: itself, percent-encoded in upper and lower case
/// hex, and JSON-escaped (with and without `/` escaped, every non-alphanumeric as `\uXXXX` in
/// either case).
fn forms(secret: &str) -> Vec<String> {
    let encoded = crate::http::encode(secret);
    let json = serde_json::to_string(secret).unwrap_or_default();
    let json = json.trim_matches('"').to_string();
    let unicode = |upper: bool| -> String {
        secret
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_string()
                } else if upper {
                    format!("\\u{:04X}", c as u32)
                } else {
                    format!("\\u{:04x}", c as u32)
                }
            })
            .collect()
    };
    let mut forms = vec![
        secret.to_string(),
        lower_hex(&encoded),
        encoded.clone(),
        json.replace('/', "\\/"),
        json,
        unicode(true),
        unicode(false),
    ];
    forms.sort_by_key(|f| std::cmp::Reverse(f.len()));
    forms.dedup();
    forms
}

/// `%2F` as `%2f`: the hex digits of each escape in lower case, nothing else.
fn lower_hex(encoded: &str) -> String {
    let mut out = String::with_capacity(encoded.len());
    let mut rest = encoded;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let escape = rest.get(i..i + 3).unwrap_or(&rest[i..]);
        out.push_str(&escape.to_ascii_lowercase());
        rest = &rest[i + escape.len()..];
    }
    out.push_str(rest);
    out
}

/// How a request is authenticated, with the secrets read.
#[derive(Debug, Clone)]
pub enum Auth {
    /// Nothing added.
    None,
    /// A header set to a secret (`Authorization: Bearer ...`, an API key).
    Header(HeaderName, SecretValue),
    /// A query parameter set to a secret.
    Query(String, SecretValue),
    /// OAuth2 client credentials.
    OAuth2(Arc<TokenSource>),
}

impl Auth {
    /// Reads the secrets `config` names (recording each in `redactor`).
    pub fn resolve(
        config: Option<&AuthConfig>,
        base_dir: &Path,
        redactor: &Redactor,
        client: &reqwest::Client,
        timeout: Duration,
    ) -> Result<Auth, OpenApiError> {
        let secret = |s: &crate::config::Secret, field: &str| {
            let value = s.resolve(field, base_dir)?;
            redactor.add(value.expose());
            Ok::<_, OpenApiError>(value)
        };
        let header_value = |text: String, field: &str| {
            let mut value = HeaderValue::from_str(&text).map_err(|_| {
                OpenApiError::config(
                    field,
                    "the secret holds characters a header cannot carry (a line break?)",
                )
            })?;
            value.set_sensitive(true);
            Ok::<_, OpenApiError>(SecretValue::new(value.to_str().unwrap_or_default()))
        };
        Ok(match config {
            None => Auth::None,
            Some(AuthConfig::Bearer(s)) => {
                let token = secret(s, "auth.bearer")?;
                let value = header_value(format!("Bearer {}", token.expose()), "auth.bearer")?;
                Auth::Header(AUTHORIZATION, value)
            }
            Some(AuthConfig::ApiKey(key)) => {
                let value = secret(&key.secret()?, "auth.api_key")?;
                match key.location {
                    ApiKeyLocation::Header => {
                        let name = HeaderName::from_bytes(key.name.as_bytes()).map_err(|_| {
                            OpenApiError::config(
                                "auth.api_key.name",
                                format!("{:?} is not a valid HTTP header name", key.name),
                            )
                        })?;
                        Auth::Header(
                            name,
                            header_value(value.expose().to_string(), "auth.api_key")?,
                        )
                    }
                    ApiKeyLocation::Query => {
                        if key.name.is_empty() {
                            return Err(OpenApiError::config("auth.api_key.name", "is empty"));
                        }
                        Auth::Query(key.name.clone(), value)
                    }
                }
            }
            Some(AuthConfig::Basic(basic)) => {
                let user = secret(&basic.username, "auth.basic.username")?;
                let password = secret(&basic.password, "auth.basic.password")?;
                let encoded = base64(format!("{}:{}", user.expose(), password.expose()).as_bytes());
                redactor.add(&encoded);
                Auth::Header(
                    AUTHORIZATION,
                    header_value(format!("Basic {encoded}"), "auth.basic")?,
                )
            }
            Some(AuthConfig::Oauth2ClientCredentials(cc)) => {
                let field = "auth.oauth2_client_credentials.token_url";
                let token_url = reqwest::Url::parse(&cc.token_url).map_err(|e| {
                    OpenApiError::config(field, format!("{:?} is not a URL ({e})", cc.token_url))
                })?;
                crate::http::check_base_url(&cc.token_url)
                    .map_err(|m| OpenApiError::config(field, m))?;
                let client_secret = secret(
                    &cc.client_secret,
                    "auth.oauth2_client_credentials.client_secret",
                )?;
                let basic = base64(
                    format!(
                        "{}:{}",
                        crate::http::encode_form(&cc.client_id),
                        crate::http::encode_form(client_secret.expose())
                    )
                    .as_bytes(),
                );
                redactor.add(&basic);
                Auth::OAuth2(Arc::new(TokenSource {
                    token_url,
                    client_auth: SecretValue::new(format!("Basic {basic}")),
                    scopes: cc.scopes.join(" "),
                    client: client.clone(),
                    timeout,
                    redactor: redactor.clone(),
                    cached: tokio::sync::Mutex::new(None),
                }))
            }
        })
    }

    /// Whether the credential is sent to the API itself (so plain http matters).
    pub fn is_some(&self) -> bool {
        !matches!(self, Auth::None)
    }
}

/// OAuth2 client credentials: one token at a time, fetched when missing or expiring, by one
/// caller while the others wait for it.
pub struct TokenSource {
    token_url: reqwest::Url,
    client_auth: SecretValue,
    scopes: String,
    client: reqwest::Client,
    timeout: Duration,
    redactor: Redactor,
    cached: tokio::sync::Mutex<Option<(SecretValue, Instant)>>,
}

impl fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenSource")
            .field("token_url", &self.token_url.as_str())
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

impl TokenSource {
    /// A token valid now: the cached one, or a new one from the token endpoint.
    pub async fn token(&self) -> Result<SecretValue, String> {
        let mut cached = self.cached.lock().await;
        if let Some((token, expires)) = cached.as_ref() {
            if Instant::now() < *expires {
                return Ok(token.clone());
            }
        }
        *cached = None;
        let (token, lifetime) = match tokio::time::timeout(self.timeout, self.fetch()).await {
            Ok(answer) => answer?,
            Err(_) => {
                return Err(format!(
                    "the OAuth2 token endpoint {} did not answer within {} ms (the provider's timeout_ms)",
                    self.endpoint(),
                    self.timeout.as_millis()
                ))
            }
        };
        self.redactor.add(token.expose());
        let margin = EXPIRY_MARGIN.min(lifetime / 2);
        *cached = Some((token.clone(), Instant::now() + lifetime - margin));
        Ok(token)
    }

    /// Forgets the cached token (after the API refused it), so the next call fetches one.
    pub async fn forget(&self) {
        *self.cached.lock().await = None;
    }

    /// The endpoint as messages name it: no query string.
    fn endpoint(&self) -> String {
        let mut url = self.token_url.clone();
        url.set_query(None);
        url.to_string()
    }

    async fn fetch(&self) -> Result<(SecretValue, Duration), String> {
        let endpoint = self.endpoint();
        let mut form = "grant_type=client_credentials".to_string();
        if !self.scopes.is_empty() {
            form.push_str("&scope=");
            form.push_str(&crate::http::encode_form(&self.scopes));
        }
        let mut auth = HeaderValue::from_str(self.client_auth.expose())
            .map_err(|_| "the client credentials cannot be sent in a header".to_string())?;
        auth.set_sensitive(true);
        let response = self
            .client
            .post(self.token_url.clone())
            .header(AUTHORIZATION, auth)
            .header("content-type", "application/x-www-form-urlencoded")
            .header("accept", "application/json")
            .body(form)
            .send()
            .await
            .map_err(|e| {
                self.redactor.redact(&format!(
                    "cannot get an OAuth2 token from {endpoint}: {}",
                    crate::http::describe_send_error(&e)
                ))
            })?;
        let status = response.status();
        let (body, _) = crate::http::read_bounded(response, MAX_TOKEN_RESPONSE_BYTES as u64)
            .await
            .map_err(|e| {
                self.redactor.redact(&format!(
                    "cannot read the OAuth2 token endpoint's answer ({endpoint}): {e}"
                ))
            })?;
        if !status.is_success() {
            return Err(self.redactor.redact(&format!(
                "the OAuth2 token endpoint {endpoint} refused the client credentials: HTTP {}: {}",
                crate::http::status_text(status),
                crate::http::quote_body(&body)
            )));
        }
        let bad = |what: &str| {
            format!(
                "the OAuth2 token endpoint {endpoint} answered {what}; expected JSON with a string \
                 `access_token` (RFC 6749, section 5.1)"
            )
        };
        let json: Value =
            serde_json::from_slice(&body).map_err(|_| bad("something that is not JSON"))?;
        let token = match json.get("access_token") {
            Some(Value::String(t)) if !t.is_empty() => t.clone(),
            _ => return Err(bad("without an `access_token`")),
        };
        if HeaderValue::from_str(&format!("Bearer {token}")).is_err() {
            return Err(bad("a token a header cannot carry"));
        }
        let lifetime = match json.get("expires_in") {
            Some(Value::Number(n)) => n
                .as_f64()
                .map(|s| Duration::from_secs_f64(s.clamp(0.0, 1e9))),
            // Bounded as a number is: no lifetime overflows an `Instant`.
            Some(Value::String(s)) => s
                .trim()
                .parse::<u64>()
                .ok()
                .map(|secs| Duration::from_secs(secs.min(1_000_000_000))),
            _ => None,
        }
        .unwrap_or(DEFAULT_TOKEN_LIFETIME);
        Ok((SecretValue::new(token), lifetime))
    }
}

/// Standard base64 with padding (RFC 4648), for HTTP basic authentication.
pub fn base64(bytes: &[u8]) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(TABLE[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc_4648() {
        for (input, want) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("user:pass", "dXNlcjpwYXNz"),
        ] {
            assert_eq!(base64(input.as_bytes()), want);
        }
    }

    #[test]
    fn the_redactor_hides_secrets_and_their_encodings_everywhere() {
        let r = Redactor::default();
        r.add("s3cr3t/key");
        r.add("s3cr3t");
        assert_eq!(
            r.redact("a s3cr3t/key b s3cr3t c s3cr3t%2Fkey"),
            "a [redacted] b [redacted] c [redacted]"
        );
        let mut v = serde_json::json!({"echo": ["Bearer s3cr3t"], "n": 1});
        r.redact_value(&mut v);
        assert_eq!(
            v,
            serde_json::json!({"echo": ["Bearer [redacted]"], "n": 1})
        );
        assert_eq!(format!("{r:?}"), "Redactor([redacted])");
    }

    #[test]
    fn the_redactor_hides_escaped_forms_and_keys() {
        let r = Redactor::default();
        r.add("ab/c+d");
        for echo in [
            "x ab%2Fc%2Bd y",
            "x ab%2fc%2bd y",
            "x ab\\/c+d y",
            "x ab\\u002Fc\\u002Bd y",
            "x ab\\u002fc\\u002bd y",
        ] {
            assert_eq!(r.redact(echo), "x [redacted] y", "{echo}");
        }
        let mut v = serde_json::json!({"Bearer ab/c+d": {"ab/c+d": 1}});
        r.redact_value(&mut v);
        assert_eq!(
            v,
            serde_json::json!({"Bearer [redacted]": {"[redacted]": 1}})
        );
    }
}
