//! Golden transcripts of the execbox runner protocol and a replayer that checks any runner against them.
//!
//! A runner in any language passes when every transcript under `transcripts/` replays against
//! it: the `execbox-conformance` binary spawns it per transcript (`--runner "CMD ARGS"`, NDJSON
//! over stdio) or connects per transcript (`--ws ws://ADDR`, one message per text frame).
//!
//! # Core types
//!
//! - [`Transcript`]: one `.ndjson` scenario, parsed into [`Step`]s ([`Transcript::parse`],
//!   [`Transcript::from_file`], [`load_dir`]). Syntax errors name the file and line.
//! - [`Transport`]: how to reach a runner; it opens one fresh [`Connection`] per transcript.
//!   [`StdioRunner`] spawns a process (killed when the session ends, stderr kept for reports);
//!   [`WsRunner`] connects to a WebSocket endpoint; [`ListeningRunner`] starts a runner with
//!   `--listen 127.0.0.1:0` and reads the address it prints.
//! - [`replay`] / [`Replayer`]: plays a transcript over a transport and returns the first
//!   divergence as a [`Failure`] (line, reason, expected and actual message, stderr tail).
//! - [`run_bench`]: times a runner ([`BenchTarget`], [`BenchOptions`]) through a low-overhead
//!   driver and returns a [`BenchReport`] (trivial execution and tool call round trips,
//!   executions per second, spawn or connect to first `done`), printable as JSON or Markdown.
//!
//! # Transcript format
//!
//! A transcript is a file `transcripts/<area>/<name>.ndjson`, named `<area>/<name>`. Each
//! non-blank line is one JSON object:
//!
//! | line | meaning |
//! |---|---|
//! | `{"comment": "..."}` | what the transcript checks and why, citing the spec rule; first line by convention (every shipped transcript has one) |
//! | `{"send": MSG}` | send `MSG` to the runner (host → runner), its text exactly as written |
//! | `{"send_raw": "TEXT"}` | send `TEXT` unparsed as one line / text frame (for garbage input) |
//! | `{"recv": MSG}` | the runner's next message must match `MSG` |
//! | a bare message `{"type": ...}` | `execute`, `cancel`, `tool_result` are sends; `started`, `tool_call`, `done` are recvs |
//! | `{"sleep_ms": N}` | wait N ms before the next step (e.g. to cancel during a CPU loop) |
//! | `{"close": true}` | close the transport: EOF on the runner's stdin, or a WebSocket close |
//! | `{"expect_exit_within_ms": N}` | stdio: the process must exit within N ms; ignored over WebSocket |
//! | `{"expect_silence_ms": N}` | no runner message may arrive within N ms (and the session must stay open) |
//! | `{"expect_within_ms": N}` | the next line, which must be a recv, must arrive within N ms |
//!
//! Bare messages let the spec's own transcripts be used verbatim:
//! `transcripts/spec/minimal_success.ndjson` and `spec/minimal_cancel.ndjson` are the lines
//! of the specification, byte for byte.
//!
//! Every recv waits at most [`DEFAULT_RECV_TIMEOUT`] (10 s) unless `expect_within_ms` bounds
//! it, so a silent runner fails instead of hanging. After the last line the replayer fails if a
//! message the transcript did not expect has already arrived (unless the transport was closed).
//!
//! ## Matching
//!
//! Expected and actual messages are compared as parsed JSON values, never as text: object key
//! order does not matter, key sets must be equal (an absent `result` must be absent), numbers
//! compare by value (`1` equals `1.0`, but `-0` is not `0`), arrays element by element.
//!
//! Values the runner chooses are normalised:
//!
//! - **callId**: the top-level `callId` of an expected message is a *name*. The first time a
//!   name is matched it is bound to the id the runner actually sent; from then on it must be that
//!   id, and two names can never bind the same runner id (a reused callId fails). A later
//!   send whose top-level `callId` is a bound name is rewritten to the runner's id, so
//!   `{"type":"tool_result","callId":"call-1",...}` answers whatever call `call-1` named. An
//!   unbound name is sent as written (useful for "unknown callId" tests). callIds are unique
//!   within one execution only, so bindings are forgotten when the next `started` is matched.
//! - **durationMs**: a number at the top level of an expected message matches any non-negative
//!   number.
//!
//! Matchers may stand for any value anywhere in an expected message:
//!
//! | matcher | matches |
//! |---|---|
//! | `"$any"` | any value (the key must still be present) |
//! | `"$string"` | any string |
//! | `"$number"` | any number |
//! | `"$re:<regex>"` | a string in which the regex (Rust `regex` syntax) finds a match; anchor with `^…$` to match all of it |
//! | `"$$…"` | the literal string `"$…"` |
//!
//! Any other string starting with `$` is a syntax error, so a misspelt matcher cannot silently
//! compare as a literal.
//!
//! ## Depth
//!
//! Runner messages may nest deeply. The replayer never recurses on raw input: it measures a
//! line's nesting depth first and parses at most [`MAX_PARSE_DEPTH`] levels, on a thread with
//! a large stack. Sent lines are forwarded as text, so a transcript may send any depth.
//!
//! # Example
//!
//! ```
//! use execbox_conformance::{Action, Transcript};
//!
//! let transcript = Transcript::parse(
//!     "execute/one_plus_one",
//!     r#"{"comment": "the value of the last expression statement is the result"}
//! {"type":"execute","id":"e","code":"1 + 1","providers":[]}
//! {"type":"started","id":"e"}
//! {"type":"done","id":"e","ok":true,"durationMs":0,"logs":[],"result":2}
//! "#,
//! )
//! .unwrap();
//! assert_eq!(transcript.steps.len(), 3);
//! assert!(matches!(transcript.steps[0].action, Action::Send { .. }));
//! ```
//!
//! Replaying every shipped transcript against a runner binary:
//!
//! ```no_run
//! use execbox_conformance::{load_dir, replay, StdioRunner, TRANSCRIPTS_DIR};
//!
//! let runner = StdioRunner { command: vec!["execbox-runner".into()] };
//! for transcript in load_dir(TRANSCRIPTS_DIR).unwrap() {
//!     match replay(&transcript, &runner) {
//!         Ok(()) => println!("ok   {}", transcript.name),
//!         Err(failure) => println!("FAIL {}: {failure}", transcript.name),
//!     }
//! }
//! ```

mod bench;
mod json;
mod matcher;
mod replay;
mod transcript;
mod transport;

pub use bench::{run_bench, BenchError, BenchOptions, BenchReport, BenchTarget, Percentiles};
pub use json::MAX_PARSE_DEPTH;
pub use replay::{replay, Failure, Replayer, DEFAULT_RECV_TIMEOUT};
pub use transcript::{load_dir, Action, Expected, LoadError, Step, Transcript};
pub use transport::{
    Connection, Exit, ListeningRunner, Received, StdioRunner, Transport, WsRunner,
};

/// The transcripts shipped with this crate: `<crate>/transcripts`.
pub const TRANSCRIPTS_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/transcripts");
