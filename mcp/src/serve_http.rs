//! `execute_code` and `search_tools` over streamable HTTP (`execbox mcp --http ADDR`), at
//! `/mcp`, behind the one HTTP front door (`execbox-http`), and no listening beyond loopback
//! without a token.
//!
//! | request | answer |
//! |---|---|
//! | a token is configured and the request has no `Authorization: Bearer TOKEN`, or another | 401 `{"error":{"code":"UNAUTHORIZED",...}}` with `WWW-Authenticate: Bearer` |
//! | `Host` is not a loopback name, the address bound or an allowed host | 403 `FORBIDDEN` |
//! | an `Origin` header whose scheme, host and port are not an allowed origin (a browser page) | 403 `FORBIDDEN` |
//! | a body over [`MAX_REQUEST_BODY_BYTES`] | 413 `PAYLOAD_TOO_LARGE` |
//! | a request head not complete within the header timeout | the connection is closed |
//! | any path but `/mcp` | 404 |

use std::net::SocketAddr;
use std::sync::Arc;

use execbox_http::{FrontDoor, Hosts, Origins, ServeOptions};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::server::CodeModeServer;

/// The path the MCP endpoint is served at.
pub const MCP_PATH: &str = "/mcp";

/// The largest request body accepted (4 MiB): a JSON-RPC message with a program in it.
pub const MAX_REQUEST_BODY_BYTES: usize = 4 * 1024 * 1024;

/// Who may use the HTTP endpoint.
#[derive(Clone, Default)]
pub struct HttpOptions {
    /// The bearer token every request must carry; required unless the address is loopback.
    pub token: Option<String>,
    /// `Host` values accepted besides `localhost`, `127.0.0.1` and `::1` (and the address
    /// bound, when it is a specific one): names or `name:port`.
    pub allowed_hosts: Vec<String>,
    /// Browser origins accepted (`https://app.example.com` is port 443 only,
    /// `http://localhost:*` any port); a request with any other `Origin` header is refused.
    /// Requests without `Origin` (every non-browser client) are not affected.
    pub allowed_origins: Vec<String>,
    /// Connections: request-head and idle timeout, how many at once.
    pub serve: ServeOptions,
}

impl std::fmt::Debug for HttpOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpOptions")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("allowed_hosts", &self.allowed_hosts)
            .field("allowed_origins", &self.allowed_origins)
            .field("serve", &self.serve)
            .finish()
    }
}

/// Why the endpoint cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// A non-loopback address without a token (the one exposure rule of `execbox-http`).
    #[error(transparent)]
    Exposed(#[from] execbox_http::Exposed),
    /// An empty token.
    #[error("the bearer token is empty")]
    EmptyToken,
    /// An allowed host or origin that cannot be understood.
    #[error("{0}")]
    Allowlist(String),
    /// Serving failed.
    #[error(transparent)]
    Io(std::io::Error),
}

/// How `execbox mcp --http` is given a token, for the exposure rule's message.
const HOW_TO_GIVE_A_TOKEN: &str = "give --token-file FILE (or EXECBOX_TOKEN)";

/// Checks that `addr` may be served with `token`: never an empty token, and a non-loopback
/// address needs one ([`execbox_http::check_exposure`], the rule of every server).
pub fn check_exposure(addr: SocketAddr, token: Option<&str>) -> Result<(), HttpError> {
    if token == Some("") {
        return Err(HttpError::EmptyToken);
    }
    execbox_http::check_exposure(&[addr], token.is_some(), HOW_TO_GIVE_A_TOKEN)?;
    Ok(())
}

/// Serves `server` on `listener` at [`MCP_PATH`] until `shutdown` is cancelled, behind the
/// one HTTP front door (`execbox-http`): token, `Host`, `Origin`, request-head and idle
/// timeouts, body and connection limits.
pub async fn serve_http(
    server: CodeModeServer,
    listener: TcpListener,
    options: HttpOptions,
    shutdown: CancellationToken,
) -> Result<(), HttpError> {
    let addr = listener.local_addr().map_err(HttpError::Io)?;
    check_exposure(addr, options.token.as_deref())?;
    let door = door(&options, addr)?;
    // The door checks Host and Origin (scheme, host and port) for every request: the SDK's
    // own checks are off rather than a second, different copy.
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .disable_allowed_origins()
        .with_max_request_body_bytes(MAX_REQUEST_BODY_BYTES)
        .with_cancellation_token(shutdown.child_token());
    let service: StreamableHttpService<CodeModeServer, LocalSessionManager> =
        StreamableHttpService::new(
            move || Ok(server.clone()),
            Arc::new(LocalSessionManager::default()),
            config,
        );
    let router = door.guard(axum::Router::new().nest_service(MCP_PATH, service));
    execbox_http::serve(listener, router, options.serve, shutdown)
        .await
        .map_err(HttpError::Io)
}

/// The door of `options` for a server bound to `addr`.
fn door(options: &HttpOptions, addr: SocketAddr) -> Result<FrontDoor<()>, HttpError> {
    let hosts = Hosts::parse(&options.allowed_hosts)
        .map_err(|e| HttpError::Allowlist(format!("--allow-host {e}")))?
        .with_bound(addr);
    let origins = Origins::parse(&options.allowed_origins)
        .map_err(|e| HttpError::Allowlist(format!("--allow-origin {e}")))?;
    let door = FrontDoor::new()
        .hosts(hosts)
        .origins(origins)
        .max_body_bytes(MAX_REQUEST_BODY_BYTES);
    Ok(match &options.token {
        Some(token) => door.token(token.clone()),
        None => door,
    })
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
            Err(HttpError::Exposed(_))
        ));
        assert!(matches!(
            check_exposure(lan, None),
            Err(HttpError::Exposed(_))
        ));
        assert!(check_exposure(lan, Some("t")).is_ok());
        assert!(matches!(
            check_exposure(local, Some("")),
            Err(HttpError::EmptyToken)
        ));
    }
}
