//! The model-facing answer for an execution's result, written once: `execbox mcp`'s
//! `execute_code`, the Python SDK's `Result.for_model` and the Node SDK's `result.forModel`
//! all give this text for the same result.
//!
//! The text is the JSON of `{ok, result | error, logs}` (`error` as `{code, message}`, the
//! message being [`ErrorBody::text`]: name, message, line and caret). Over the limit, long
//! log lines are cut first (the answer stays whole JSON, with the host's notes); when that is
//! not enough, the text itself is cut with a marker, and the host's notes follow it.

use serde_json::{json, Map, Value};

use execbox_protocol::ErrorBody;

use crate::ExecuteResult;

/// The limit on an answer's characters unless a caller sets another.
pub const MAX_ANSWER_CHARS: usize = 24_000;

/// Where the host's own lines in `logs` start (the un-awaited calls, what the log limits took).
const HOST_NOTE: &str = "[execbox] ";

/// Shortest a log line is cut to before the answer as a whole is cut instead.
const MIN_LOG_LINE_CHARS: usize = 200;

/// What a model reads of one execution's result.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelAnswer {
    /// The text to hand to the model.
    pub text: String,
    /// The same answer as JSON: `{ok, result?, error?, logs}`, or, when the text was cut,
    /// `{ok, error?, truncated: {chars, limit}, notes?}`.
    pub structured: Value,
    /// The program returned (so the answer is not an error).
    pub ok: bool,
}

/// The parts of a result an answer is made of, as each SDK keeps them.
#[derive(Debug, Clone, Copy)]
pub struct AnswerParts<'a> {
    /// The program's value as the runner's JSON text; `None` for `undefined` or a failure.
    pub value_json: Option<&'a str>,
    /// Why the program failed: its code (`"runtime_error"`) and [`ErrorBody::text`].
    pub error: Option<(&'a str, &'a str)>,
    /// The console lines, then the host's notes.
    pub logs: &'a [String],
}

/// The answer for `result`, at most `max_chars` characters before the cut marker.
pub fn model_answer(result: &ExecuteResult, max_chars: usize) -> ModelAnswer {
    let text = result.error().map(ErrorBody::text);
    let parts = AnswerParts {
        value_json: result
            .outcome
            .as_ref()
            .ok()
            .and_then(|v| v.as_deref())
            .map(|v| v.get()),
        error: result
            .error()
            .zip(text.as_deref())
            .map(|(e, text)| (e.code.as_str(), text)),
        logs: &result.logs,
    };
    answer_of(parts, max_chars)
}

/// The answer for a result given as its parts (what the SDKs keep of it).
pub fn answer_of(parts: AnswerParts<'_>, max_chars: usize) -> ModelAnswer {
    let ok = parts.error.is_none();
    let mut shown_logs = parts.logs.to_vec();
    let mut text = answer_text(&parts, &shown_logs);
    let mut cap = max_chars / 2;
    while text.chars().count() > max_chars && cap >= MIN_LOG_LINE_CHARS {
        shown_logs = shortened_logs(parts.logs, cap);
        text = answer_text(&parts, &shown_logs);
        cap /= 2;
    }
    let chars = text.chars().count();
    let mut structured = Map::new();
    structured.insert("ok".into(), ok.into());
    if chars <= max_chars {
        if let Some(value) = parts
            .value_json
            .and_then(|raw| crate::json::parse_json(raw).ok())
        {
            structured.insert("result".into(), value);
        }
        if let Some((code, message)) = parts.error {
            structured.insert("error".into(), json!({"code": code, "message": message}));
        }
        structured.insert("logs".into(), json!(shown_logs));
        return ModelAnswer {
            text,
            structured: Value::Object(structured),
            ok,
        };
    }
    let mut cut: String = text.chars().take(max_chars).collect();
    cut.push_str(&format!(
        "\n… [cut: the answer has {chars} characters, the limit is {max_chars}; return less, \
         e.g. only the fields you need]"
    ));
    let notes: Vec<&String> = parts
        .logs
        .iter()
        .filter(|l| l.starts_with(HOST_NOTE))
        .collect();
    for note in &notes {
        cut.push('\n');
        cut.push_str(note);
    }
    if let Some((code, message)) = parts.error {
        let message = one_line(message, max_chars / 2);
        structured.insert("error".into(), json!({"code": code, "message": message}));
    }
    structured.insert(
        "truncated".into(),
        json!({"chars": chars, "limit": max_chars}),
    );
    if !notes.is_empty() {
        structured.insert("notes".into(), json!(notes));
    }
    ModelAnswer {
        text: cut,
        structured: Value::Object(structured),
        ok,
    }
}

/// The JSON of `{ok, result | error, logs}` with `logs` as shown.
fn answer_text(parts: &AnswerParts<'_>, logs: &[String]) -> String {
    let logs_text = json!(logs).to_string();
    match (parts.error, parts.value_json) {
        (Some((code, message)), _) => {
            let error = json!({"code": code, "message": message});
            format!("{{\"ok\":false,\"error\":{error},\"logs\":{logs_text}}}")
        }
        (None, Some(raw)) => format!("{{\"ok\":true,\"result\":{raw},\"logs\":{logs_text}}}"),
        (None, None) => format!("{{\"ok\":true,\"logs\":{logs_text}}}"),
    }
}

/// `logs` with every guest line longer than `cap` characters cut to its start and a note of
/// its length; the host's notes are kept whole.
fn shortened_logs(logs: &[String], cap: usize) -> Vec<String> {
    logs.iter()
        .map(|line| {
            let chars = line.chars().count();
            if chars <= cap || line.starts_with(HOST_NOTE) {
                return line.clone();
            }
            let head: String = line.chars().take(cap).collect();
            format!("{head}… [execbox] line cut: {chars} characters, the first {cap} shown")
        })
        .collect()
}

/// `text` on one line (line breaks as spaces), cut to `max` characters with `…`.
pub fn one_line(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    match flat.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &flat[..cut]),
        None => flat,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use execbox_protocol::{ErrorCode, ErrorLocation};

    fn ok(raw: &str, logs: &[&str]) -> ExecuteResult {
        ExecuteResult {
            id: "x".into(),
            outcome: Ok(Some(
                serde_json::value::RawValue::from_string(raw.into()).unwrap(),
            )),
            logs: logs.iter().map(|s| s.to_string()).collect(),
            logs_truncated: None,
            duration_ms: 1,
            cancelled: false,
            ledger: None,
            paused: None,
        }
    }

    #[test]
    fn an_answer_is_the_json_of_ok_result_and_logs() {
        let answer = model_answer(&ok("{\"a\":1}", &["hi"]), 1000);
        assert_eq!(
            answer.text,
            "{\"ok\":true,\"result\":{\"a\":1},\"logs\":[\"hi\"]}"
        );
        assert_eq!(
            answer.structured,
            json!({"ok": true, "result": {"a": 1}, "logs": ["hi"]})
        );
        assert!(answer.ok);
    }

    #[test]
    fn a_failure_is_an_error_answer_with_the_errors_whole_text() {
        let failed = ExecuteResult::failed(ErrorCode::RuntimeError, "boom");
        let answer = model_answer(&failed, 1000);
        assert_eq!(
            answer.text,
            "{\"ok\":false,\"error\":{\"code\":\"runtime_error\",\"message\":\"boom\"},\"logs\":[]}"
        );
        assert!(!answer.ok);
        let mut located = ExecuteResult::failed(ErrorCode::RuntimeError, "x is not defined");
        if let Err(e) = &mut located.outcome {
            *e = e
                .clone()
                .with_name("ReferenceError")
                .with_location(ErrorLocation {
                    line: 1,
                    column: 8,
                    source: Some("return x".into()),
                    caret: Some(8),
                });
        }
        let answer = model_answer(&located, 1000);
        let value: Value = serde_json::from_str(&answer.text).unwrap();
        assert_eq!(
            value["error"]["message"],
            "ReferenceError: x is not defined (line 1, column 8)\n  1 | return x\n    |        ^"
        );
    }

    #[test]
    fn a_long_answer_is_cut_with_a_marker() {
        let long = format!("\"{}\"", "x".repeat(100));
        let answer = model_answer(&ok(&long, &[]), 50);
        assert!(
            answer.text.starts_with("{\"ok\":true,\"result\":\"xxx"),
            "{}",
            answer.text
        );
        assert!(
            answer.text.ends_with("[cut: the answer has 133 characters, the limit is 50; return less, e.g. only the fields you need]"),
            "{}", answer.text
        );
        assert_eq!(
            answer.structured,
            json!({"ok": true, "truncated": {"chars": 133, "limit": 50}})
        );
    }

    #[test]
    fn long_log_lines_are_cut_first_and_the_host_notes_survive() {
        let huge = "y".repeat(5000);
        let note =
            "[execbox] 3 more log lines not shown (the logs reached the 64000-character limit)";
        let answer = model_answer(&ok("1", &[&huge, "short", note]), 1000);
        let value: Value = serde_json::from_str(&answer.text).expect("still whole JSON");
        let logs = value["logs"].as_array().unwrap();
        assert!(
            logs[0]
                .as_str()
                .unwrap()
                .ends_with("… [execbox] line cut: 5000 characters, the first 500 shown"),
            "{logs:?}"
        );
        assert_eq!(logs[1], "short");
        assert_eq!(logs[2], note);
        assert_eq!(value["result"], 1);
    }

    #[test]
    fn a_cut_answer_still_ends_with_the_host_notes() {
        let long = format!("\"{}\"", "x".repeat(5000));
        let note = "[execbox] 1 tool call was not awaited: store.put; it finished after the program returned — await it";
        let answer = model_answer(&ok(&long, &[note]), 300);
        assert!(
            answer
                .text
                .ends_with(&format!("only the fields you need]\n{note}")),
            "{}",
            answer.text
        );
        assert_eq!(answer.structured["notes"], json!([note]));
    }

    #[test]
    fn parts_give_the_same_answer_as_the_result() {
        let result = ok("[1,2,3]", &["a", "[execbox] note"]);
        let parts = AnswerParts {
            value_json: Some("[1,2,3]"),
            error: None,
            logs: &result.logs,
        };
        for max in [10, 40, 1000] {
            assert_eq!(answer_of(parts, max), model_answer(&result, max));
        }
    }

    #[test]
    fn one_line_cuts_on_characters() {
        assert_eq!(one_line("a\nb", 10), "a b");
        assert_eq!(one_line("ééééé", 3), "ééé…");
    }
}
