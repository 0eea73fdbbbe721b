//! The message of an execution that ran past its `timeoutMs`: what it was doing when time ran out.
//!
//! The code stays `timeout` and the message starts with the protocol's
//! [`TIMEOUT_MESSAGE`], so whoever tests either keeps working; the rest says how to fix it:
//!
//! ```text
//! Execution timed out after 1000 ms while running JavaScript at line 3
//! Execution timed out after 1000 ms while waiting for: store.get (pending 0.9 s), store.put ×2 (pending 0.9 s)
//! Execution timed out after 1000 ms while waiting for a promise nothing will settle (no tool call was in flight)
//! ```
//!
//! A cancel is not a timeout of the program's making: it keeps the bare `Execution timed out`,
//! as the specification's cancellation transcript has it.

use std::time::Instant;

use execbox_protocol::{ErrorBody, ErrorCode, ErrorLocation, TIMEOUT_MESSAGE};

/// What the execution was doing when its deadline passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Busy {
    /// Running JavaScript (a loop, a long computation).
    Running,
    /// Suspended, waiting for a tool result or a promise.
    Waiting,
}

/// A tool call sent and not yet answered.
#[derive(Debug, Clone)]
pub(crate) struct InFlight {
    /// `provider.tool`, as the guest called it.
    tool: String,
    sent: Instant,
}

impl InFlight {
    /// A call of `tool` (`provider.tool`) sent now.
    pub(crate) fn new(tool: String) -> InFlight {
        InFlight {
            tool,
            sent: Instant::now(),
        }
    }
}

/// Whether a line of the program has a loop keyword (`for`, `while`, `do`), which the
/// location of an interrupted program must have to be shown. QuickJS records where an
/// interrupt hit only at its last checkpoint: on a loop's condition that is the loop's line,
/// but after a jump back to the top of a loop without one (`while (true)`) it is whatever
/// came before the loop, which would send the reader to the wrong line.
pub(crate) fn names_a_loop(line: &str) -> bool {
    line.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$'))
        .any(|word| matches!(word, "for" | "while" | "do"))
}

/// The `timeout` error of an execution whose `timeout_ms` passed while it was `busy`; `location`
/// is where the guest's JavaScript was, when known, and `pending` the tool calls in flight.
pub(crate) fn timed_out(
    timeout_ms: u64,
    busy: Busy,
    location: Option<ErrorLocation>,
    pending: &[InFlight],
) -> ErrorBody {
    let head = format!("{TIMEOUT_MESSAGE} after {timeout_ms} ms");
    match busy {
        Busy::Running => match location {
            Some(location) => ErrorBody::new(
                ErrorCode::Timeout,
                format!("{head} while running JavaScript at line {}", location.line),
            )
            .with_location(location),
            None => ErrorBody::new(
                ErrorCode::Timeout,
                format!("{head} while running JavaScript"),
            ),
        },
        Busy::Waiting if pending.is_empty() => ErrorBody::new(
            ErrorCode::Timeout,
            format!(
                "{head} while waiting for a promise nothing will settle (no tool call was in \
                 flight)"
            ),
        ),
        Busy::Waiting => ErrorBody::new(
            ErrorCode::Timeout,
            format!("{head} while waiting for: {}", waiting_for(pending)),
        ),
    }
}

/// The calls in flight, one entry per tool in the order they were first sent, with how many
/// and how long the oldest has waited: `store.get (pending 0.9 s), store.put ×2 (pending 0.9 s)`.
fn waiting_for(pending: &[InFlight]) -> String {
    let mut calls: Vec<&InFlight> = pending.iter().collect();
    calls.sort_by_key(|c| c.sent);
    // (tool, count, the oldest call's send time)
    let mut tools: Vec<(&str, usize, Instant)> = Vec::new();
    for call in calls {
        match tools.iter_mut().find(|(tool, _, _)| *tool == call.tool) {
            Some(entry) => entry.1 += 1,
            None => tools.push((&call.tool, 1, call.sent)),
        }
    }
    /// Listed by name; the rest are counted.
    const LISTED: usize = 10;
    let mut parts: Vec<String> = tools
        .iter()
        .take(LISTED)
        .map(|(tool, count, sent)| {
            let times = if *count > 1 {
                format!(" ×{count}")
            } else {
                String::new()
            };
            let seconds = sent.elapsed().as_secs_f64();
            format!("{tool}{times} (pending {seconds:.1} s)")
        })
        .collect();
    if tools.len() > LISTED {
        parts.push(format!("and {} more tools", tools.len() - LISTED));
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(tool: &str) -> InFlight {
        InFlight::new(tool.into())
    }

    #[test]
    fn running_names_the_line() {
        let location = ErrorLocation {
            line: 3,
            column: 1,
            source: Some("while (true) {}".into()),
            caret: Some(1),
        };
        let error = timed_out(1000, Busy::Running, Some(location.clone()), &[]);
        assert_eq!(error.code, ErrorCode::Timeout);
        assert_eq!(
            error.message,
            "Execution timed out after 1000 ms while running JavaScript at line 3"
        );
        assert_eq!(error.location, Some(Box::new(location)));
        let bare = timed_out(200, Busy::Running, None, &[call("t.x")]);
        assert_eq!(
            bare.message,
            "Execution timed out after 200 ms while running JavaScript"
        );
    }

    #[test]
    fn only_a_line_with_a_loop_is_named() {
        assert!(names_a_loop("for (let i = 0; i >= 0; i++) {"));
        assert!(names_a_loop("} while (x)"));
        assert!(!names_a_loop("let i = 0;"));
        assert!(!names_a_loop("const format = whilst(forEach);"));
    }

    #[test]
    fn waiting_names_the_calls_in_flight_grouped_by_tool() {
        let pending = [call("store.get"), call("store.put"), call("store.put")];
        let error = timed_out(1000, Busy::Waiting, None, &pending);
        assert_eq!(
            error.message,
            "Execution timed out after 1000 ms while waiting for: store.get (pending 0.0 s), \
             store.put ×2 (pending 0.0 s)"
        );
        let nothing = timed_out(1000, Busy::Waiting, None, &[]);
        assert_eq!(
            nothing.message,
            "Execution timed out after 1000 ms while waiting for a promise nothing will settle \
             (no tool call was in flight)"
        );
        assert!(nothing.message.starts_with(TIMEOUT_MESSAGE));
    }

    #[test]
    fn many_tools_are_counted_past_ten() {
        let pending: Vec<InFlight> = (0..12).map(|i| call(&format!("t.f{i}"))).collect();
        let text = waiting_for(&pending);
        assert!(text.ends_with(", and 2 more tools"), "{text}");
    }
}
