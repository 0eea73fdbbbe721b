//! The one HTTP front door of execbox's servers: who may come in, and how long and how much
//! they may take.
//!
//! Every server that reaches a port goes through it: `execbox serve` (the capabilities API)
//! and `execbox mcp --http` use the [`FrontDoor`] layer and the [`serve`] loop (feature
//! `server`); the runner's own listener (`execbox-runner --listen`), which stays free of
//! axum and hyper, uses the same checks from this crate's default build. The guarantees, once:
//! - **Bearer tokens** ([`bearer`], [`same_secret`]): `Authorization: Bearer TOKEN` with the
//!   scheme matched case-insensitively, compared in time that depends on neither token; a
//!   missing or wrong token is `401` with `WWW-Authenticate: Bearer`.
//! - **Origins** ([`Origins`]): a request carrying `Origin` (a browser page) is refused with
//!   `403` unless its scheme, host and port are allowed exactly (`:*` allows any port, only
//!   when written).
//! - **Hosts** ([`Hosts`]): `Host` must be a loopback name, the address listened on, or an
//!   allowed name (`name` for any port, `name:port` for one), against DNS rebinding: `403`.
//! - **Time and size** (feature `server`): a request head must arrive within
//!   [`ServeOptions::header_timeout`] (also the idle time allowed between requests of a
//!   kept-alive connection), a body within [`ServeOptions::body_timeout`] per frame, bodies are
//!   at most [`FrontDoor::max_body_bytes`] (`413`), and at most
//!   [`ServeOptions::max_connections`] connections are open at once ([`ConnectionSlots`]: when
//!   all are taken, the oldest connection without a request in progress makes room, a
//!   half-sent head before an idle kept-alive one, so half-sent heads cannot lock anyone out).
//! - **Descriptors** ([`raise_open_files_limit`], [`connection_cap`]): every server raises its
//!   soft `RLIMIT_NOFILE` to the hard limit at start, and takes no more connections than it
//!   can open while keeping room for its files, database connections and child processes.
//! - **Long requests** (feature `server`, [`long_requests`]): event streams and long polls,
//!   at most [`ServeOptions::max_long_requests_per_caller`] per caller, and never the last
//!   quarter of the connection slots, kept for short requests (`429`).
//! - **Cookie sessions** (feature `server`, [`Sessions`], [`FrontDoor::cookie_sessions`]): a
//!   browser page signs in once with a bearer token and is then known by an HttpOnly,
//!   SameSite=Strict session cookie on its own path; what it changes needs the server's own
//!   `Origin` and the session's CSRF token ([`CSRF_HEADER`]), else `403`.
//! - **Exposure** ([`check_exposure`]): no server listens beyond loopback without a bearer
//!   token; one rule, one message.
//! - **One error shape** ([`Refusal`]): `{"error": {"code", "message"}}` with
//!   `UNAUTHORIZED`, `FORBIDDEN`, `PAYLOAD_TOO_LARGE`, `BAD_REQUEST`, `TOO_MANY_REQUESTS`.

mod allowlist;
mod descriptors;
mod exposure;
mod refusal;
mod slots;
mod token;

#[cfg(feature = "server")]
mod guarded;
#[cfg(feature = "server")]
mod layer;
#[cfg(feature = "server")]
mod long;
#[cfg(feature = "server")]
mod serve;
#[cfg(feature = "server")]
mod session;

pub use allowlist::{AllowlistError, Hosts, Origins};
#[cfg(unix)]
pub use descriptors::raise_open_files_limit;
pub use descriptors::{connection_cap, open_files_limit, OpenFiles};
pub use exposure::{check_exposure, Exposed};
pub use refusal::Refusal;
pub use slots::{Busy, ConnectionSlots, Evict, Full, Slot};
pub use token::{bearer, same_secret};

#[cfg(feature = "server")]
pub use layer::{refusal_response, Admitted, Caller, FrontDoor, TokenCheck};
#[cfg(feature = "server")]
pub use long::{long_requests, CallerKey, DEFAULT_MAX_LONG_REQUESTS_PER_CALLER};
#[cfg(feature = "server")]
pub use serve::{serve, ServeOptions, DEFAULT_HEADER_TIMEOUT, DEFAULT_MAX_CONNECTIONS};
#[cfg(feature = "server")]
pub use session::{
    needs_secure_cookie, Session, Sessions, CSRF_HEADER, DEFAULT_MAX_SESSIONS, DEFAULT_SESSION_TTL,
    SESSION_COOKIE,
};
