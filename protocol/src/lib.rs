//! Wire types of the execbox runner protocol: messages, error codes, options, framing.
//!
//! A host and a runner talk over one bidirectional session. Every message is one JSON
//! object with a `type` field; on stdio each is one line (NDJSON), on WebSocket one text frame.
//!
//! | direction | `type` | fields |
//! |---|---|---|
//! | host → runner | `execute` | `id`, `code`, `options?` ([`RuntimeOptions`]), `providers` ([`ProviderManifest`]`[]`), `replay?` ([`Replay`]) |
//! | runner → host | `started` | `id` |
//! | runner → host | `tool_call` | `callId`, `providerName`, `safeToolName`, `input?` |
//! | host → runner | `tool_result` | `callId`, `ok`, `result?` when ok, `error` ([`ErrorBody`]) when not |
//! | runner → host | `done` | `id`, `ok`, `durationMs`, `logs`, `logsTruncated?`, `clock?` ([`ClockRun`]`[]`), `clockOverflow?`, `result?` when ok, `error` when not |
//! | host → runner | `cancel` | `id` |
//!
//! An `error` is `{code, message}` and, for an uncaught guest error, optionally `name` and
//! `location` (`{line, column, source?, caret?}`, see [`ErrorLocation`]); `message` is the
//! error's own message, never a rendering of the others (that is [`ErrorBody::text`]).
//!
//! `replay` (`{randomSeed, clock?}`) asks for a re-run: `Math.random()` seeded by `randomSeed`,
//! and the guest's clock readings taken from `clock` (`[[ms, count], ...]`) before the real
//! clock; the `done` of such an execution carries every reading in `clock`, and
//! `clockOverflow: true` when that record is incomplete (see [`Replay`]). A host that never
//! sends `replay` never sees either.
//!
//! An omitted `input` or `result` means JavaScript `undefined`. Additive changes (a new
//! optional field, a new message a peer may ignore) are compatible; renaming or retyping a
//! field, a new error code, or a new required field is breaking.
//!
//! The core types: [`Message`] (one of the six, with [`Message::decode`] / [`Message::encode`]),
//! [`ErrorCode`] (the fixed vocabulary), [`RuntimeOptions`] (limits with per-field defaults),
//! [`LineFramer`] (size-checked NDJSON framing), and [`Received`] (what a runner makes of a line,
//! [`answered_execute`] for a relay that counts its executions). This crate does no I/O.
//!
//! ```
//! use execbox_protocol::{Message, ErrorCode};
//!
//! let line = r#"{"type":"tool_result","callId":"c1","ok":false,"error":{"code":"tool_error","message":"boom"}}"#;
//! let Message::ToolResult(result) = Message::decode(line).unwrap() else { unreachable!() };
//! assert_eq!(result.outcome.unwrap_err().code, ErrorCode::ToolError);
//! ```

mod error;
mod framing;
mod manifest;
mod message;
pub mod names;
mod options;
mod received;
mod replay;
mod safety;

pub use error::{ErrorBody, ErrorCode, ErrorLocation, MEMORY_LIMIT_MESSAGE, TIMEOUT_MESSAGE};
pub use framing::{
    peek_envelope, Envelope, Frame, LineFramer, DEFAULT_MAX_MESSAGE_BYTES, PEEK_BYTES,
};
pub use manifest::{ProviderManifest, ToolManifest};
pub use message::{
    replace_lone_surrogates, Cancel, DecodeError, Done, Execute, LogsTruncated, Message, Started,
    ToolCall, ToolResult,
};
pub use options::RuntimeOptions;
pub use received::{answered_execute, Received};
pub use replay::{ClockRun, Replay, MAX_CLOCK_RUNS, MAX_RANDOM_SEED};
pub use safety::{check_transport_safe, UnsafeValue, MAX_NESTING_DEPTH};
pub use serde_json::value::RawValue;
