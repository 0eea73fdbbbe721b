//! What an approver is shown of a paused execution besides its pending call: the program's
//! source, and the calls that already ran with their answers, read from the replay ledger
//! the store keeps while the execution waits. Every text is escaped for display
//! (`execbox_policy::escape_for_display`), and a long one is shown by both ends.

use execbox_host::{Answer, Ledger};
use execbox_policy::{escape_for_display, shown_input};
use serde::Serialize;
use serde_json::Value;

use crate::manager::CapabilityManager;
use crate::programs::PROGRAM_TYPE;
use crate::records::{CapabilityError, ExecutionRecord};

/// The most characters of a call's input or answer shown (both ends past it).
pub(crate) const SHOWN_VALUE_CHARS: usize = 2000;

/// The most calls that already ran shown of one execution: the last ones, the number of
/// the earlier ones besides.
pub(crate) const MAX_SHOWN_CALLS: usize = 20;

/// The most characters of a program's source shown (both ends past it).
pub(crate) const SHOWN_SOURCE_CHARS: usize = 20_000;

/// The program of a paused execution, as shown.
#[derive(Serialize, PartialEq, Debug, Clone)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Source {
    /// Where it comes from: `program` (the code it was started with), `entry` (a script
    /// capability's entry file, as a resume will run it), `none` (an external executor's).
    pub from: &'static str,
    /// The source, escaped; empty for `none`.
    pub code: String,
    /// The params it was started with, as JSON, escaped; `None` for a program.
    pub params: Option<String>,
}

/// A call that ran before the pending one, as shown.
#[derive(Serialize, PartialEq, Debug, Clone)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RanCall {
    /// Its number, from 1.
    pub call: u32,
    /// `provider.tool`, escaped.
    pub tool: String,
    /// Its input as pretty JSON, escaped.
    pub input: String,
    /// Its result as pretty JSON, or its error's text, escaped; `None`: cut short.
    pub answer: Option<String>,
    /// Whether the answer is an error.
    pub failed: bool,
}

/// `text` escaped for display; past `max` characters its two halves with how much is left
/// out between them. The cut falls between characters of `text`, never inside an escape.
pub(crate) fn both_ends(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return escape_for_display(text);
    }
    let half = max / 2;
    let head: String = text.chars().take(half).collect();
    let tail: String = text.chars().skip(count - half).collect();
    format!(
        "{}\n… {} characters left out …\n{}",
        escape_for_display(&head),
        count - 2 * half,
        escape_for_display(&tail)
    )
}

/// The source of `record`'s program.
pub(crate) async fn source(manager: &CapabilityManager, record: &ExecutionRecord) -> Source {
    let params = || Some(shown_input(&record.params, SHOWN_VALUE_CHARS));
    if record.capability_type == PROGRAM_TYPE {
        let code = record
            .params
            .get("code")
            .and_then(Value::as_str)
            .unwrap_or_default();
        return Source {
            from: "program",
            code: both_ends(code, SHOWN_SOURCE_CHARS),
            params: None,
        };
    }
    let registry = manager.registry();
    let entry = registry
        .resolve(&record.capability, Some(&record.capability_type))
        .ok()
        .and_then(|(capability, _)| capability.config.entry.clone());
    match entry {
        Some(path) => {
            let code = match tokio::fs::read_to_string(&path).await {
                Ok(text) => both_ends(&text, SHOWN_SOURCE_CHARS),
                Err(e) => escape_for_display(&format!(
                    "(the entry {} cannot be read: {e})",
                    path.display()
                )),
            };
            Source {
                from: "entry",
                code,
                params: params(),
            }
        }
        None => Source {
            from: "none",
            code: String::new(),
            params: params(),
        },
    }
}

/// The calls execution `id` made before call `pending` (numbered from 1), with their answers,
/// from its ledger, as [`shown_calls`]; none when the store keeps no ledger (it is no longer
/// paused).
pub(crate) async fn ran_calls(
    manager: &CapabilityManager,
    id: &str,
    pending: u32,
) -> Result<(Vec<RanCall>, u32), CapabilityError> {
    let Some(text) = manager.store().ledger(id).await? else {
        return Ok((Vec::new(), 0));
    };
    let Ok(ledger) = serde_json::from_str::<Ledger>(&text) else {
        return Ok((Vec::new(), 0));
    };
    Ok(shown_calls(&ledger, pending))
}

/// The last [`MAX_SHOWN_CALLS`] calls of `ledger` before call `pending` (from 1), as shown,
/// and how many ran before them (not shown).
pub(crate) fn shown_calls(ledger: &Ledger, pending: u32) -> (Vec<RanCall>, u32) {
    let before = (pending.saturating_sub(1) as usize).min(ledger.calls.len());
    let skipped = before.saturating_sub(MAX_SHOWN_CALLS);
    let shown = ledger.calls[..before]
        .iter()
        .enumerate()
        .skip(skipped)
        .map(|(i, call)| {
            let (answer, failed) = match &call.answer {
                None => (None, false),
                Some(Answer::Result(raw)) => {
                    let value = serde_json::from_str::<Value>(raw.get()).unwrap_or(Value::Null);
                    (Some(shown_input(&value, SHOWN_VALUE_CHARS)), false)
                }
                Some(Answer::Error(error)) => {
                    (Some(both_ends(&error.text(), SHOWN_VALUE_CHARS)), true)
                }
            };
            RanCall {
                call: i as u32 + 1,
                tool: escape_for_display(&call.tool),
                input: shown_input(&call.input, SHOWN_VALUE_CHARS),
                answer,
                failed,
            }
        })
        .collect();
    (shown, skipped as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_text_shows_both_ends_and_escapes() {
        let text = format!("start\u{202e}{}end", "x".repeat(100));
        let shown = both_ends(&text, 20);
        assert!(shown.starts_with("start\\u{202e}"), "{shown}");
        assert!(shown.ends_with("xxxend"), "{shown}");
        assert!(shown.contains("characters left out"), "{shown}");
        assert_eq!(both_ends("<b>", 20), "<b>");
    }

    #[test]
    fn the_calls_before_the_pending_one_with_their_answers() {
        let ledger: Ledger = serde_json::from_value(serde_json::json!({
            "randomSeed": 1,
            "calls": [
                {"tool": "notes.add", "input": {"text": "a"}, "answer": {"result": {"ok": true}}},
                {"tool": "notes.add", "input": {"text": "b"}, "answer": {"error": {"code": "tool_error", "message": "no"}}},
                {"tool": "mail.send", "input": {"to": "x"}},
            ]
        }))
        .unwrap();
        let (shown, earlier) = shown_calls(&ledger, 3);
        assert_eq!(earlier, 0);
        assert_eq!(shown.len(), 2);
        assert_eq!(shown[0].tool, "notes.add");
        assert!(shown[0].answer.as_deref().unwrap().contains("\"ok\": true"));
        assert!(!shown[0].failed && shown[1].failed);
        assert!(shown[1].answer.as_deref().unwrap().contains("no"));
    }

    #[test]
    fn only_the_last_calls_that_ran_are_shown_with_the_number_of_the_earlier() {
        let calls: Vec<_> = (1..=30)
            .map(|i| serde_json::json!({"tool": "notes.add", "input": {"n": i}, "answer": {"result": i}}))
            .collect();
        let ledger: Ledger =
            serde_json::from_value(serde_json::json!({"randomSeed": 1, "calls": calls})).unwrap();
        // Paused at call 26: 25 ran, the last 20 (6 to 25) are shown.
        let (shown, earlier) = shown_calls(&ledger, 26);
        assert_eq!(shown.len(), MAX_SHOWN_CALLS);
        assert_eq!(earlier, 5);
        assert_eq!(shown[0].call, 6);
        assert_eq!(shown[19].call, 25);
        assert!(shown[19].input.contains("25"), "{}", shown[19].input);
        // A pending number past the ledger shows what the ledger has.
        let (shown, earlier) = shown_calls(&ledger, 100);
        assert_eq!((shown.len(), earlier), (20, 10));
        assert_eq!(shown_calls(&ledger, 1).0.len(), 0);
    }
}
