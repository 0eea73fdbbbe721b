//! `execbox mcp login NAME`: signs in to an HTTP upstream once, in the user's browser.
//!
//! It asks the server what it wants (an unauthenticated `initialize`, then `tools/list`: the
//! 401's `WWW-Authenticate` names the protected resource metadata and the scope), finds the
//! authorization server, registers execbox there (or uses the client in `mcp.json`, or a
//! client ID metadata document), opens `$BROWSER` on the authorization URL (PKCE S256,
//! `state`, the resource indicator) and waits on a loopback listener for the redirect, then
//! exchanges the code and keeps the tokens ([`super::store`]), and only then tells the browser
//! how it ended. A server that refused a call for more scope (step-up) gets asked for it; one
//! that refuses a scope its sign-in already has is not asked again: that would loop.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use rmcp::transport::auth::OAuthClientConfig;
use serde_json::json;

use super::config::{Grant, OAuthConfig};
use super::session::with_cause;
use super::store::TokenFile;
use super::untrusted::{check_endpoints, check_issuer, shown};
use crate::config::{UpstreamConfig, UpstreamTransport};
use crate::plain::plain_error;

/// How a sign-in goes.
#[derive(Clone, Debug)]
pub struct SignInOptions {
    /// How long to wait for the browser's redirect.
    pub timeout: Duration,
    /// The browser command (`$BROWSER`: commands separated by `:`, `%s` for the URL, else the
    /// URL is the last argument); `None` only prints the URL.
    pub browser: Option<String>,
}

impl Default for SignInOptions {
    fn default() -> Self {
        SignInOptions {
            timeout: Duration::from_secs(300),
            browser: std::env::var("BROWSER")
                .ok()
                .filter(|b| !b.trim().is_empty()),
        }
    }
}

/// Whom `execbox mcp login` signed in to.
#[derive(Clone, Debug)]
pub struct SignedIn {
    /// The server's key in `mcp.json`.
    pub server: String,
    /// Its URL.
    pub url: String,
    /// The authorization server's issuer, when it names one.
    pub issuer: Option<String>,
    /// The client execbox is known by there.
    pub client_id: String,
    /// The scopes granted (or asked for, when the answer does not say).
    pub scopes: Vec<String>,
    /// Where the tokens are kept; `None` for client credentials (fetched by each run).
    pub token_file: Option<PathBuf>,
}

impl std::fmt::Display for SignedIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "signed in to {} ({})", self.server, self.url)?;
        // The issuer and the client ID are the authorization server's words.
        if let Some(issuer) = &self.issuer {
            write!(f, " at {}", shown(issuer, 300))?;
        }
        write!(f, " as client {}", shown(&self.client_id, 300))?;
        if !self.scopes.is_empty() {
            let scope = format!("{:?}", self.scopes.join(" "));
            write!(f, " with scope {}", shown(&scope, 300))?;
        }
        match &self.token_file {
            Some(file) => write!(f, "; tokens kept in {}", file.display()),
            None => write!(
                f,
                "; it uses client credentials, so execbox mcp gets its tokens itself"
            ),
        }
    }
}

/// How long one request of the sign-in may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Signs in to `server`, as the module says.
pub async fn sign_in(server: &UpstreamConfig, options: &SignInOptions) -> Result<SignedIn, String> {
    crate::http_client::install_tls_provider();
    let UpstreamTransport::Http {
        url,
        headers,
        oauth,
    } = &server.transport
    else {
        return Err(format!(
            "{:?} is started as a command (stdio): there is nothing to sign in to; give the \
             server its credentials in \"env\"",
            server.name
        ));
    };
    let name = &server.name;
    let config = oauth.clone().unwrap_or_default();
    if config.grant == Grant::ClientCredentials {
        return client_credentials(server, url, &config).await;
    }
    let file = TokenFile::for_url(url)?;
    let entry = file.read()?.unwrap_or_default();
    let granted: BTreeSet<String> = entry
        .credentials
        .as_ref()
        .map(|c| c.granted_scopes.iter().cloned().collect())
        .unwrap_or_default();
    if !entry.step_up.is_empty() && entry.step_up.iter().all(|s| granted.contains(s)) {
        return Err(format!(
            "{name:?} refused a call for scope {:?}, which its sign-in already has: signing in \
             again will not help. Ask the server's operator for that access, or start over with \
             `execbox mcp logout {name} --config {}`",
            entry.step_up.join(" "),
            server.source.display()
        ));
    }

    // The probe follows redirects within the server's own origin only: a redirect cannot send
    // it, with the configured headers, to another host.
    let http = crate::http_client::tls_builder()?
        .redirect(crate::http_client::same_origin_redirects())
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
    let challenge = probe(&http, url, headers).await?;
    let (mut manager, sign_in_http) = super::session::manager(url)
        .await
        .map_err(|e| format!("cannot sign in to {url}: {}", shown(&e, 300)))?;
    manager.set_credential_store(file.clone());
    let metadata = within(
        "finding the authorization server",
        manager.resolve_metadata_from_challenge(challenge.as_deref()),
    )
    .await?
    .map_err(|e| {
        format!(
            "cannot find the authorization server of {name:?}: {}",
            shown(&plain_error(&e, 300), 300)
        )
    })?
    .metadata;
    check_endpoints(url, &metadata)
        .and_then(|()| check_issuer(config.issuer.as_deref(), &metadata))
        .map_err(|e| format!("cannot sign in to {name:?}: {e}"))?;
    manager.set_metadata(metadata.clone());

    let mut scopes: Vec<String> = if !config.scopes.is_empty() {
        config.scopes.clone()
    } else if !entry.step_up.is_empty() {
        granted.iter().cloned().collect()
    } else {
        manager.select_initial_scopes(&[]).await
    };
    for scope in &entry.step_up {
        if !scopes.contains(scope) {
            scopes.push(scope.clone());
        }
    }
    let offline = metadata
        .scopes_supported
        .as_ref()
        .is_some_and(|s| s.iter().any(|s| s == "offline_access"));
    if offline && !scopes.is_empty() && !scopes.iter().any(|s| s == "offline_access") {
        scopes.push("offline_access".into());
    }
    let scope_refs: Vec<&str> = scopes.iter().map(String::as_str).collect();

    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .map_err(|e| format!("cannot listen on 127.0.0.1 for the sign-in's redirect: {e}"))?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    let redirect_uri = format!("http://127.0.0.1:{port}/callback");

    let metadata_documents = metadata
        .additional_fields
        .get("client_id_metadata_document_supported")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    let (client, registered_secret) = if let Some(client_id) = &config.client_id {
        let mut client = OAuthClientConfig::new(client_id.clone(), redirect_uri.clone());
        if let Some(secret) = &config.client_secret {
            client = client.with_client_secret(secret.read("client_secret")?);
        }
        (client, None)
    } else if let (Some(document), true) = (&config.client_metadata_url, metadata_documents) {
        (
            OAuthClientConfig::new(document.clone(), redirect_uri.clone()),
            None,
        )
    } else {
        if metadata.registration_endpoint.is_none() {
            return Err(format!(
                "the authorization server of {name:?} does not register clients itself: register \
                 execbox there (redirect URI http://127.0.0.1/callback, any port) and write its \
                 \"client_id\" in the server's \"oauth\" field of {}",
                server.source.display()
            ));
        }
        let mark = sign_in_http.mark();
        let registered = within(
            "registering execbox",
            manager.register_client("execbox", &redirect_uri, &scope_refs),
        )
        .await?
        .map_err(|e| with_cause(e, &sign_in_http, mark))
        .map_err(|e| {
            format!(
                "the authorization server of {name:?} did not register execbox: {}",
                shown(&plain_error(&e, 300), 300)
            )
        })?;
        let secret = registered.client_secret.clone();
        (registered, secret)
    };
    let client_id = client.client_id.clone();
    manager.configure_client(client).map_err(|e| {
        format!(
            "cannot sign in to {name:?}: {}",
            shown(&plain_error(&e, 300), 300)
        )
    })?;
    let authorization_url = manager
        .get_authorization_url(&scope_refs)
        .await
        .map_err(|e| {
            format!(
                "cannot sign in to {name:?}: {}",
                shown(&plain_error(&e, 300), 300)
            )
        })?;
    let state = url::Url::parse(&authorization_url)
        .ok()
        .and_then(|u| {
            u.query_pairs()
                .find(|(k, _)| k == "state")
                .map(|(_, v)| v.into_owned())
        })
        .ok_or("the authorization URL has no state")?;

    eprintln!(
        "execbox: to sign in to {name}, open this URL in a browser:\n\n  {authorization_url}\n"
    );
    if let Some(browser) = &options.browser {
        open_browser(browser, &authorization_url);
    }
    let issuer = metadata.issuer.clone();
    // The browser's page says how this ended, once it has.
    let (manager, sign_in_http, file_kept, state_sent) = (&manager, &sign_in_http, &file, &state);
    let exchange = |callback: Callback| async move {
        let mark = sign_in_http.mark();
        within(
            "exchanging the code for tokens",
            manager.exchange_code_for_token_with_issuer(
                &callback.code,
                state_sent,
                callback.issuer.as_deref(),
            ),
        )
        .await?
        .map_err(|e| with_cause(e, sign_in_http, mark))
        .map_err(|e| {
            format!(
                "the authorization server of {name:?} did not give tokens for the sign-in: {}",
                shown(&plain_error(&e, 300), 300)
            )
        })?;
        file_kept.update(|entry| {
            entry.metadata = Some(metadata);
            entry.client_secret = registered_secret;
            entry.step_up.clear();
        })
    };
    wait_for_redirect(listener, &state, name, options.timeout, exchange).await?;
    let granted = file
        .read()?
        .and_then(|e| e.credentials)
        .map(|c| c.granted_scopes)
        .filter(|s| !s.is_empty())
        .unwrap_or(scopes);
    Ok(SignedIn {
        server: name.clone(),
        url: url.clone(),
        issuer,
        client_id,
        scopes: granted,
        token_file: Some(file.path().to_owned()),
    })
}

/// Forgets the sign-in to `server`; `true` when there was one.
pub fn sign_out(server: &UpstreamConfig) -> Result<bool, String> {
    match &server.transport {
        UpstreamTransport::Http { url, .. } => TokenFile::for_url(url)?.remove(),
        UpstreamTransport::Stdio { .. } => Err(format!(
            "{:?} is started as a command (stdio): it has no sign-in",
            server.name
        )),
    }
}

/// Client credentials: one exchange, to show they work.
async fn client_credentials(
    server: &UpstreamConfig,
    url: &str,
    config: &OAuthConfig,
) -> Result<SignedIn, String> {
    within(
        "getting a token with the client's credentials",
        super::session::prepare(url, Some(config)),
    )
    .await??;
    Ok(SignedIn {
        server: server.name.clone(),
        url: url.to_owned(),
        issuer: None,
        client_id: config.client_id.clone().unwrap_or_default(),
        scopes: config.scopes.clone(),
        token_file: None,
    })
}

async fn within<T>(what: &str, work: impl std::future::Future<Output = T>) -> Result<T, String> {
    tokio::time::timeout(REQUEST_TIMEOUT * 2, work)
        .await
        .map_err(|_| {
            format!(
                "{what} took longer than {}s",
                (REQUEST_TIMEOUT * 2).as_secs()
            )
        })
}

/// Asks the server what it wants without a token: `initialize`, then `tools/list` in its
/// session (some servers let anyone initialize); the `WWW-Authenticate` of its first 401 or
/// 403, or `None` when it answered both.
async fn probe(
    http: &reqwest::Client,
    url: &str,
    headers: &[(String, String)],
) -> Result<Option<String>, String> {
    const PROTOCOL: &str = "2025-06-18";
    let post = |body: serde_json::Value, session: Option<String>| {
        let mut request = http
            .post(url)
            .timeout(REQUEST_TIMEOUT)
            .header(
                reqwest::header::ACCEPT,
                "application/json, text/event-stream",
            )
            .json(&body);
        for (name, value) in headers {
            request = request.header(name.as_str(), value.as_str());
        }
        if let Some(session) = session {
            request = request
                .header("mcp-session-id", session)
                .header("mcp-protocol-version", PROTOCOL);
        }
        request.send()
    };
    let challenge = |response: &reqwest::Response| {
        let refused = matches!(response.status().as_u16(), 401 | 403);
        refused.then(|| {
            response
                .headers()
                .get(reqwest::header::WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned()
        })
    };
    let reach = |e: reqwest::Error| format!("cannot reach {url}: {}", plain_error(&e, 300));
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": PROTOCOL,
            "capabilities": {},
            "clientInfo": {"name": "execbox", "version": env!("CARGO_PKG_VERSION")}
        }
    });
    let answer = post(initialize, None).await.map_err(reach)?;
    if let Some(found) = challenge(&answer) {
        return Ok(Some(found).filter(|c| !c.is_empty()));
    }
    let session = answer
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    drop(answer);
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let _ = post(initialized, session.clone()).await;
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}});
    let answer = post(list, session).await.map_err(reach)?;
    Ok(challenge(&answer).filter(|c| !c.is_empty()))
}

/// Runs the user's browser on `url`, without waiting for it.
fn open_browser(browser: &str, url: &str) {
    for command in browser.split(':').map(str::trim).filter(|c| !c.is_empty()) {
        let script = if command.contains("%s") {
            command.replace("%s", "\"$1\"")
        } else {
            format!("{command} \"$1\"")
        };
        let started = std::process::Command::new("sh")
            .args(["-c", &script, "execbox-browser", url])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn();
        match started {
            Ok(mut child) => {
                std::thread::spawn(move || child.wait());
                return;
            }
            Err(e) => eprintln!("execbox: cannot run the browser {command:?}: {e}"),
        }
    }
}

/// What the authorization server's redirect brought.
struct Callback {
    code: String,
    issuer: Option<String>,
}

/// How long the browser's page waits for the sign-in to end before it says to look at the
/// terminal.
const PAGE_WAIT: Duration = Duration::from_secs(90);

/// Waits on `listener` for the redirect that carries `state`, at most `timeout`, then runs
/// `exchange` on it and answers the browser with how that ended; other requests are answered
/// and ignored, so a stray or forged one cannot end the sign-in.
async fn wait_for_redirect<F, Fut>(
    listener: tokio::net::TcpListener,
    state: &str,
    name: &str,
    timeout: Duration,
    exchange: F,
) -> Result<(), String>
where
    F: FnOnce(Callback) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    use axum::extract::{Query, State};
    use axum::response::Html;
    use std::collections::HashMap;

    /// The redirect, or the authorization server's refusal; with where to say how it ended.
    type Arrival = (
        Result<Callback, String>,
        tokio::sync::oneshot::Sender<Result<(), String>>,
    );
    type Found = tokio::sync::mpsc::Sender<Arrival>;
    let (found, mut arrived) = tokio::sync::mpsc::channel::<Arrival>(1);
    let expected = state.to_owned();
    let server = name.to_owned();
    let handler = move |State(found): State<Found>,
                        Query(query): Query<HashMap<String, String>>| {
        let expected = expected.clone();
        let server = server.clone();
        async move {
            if query.get("state") != Some(&expected) {
                return (
                    axum::http::StatusCode::BAD_REQUEST,
                    Html("This is not the sign-in execbox is waiting for.".to_owned()),
                );
            }
            let (told, outcome) = tokio::sync::oneshot::channel();
            if let Some(error) = query.get("error") {
                let description = query.get("error_description").cloned().unwrap_or_default();
                let why = shown(&format!("{error} {description}"), 300);
                let _ = found.try_send((
                    Err(format!(
                        "the authorization server of {server:?} refused the sign-in: {why}"
                    )),
                    told,
                ));
                return (
                    axum::http::StatusCode::OK,
                    Html(format!(
                        "Signing in to {} failed. You can close this window.",
                        escape(&server)
                    )),
                );
            }
            let Some(code) = query.get("code").cloned() else {
                return (
                    axum::http::StatusCode::BAD_REQUEST,
                    Html("The redirect has no code.".to_owned()),
                );
            };
            let issuer = query.get("iss").cloned();
            if found
                .try_send((Ok(Callback { code, issuer }), told))
                .is_err()
            {
                return (
                    axum::http::StatusCode::CONFLICT,
                    Html(
                        "execbox already has this sign-in's redirect; see the terminal.".to_owned(),
                    ),
                );
            }
            match tokio::time::timeout(PAGE_WAIT, outcome).await {
                Ok(Ok(Ok(()))) => (
                    axum::http::StatusCode::OK,
                    Html(format!(
                        "Signed in to {} for execbox. You can close this window.",
                        escape(&server)
                    )),
                ),
                Ok(Ok(Err(why))) => (
                    axum::http::StatusCode::OK,
                    Html(format!(
                        "Signing in to {} failed: {}. See the terminal; you can close this \
                         window.",
                        escape(&server),
                        escape(&why)
                    )),
                ),
                Ok(Err(_)) => (
                    axum::http::StatusCode::OK,
                    Html(format!(
                        "Signing in to {} ended without finishing; see the terminal.",
                        escape(&server)
                    )),
                ),
                Err(_) => (
                    axum::http::StatusCode::OK,
                    Html(format!(
                        "Still signing in to {}; see the terminal. You can close this window.",
                        escape(&server)
                    )),
                ),
            }
        }
    };
    let app = axum::Router::new()
        .route("/callback", axum::routing::get(handler))
        .with_state(found);
    let stop = tokio_util::sync::CancellationToken::new();
    let stopped = stop.clone();
    let serving = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { stopped.cancelled().await })
            .await
    });
    let outcome = match tokio::time::timeout(timeout, arrived.recv()).await {
        Ok(Some((Ok(callback), told))) => {
            let ended = exchange(callback).await;
            let _ = told.send(ended.clone());
            ended
        }
        Ok(Some((Err(refused), _))) => Err(refused),
        Ok(None) => Err("the sign-in's redirect listener stopped".into()),
        Err(_) => Err(format!(
            "no sign-in arrived within {}s: open the URL above in a browser (or set BROWSER), \
             or give more time with --timeout-ms",
            timeout.as_secs()
        )),
    };
    // Let the browser get its page before the listener goes (graceful: the page being
    // answered is finished first).
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop.cancel();
    drop(arrived);
    let _ = tokio::time::timeout(Duration::from_secs(2), serving).await;
    outcome
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_authorization_url_reaches_the_browser_as_one_argument_never_as_shell_text() {
        let dir = std::env::temp_dir().join(format!("execbox-browser-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let seen = dir.join("seen");
        let pwned = dir.join("pwned");
        let url = format!(
            "https://as.example/authorize?a=$(touch {p})&b=`touch {p}`;touch {p}'\"",
            p = pwned.display()
        );
        // `%s` and the URL appended as the last argument.
        for browser in [
            format!("echo %s > {}", seen.display()),
            format!("show() {{ echo \"$1\" > {}; }}; show", seen.display()),
        ] {
            let _ = std::fs::remove_file(&seen);
            open_browser(&browser, &url);
            let started = std::time::Instant::now();
            while !seen.exists() && started.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(20));
            }
            std::thread::sleep(Duration::from_millis(100));
            let shown = std::fs::read_to_string(&seen).unwrap();
            assert_eq!(shown, format!("{url}\n"), "{browser}");
        }
        assert!(!pwned.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
