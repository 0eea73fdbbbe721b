//! Cookie sessions for a browser page behind the door: sign in once with a bearer token, then
//! a session cookie (HttpOnly, SameSite=Strict, one path) instead of the token, with a CSRF
//! token per session and the page's own `Origin` on every request that changes something.
//!
//! A [`Sessions`] store is in memory: a session id is 256 random bits (`ring`'s system
//! random), kept only as its SHA-256, with an expiry ([`Sessions::ttl`], 8 hours by default)
//! and bounds on their number: [`Sessions::max_per_owner`] (8 by default) per principal, whose
//! oldest goes first past it, and [`Sessions::max_sessions`] (1,024 by default) in all, past
//! which a sign-in is refused (`503`) rather than end another principal's session.
//! The cookie is `__Secure-execbox_session` when it is `Secure` (the `__Host-` prefix needs
//! `Path=/`, and the cookie's path is narrower), `execbox_session` on a loopback name.
//! [`FrontDoor::cookie_sessions`](crate::FrontDoor::cookie_sessions) puts a path under it:
//! there the door takes the caller from the cookie, never from `Authorization`, and refuses
//! with `403 FORBIDDEN`:
//! - an `Origin` other than the server's own (`http://HOST` or `https://HOST` of the
//!   request's own `Host`, which the door already checked), whatever the method;
//! - a request other than `GET`, `HEAD` or `OPTIONS` without `Origin`;
//! - a request to a path that is not public without a live session cookie;
//! - a request other than `GET`, `HEAD` or `OPTIONS` to a path that is not public without
//!   the session's CSRF token in [`CSRF_HEADER`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap, HeaderValue, Method};
use ring::rand::SecureRandom as _;

use crate::{same_secret, Refusal};

/// The header a page sends its session's CSRF token in.
pub const CSRF_HEADER: &str = "x-execbox-csrf";

/// The session cookie's name when it is not `Secure` (a loopback name over plain HTTP).
pub const SESSION_COOKIE: &str = "execbox_session";

/// The session cookie's name when it is `Secure`: a browser keeps a `__Secure-` cookie only
/// when it was set over HTTPS with `Secure`, so plain HTTP cannot plant one. (`__Host-` needs
/// `Path=/`; the cookie is kept to its path.)
pub const SECURE_SESSION_COOKIE: &str = "__Secure-execbox_session";

/// The default lifetime of a session: 8 hours.
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(8 * 3600);

/// The default bound on the sessions kept at once.
pub const DEFAULT_MAX_SESSIONS: usize = 1024;

/// The default bound on the sessions of one principal kept at once.
pub const DEFAULT_MAX_SESSIONS_PER_OWNER: usize = 8;

/// One signed-in session, as the door hands it to a handler (a request extension).
#[derive(Clone)]
pub struct Session<C> {
    /// The session id: the cookie's value. Never logged.
    pub id: String,
    /// Who signed in.
    pub caller: C,
    /// The token the page must send in [`CSRF_HEADER`] with every request that changes
    /// something.
    pub csrf: String,
    /// When the session ends.
    pub expires: Instant,
}

impl<C> std::fmt::Debug for Session<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &"<secret>")
            .field("csrf", &"<secret>")
            .field("expires", &self.expires)
            .finish_non_exhaustive()
    }
}

struct Entry<C> {
    owner: String,
    caller: C,
    csrf: String,
    expires: Instant,
}

/// The sessions of one server, in memory (see the module docs); cheap to clone, clones share.
pub struct Sessions<C> {
    inner: Arc<Mutex<HashMap<[u8; 32], Entry<C>>>>,
    path: String,
    ttl: Duration,
    max: usize,
    per_owner: usize,
}

impl<C> Clone for Sessions<C> {
    fn clone(&self) -> Self {
        Sessions {
            inner: self.inner.clone(),
            path: self.path.clone(),
            ttl: self.ttl,
            max: self.max,
            per_owner: self.per_owner,
        }
    }
}

impl<C> std::fmt::Debug for Sessions<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("path", &self.path)
            .field("ttl", &self.ttl)
            .field("max", &self.max)
            .field("per_owner", &self.per_owner)
            .finish_non_exhaustive()
    }
}

/// A fresh 256-bit secret in lowercase hex, or `None` when the system has no randomness.
fn secret() -> Option<String> {
    let mut bytes = [0u8; 32];
    ring::rand::SystemRandom::new().fill(&mut bytes).ok()?;
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn digest(id: &str) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, id.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

impl<C: Clone> Sessions<C> {
    /// Sessions whose cookie is sent to `path` (and below) only.
    pub fn new(path: impl Into<String>) -> Sessions<C> {
        Sessions {
            inner: Arc::new(Mutex::new(HashMap::new())),
            path: path.into(),
            ttl: DEFAULT_SESSION_TTL,
            max: DEFAULT_MAX_SESSIONS,
            per_owner: DEFAULT_MAX_SESSIONS_PER_OWNER,
        }
    }

    /// How long a session lasts after sign-in.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The most sessions kept at once; a sign-in past it is refused (`503`): it never ends
    /// another principal's session.
    pub fn max_sessions(mut self, max: usize) -> Self {
        self.max = max.max(1);
        self
    }

    /// The most sessions of one owner (principal) kept at once; its sign-in past it ends its
    /// own oldest session.
    pub fn max_per_owner(mut self, max: usize) -> Self {
        self.per_owner = max.max(1);
        self
    }

    /// The cookie's path: the requests under it are the sessions' (the door's
    /// [`FrontDoor::cookie_sessions`](crate::FrontDoor::cookie_sessions)).
    pub fn path(&self) -> &str {
        &self.path
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<[u8; 32], Entry<C>>> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A new session of `caller`, whose owner (the principal's name) is `owner`: expired
    /// sessions go first; past [`Sessions::max_per_owner`] the owner's own oldest session
    /// ends; past [`Sessions::max_sessions`] the sign-in is refused (`503 UNAVAILABLE`)
    /// rather than end anyone else's. `Err` too when the system has no randomness.
    pub fn open(&self, owner: &str, caller: C) -> Result<Session<C>, Refusal> {
        let (Some(id), Some(csrf)) = (secret(), secret()) else {
            return Err(Refusal::forbidden(
                "no session can be opened: the system gives no randomness",
            ));
        };
        let now = Instant::now();
        let expires = now + self.ttl;
        let mut all = self.lock();
        all.retain(|_, e| e.expires > now);
        loop {
            let mine = all.iter().filter(|(_, e)| e.owner == owner);
            if mine.clone().count() < self.per_owner {
                break;
            }
            let oldest = mine.min_by_key(|(_, e)| e.expires).map(|(k, _)| *k);
            match oldest {
                Some(k) => all.remove(&k),
                None => break,
            };
        }
        if all.len() >= self.max {
            return Err(Refusal {
                status: 503,
                code: "UNAVAILABLE",
                message: format!(
                    "this server keeps at most {} sessions at once and all are in use; sign in \
                     again when one has ended (sessions end at sign-out or after {} hours)",
                    self.max,
                    self.ttl.as_secs() / 3600
                ),
            });
        }
        all.insert(
            digest(&id),
            Entry {
                owner: owner.to_owned(),
                caller: caller.clone(),
                csrf: csrf.clone(),
                expires,
            },
        );
        Ok(Session {
            id,
            caller,
            csrf,
            expires,
        })
    }

    /// The live session whose id is `id`.
    pub fn find(&self, id: &str) -> Option<Session<C>> {
        let key = digest(id);
        let mut all = self.lock();
        let entry = all.get(&key)?;
        if entry.expires <= Instant::now() {
            all.remove(&key);
            return None;
        }
        Some(Session {
            id: id.to_owned(),
            caller: entry.caller.clone(),
            csrf: entry.csrf.clone(),
            expires: entry.expires,
        })
    }

    /// Ends session `id` (sign-out).
    pub fn close(&self, id: &str) {
        self.lock().remove(&digest(id));
    }

    /// How many sessions are live.
    pub fn len(&self) -> usize {
        let now = Instant::now();
        self.lock().values().filter(|e| e.expires > now).count()
    }

    /// Whether no session is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `Set-Cookie` value of `session`: HttpOnly, SameSite=Strict, this path, its
    /// lifetime, and `Secure` when `secure` (see [`needs_secure_cookie`]).
    pub fn set_cookie(&self, session: &Session<C>, secure: bool) -> HeaderValue {
        let left = session.expires.saturating_duration_since(Instant::now());
        let max_age = left.as_secs() + u64::from(left.subsec_nanos() > 0);
        self.cookie(&session.id, max_age, secure)
    }

    /// The `Set-Cookie` value that removes the cookie (sign-out).
    pub fn clear_cookie(&self, secure: bool) -> HeaderValue {
        self.cookie("", 0, secure)
    }

    fn cookie(&self, value: &str, max_age: u64, secure: bool) -> HeaderValue {
        let name = cookie_name(secure);
        let secure = if secure { "; Secure" } else { "" };
        HeaderValue::from_str(&format!(
            "{name}={value}; Path={}; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}",
            self.path
        ))
        .unwrap_or_else(|_| HeaderValue::from_static("invalid=1; Max-Age=0"))
    }

    /// Whether `path` is under the sessions' path.
    pub(crate) fn covers(&self, path: &str) -> bool {
        path == self.path
            || path
                .strip_prefix(self.path.as_str())
                .is_some_and(|rest| rest.starts_with('/'))
    }

    /// The door's decision on a request under the sessions' path: the session (`None` for a
    /// public path), or the refusal. The `Host` was checked before.
    pub(crate) fn admit(
        &self,
        method: &Method,
        public: bool,
        host: &str,
        headers: &HeaderMap,
    ) -> Result<Option<Session<C>>, Refusal> {
        let safe = matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
        let origins: Vec<&str> = headers
            .get_all(header::ORIGIN)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        match origins.as_slice() {
            [] if safe => {}
            [] => {
                return Err(Refusal::forbidden(
                    "a request that changes something must come from this server's own page, \
                     with its Origin header",
                ))
            }
            [origin] if same_origin(origin, host) => {}
            _ => {
                return Err(Refusal::forbidden(format!(
                    "requests to {} are taken from this server's own page only (origin \
                     http://{host} or https://{host})",
                    self.path
                )))
            }
        }
        if public {
            return Ok(None);
        }
        let session = cookie_value(headers, cookie_name(secure_host(host)))
            .and_then(|id| self.find(id))
            .ok_or_else(|| {
                Refusal::forbidden(format!(
                    "no live session: sign in at {} with a bearer token first",
                    self.path
                ))
            })?;
        if !safe {
            let offered = headers
                .get(CSRF_HEADER)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            if !same_secret(offered, &session.csrf) {
                return Err(Refusal::forbidden(format!(
                    "the {CSRF_HEADER} header must carry this session's CSRF token (the page \
                     gets it from GET {}/session)",
                    self.path
                )));
            }
        }
        Ok(Some(session))
    }
}

/// Whether `origin` is this server's own page: `http://HOST` or `https://HOST` for the
/// request's `Host` (which the door accepted as ours).
fn same_origin(origin: &str, host: &str) -> bool {
    let origin = origin.trim();
    let host = host.trim();
    ["http://", "https://"].iter().any(|scheme| {
        origin.len() == scheme.len() + host.len()
            && origin
                .get(..scheme.len())
                .is_some_and(|s| s.eq_ignore_ascii_case(scheme))
            && origin
                .get(scheme.len()..)
                .is_some_and(|h| h.eq_ignore_ascii_case(host))
    })
}

/// The session cookie's name: [`SECURE_SESSION_COOKIE`] when it is `Secure`.
fn cookie_name(secure: bool) -> &'static str {
    if secure {
        SECURE_SESSION_COOKIE
    } else {
        SESSION_COOKIE
    }
}

/// The session cookie's value among the request's cookies.
fn cookie_value<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, value)| value.trim())
        .filter(|v| !v.is_empty())
}

/// Whether a session cookie set in answer to a request with these headers needs `Secure`:
/// always, unless the request came to a loopback name (`localhost`, `127.0.0.1`, `[::1]`),
/// which a browser reaches over plain HTTP on its own machine. The door serves plain HTTP, so
/// anywhere else the console must be reached through HTTPS (a proxy that terminates TLS).
pub fn needs_secure_cookie(headers: &HeaderMap) -> bool {
    secure_host(
        headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default(),
    )
}

/// Whether a session cookie for a request to `host` is `Secure` ([`needs_secure_cookie`]).
fn secure_host(host: &str) -> bool {
    let host = host.trim().to_ascii_lowercase();
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host.as_str(), |(h, _)| h),
    };
    !matches!(name, "localhost" | "127.0.0.1" | "::1")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(*name, HeaderValue::from_str(value).unwrap());
        }
        h
    }

    #[test]
    fn a_session_is_found_by_its_cookie_until_closed() {
        let sessions = Sessions::new("/console");
        let s = sessions.open("ops", "ops".to_string()).unwrap();
        assert_eq!(s.id.len(), 64);
        assert_ne!(s.id, s.csrf);
        let cookie = format!("a=b; {SECURE_SESSION_COOKIE}={}", s.id);
        let h = headers(&[("cookie", &cookie)]);
        let found = sessions
            .admit(&Method::GET, false, "h", &h)
            .unwrap()
            .unwrap();
        assert_eq!(found.caller, "ops");
        // Reached by a name other than loopback, the cookie is `__Secure-` only: one without
        // the prefix (which plain HTTP could plant) is not read.
        let plain = headers(&[("cookie", &format!("{SESSION_COOKIE}={}", s.id))]);
        assert!(sessions.admit(&Method::GET, false, "h", &plain).is_err());
        assert!(sessions
            .admit(&Method::GET, false, "localhost:8080", &plain)
            .is_ok());
        sessions.close(&s.id);
        assert!(sessions.admit(&Method::GET, false, "h", &h).is_err());
    }

    #[test]
    fn changes_need_the_own_origin_and_the_csrf_token() {
        let sessions = Sessions::new("/console");
        let s = sessions.open("one", 1u8).unwrap();
        let cookie = format!("{SESSION_COOKIE}={}", s.id);
        let post = |pairs: &[(&'static str, &str)]| {
            sessions.admit(&Method::POST, false, "127.0.0.1:8080", &headers(pairs))
        };
        let own = "http://127.0.0.1:8080";
        assert!(post(&[("cookie", &cookie), ("origin", own), (CSRF_HEADER, &s.csrf)]).is_ok());
        let no_csrf = post(&[("cookie", &cookie), ("origin", own)]).unwrap_err();
        assert_eq!(no_csrf.status, 403);
        assert!(no_csrf.message.contains(CSRF_HEADER), "{no_csrf}");
        let foreign = post(&[
            ("cookie", &cookie),
            ("origin", "http://evil.example"),
            (CSRF_HEADER, &s.csrf),
        ])
        .unwrap_err();
        assert!(foreign.message.contains("own page"), "{foreign}");
        assert!(post(&[("cookie", &cookie), (CSRF_HEADER, &s.csrf)]).is_err());
        assert!(post(&[("origin", own), (CSRF_HEADER, &s.csrf)]).is_err());
        // A public path needs the origin, not a session.
        let public = sessions.admit(
            &Method::POST,
            true,
            "127.0.0.1:8080",
            &headers(&[("origin", own)]),
        );
        assert!(matches!(public, Ok(None)));
    }

    #[test]
    fn a_principal_past_its_bound_ends_its_own_oldest_session_only() {
        let sessions = Sessions::new("/console").max_per_owner(8);
        let theirs = sessions.open("victim", 0).unwrap();
        let mine: Vec<_> = (0..8).map(|i| sessions.open("me", i).unwrap()).collect();
        // A ninth sign-in of `me` ends `me`'s oldest, and nobody else's.
        let ninth = sessions.open("me", 8).unwrap();
        assert_eq!(sessions.len(), 9);
        assert!(sessions.find(&mine[0].id).is_none());
        assert!(sessions.find(&mine[1].id).is_some());
        assert!(sessions.find(&ninth.id).is_some());
        assert!(sessions.find(&theirs.id).is_some());
        for i in 9..40 {
            sessions.open("me", i).unwrap();
        }
        assert_eq!(sessions.len(), 9);
        assert!(sessions.find(&theirs.id).is_some());
    }

    #[test]
    fn a_full_server_refuses_a_sign_in_rather_than_end_another_principals_session() {
        let sessions = Sessions::new("/console").max_sessions(2);
        let a = sessions.open("a", 1).unwrap();
        let b = sessions.open("b", 2).unwrap();
        let refused = sessions.open("mallory", 3).unwrap_err();
        assert_eq!(refused.status, 503, "{refused}");
        assert_eq!(refused.code, "UNAVAILABLE");
        assert!(refused.message.contains("at most 2 sessions"), "{refused}");
        assert!(sessions.find(&a.id).is_some() && sessions.find(&b.id).is_some());
        // `a`'s own sign-in past its own bound still ends its own oldest.
        let sessions = sessions.max_per_owner(1);
        let again = sessions.open("a", 4).unwrap();
        assert!(sessions.find(&a.id).is_none() && sessions.find(&again.id).is_some());
        // Expired sessions are purged first, so they never fill the bound.
        let short = Sessions::new("/console")
            .max_sessions(1)
            .ttl(Duration::ZERO);
        short.open("a", 1).unwrap();
        short.open("b", 2).unwrap();
    }

    #[test]
    fn the_cookie_has_its_flags() {
        let sessions = Sessions::new("/console");
        let third = sessions.open("three", 3).unwrap();
        let cookie = sessions.set_cookie(&third, true);
        let cookie = cookie.to_str().unwrap();
        assert!(
            cookie.starts_with(&format!("{SECURE_SESSION_COOKIE}={}", third.id)),
            "{cookie}"
        );
        assert!(sessions
            .clear_cookie(true)
            .to_str()
            .unwrap()
            .starts_with("__Secure-execbox_session=;"));
        for flag in [
            "Path=/console",
            "HttpOnly",
            "SameSite=Strict",
            "Secure",
            "Max-Age=",
        ] {
            assert!(cookie.contains(flag), "{cookie}");
        }
        let plain = sessions.set_cookie(&third, false);
        let plain = plain.to_str().unwrap();
        assert!(!plain.contains("Secure"), "{plain}");
        assert!(plain.starts_with("execbox_session="), "{plain}");
        assert!(sessions.covers("/console") && sessions.covers("/console/x"));
        assert!(!sessions.covers("/consoles") && !sessions.covers("/v1/x"));
    }

    #[test]
    fn the_door_takes_the_session_under_its_path_and_the_token_elsewhere() {
        let sessions = Sessions::new("/console");
        let door = crate::FrontDoor::new()
            .tokens(std::sync::Arc::new(|t: &str| (t == "tok").then_some("api")))
            .cookie_sessions(sessions.clone(), ["/console", "/console/sign-in"]);
        let s = sessions.open("ops", "ops").unwrap();
        let cookie = format!("{SESSION_COOKIE}={}", s.id);
        let uri = |p: &str| p.parse::<axum::http::Uri>().unwrap();
        let admit = |method: Method, path: &str, pairs: &[(&'static str, &str)]| {
            let mut h = headers(pairs);
            h.insert("host", HeaderValue::from_static("127.0.0.1:8080"));
            door.admit(&method, &uri(path), &h)
        };
        // The page is public: no caller, no session.
        let page = admit(Method::GET, "/console", &[]).unwrap();
        assert!(page.caller.is_none() && page.session.is_none());
        // Under the path, the cookie is the caller; a bearer token is not read there.
        let data = admit(Method::GET, "/console/pending", &[("cookie", &cookie)]).unwrap();
        assert_eq!(data.caller.unwrap().0, Some("ops"));
        let bearer = admit(
            Method::GET,
            "/console/pending",
            &[("authorization", "Bearer tok")],
        )
        .unwrap_err();
        assert_eq!(bearer.status, 403);
        // Elsewhere, the token is, and the cookie is not.
        let api = admit(Method::GET, "/v1/x", &[("authorization", "Bearer tok")]).unwrap();
        assert_eq!(api.caller.unwrap().0, Some("api"));
        assert_eq!(
            admit(Method::GET, "/v1/x", &[("cookie", &cookie)])
                .unwrap_err()
                .status,
            401
        );
        // `decide` never lets a public path in as a caller.
        let mut h = headers(&[]);
        h.insert("host", HeaderValue::from_static("127.0.0.1:8080"));
        assert!(door.decide(&uri("/console"), &h).is_err());
    }

    #[test]
    fn an_expired_session_is_nothing() {
        let sessions = Sessions::new("/console").ttl(Duration::ZERO);
        let s = sessions.open("one", 1).unwrap();
        assert!(sessions.find(&s.id).is_none());
        assert!(sessions.is_empty());
        let h = headers(&[("cookie", &format!("{SESSION_COOKIE}={}", s.id))]);
        let refused = sessions.admit(&Method::GET, false, "h", &h).unwrap_err();
        assert!(refused.message.contains("sign in"), "{refused}");
    }

    #[test]
    fn secure_unless_a_loopback_name() {
        for (host, secure) in [
            ("localhost:8080", false),
            ("127.0.0.1", false),
            ("[::1]:9", false),
            ("execbox.example.com", true),
            ("10.0.0.2:8080", true),
        ] {
            assert_eq!(
                needs_secure_cookie(&headers(&[("host", host)])),
                secure,
                "{host}"
            );
        }
    }
}
