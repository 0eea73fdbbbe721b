//! The front door as a layer over an axum `Router`: Host, Origin, bearer token (or, under the
//! path of cookie sessions, the session), body size and body read time, in that order, each
//! refusal in the one error shape.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use http_body_util::Limited;
use tower_http::timeout::TimeoutBody;

use crate::session::{Session, Sessions};
use crate::{bearer, same_secret, Hosts, Origins, Refusal};

/// Who a bearer token belongs to: `Some(caller)` admits the request as that caller.
pub type TokenCheck<C> = Arc<dyn Fn(&str) -> Option<C> + Send + Sync>;

/// The caller of a request, as the door decided: `Some` when tokens are required (the
/// caller the token belongs to), `None` when they are not. Every request past the door
/// carries it as an extension.
#[derive(Clone, Debug)]
pub struct Caller<C>(pub Option<C>);

/// The checks of the door; see the crate docs. Build one, then [`FrontDoor::guard`] a router.
pub struct FrontDoor<C> {
    hosts: Hosts,
    origins: Origins,
    tokens: Option<TokenCheck<C>>,
    max_body_bytes: usize,
    body_timeout: Duration,
    cookies: Option<CookieAuth<C>>,
}

/// A path whose callers are the sessions' ([`FrontDoor::cookie_sessions`]).
struct CookieAuth<C> {
    sessions: Sessions<C>,
    public: Vec<String>,
}

impl<C> Clone for CookieAuth<C> {
    fn clone(&self) -> Self {
        CookieAuth {
            sessions: self.sessions.clone(),
            public: self.public.clone(),
        }
    }
}

impl<C> Clone for FrontDoor<C> {
    fn clone(&self) -> Self {
        FrontDoor {
            hosts: self.hosts.clone(),
            origins: self.origins.clone(),
            tokens: self.tokens.clone(),
            max_body_bytes: self.max_body_bytes,
            body_timeout: self.body_timeout,
            cookies: self.cookies.clone(),
        }
    }
}

impl<C> std::fmt::Debug for FrontDoor<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrontDoor")
            .field("hosts", &self.hosts)
            .field("origins", &self.origins)
            .field("tokens", &self.tokens.as_ref().map(|_| "<required>"))
            .field("max_body_bytes", &self.max_body_bytes)
            .field("body_timeout", &self.body_timeout)
            .field("cookies", &self.cookies.as_ref().map(|c| &c.sessions))
            .finish()
    }
}

impl<C: Clone + Send + Sync + 'static> FrontDoor<C> {
    /// Loopback hosts only, no origin, no token, bodies of at most 1 MiB, 30 s per body frame.
    pub fn new() -> Self {
        FrontDoor {
            hosts: Hosts::default(),
            origins: Origins::none(),
            tokens: None,
            max_body_bytes: 1024 * 1024,
            body_timeout: Duration::from_secs(30),
            cookies: None,
        }
    }

    /// The `Host` values answered besides loopback names.
    pub fn hosts(mut self, hosts: Hosts) -> Self {
        self.hosts = hosts;
        self
    }

    /// The browser origins allowed.
    pub fn origins(mut self, origins: Origins) -> Self {
        self.origins = origins;
        self
    }

    /// Every request needs a bearer token that `check` maps to a caller.
    pub fn tokens(mut self, check: TokenCheck<C>) -> Self {
        self.tokens = Some(check);
        self
    }

    /// Whether every request needs a token.
    pub fn requires_token(&self) -> bool {
        self.tokens.is_some()
    }

    /// The largest request body accepted (`413` past it).
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// The longest wait for the next piece of a request body.
    pub fn body_timeout(mut self, timeout: Duration) -> Self {
        self.body_timeout = timeout;
        self
    }

    /// Requests under `sessions`' path are a browser page's: their caller is the session
    /// their cookie names (the `Authorization` header is not read there), the paths in
    /// `public` (the page itself, its assets, its sign-in) need none, and what changes
    /// something needs the server's own `Origin` and the session's CSRF token (see
    /// [`Sessions`]). Host, body size and body time are checked as everywhere. A handler
    /// behind it finds the [`Session`](crate::Session) among the request's extensions, and
    /// [`Caller`] as the session's caller; a public path has neither.
    pub fn cookie_sessions(
        mut self,
        sessions: Sessions<C>,
        public: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        self.cookies = Some(CookieAuth {
            sessions,
            public: public.into_iter().map(Into::into).collect(),
        });
        self
    }

    /// `router` behind the door: nothing reaches its handlers unchecked.
    pub fn guard<S: Clone + Send + Sync + 'static>(self, router: Router<S>) -> Router<S> {
        let max = self.max_body_bytes;
        router
            .layer(DefaultBodyLimit::max(max))
            .layer(middleware::from_fn_with_state(Arc::new(self), check::<C>))
    }

    /// The door's decision on a request's target and headers: the caller, or the refusal.
    /// Who is asking is settled (Host, Origin, token) before anything about the body, so a
    /// request without a token is never read further. A request under the path of
    /// [`FrontDoor::cookie_sessions`] is decided by [`FrontDoor::admit`], which needs its
    /// method: here it is taken as a `GET`, and a public path (no caller) is refused.
    pub fn decide(
        &self,
        uri: &axum::http::Uri,
        headers: &axum::http::HeaderMap,
    ) -> Result<Caller<C>, Refusal> {
        self.admit(&Method::GET, uri, headers)?
            .caller
            .ok_or_else(|| Refusal::forbidden("a public page has no caller"))
    }

    /// The door's decision on a request: who it is from (and its session, under the path of
    /// [`FrontDoor::cookie_sessions`]), or the refusal.
    pub fn admit(
        &self,
        method: &Method,
        uri: &axum::http::Uri,
        headers: &axum::http::HeaderMap,
    ) -> Result<Admitted<C>, Refusal> {
        let host = one(headers, header::HOST)?
            .ok_or_else(|| Refusal::bad_request("the request has no Host header"))?;
        // An absolute-form target names the host the request is for: it must be ours too.
        for host in std::iter::once(host).chain(uri.authority().map(|a| a.as_str())) {
            if !self.hosts.allows(host) {
                return Err(Refusal::forbidden(format!(
                    "Host {host:?} is not this server's; start it with --allow-host to accept it"
                )));
            }
        }
        if let Some(cookies) = self
            .cookies
            .as_ref()
            .filter(|c| c.sessions.covers(uri.path()))
        {
            let public = cookies.public.iter().any(|p| p == uri.path());
            let session = cookies.sessions.admit(method, public, host, headers)?;
            self.check_length(headers)?;
            return Ok(Admitted {
                caller: session.as_ref().map(|s| Caller(Some(s.caller.clone()))),
                session,
            });
        }
        if let Some(origin) = one(headers, header::ORIGIN)? {
            if !self.origins.allows(origin) {
                return Err(Refusal::forbidden(format!(
                    "requests from the browser origin {origin:?} are refused; start the server \
                     with --allow-origin (scheme://host[:port]) to accept them"
                )));
            }
        }
        let caller = match &self.tokens {
            None => Caller(None),
            Some(tokens) => {
                let offered = headers
                    .get_all(header::AUTHORIZATION)
                    .iter()
                    .filter_map(|v| v.to_str().ok())
                    .filter_map(bearer)
                    .next();
                match offered {
                    None => {
                        return Err(Refusal::unauthorized(
                            "this server needs `Authorization: Bearer TOKEN`",
                        ))
                    }
                    Some(token) => match tokens(token) {
                        Some(caller) => Caller(Some(caller)),
                        None => {
                            return Err(Refusal::unauthorized("the bearer token is not valid here"))
                        }
                    },
                }
            }
        };
        self.check_length(headers)?;
        Ok(Admitted {
            caller: Some(caller),
            session: None,
        })
    }

    /// `413` for a body announced past the limit.
    fn check_length(&self, headers: &axum::http::HeaderMap) -> Result<(), Refusal> {
        if let Some(content_length) = one(headers, header::CONTENT_LENGTH)? {
            match content_length.trim().parse::<u64>() {
                Ok(n) if n > self.max_body_bytes as u64 => {
                    return Err(Refusal::too_large(self.max_body_bytes))
                }
                Ok(_) => {}
                Err(_) => return Err(Refusal::bad_request("Content-Length is not a number")),
            }
        }
        Ok(())
    }
}

/// The one value of header `name`, if any; more than one, or one that is not text, is a
/// `400`.
fn one(headers: &axum::http::HeaderMap, name: header::HeaderName) -> Result<Option<&str>, Refusal> {
    let mut values = headers.get_all(&name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(Refusal::bad_request(format!(
            "the request has more than one {name} header"
        )));
    }
    value
        .to_str()
        .map(Some)
        .map_err(|_| Refusal::bad_request(format!("the {name} header is not text")))
}

/// Who the door let in: the caller (`None` only for a public path of
/// [`FrontDoor::cookie_sessions`]) and, under that path, the session.
#[derive(Clone, Debug)]
pub struct Admitted<C> {
    /// The caller, as handlers find it in [`Caller`].
    pub caller: Option<Caller<C>>,
    /// The session of a request under [`FrontDoor::cookie_sessions`]'s path.
    pub session: Option<Session<C>>,
}

impl<C: Clone + Send + Sync + 'static> Default for FrontDoor<C> {
    fn default() -> Self {
        Self::new()
    }
}

impl FrontDoor<()> {
    /// Every request needs this one token.
    pub fn token(self, token: String) -> Self {
        self.tokens(Arc::new(move |offered: &str| {
            same_secret(offered, &token).then_some(())
        }))
    }
}

async fn check<C: Clone + Send + Sync + 'static>(
    State(door): State<Arc<FrontDoor<C>>>,
    request: Request,
    next: Next,
) -> Response {
    let admitted = match door.admit(request.method(), request.uri(), request.headers()) {
        Ok(admitted) => admitted,
        Err(refusal) => {
            tracing::debug!(
                status = refusal.status,
                "refused at the door: {}",
                refusal.message
            );
            // Only a caller past every other check is answered a 413 at all.
            if refusal.status == 413 {
                drain(request, door.body_timeout.min(MAX_DRAIN_TIME)).await;
            }
            return refusal_response(&refusal);
        }
    };
    let (timeout, max) = (door.body_timeout, door.max_body_bytes);
    // The limit holds whatever the transfer coding (a chunked body announces no length).
    let mut request =
        request.map(|body| Body::new(Limited::new(TimeoutBody::new(timeout, body), max)));
    if let Some(caller) = admitted.caller {
        request.extensions_mut().insert(caller);
    }
    if let Some(session) = admitted.session {
        request.extensions_mut().insert(session);
    }
    next.run(request).await
}

/// A body announced larger than the limit but at most this size is read and thrown away
/// before the `413` is sent, so a client that writes its whole body before it reads gets the
/// answer instead of a reset connection; a larger one is not read at all.
const MAX_DRAINED_BYTES: u64 = 8 * 1024 * 1024;

/// The longest a refused body is read for, in all.
const MAX_DRAIN_TIME: Duration = Duration::from_secs(5);

/// Reads and discards `request`'s body when it is small enough ([`MAX_DRAINED_BYTES`]), for
/// at most `timeout` in all.
async fn drain(request: Request, timeout: Duration) {
    use http_body_util::BodyExt as _;
    let announced = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
    if announced.is_none_or(|n| n > MAX_DRAINED_BYTES) {
        return;
    }
    let mut body = request.into_body();
    let all = async {
        let mut read = 0u64;
        while read <= MAX_DRAINED_BYTES {
            match body.frame().await {
                Some(Ok(frame)) => read += frame.data_ref().map_or(0, |d| d.len() as u64),
                _ => return,
            }
        }
    };
    let _ = tokio::time::timeout(timeout, all).await;
}

/// The answer to a refusal: its status, the JSON body, and `WWW-Authenticate: Bearer` for a
/// `401`.
pub fn refusal_response(refusal: &Refusal) -> Response {
    let status = StatusCode::from_u16(refusal.status).unwrap_or(StatusCode::BAD_REQUEST);
    let mut response = (status, refusal.body()).into_response();
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
