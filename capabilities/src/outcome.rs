//! How one run of an executor ended, before the manager records it.

use execbox_host::{Ledger, PausedCall};
use execbox_protocol::ErrorBody;
use serde_json::Value;

/// The end of one run, as an executor saw it.
#[derive(Debug)]
pub(crate) enum RunOutcome {
    /// It produced a result (`None`: no result).
    Completed {
        result: Option<Value>,
        additional_context: Option<Value>,
    },
    /// It failed; the message says why.
    Failed(String),
    /// A program (not a capability) ended with its own error (`timeout` included): the
    /// message says why, and `error` is what its model answer is rebuilt from.
    ProgramFailed { error: ErrorBody, message: String },
    /// It ran past its time limit and was ended.
    TimedOut(String),
    /// It was stopped on request.
    Stopped,
    /// It reached a call that needs an approval nobody could give: it waits for one, to be
    /// resumed from `ledger`.
    Paused {
        call: PausedCall,
        ledger: Box<Ledger>,
    },
    /// Resumed, it made other calls than its ledger recorded; the message says where.
    Diverged(String),
}

/// A result as an executor returned it: an object with `result` (and optionally
/// `additionalContext`) and nothing else is taken apart; anything else is the result.
pub(crate) fn split_result(value: Option<Value>) -> RunOutcome {
    let value = match value {
        Some(Value::Object(map))
            if map.contains_key("result")
                && map
                    .keys()
                    .all(|k| k == "result" || k == "additionalContext") =>
        {
            let mut map = map;
            return RunOutcome::Completed {
                result: map.remove("result").filter(|v| !v.is_null()),
                additional_context: map.remove("additionalContext").filter(|v| !v.is_null()),
            };
        }
        other => other,
    };
    RunOutcome::Completed {
        result: value,
        additional_context: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_result_envelope_is_taken_apart_and_anything_else_is_the_result() {
        match split_result(Some(json!({"result": 1, "additionalContext": {"a": 2}}))) {
            RunOutcome::Completed {
                result,
                additional_context,
            } => {
                assert_eq!(result, Some(json!(1)));
                assert_eq!(additional_context, Some(json!({"a": 2})));
            }
            other => panic!("{other:?}"),
        }
        match split_result(Some(json!({"result": 1, "other": 2}))) {
            RunOutcome::Completed {
                result,
                additional_context,
            } => {
                assert_eq!(result, Some(json!({"result": 1, "other": 2})));
                assert_eq!(additional_context, None);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            split_result(None),
            RunOutcome::Completed { result: None, .. }
        ));
    }
}
