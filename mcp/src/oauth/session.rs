//! Signed requests to an HTTP upstream: [`Signed`] puts the current access token on every
//! request, refreshes it when it expires or the server answers 401 (once per rejected token),
//! gets a new one with the client's credentials for a headless server, and remembers the
//! scope a 403 `insufficient_scope` asked for, so the next `execbox mcp login` asks for it.
//! [`explain`] turns what is left (no sign-in, not enough scope) into what to do.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use futures_util::stream::BoxStream;
use oauth2::TokenResponse as _;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::auth::{
    AuthError, AuthorizationManager, ClientCredentialsConfig, CredentialStore,
    InMemoryCredentialStore, OAuthClientConfig, OAuthTokenResponse, StoredCredentials,
};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};

use super::config::{Grant, OAuthConfig};
use super::jwt::{self, SigningKey};
use super::store::TokenFile;
use super::untrusted::{check_endpoint, check_endpoints, check_issuer, shown};
use crate::http_client::{Guarded, SignInClient};
use crate::plain::plain_error;

/// The redirect URI a stored client is configured with when only refreshing (never visited).
const UNUSED_REDIRECT: &str = "http://127.0.0.1/callback";

/// How one upstream gets its tokens.
enum Source {
    /// A sign-in of `execbox mcp login`, kept in a token file.
    SignedIn(TokenFile),
    /// The client's secret, exchanged by the MCP SDK.
    ClientSecret(ClientCredentialsConfig),
    /// The client's key, exchanged with a signed assertion.
    PrivateKey {
        key: SigningKey,
        client_id: String,
        scopes: Vec<String>,
        audience: String,
        token_endpoint: String,
        memory: InMemoryCredentialStore,
        http: Guarded,
    },
}

/// The tokens of one upstream.
pub(crate) struct Auth {
    url: String,
    manager: AuthorizationManager,
    /// The manager's HTTP client, which says why a token request failed.
    http: Arc<SignInClient>,
    source: Source,
    /// One renewal at a time: two calls rejected together spend one refresh token once.
    renewing: tokio::sync::Mutex<()>,
}

/// The tokens for the upstream at `url`: `None` when it has no sign-in and no client
/// credentials (its requests then go out as they are, and a 401 says to sign in).
pub(crate) async fn prepare(
    url: &str,
    oauth: Option<&OAuthConfig>,
) -> Result<Option<Arc<Auth>>, String> {
    crate::http_client::install_tls_provider();
    match oauth {
        Some(config) if config.grant == Grant::ClientCredentials => {
            client_credentials(url, config).await.map(Some)
        }
        _ => signed_in(url, oauth).await,
    }
}

async fn signed_in(url: &str, oauth: Option<&OAuthConfig>) -> Result<Option<Arc<Auth>>, String> {
    let file = TokenFile::for_url(url)?;
    let entry = {
        let file = file.clone();
        tokio::task::spawn_blocking(move || file.read())
            .await
            .map_err(|e| e.to_string())??
    };
    let Some(entry) = entry else { return Ok(None) };
    let (Some(credentials), Some(metadata)) = (entry.credentials, entry.metadata) else {
        return Ok(None);
    };
    // Checked again on every start: the file may predate the check, or not be of `login`.
    check_endpoints(url, &metadata)?;
    check_issuer(oauth.and_then(|o| o.issuer.as_deref()), &metadata)?;
    let (mut manager, http) = manager(url).await?;
    manager.set_metadata(metadata);
    manager.set_credential_store(file.clone());
    let secret = match oauth.and_then(|o| o.client_secret.as_ref()) {
        Some(secret)
            if oauth.and_then(|o| o.client_id.as_deref()) == Some(&credentials.client_id) =>
        {
            Some(secret.read("client_secret")?)
        }
        _ => entry.client_secret,
    };
    let mut client = OAuthClientConfig::new(credentials.client_id.clone(), UNUSED_REDIRECT);
    if let Some(secret) = secret {
        client = client.with_client_secret(secret);
    }
    manager
        .configure_client(client)
        .map_err(|e| format!("oauth: {}", plain_error(&e, 300)))?;
    Ok(Some(Arc::new(Auth {
        url: url.to_owned(),
        manager,
        http,
        source: Source::SignedIn(file),
        renewing: tokio::sync::Mutex::new(()),
    })))
}

async fn client_credentials(url: &str, config: &OAuthConfig) -> Result<Arc<Auth>, String> {
    let client_id = config.client_id.clone().unwrap_or_default();
    let (mut manager, http) = manager(url).await?;
    let metadata = manager
        .resolve_metadata()
        .await
        .map_err(|e| {
            format!(
                "cannot find the server's authorization server: {}",
                shown(&plain_error(&e, 300), 300)
            )
        })?
        .metadata;
    // The client's secret or assertion goes to this endpoint.
    check_endpoint(url, "token_endpoint", &metadata.token_endpoint)?;
    check_issuer(config.issuer.as_deref(), &metadata)?;
    manager.set_metadata(metadata.clone());
    let memory = InMemoryCredentialStore::new();
    manager.set_credential_store(memory.clone());
    let source = match (&config.client_secret, &config.private_key) {
        (Some(secret), _) => {
            let credentials = ClientCredentialsConfig::ClientSecret {
                client_id,
                client_secret: secret.read("client_secret")?,
                scopes: config.scopes.clone(),
                resource: Some(url.to_owned()),
            };
            manager
                .configure_client_credentials(&credentials)
                .map_err(|e| format!("oauth: {}", plain_error(&e, 300)))?;
            Source::ClientSecret(credentials)
        }
        (None, Some(key)) => Source::PrivateKey {
            http: {
                // Our own request, so the MCP SDK's address policy is applied here.
                let guarded = Guarded::new(url)?;
                guarded.check(&metadata.token_endpoint)?;
                guarded
            },
            key: SigningKey::from_pem(&key.read("private_key")?, config.signing_algorithm)?,
            client_id,
            scopes: config.scopes.clone(),
            audience: metadata
                .issuer
                .clone()
                .unwrap_or_else(|| metadata.token_endpoint.clone()),
            token_endpoint: metadata.token_endpoint.clone(),
            memory,
        },
        (None, None) => return Err("oauth: client credentials need a secret or a key".into()),
    };
    let auth = Arc::new(Auth {
        url: url.to_owned(),
        manager,
        http,
        source,
        renewing: tokio::sync::Mutex::new(()),
    });
    let mark = auth.http.mark();
    auth.exchange()
        .await
        .map_err(|e| with_cause(e, &auth.http, mark))
        .map_err(|e| shown(&plain_error(&e, 500), 500))?;
    Ok(auth)
}

/// An authorization manager for the upstream at `url` whose requests go through our
/// [`SignInClient`], and that client.
pub(crate) async fn manager(
    url: &str,
) -> Result<(AuthorizationManager, Arc<SignInClient>), String> {
    let http = SignInClient::new(url)?;
    let manager = AuthorizationManager::new_with_oauth_http_client(url, http.clone())
        .await
        .map_err(|e| format!("oauth: {}", plain_error(&e, 300)))?;
    Ok((manager, http))
}

/// `error`, saying why when a request of `http` failed since `mark`: the MCP SDK reports a
/// failed token request only as "Request failed".
pub(crate) fn with_cause(error: AuthError, http: &SignInClient, mark: u64) -> AuthError {
    let Some(cause) = http.failure_since(mark) else {
        return error;
    };
    match error {
        AuthError::TokenRefreshFailed(_) => AuthError::TokenRefreshFailed(cause),
        AuthError::TokenExchangeFailed(_) => AuthError::TokenExchangeFailed(cause),
        AuthError::ClientCredentialsError(_) => AuthError::ClientCredentialsError(cause),
        AuthError::RegistrationFailed(_) => AuthError::RegistrationFailed(cause),
        other => other,
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

impl Auth {
    /// New tokens from the client's credentials.
    async fn exchange(&self) -> Result<String, AuthError> {
        match &self.source {
            Source::ClientSecret(credentials) => {
                let response = self
                    .manager
                    .exchange_client_credentials(credentials)
                    .await?;
                Ok(response.access_token().secret().clone())
            }
            Source::PrivateKey {
                key,
                client_id,
                scopes,
                audience,
                token_endpoint,
                memory,
                http,
            } => {
                let assertion = key
                    .assertion(client_id, audience)
                    .map_err(AuthError::ClientCredentialsError)?;
                let answer = jwt::exchange(http, token_endpoint, &assertion, scopes, &self.url)
                    .await
                    .map_err(AuthError::ClientCredentialsError)?;
                let response: OAuthTokenResponse = serde_json::from_value(answer).map_err(|e| {
                    AuthError::ClientCredentialsError(format!(
                        "the token endpoint's answer is not a token response: {e}"
                    ))
                })?;
                let token = response.access_token().secret().clone();
                let stored = StoredCredentials::new(
                    client_id.clone(),
                    Some(response),
                    scopes.clone(),
                    Some(now()),
                );
                memory.save(stored).await?;
                Ok(token)
            }
            Source::SignedIn(_) => Err(AuthError::AuthorizationRequired),
        }
    }

    fn headless(&self) -> bool {
        !matches!(self.source, Source::SignedIn(_))
    }

    /// The token to send: `None` when there is none to send (no sign-in any more).
    async fn token(&self) -> Result<Option<String>, AuthError> {
        let mark = self.http.mark();
        self.token_unexplained()
            .await
            .map_err(|e| with_cause(e, &self.http, mark))
    }

    async fn token_unexplained(&self) -> Result<Option<String>, AuthError> {
        match self.manager.get_access_token().await {
            Ok(token) => Ok(Some(token)),
            Err(AuthError::AuthorizationRequired) if self.headless() => {
                let _renewing = self.renewing.lock().await;
                match self.manager.get_access_token().await {
                    Ok(token) => Ok(Some(token)),
                    Err(_) => self.exchange().await.map(Some),
                }
            }
            Err(AuthError::AuthorizationRequired) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A token to retry with after the server rejected `rejected`: another task's fresh one,
    /// a refreshed one, or a new one from the client's credentials; `None` when only a new
    /// sign-in can help.
    async fn renew(&self, rejected: Option<&str>) -> Result<Option<String>, AuthError> {
        let mark = self.http.mark();
        self.renew_unexplained(rejected)
            .await
            .map_err(|e| with_cause(e, &self.http, mark))
    }

    async fn renew_unexplained(&self, rejected: Option<&str>) -> Result<Option<String>, AuthError> {
        let _renewing = self.renewing.lock().await;
        if let Ok(current) = self.manager.get_access_token().await {
            if Some(current.as_str()) != rejected {
                return Ok(Some(current));
            }
        }
        if self.headless() {
            return self.exchange().await.map(Some);
        }
        match self.manager.refresh_token().await {
            Ok(response) => Ok(Some(response.access_token().secret().clone())),
            Err(AuthError::AuthorizationRequired | AuthError::TokenRefreshRejected(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Remembers the scope a call was refused for, for the next sign-in: scope tokens as
    /// RFC 6749 writes them, at most [`MAX_STEP_UP`] of them kept in all, so a server cannot
    /// grow the token file or the next authorization URL without bound.
    async fn remember_step_up(&self, scope: Option<&str>) {
        let Source::SignedIn(file) = &self.source else {
            return;
        };
        let Some(scope) = scope else { return };
        let wanted: Vec<String> = step_up_scopes(scope);
        if wanted.is_empty() {
            return;
        }
        let file = file.clone();
        let saved = tokio::task::spawn_blocking(move || {
            file.update(|entry| {
                for scope in wanted {
                    if entry.step_up.len() >= MAX_STEP_UP {
                        break;
                    }
                    if !entry.step_up.contains(&scope) {
                        entry.step_up.push(scope);
                    }
                }
            })
        })
        .await;
        if let Ok(Err(e)) = saved {
            tracing::warn!("cannot remember the scope a call needs: {e}");
        }
    }
}

/// How many scopes a token file remembers for the next sign-in.
const MAX_STEP_UP: usize = 32;

/// The longest scope remembered.
const MAX_SCOPE_CHARS: usize = 200;

/// The scope tokens of a 403's `scope` that are worth asking for: RFC 6749's characters
/// (printable ASCII but space, `"` and `\`), at most [`MAX_SCOPE_CHARS`] each, at most
/// [`MAX_STEP_UP`].
fn step_up_scopes(scope: &str) -> Vec<String> {
    let mut wanted: Vec<String> = Vec::new();
    for token in scope.split_whitespace() {
        let valid = token.len() <= MAX_SCOPE_CHARS
            && token
                .bytes()
                .all(|b| (0x21..=0x7e).contains(&b) && b != b'"' && b != b'\\');
        if valid && !wanted.iter().any(|w| w == token) {
            wanted.push(token.to_owned());
        }
        if wanted.len() >= MAX_STEP_UP {
            break;
        }
    }
    wanted
}

/// An HTTP client that signs its requests with an upstream's tokens (see the module).
#[derive(Clone)]
pub(crate) struct Signed<C> {
    inner: C,
    auth: Arc<Auth>,
}

impl<C> Signed<C> {
    pub fn new(inner: C, auth: Arc<Auth>) -> Signed<C> {
        Signed { inner, auth }
    }
}

impl<C: StreamableHttpClient + Sync> Signed<C> {
    async fn signed<T, F, Fut>(&self, call: F) -> Result<T, StreamableHttpError<C::Error>>
    where
        F: Fn(Option<String>) -> Fut,
        Fut: std::future::Future<Output = Result<T, StreamableHttpError<C::Error>>>,
    {
        let token = self.auth.token().await?;
        match call(token.clone()).await {
            Err(StreamableHttpError::AuthRequired(challenge)) => {
                match self.auth.renew(token.as_deref()).await? {
                    Some(fresh) if Some(&fresh) != token.as_ref() => call(Some(fresh)).await,
                    _ => Err(StreamableHttpError::AuthRequired(challenge)),
                }
            }
            Err(StreamableHttpError::InsufficientScope(refused)) => {
                self.auth
                    .remember_step_up(refused.required_scope.as_deref())
                    .await;
                Err(StreamableHttpError::InsufficientScope(refused))
            }
            other => other,
        }
    }
}

impl<C: StreamableHttpClient + Sync> StreamableHttpClient for Signed<C> {
    type Error = C::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.signed(|token| {
            self.inner.post_message(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
            )
        })
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.signed(|token| {
            self.inner.post_message_with_max_sse_event_size(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
                max_sse_event_size,
            )
        })
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.signed(|token| {
            self.inner.post_message_with_response_limits(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
                limits,
            )
        })
        .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.signed(|token| {
            self.inner.delete_session(
                uri.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
            )
        })
        .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<
        BoxStream<'static, Result<sse_stream::Sse, SseError>>,
        StreamableHttpError<Self::Error>,
    > {
        self.signed(|token| {
            self.inner.get_stream(
                uri.clone(),
                session_id.clone(),
                last_event_id.clone(),
                token,
                custom_headers.clone(),
            )
        })
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<
        BoxStream<'static, Result<sse_stream::Sse, SseError>>,
        StreamableHttpError<Self::Error>,
    > {
        self.signed(|token| {
            self.inner.get_stream_with_max_sse_event_size(
                uri.clone(),
                session_id.clone(),
                last_event_id.clone(),
                token,
                custom_headers.clone(),
                max_sse_event_size,
            )
        })
        .await
    }
}

/// What to do about an authorization failure of the upstream `name` (read from `config`),
/// found anywhere in `error`'s chain; `None` for other failures.
pub(crate) fn explain(
    error: &(dyn std::error::Error + 'static),
    name: &str,
    config: &Path,
) -> Option<String> {
    let login = format!("execbox mcp login {name} --config {}", config.display());
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(e) = e.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
            return match e {
                StreamableHttpError::AuthRequired(_) => Some(format!(
                    "the MCP server {name:?} needs a sign-in (it answered HTTP 401): run `{login}` \
                     in a terminal, then try again"
                )),
                StreamableHttpError::InsufficientScope(refused) => Some(format!(
                    "the MCP server {name:?} needs more access than its sign-in granted (HTTP 403, \
                     scope {}): run `{login}` to grant it, then try again",
                    shown(
                        &format!(
                            "{:?}",
                            refused.required_scope.as_deref().unwrap_or("not named")
                        ),
                        200
                    )
                )),
                StreamableHttpError::Auth(auth) => Some(format!(
                    "signing in to the MCP server {name:?} failed: {}; if this lasts, run `{login}`",
                    shown(&plain_error(auth, 300), 300)
                )),
                _ => None,
            };
        }
        current = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_scope_is_remembered_bounded_and_as_scope_tokens_only() {
        // Before: every word of the 403's scope was kept, without bound, in the token file
        // and asked for at the next sign-in.
        assert_eq!(step_up_scopes("repo  read:org repo"), ["repo", "read:org"]);
        let flood: String = (0..10_000).map(|i| format!("s{i} ")).collect();
        assert_eq!(step_up_scopes(&flood).len(), MAX_STEP_UP);
        let odd = format!("ok \"quoted\" back\\slash {} caf\u{e9}", "x".repeat(500));
        assert_eq!(step_up_scopes(&odd), ["ok"]);
    }
}
