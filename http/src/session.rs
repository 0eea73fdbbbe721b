//! Cookie sessions for a browser page behind the door: sign in once with a bearer token, then
//! a session cookie (HttpOnly, SameSite=Strict, one path) instead of the token, with a CSRF
//! token per session and the page's own `Origin` on every request that changes something.
//!
//! A [`Sessions`] store is in memory: a session id is 256 random bits (`ring`'s system
//! random), kept only as its SHA-256, with an expiry ([`Sessions::ttl`], 8 hours by default)
//! and a bound on their number ([`Sessions::max_sessions`], the oldest goes first past it).
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

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "execbox_session";

/// The default lifetime of a session: 8 hours.
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(8 * 3600);

/// The default bound on the sessions kept at once.
pub const DEFAULT_MAX_SESSIONS: usize = 1024;

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
}

impl<C> Clone for Sessions<C> {
    fn clone(&self) -> Self {
        Sessions {
            inner: self.inner.clone(),
            path: self.path.clone(),
            ttl: self.ttl,
            max: self.max,
        }
    }
}

impl<C> std::fmt::Debug for Sessions<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("path", &self.path)
            .field("ttl", &self.ttl)
            .field("max", &self.max)
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
        }
    }

    /// How long a session lasts after sign-in.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The most sessions kept at once; a sign-in past it ends the oldest.
    pub fn max_sessions(mut self, max: usize) -> Self {
        self.max = max.max(1);
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

    /// A new session of `caller`; `Err` only when the system has no randomness.
    pub fn open(&self, caller: C) -> Result<Session<C>, Refusal> {
        let (Some(id), Some(csrf)) = (secret(), secret()) else {
            return Err(Refusal::forbidden(
                "no session can be opened: the system gives no randomness",
            ));
        };
        let now = Instant::now();
        let expires = now + self.ttl;
        let mut all = self.lock();
        all.retain(|_, e| e.expires > now);
        while all.len() >= self.max {
            let oldest = all.iter().min_by_key(|(_, e)| e.expires).map(|(k, _)| *k);
            match oldest {
                Some(k) => all.remove(&k),
                None => break,
            };
        }
        all.insert(
            digest(&id),
            Entry {
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
        let secure = if secure { "; Secure" } else { "" };
        HeaderValue::from_str(&format!(
            "{SESSION_COOKIE}={value}; Path={}; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}",
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
        let session = cookie_value(headers)
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

/// The session cookie's value among the request's cookies.
fn cookie_value(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value.trim())
        .filter(|v| !v.is_empty())
}

/// Whether a session cookie set in answer to a request with these headers needs `Secure`:
/// always, unless the request came to a loopback name (`localhost`, `127.0.0.1`, `[::1]`),
/// which a browser reaches over plain HTTP on its own machine. The door serves plain HTTP, so
/// anywhere else the console must be reached through HTTPS (a proxy that terminates TLS).
pub fn needs_secure_cookie(headers: &HeaderMap) -> bool {
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
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
        let s = sessions.open("ops".to_string()).unwrap();
        assert_eq!(s.id.len(), 64);
        assert_ne!(s.id, s.csrf);
        let cookie = format!("a=b; {SESSION_COOKIE}={}", s.id);
        let h = headers(&[("cookie", &cookie)]);
        let found = sessions
            .admit(&Method::GET, false, "h", &h)
            .unwrap()
            .unwrap();
        assert_eq!(found.caller, "ops");
        sessions.close(&s.id);
        assert!(sessions.admit(&Method::GET, false, "h", &h).is_err());
    }

    #[test]
    fn changes_need_the_own_origin_and_the_csrf_token() {
        let sessions = Sessions::new("/console");
        let s = sessions.open(1u8).unwrap();
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
    fn the_bound_ends_the_oldest_and_the_cookie_has_its_flags() {
        let sessions = Sessions::new("/console").max_sessions(2);
        let first = sessions.open(1).unwrap();
        let _ = sessions.open(2).unwrap();
        let third = sessions.open(3).unwrap();
        assert_eq!(sessions.len(), 2);
        assert!(sessions.find(&first.id).is_none());
        let cookie = sessions.set_cookie(&third, true);
        let cookie = cookie.to_str().unwrap();
        for flag in [
            "Path=/console",
            "HttpOnly",
            "SameSite=Strict",
            "Secure",
            "Max-Age=",
        ] {
            assert!(cookie.contains(flag), "{cookie}");
        }
        assert!(!sessions
            .set_cookie(&third, false)
            .to_str()
            .unwrap()
            .contains("Secure"));
        assert!(sessions.covers("/console") && sessions.covers("/console/x"));
        assert!(!sessions.covers("/consoles") && !sessions.covers("/v1/x"));
    }

    #[test]
    fn the_door_takes_the_session_under_its_path_and_the_token_elsewhere() {
        let sessions = Sessions::new("/console");
        let door = crate::FrontDoor::new()
            .tokens(std::sync::Arc::new(|t: &str| (t == "tok").then_some("api")))
            .cookie_sessions(sessions.clone(), ["/console", "/console/sign-in"]);
        let s = sessions.open("ops").unwrap();
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
        let s = sessions.open(1).unwrap();
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
