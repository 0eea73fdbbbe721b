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
//!   all are taken, the oldest connection without a request in progress makes room, so
//!   half-sent heads cannot lock anyone out).
//! - **One error shape** ([`Refusal`]): `{"error": {"code", "message"}}` with
//!   `UNAUTHORIZED`, `FORBIDDEN`, `PAYLOAD_TOO_LARGE`, `BAD_REQUEST`.

mod allowlist;
mod refusal;
mod slots;
mod token;

#[cfg(feature = "server")]
mod layer;
#[cfg(feature = "server")]
mod serve;

pub use allowlist::{AllowlistError, Hosts, Origins};
pub use refusal::Refusal;
pub use slots::{Busy, ConnectionSlots, Evict, Full, Slot};
pub use token::{bearer, same_secret};

#[cfg(feature = "server")]
pub use layer::{refusal_response, Caller, FrontDoor, TokenCheck};
#[cfg(feature = "server")]
pub use serve::{serve, ServeOptions, DEFAULT_HEADER_TIMEOUT, DEFAULT_MAX_CONNECTIONS};
