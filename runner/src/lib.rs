//! The execbox runner: executes untrusted JavaScript in QuickJS, one fresh sandbox per execution,
//! and asks the trusted host for every tool call over the execbox protocol.
//!
//! The core types, from the wire inwards:
//! - [`Session`] is one session with the engine: started with [`Session::builder`] and an
//!   [`Outbound`] sink for what the runner sends, fed [`Inbound`] items (decoded messages, or
//!   the transport's close) in arrival order. It answers each `execute` with `started` and
//!   exactly one `done`, asks for tool calls, and applies a `cancel` at once, even in a tight
//!   loop; [`SessionLimits`] bounds its messages and pending tool calls, and its
//!   [`Ceilings`] the limits an `execute` may ask for. Every execution runs
//!   in a fresh QuickJS sandbox with its own memory budget and deadline, one at a time, on
//!   one of the session's engine threads ([`DEFAULT_ENGINES`]), which take turns so that
//!   building the next sandbox overlaps the next execution.
//! - [`serve_stdio`] is the runner process: one [`Session`] on stdin/stdout, the whole
//!   process locked down first ([`Lockdown`]: Landlock, seccomp, rlimits on Linux), with a
//!   watchdog that ends the process ([`WATCHDOG_EXIT_CODE`]) when an execution is stuck in a
//!   long native call.
//! - With the `cli` feature (on by default), [`run`] is the `execbox-runner` command line
//!   ([`RunnerArgs`]), shared by `execbox runner`: stdio, or `--listen`, a supervisor that
//!   runs no guest code and serves each WebSocket session with its own stdio runner process
//!   ([`ChildCommand`]).
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use execbox_protocol::Message;
//! use execbox_runner::{Inbound, Outbound, Session, SessionLimits};
//!
//! /// Keeps what the runner sends.
//! #[derive(Default)]
//! struct Sent(Mutex<Vec<String>>);
//! impl Outbound for Sent {
//!     fn send(&self, message: &Message) {
//!         self.0.lock().unwrap().push(message.encode());
//!     }
//! }
//!
//! let sent = Arc::new(Sent::default());
//! let session = Session::builder()
//!     .limits(SessionLimits::default())
//!     .start(sent.clone())
//!     .unwrap();
//! session.send(Inbound::from_text(
//!     r#"{"type":"execute","id":"a","code":"const r = 6 * 7; `answer: ${r}`","providers":[]}"#,
//! ));
//! session.close(); // the transport closed: the session ends once "a" is answered
//! session.join().unwrap();
//! let sent = sent.0.lock().unwrap();
//! assert_eq!(sent[0], r#"{"type":"started","id":"a"}"#);
//! assert!(sent[1].ends_with(r#""result":"answer: 42"}"#), "{}", sent[1]);
//! ```

mod ceilings;
#[cfg(feature = "cli")]
mod cli;
mod control;
mod engine;
mod hints;
#[cfg(feature = "cli")]
pub mod listen;
mod location;
mod lockdown;
mod logs;
mod normalize;
mod replay;
mod session;
mod stdio;
mod timeout;
mod transport;
mod typescript;

pub use ceilings::{
    Ceilings, DEFAULT_MAX_LOG_CHARS, DEFAULT_MAX_LOG_LINES, DEFAULT_MAX_MEMORY_LIMIT_BYTES,
    DEFAULT_MAX_TIMEOUT_MS,
};
#[cfg(feature = "cli")]
pub use cli::{init_tracing, parse_duration, run, DurationError, LogFormat, RunnerArgs};
#[cfg(feature = "cli")]
pub use listen::child::ChildCommand;
pub use lockdown::{Lockdown, LockdownError};
pub use session::{
    Inbound, Outbound, Sent, Session, SessionBuilder, SessionInput, SessionLimits, DEFAULT_ENGINES,
    DEFAULT_MAX_PENDING_TOOL_CALLS,
};
pub use stdio::{serve as serve_stdio, StdioError, WATCHDOG_EXIT_CODE};
