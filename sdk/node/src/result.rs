//! The result of an execution as the JavaScript layer receives it.

use execbox_host::ExecuteResult;
use napi_derive::napi;

/// Where an uncaught guest error was thrown.
#[napi(object)]
pub struct NativeLocation {
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
    /// The text of that line.
    pub source: Option<String>,
    /// Where the caret goes in `source`.
    pub caret: Option<u32>,
}

/// A failed execution's error.
#[napi(object)]
pub struct NativeError {
    /// One of the seven codes.
    pub code: String,
    /// What went wrong.
    pub message: String,
    /// The thrown error's name.
    pub name: Option<String>,
    /// Why a trusted layer refused.
    pub reason: Option<String>,
    /// When a retry may be admitted.
    pub retry_after_ms: Option<f64>,
    /// Where it was thrown.
    pub location: Option<NativeLocation>,
    /// The error as a person or a model reads it: name, message, line and caret.
    pub text: String,
}

/// What the log limits left out.
#[napi(object)]
pub struct NativeLogsTruncated {
    /// Lines not in `logs` at all.
    pub omitted_lines: f64,
    /// The last line was cut.
    pub cut_line: bool,
}

/// One execution's result; the value stays JSON text for the JavaScript to parse.
#[napi(object)]
pub struct NativeResult {
    /// The program succeeded.
    pub ok: bool,
    /// The value as JSON text; absent for `undefined` or a failure.
    pub value_json: Option<String>,
    /// The error of a failure.
    pub error: Option<NativeError>,
    /// Console lines, then the host's notes.
    pub logs: Vec<String>,
    /// What the log limits took.
    pub logs_truncated: Option<NativeLogsTruncated>,
    /// Wall time in milliseconds.
    pub duration_ms: f64,
    /// The caller's cancellation ended it.
    pub cancelled: bool,
}

/// The model-facing answer for a result given as its parts: `value_json` (the runner's JSON
/// text of the value), `error_code` and `error_text` of a failure, and `logs`, cut at
/// `max_chars`; the text `execbox mcp`'s `execute_code` gives for the same result.
#[napi]
pub fn model_answer(
    value_json: Option<String>,
    error_code: Option<String>,
    error_text: Option<String>,
    logs: Vec<String>,
    max_chars: u32,
) -> String {
    let parts = execbox_host::AnswerParts {
        value_json: value_json.as_deref(),
        error: error_code
            .as_deref()
            .map(|code| (code, error_text.as_deref().unwrap_or(""))),
        logs: &logs,
    };
    execbox_host::answer_of(parts, max_chars as usize).text
}

/// The JavaScript-bound form of `result`.
pub(crate) fn convert(result: ExecuteResult) -> NativeResult {
    let cancelled = result.was_cancelled();
    let (ok, value_json, error) = match result.outcome {
        Ok(value) => (true, value.map(|raw| raw.get().to_owned()), None),
        Err(body) => (
            false,
            None,
            Some(NativeError {
                text: body.text(),
                code: body.code.as_str().to_owned(),
                message: body.message,
                name: body.name,
                reason: body.reason,
                retry_after_ms: body.retry_after_ms.map(|ms| ms as f64),
                location: body.location.map(|l| NativeLocation {
                    line: l.line,
                    column: l.column,
                    source: l.source,
                    caret: l.caret,
                }),
            }),
        ),
    };
    NativeResult {
        ok,
        value_json,
        error,
        logs: result.logs,
        logs_truncated: result.logs_truncated.map(|t| NativeLogsTruncated {
            omitted_lines: t.omitted_lines as f64,
            cut_line: t.cut_line,
        }),
        duration_ms: result.duration_ms as f64,
        cancelled,
    }
}
