//! The execbox runner: executes untrusted JavaScript in QuickJS, one fresh sandbox per execution,
//! and asks the trusted host for every tool call over the execbox protocol.
//!
//! The pieces, from the wire inwards:
//! - the [`stdio`] transport reads messages on its own thread, feeding [`session::Inbound`]
//!   items to a channel and cancellations straight to [`session::Control`];
//! - [`session::run_session`] is the protocol state machine: `started`, exactly one `done` per
//!   `execute`, rejections of malformed or concurrent requests;
//! - [`engine::Engine`] runs one execution in a [`QuickJS`](rquickjs) sandbox and is the only
//!   code that touches the engine; [`normalize`] turns guest code into a function body and
//!   [`logs::LogBuffer`] applies the log limits;
//! - [`lockdown`] confines the whole process (Landlock, seccomp, rlimits on Linux) before the
//!   transport reads the first byte of guest input;
//! - [`listen`] is `--listen`: a supervisor that runs no guest code and serves each WebSocket
//!   session with its own stdio runner process ([`ChildCommand`]).
//!
//! ```no_run
//! // The same as running `execbox-runner --listen 127.0.0.1:0 --max-sessions 16`.
//! let args = execbox_runner::RunnerArgs {
//!     listen: Some("127.0.0.1:0".into()),
//!     max_sessions: 16,
//!     ..Default::default()
//! };
//! execbox_runner::run(&args, execbox_runner::ChildCommand::current_exe).unwrap();
//! ```

mod cli;
mod control;
pub mod engine;
pub mod listen;
pub mod location;
pub mod lockdown;
pub mod logs;
pub mod normalize;
pub mod session;
pub mod stdio;
pub mod typescript;

pub use cli::{init_tracing, run, LogFormat, RunnerArgs};
pub use listen::ChildCommand;
pub use session::{Inbound, Outbound, Sent, Session, SessionBuilder, SessionInput, SessionLimits};
