//! `execute_code` and `search_tools` over streamable HTTP (`execbox mcp --http ADDR`), at
//! `/mcp`: a bearer token checked in a layer before anything else, `Host` and `Origin`
//! checked by the SDK's transport, and no listening beyond loopback without a token.
//!
//! | request | answer |
//! |---|---|
//! | a token is configured and the request has no `Authorization: Bearer TOKEN`, or another | 401 `{"error":{"code":"unauthorized",...}}` with `WWW-Authenticate: Bearer` |
//! | `Host` is not a loopback name or an allowed host | 403 |
//! | an `Origin` header that is not an allowed origin (a browser page) | 403 |
//! | any path but `/mcp` | 404 |

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use subtle::ConstantTimeEq as _;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::server::CodeModeServer;

/// The path the MCP endpoint is served at.
pub const MCP_PATH: &str = "/mcp";

/// Who may use the HTTP endpoint.
#[derive(Clone, Default)]
pub struct HttpOptions {
    /// The bearer token every request must carry; required unless the address is loopback.
    pub token: Option<String>,
    /// `Host` values accepted besides `localhost`, `127.0.0.1` and `::1` (and the address
    /// bound, when it is a specific one): names or `name:port`.
    pub allowed_hosts: Vec<String>,
    /// Browser origins accepted (`https://app.example.com`, `http://localhost:*`); a
    /// request with any other `Origin` header is refused. Requests without `Origin` (every
    /// non-browser client) are not affected.
    pub allowed_origins: Vec<String>,
}

impl std::fmt::Debug for HttpOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpOptions")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("allowed_hosts", &self.allowed_hosts)
            .field("allowed_origins", &self.allowed_origins)
            .finish()
    }
}

/// Why the endpoint cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// A non-loopback address without a token.
    #[error(
        "refusing to serve MCP on {addr} without a bearer token: anyone who can reach it could \
         run code against your tools; give --token-file FILE (or EXECBOX_TOKEN), or listen on \
         127.0.0.1"
    )]
    NoToken {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// An empty token.
    #[error("the bearer token is empty")]
    EmptyToken,
}

/// Checks that `addr` may be served with `token`: a non-loopback address needs one.
pub fn check_exposure(addr: SocketAddr, token: Option<&str>) -> Result<(), HttpError> {
    match token {
        Some("") => Err(HttpError::EmptyToken),
        None if !addr.ip().is_loopback() => Err(HttpError::NoToken { addr }),
        _ => Ok(()),
    }
}

/// Serves `server` on `listener` at [`MCP_PATH`] until `shutdown` is cancelled.
pub async fn serve_http(
    server: CodeModeServer,
    listener: TcpListener,
    options: HttpOptions,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    check_exposure(addr, options.token.as_deref())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::PermissionDenied, e.to_string()))?;
    let mut hosts: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    if !addr.ip().is_unspecified() && !addr.ip().is_loopback() {
        hosts.push(addr.ip().to_string());
    }
    hosts.extend(options.allowed_hosts.iter().cloned());
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_allowed_origins(options.allowed_origins.clone())
        .enforce_origin_validation()
        .with_cancellation_token(shutdown.child_token());
    let service: StreamableHttpService<CodeModeServer, LocalSessionManager> =
        StreamableHttpService::new(
            move || Ok(server.clone()),
            Arc::new(LocalSessionManager::default()),
            config,
        );
    let token: Arc<Option<String>> = Arc::new(options.token.clone());
    let router = axum::Router::new()
        .nest_service(MCP_PATH, service)
        .layer(middleware::from_fn_with_state(token, require_token));
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { shutdown.cancelled_owned().await })
        .await
}

async fn require_token(
    State(token): State<Arc<Option<String>>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(token) = token.as_deref() else {
        return next.run(request).await;
    };
    let offered = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer);
    match offered {
        Some(offered) if same(offered, token) => next.run(request).await,
        Some(_) => unauthorized("the bearer token is wrong"),
        None => unauthorized("this endpoint needs Authorization: Bearer TOKEN"),
    }
}

fn unauthorized(message: &str) -> Response {
    let body = serde_json::json!({"error": {"code": "unauthorized", "message": message}});
    let mut response = (StatusCode::UNAUTHORIZED, body.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// The token of an `Authorization: Bearer TOKEN` value (the scheme is case-insensitive).
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Whether `offered` is the token, in time that depends on neither's bytes nor length: both
/// are hashed with a key drawn at start-up, the digests compared in constant time, and only
/// equal digests go on to the byte comparison (as the runner's `--listen` does).
fn same(offered: &str, token: &str) -> bool {
    use std::hash::BuildHasher;
    static KEY: std::sync::OnceLock<std::hash::RandomState> = std::sync::OnceLock::new();
    let key = KEY.get_or_init(std::hash::RandomState::new);
    let digests: bool = key
        .hash_one(offered.as_bytes())
        .ct_eq(&key.hash_one(token.as_bytes()))
        .into();
    digests && offered.as_bytes() == token.as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_may_go_without_a_token() {
        let local: SocketAddr = "127.0.0.1:7000".parse().unwrap();
        let local6: SocketAddr = "[::1]:7000".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:7000".parse().unwrap();
        let lan: SocketAddr = "10.1.2.3:7000".parse().unwrap();
        assert!(check_exposure(local, None).is_ok());
        assert!(check_exposure(local6, None).is_ok());
        assert!(matches!(
            check_exposure(any, None),
            Err(HttpError::NoToken { .. })
        ));
        assert!(matches!(
            check_exposure(lan, None),
            Err(HttpError::NoToken { .. })
        ));
        assert!(check_exposure(lan, Some("t")).is_ok());
        assert!(matches!(
            check_exposure(local, Some("")),
            Err(HttpError::EmptyToken)
        ));
    }

    #[test]
    fn bearer_tokens_compare_by_content() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer  abc "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert!(same("s3cret", "s3cret"));
        assert!(!same("s3cre", "s3cret"));
        assert!(!same("s3crets", "s3cret"));
    }
}
