//! The stable error vocabulary of the protocol: seven codes and the `{code, message}` body, with
//! the optional name and location of a guest error.

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

/// How the message of every `timeout` error starts: the deadline passed, or the execution was
/// cancelled. A cancel says exactly this; execbox's runner goes on, for a deadline, to say what
/// the program was doing (`Execution timed out after 1000 ms while waiting for: store.get
/// (pending 0.9 s)`), so a caller tests the code, or this prefix, never the whole text.
pub const TIMEOUT_MESSAGE: &str = "Execution timed out";

/// The message of every `memory_limit` error.
pub const MEMORY_LIMIT_MESSAGE: &str = "Execution exceeded its memory limit";

/// The `error` object of `done` and of a failing `tool_result`.
///
/// `message` is the error's own message, as the spec and the reference implementation have it:
/// for a thrown `Error` its `.message`, for another thrown value its string form, for a trusted
/// host code the host's text. Where an uncaught guest error came from travels beside it, in
/// optional fields a host may ignore: `name` (`"TypeError"`) and `location` (line, column, the
/// line itself and where the caret goes). [`ErrorBody::text`] renders them all for a reader.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// One of the seven codes.
    pub code: ErrorCode,
    /// Human-readable text; never parsed for meaning.
    pub message: String,
    /// The name of the thrown error (`"TypeError"`, `"SyntaxError"`, whatever a guest set),
    /// when it had one. Guest-controlled: it never changes the code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Where in the program as sent the error was thrown, when the runner knows.
    /// Boxed: most errors have none, and every `Result<_, ErrorBody>` carries the room.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<Box<ErrorLocation>>,
    /// Why a trusted layer refused, in a word code can test (`"rate_limited"`,
    /// `"approval_denied"`, `"unavailable"`, ...), beside the spec's `code`. Guest code reads it as
    /// `error.reason`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// With a `reason` of `"rate_limited"`: how long to wait before the same call may succeed.
    /// Guest code reads it as `error.retryAfterMs`.
    #[serde(
        default,
        rename = "retryAfterMs",
        skip_serializing_if = "Option::is_none"
    )]
    pub retry_after_ms: Option<u64>,
    /// With a `reason` of `"http_status"`: the HTTP status the upstream answered (100-599).
    /// Guest code reads it as `error.status`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
}

/// A place in the program as the host sent it (after a Markdown fence is removed, line 1 is the
/// fence's first line).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorLocation {
    /// 1-based line.
    pub line: u32,
    /// 1-based column, in characters.
    pub column: u32,
    /// The text of that line (tabs shown as spaces); a line over 120 characters is shown as a
    /// window around the column, cut ends marked `…`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The 1-based character position in `source` the caret points at: `column`, unless the
    /// line was cut to a window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caret: Option<u32>,
}

impl ErrorBody {
    /// Builds an error body.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorBody {
            code,
            message: message.into(),
            name: None,
            location: None,
            reason: None,
            retry_after_ms: None,
            status: None,
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

    /// The same error, naming what was thrown.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The same error, thrown at `location`.
    pub fn with_location(mut self, location: ErrorLocation) -> Self {
        self.location = Some(Box::new(location));
        self
    }

    /// The same error, refused for `reason` (see [`ErrorBody::reason`]).
    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    /// The same error, with the time after which a retry may succeed.
    pub fn with_retry_after_ms(mut self, ms: u64) -> Self {
        self.retry_after_ms = Some(ms);
        self
    }

    /// The error as people and models read it (without its code): the name, the message, and
    /// where it was thrown with the line and a caret, e.g.
    ///
    /// ```text
    /// SyntaxError: unexpected token in expression: ';' (line 2, column 11)
    ///   2 | const b = ;
    ///     |           ^
    /// ```
    pub fn text(&self) -> String {
        let mut out = match self.name.as_deref().filter(|n| !n.is_empty()) {
            Some(name) if self.message.is_empty() => name.to_owned(),
            Some(name) => format!("{name}: {}", self.message),
            None => self.message.clone(),
        };
        let Some(at) = &self.location else {
            return out;
        };
        out.push_str(&format!(" (line {}, column {})", at.line, at.column));
        if let Some(source) = &at.source {
            let gutter = at.line.to_string();
            let pad = " ".repeat(gutter.len());
            let caret = " ".repeat(at.caret.unwrap_or(at.column).max(1) as usize - 1);
            // The source line is guest text: it must not break the layout it is shown in.
            let source: String = source
                .chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .collect();
            out.push_str(&format!("\n  {gutter} | {source}\n  {pad} | {caret}^"));
        }
        out
    }
}

impl fmt::Display for ErrorBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.text())
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

    #[test]
    fn text_renders_name_message_and_location() {
        let error = ErrorBody::new(
            ErrorCode::RuntimeError,
            "unexpected token in expression: ';'",
        )
        .with_name("SyntaxError")
        .with_location(ErrorLocation {
            line: 2,
            column: 11,
            source: Some("const b = ;".into()),
            caret: Some(11),
        });
        assert_eq!(
            error.text(),
            "SyntaxError: unexpected token in expression: ';' (line 2, column 11)\n  2 | const b = ;\n    |           ^"
        );
        let json = serde_json::to_value(&error).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "code": "runtime_error",
                "message": "unexpected token in expression: ';'",
                "name": "SyntaxError",
                "location": {"line": 2, "column": 11, "source": "const b = ;", "caret": 11}
            })
        );
        // A host's error has neither: the wire shape stays `{code, message}`.
        let plain = serde_json::to_string(&ErrorBody::timeout()).unwrap();
        assert_eq!(
            plain,
            r#"{"code":"timeout","message":"Execution timed out"}"#
        );
        assert_eq!(ErrorBody::timeout().text(), TIMEOUT_MESSAGE);
        // A name with an empty message is shown alone.
        let bare = ErrorBody::new(ErrorCode::RuntimeError, "").with_name("TypeError");
        assert_eq!(bare.text(), "TypeError");
    }

    #[test]
    fn a_refusal_carries_its_reason_and_retry_time_beside_the_code() {
        let error = ErrorBody::new(ErrorCode::ToolError, "math.add is rate limited")
            .with_reason("rate_limited")
            .with_retry_after_ms(1500);
        assert_eq!(
            serde_json::to_value(&error).unwrap(),
            serde_json::json!({
                "code": "tool_error",
                "message": "math.add is rate limited",
                "reason": "rate_limited",
                "retryAfterMs": 1500
            })
        );
    }
}
