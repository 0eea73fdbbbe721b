//! The stable error vocabulary of the protocol: seven codes and the `{code, message}` body.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The public error code set. The spec fixes it; no other code ever goes on the wire.
///
/// Adding a variant is a breaking change for every host and runner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The execution ran past `timeoutMs`, or the host cancelled it.
    Timeout,
    /// The guest exceeded `memoryLimitBytes`; decided from the runtime's allocator, never from error text.
    MemoryLimit,
    /// A request or a tool input/output failed validation.
    ValidationError,
    /// A trusted tool implementation failed.
    ToolError,
    /// The guest threw, or its program does not parse.
    RuntimeError,
    /// A value that had to cross the boundary is not transport-safe.
    SerializationError,
    /// The runner or host failed in a way that is nobody's input.
    InternalError,
}

impl ErrorCode {
    /// Every code, in the order the spec lists them.
    pub const ALL: [ErrorCode; 7] = [
        ErrorCode::Timeout,
        ErrorCode::MemoryLimit,
        ErrorCode::ValidationError,
        ErrorCode::ToolError,
        ErrorCode::RuntimeError,
        ErrorCode::SerializationError,
        ErrorCode::InternalError,
    ];

    /// The wire spelling, e.g. `"memory_limit"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Timeout => "timeout",
            ErrorCode::MemoryLimit => "memory_limit",
            ErrorCode::ValidationError => "validation_error",
            ErrorCode::ToolError => "tool_error",
            ErrorCode::RuntimeError => "runtime_error",
            ErrorCode::SerializationError => "serialization_error",
            ErrorCode::InternalError => "internal_error",
        }
    }

    /// Parses the wire spelling; `None` for anything outside the fixed set.
    pub fn parse(s: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The message of every `timeout` error: the deadline passed, or the execution was cancelled.
/// Runners, hosts and tools that end an execution for time all say exactly this, so a
/// caller can rely on one text (the code, not the text, carries the meaning).
pub const TIMEOUT_MESSAGE: &str = "Execution timed out";

/// The message of every `memory_limit` error.
pub const MEMORY_LIMIT_MESSAGE: &str = "Execution exceeded its memory limit";

/// The `error` object of `done` and of a failing `tool_result`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// One of the seven codes.
    pub code: ErrorCode,
    /// Human-readable text; never parsed for meaning.
    pub message: String,
}

impl ErrorBody {
    /// Builds an error body.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorBody {
            code,
            message: message.into(),
        }
    }

    /// `timeout` with [`TIMEOUT_MESSAGE`]: the deadline passed or the execution was cancelled.
    pub fn timeout() -> Self {
        ErrorBody::new(ErrorCode::Timeout, TIMEOUT_MESSAGE)
    }

    /// `memory_limit` with [`MEMORY_LIMIT_MESSAGE`].
    pub fn memory_limit() -> Self {
        ErrorBody::new(ErrorCode::MemoryLimit, MEMORY_LIMIT_MESSAGE)
    }
}

impl fmt::Display for ErrorBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ErrorBody {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_through_their_wire_names() {
        for code in ErrorCode::ALL {
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
            assert_eq!(ErrorCode::parse(code.as_str()), Some(code));
        }
        assert_eq!(ErrorCode::parse("Timeout"), None);
    }
}
