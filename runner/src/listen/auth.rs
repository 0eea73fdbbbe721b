//! Who may open a session: the bearer token, the `Origin` check, and the refusal to expose an
//! unauthenticated runner beyond loopback. Checked on the upgrade request, before the upgrade.

use std::net::SocketAddr;
use std::path::Path;

use execbox_http::{bearer, same_secret as same, Origins, Refusal};
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::{header, HeaderValue, StatusCode};

/// The environment variable holding the bearer token (when no `--token-file` is given).
pub(crate) const TOKEN_ENV: &str = "EXECBOX_TOKEN";
/// The subprotocol a browser offers, and the server selects, alongside the token's.
pub(crate) const SUBPROTOCOL: &str = "execbox";
/// The prefix of the subprotocol that carries the token: `execbox.bearer.TOKEN`.
pub(crate) const BEARER_SUBPROTOCOL_PREFIX: &str = "execbox.bearer.";
/// How a listening runner is given a token, for the exposure rule's message.
const HOW_TO_GIVE_A_TOKEN: &str = "give one with --token-file FILE or the EXECBOX_TOKEN \
                                   environment variable (or pass --insecure-no-auth, at your own risk)";

/// Reads the bearer token: from `file` if given (one trailing newline trimmed), otherwise from
/// `EXECBOX_TOKEN`; `None` when neither is set. An empty token is an error, never "no auth".
pub fn load_token(file: Option<&Path>) -> Result<Option<String>, TokenError> {
    let (token, source) = match file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| TokenError::Read {
                path: path.to_owned(),
                source,
            })?;
            let text = text.strip_suffix('\n').unwrap_or(&text);
            let text = text.strip_suffix('\r').unwrap_or(text);
            (text.to_owned(), format!("token file {}", path.display()))
        }
        None => match std::env::var(TOKEN_ENV) {
            Ok(token) => (token, TOKEN_ENV.to_owned()),
            Err(std::env::VarError::NotPresent) => return Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => return Err(TokenError::NotUnicode),
        },
    };
    if token.is_empty() {
        return Err(TokenError::Empty { origin: source });
    }
    // A client's `Bearer TOKEN` is read trimmed: a token with spaces or control characters
    // could never match, and the server would refuse everyone without saying why.
    if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(TokenError::Unusable { origin: source });
    }
    Ok(Some(token))
}

/// Why [`load_token`] found no usable token.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The token file could not be read.
    #[error("cannot read the token file {}", path.display())]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// `EXECBOX_TOKEN` is set but is not valid Unicode.
    #[error("EXECBOX_TOKEN: environment variable was not valid unicode")]
    NotUnicode,
    /// The token holds spaces, line breaks or control characters (beyond the one trailing
    /// newline of a file), which no `Authorization` header can carry.
    #[error("the bearer token from {origin} contains spaces, line breaks or control characters; a token is one word (e.g. from `openssl rand -hex 32`)")]
    Unusable {
        /// Where it came from: the token file or `EXECBOX_TOKEN`.
        origin: String,
    },
    /// The token is empty: never taken as "no token".
    #[error("the bearer token from {origin} is empty")]
    Empty {
        /// Where it came from: the token file or `EXECBOX_TOKEN`.
        origin: String,
    },
}

/// The access policy of a listening runner.
#[derive(Clone, Default)]
pub(crate) struct Auth {
    /// The bearer token every upgrade request must carry; `None`: no token required.
    pub(crate) token: Option<String>,
    /// Origins allowed to connect (scheme, host and port); a request with any other `Origin`
    /// is refused.
    pub(crate) allowed_origins: Origins,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("allowed_origins", &self.allowed_origins)
            .finish()
    }
}

impl Auth {
    /// Refuses to serve a non-loopback address without a token
    /// ([`execbox_http::check_exposure`], the rule of every server), unless
    /// `insecure_no_auth`, which serves it saying so loudly.
    pub(crate) fn check_exposure(
        &self,
        addrs: &[SocketAddr],
        insecure_no_auth: bool,
    ) -> Result<(), execbox_http::Exposed> {
        match execbox_http::check_exposure(addrs, self.token.is_some(), HOW_TO_GIVE_A_TOKEN) {
            Err(exposed) if insecure_no_auth => {
                let addrs: Vec<String> = exposed.addrs.iter().map(ToString::to_string).collect();
                tracing::warn!(
                    "--insecure-no-auth: serving {} WITHOUT authentication; anyone who can \
                     reach the port can run code and use the sessions' resources",
                    addrs.join(", ")
                );
                Ok(())
            }
            checked => checked,
        }
    }

    /// The handshake callback: checks `Origin` (403) and the token (401, with
    /// `WWW-Authenticate: Bearer`) before the upgrade, and selects the `execbox` subprotocol
    /// when the client offers it (never the token's). The error type is tungstenite's.
    #[allow(clippy::result_large_err)]
    pub(crate) fn check(
        &self,
        request: &Request,
        mut response: Response,
    ) -> Result<Response, ErrorResponse> {
        let headers = request.headers();
        if let Some(origin) = headers.get(header::ORIGIN) {
            let allowed = origin
                .to_str()
                .is_ok_and(|o| self.allowed_origins.allows(o));
            if !allowed {
                tracing::debug!(?origin, "refusing an upgrade from an origin not allowed");
                return Err(refusal(&Refusal::forbidden(
                    "requests from this browser origin are refused; start the runner with \
                     --allow-origin (scheme://host[:port]) to accept them",
                )));
            }
        }
        let offered: Vec<&str> = headers
            .get_all(header::SEC_WEBSOCKET_PROTOCOL)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .collect();
        if let Some(token) = &self.token {
            let from_header = headers
                .get_all(header::AUTHORIZATION)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .filter_map(bearer)
                .any(|t| same(t, token));
            let from_subprotocol = offered
                .iter()
                .filter_map(|p| p.strip_prefix(BEARER_SUBPROTOCOL_PREFIX))
                .any(|t| same(t, token));
            if !(from_header || from_subprotocol) {
                tracing::debug!("refusing an upgrade without a valid bearer token");
                return Err(refusal(&Refusal::unauthorized(
                    "missing or invalid bearer token: send `Authorization: Bearer TOKEN`",
                )));
            }
        }
        if offered.contains(&SUBPROTOCOL) {
            response.headers_mut().insert(
                header::SEC_WEBSOCKET_PROTOCOL,
                HeaderValue::from_static(SUBPROTOCOL),
            );
        }
        Ok(response)
    }
}

/// A refusal before the upgrade, in the door's one error shape.
fn refusal(refusal: &Refusal) -> ErrorResponse {
    let mut response = ErrorResponse::new(Some(refusal.body()));
    *response.status_mut() =
        StatusCode::from_u16(refusal.status).unwrap_or(StatusCode::BAD_REQUEST);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if refusal.challenges() {
        headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(headers: &[(&str, &str)]) -> Request {
        let mut builder = Request::builder().uri("/");
        for (k, v) in headers {
            builder = builder.header(*k, *v);
        }
        builder.body(()).unwrap()
    }

    fn auth(token: Option<&str>) -> Auth {
        Auth {
            token: token.map(str::to_owned),
            allowed_origins: Origins::parse(["https://app.example"]).unwrap(),
        }
    }

    fn status(auth: &Auth, headers: &[(&str, &str)]) -> u16 {
        match auth.check(&request(headers), Response::default()) {
            Ok(_) => 101,
            Err(e) => e.status().as_u16(),
        }
    }

    #[test]
    fn tokens_are_checked_in_the_header_and_the_subprotocol() {
        let a = auth(Some("s3cret"));
        assert_eq!(status(&a, &[]), 401);
        assert_eq!(status(&a, &[("authorization", "Bearer wrong")]), 401);
        assert_eq!(status(&a, &[("authorization", "Bearer s3cret")]), 101);
        assert_eq!(status(&a, &[("authorization", "bearer s3cret")]), 101);
        assert_eq!(status(&a, &[("authorization", "Basic s3cret")]), 401);
        let proto = [("sec-websocket-protocol", "execbox, execbox.bearer.s3cret")];
        let ok = a.check(&request(&proto), Response::default()).unwrap();
        assert_eq!(ok.headers()["sec-websocket-protocol"], "execbox");
        assert_eq!(
            status(
                &a,
                &[("sec-websocket-protocol", "execbox, execbox.bearer.x")]
            ),
            401
        );
        let refused = a.check(&request(&[]), Response::default()).unwrap_err();
        assert_eq!(refused.headers()["www-authenticate"], "Bearer");
    }

    #[test]
    fn origins_must_be_allowed_even_without_a_token() {
        let a = auth(None);
        assert_eq!(status(&a, &[]), 101);
        assert_eq!(status(&a, &[("origin", "http://evil.example")]), 403);
        assert_eq!(status(&a, &[("origin", "https://app.example")]), 101);
    }

    #[test]
    fn exposure_beyond_loopback_needs_a_token_or_the_insecure_flag() {
        let any: SocketAddr = "0.0.0.0:0".parse().unwrap();
        let lo: SocketAddr = "127.0.0.1:0".parse().unwrap();
        assert!(auth(None).check_exposure(&[lo], false).is_ok());
        assert!(auth(None).check_exposure(&[any], false).is_err());
        assert!(auth(None).check_exposure(&[any], true).is_ok());
        assert!(auth(Some("t")).check_exposure(&[any], false).is_ok());
    }
}
