//! The execbox runner: executes untrusted JavaScript in QuickJS, one fresh sandbox per execution,
//! and asks the trusted host for every tool call over the execbox protocol.
//!
//! The pieces, from the wire inwards:
//! - a transport ([`stdio`] or [`ws`]) reads messages on its own thread or task, feeding
//!   [`session::Inbound`] items to a channel and cancellations straight to [`session::Control`];
//! - [`session::run_session`] is the protocol state machine: `started`, exactly one `done` per
//!   `execute`, rejections of malformed or concurrent requests;
//! - [`engine::Engine`] runs one execution in a [`QuickJS`](rquickjs) sandbox and is the only
//!   code that touches the engine; [`normalize`] turns guest code into a function body and
//!   [`logs::LogBuffer`] applies the log limits;
//! - [`lockdown`] confines the whole process (Landlock, seccomp, rlimits on Linux) before the
//!   transport reads the first byte of guest input.
//!
//! ```no_run
//! // The same as running `execbox-runner --listen 127.0.0.1:0`.
//! let args = execbox_runner::RunnerArgs {
//!     listen: Some("127.0.0.1:0".into()),
//!     max_sessions: 16,
//!     max_message_bytes: execbox_protocol::DEFAULT_MAX_MESSAGE_BYTES,
//!     max_pending_tool_calls: 64,
//!     insecure_no_sandbox: false,
//! };
//! execbox_runner::run(&args).unwrap();
//! ```

mod cli;
pub mod engine;
pub mod location;
pub mod lockdown;
pub mod logs;
pub mod normalize;
pub mod session;
pub mod stdio;
pub mod typescript;
pub mod ws;

pub use cli::{init_tracing, run, RunnerArgs};
