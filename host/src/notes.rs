//! The host's notes at the end of an execution's logs, each a line starting `[execbox] `:
//! what the log limits left out, and the tool calls the program did not await.

use execbox_protocol::{LogsTruncated, RuntimeOptions};

/// How every host note starts, so a reader can tell it from the guest's own lines.
pub(crate) const PREFIX: &str = "[execbox] ";

/// The note saying what the runner's log limits took, if they took anything. `kept` is the
/// number of lines the runner kept.
pub(crate) fn logs_truncated(
    truncated: Option<LogsTruncated>,
    kept: usize,
    options: &RuntimeOptions,
) -> Option<String> {
    let LogsTruncated {
        omitted_lines,
        cut_line,
    } = truncated?;
    let more = |n: u64| format!("{n} more log line{} not shown", plural(n as usize));
    let chars = options.max_log_chars;
    if cut_line {
        let mut note =
            format!("{PREFIX}the last log line was cut at the {chars}-character log limit");
        if omitted_lines > 0 {
            note.push_str("; ");
            note.push_str(&more(omitted_lines));
        }
        return Some(note);
    }
    if omitted_lines == 0 {
        return None;
    }
    let lines = options.max_log_lines;
    Some(if kept as u64 >= lines {
        format!("{PREFIX}{} (limit {lines} lines)", more(omitted_lines))
    } else {
        format!(
            "{PREFIX}{} (the logs reached the {chars}-character limit)",
            more(omitted_lines)
        )
    })
}

/// The note for a program with statements whose result is `undefined`: most often one that
/// forgot its `return` (`const names = rows.map(r => r.name);`), whose caller would otherwise
/// get nothing and no hint why.
pub(crate) fn no_value<E>(
    code: &str,
    outcome: &Result<Option<Box<execbox_protocol::RawValue>>, E>,
) -> Option<String> {
    (matches!(outcome, Ok(None)) && !code.trim().is_empty()).then(|| {
        format!(
            "{PREFIX}the program returned no value: end it with `return` and the value to give \
             one (or with an expression, whose value is the result)"
        )
    })
}

/// What became of a tool call the program did not await.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fate {
    /// It ran to its end after the program returned; `Some(message)` if it failed.
    Finished(Option<String>),
    /// It was cancelled (or never started), for the reason given.
    Cancelled(CancelledBy),
}

/// Why an unawaited call was cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CancelledBy {
    /// [`Unawaited::Cancel`](crate::Unawaited::Cancel): when the program returned.
    Return,
    /// The execution's time limit passed while it ran.
    TimeLimit,
    /// The caller cancelled the execution while it ran.
    Caller,
    /// The execution ended in an error of the host while it ran.
    HostError,
}

/// How the program ended while the calls were still running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// It returned a value: the calls were not awaited.
    Returned,
    /// It threw (a `Promise.all` that failed first, say): the calls may have been awaited.
    Failed,
    /// Its time ran out, perhaps while it awaited them (the runner's message names them).
    TimedOut,
}

impl Ending {
    /// The ending as `done` tells it.
    pub(crate) fn of(
        outcome: &Result<Option<Box<execbox_protocol::RawValue>>, execbox_protocol::ErrorBody>,
    ) -> Ending {
        match outcome {
            Ok(_) => Ending::Returned,
            Err(e) if e.code == execbox_protocol::ErrorCode::Timeout => Ending::TimedOut,
            Err(_) => Ending::Failed,
        }
    }
}

/// The note naming the calls still running when the program ended, `name` as the program
/// called them (`store.put`), in the order the program made them; `None` when there were none.
/// After a return they were not awaited, and the note says to await them.
pub(crate) fn unawaited(calls: &[(String, Fate)], ending: Ending) -> Option<String> {
    if calls.is_empty() {
        return None;
    }
    let all: Vec<&str> = calls.iter().map(|(name, _)| name.as_str()).collect();
    // The fates in order of first appearance, each with its calls.
    let mut groups: Vec<(Kind, Vec<&str>, Vec<&str>)> = Vec::new();
    for (name, fate) in calls {
        let kind = Kind::of(fate);
        let index = match groups.iter().position(|(k, _, _)| *k == kind) {
            Some(index) => index,
            None => {
                groups.push((kind, Vec::new(), Vec::new()));
                groups.len() - 1
            }
        };
        groups[index].1.push(name);
        if let Fate::Finished(Some(error)) = fate {
            groups[index].2.push(error);
        }
    }
    let n = calls.len();
    let was = if n == 1 { "was" } else { "were" };
    let what = match ending {
        Ending::Returned => format!("{was} not awaited"),
        Ending::Failed => format!("{was} still running when the program failed"),
        Ending::TimedOut => format!("{was} still running when the time ran out"),
    };
    let mut note = format!("{PREFIX}{n} tool call{} {what}: {}", plural(n), tally(&all));
    let uniform = groups.len() == 1;
    for (kind, names, errors) in &groups {
        let subject = match (uniform, names.len()) {
            (true, 1) => "it".to_owned(),
            (true, _) => "they".to_owned(),
            (false, _) => tally(names),
        };
        note.push_str("; ");
        note.push_str(&subject);
        note.push(' ');
        note.push_str(&kind.phrase(names.len(), ending));
        if let Some(first) = errors.first() {
            note.push_str(&format!(" ({} failed: {})", errors.len(), shorten(first)));
        }
    }
    if ending == Ending::Returned {
        note.push_str(if n == 1 {
            " — await it"
        } else {
            " — await them"
        });
    }
    Some(note)
}

/// A fate without its error, for grouping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Finished,
    Cancelled(CancelledBy),
}

impl Kind {
    fn of(fate: &Fate) -> Kind {
        match fate {
            Fate::Finished(_) => Kind::Finished,
            Fate::Cancelled(by) => Kind::Cancelled(*by),
        }
    }

    fn phrase(self, n: usize, ending: Ending) -> String {
        let was = if n == 1 { "was" } else { "were" };
        let ended = match ending {
            Ending::Returned => "returned",
            Ending::Failed => "failed",
            Ending::TimedOut => "timed out",
        };
        match self {
            Kind::Finished => format!("finished after the program {ended}"),
            Kind::Cancelled(CancelledBy::Return) => {
                format!("{was} cancelled when the program {ended}")
            }
            Kind::Cancelled(CancelledBy::TimeLimit) => format!("{was} cancelled at the time limit"),
            Kind::Cancelled(CancelledBy::Caller) => {
                format!("{was} cancelled when the execution was cancelled")
            }
            Kind::Cancelled(CancelledBy::HostError) => {
                format!("{was} cancelled when the execution failed")
            }
        }
    }
}

/// `store.put ×2, kv.get`: names in order of first appearance, with their counts.
fn tally(names: &[&str]) -> String {
    let mut counted: Vec<(&str, usize)> = Vec::new();
    for name in names {
        match counted.iter_mut().find(|(n, _)| n == name) {
            Some((_, count)) => *count += 1,
            None => counted.push((name, 1)),
        }
    }
    counted
        .iter()
        .map(|(name, count)| match count {
            1 => (*name).to_owned(),
            _ => format!("{name} ×{count}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// An error message cut to a length a log line can carry.
fn shorten(message: &str) -> String {
    const MAX: usize = 200;
    let first_line = message.lines().next().unwrap_or("");
    if first_line.chars().count() <= MAX && first_line.len() == message.len() {
        return first_line.to_owned();
    }
    let mut cut: String = first_line.chars().take(MAX).collect();
    cut.push('…');
    cut
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(lines: u64, chars: u64) -> RuntimeOptions {
        RuntimeOptions {
            max_log_lines: lines,
            max_log_chars: chars,
            ..RuntimeOptions::default()
        }
    }

    fn truncated(omitted_lines: u64, cut_line: bool) -> Option<LogsTruncated> {
        Some(LogsTruncated {
            omitted_lines,
            cut_line,
        })
    }

    #[test]
    fn a_program_with_statements_and_no_value_gets_a_note_an_empty_one_does_not() {
        let none: Result<Option<Box<execbox_protocol::RawValue>>, ()> = Ok(None);
        let note = no_value("const names = rows.map(r => r.name);", &none).unwrap();
        assert!(note.starts_with("[execbox] the program returned no value: end it with `return`"));
        assert_eq!(no_value(" \n ", &none), None);
        let one = Ok(Some(
            execbox_protocol::RawValue::from_string("1".into()).unwrap(),
        ));
        assert_eq!(no_value::<()>("return 1", &one), None);
        assert_eq!(no_value("throw 1", &Err(())), None);
    }

    #[test]
    fn lines_left_out_by_the_line_limit_are_counted_with_the_limit() {
        assert_eq!(
            logs_truncated(truncated(400, false), 100, &options(100, 64_000)).as_deref(),
            Some("[execbox] 400 more log lines not shown (limit 100 lines)")
        );
        assert_eq!(
            logs_truncated(truncated(1, false), 100, &options(100, 64_000)).as_deref(),
            Some("[execbox] 1 more log line not shown (limit 100 lines)")
        );
    }

    #[test]
    fn a_cut_line_names_the_character_limit() {
        assert_eq!(
            logs_truncated(truncated(3, true), 5, &options(100, 64_000)).as_deref(),
            Some("[execbox] the last log line was cut at the 64000-character log limit; 3 more log lines not shown")
        );
        assert_eq!(
            logs_truncated(truncated(0, true), 5, &options(100, 64_000)).as_deref(),
            Some("[execbox] the last log line was cut at the 64000-character log limit")
        );
        assert_eq!(
            logs_truncated(truncated(2, false), 5, &options(100, 64_000)).as_deref(),
            Some(
                "[execbox] 2 more log lines not shown (the logs reached the 64000-character limit)"
            )
        );
    }

    #[test]
    fn nothing_truncated_adds_no_note() {
        assert_eq!(logs_truncated(None, 3, &options(100, 64_000)), None);
        assert_eq!(
            logs_truncated(truncated(0, false), 3, &options(100, 64_000)),
            None
        );
    }

    fn call(name: &str, fate: Fate) -> (String, Fate) {
        (name.to_owned(), fate)
    }

    #[test]
    fn unawaited_calls_are_named_and_counted_with_their_fate() {
        let finished = Fate::Finished(None);
        assert_eq!(
            unawaited(&[call("store.put", finished.clone()), call("store.put", finished.clone())], Ending::Returned).as_deref(),
            Some("[execbox] 2 tool calls were not awaited: store.put ×2; they finished after the program returned — await them")
        );
        assert_eq!(
            unawaited(&[call("store.put", Fate::Cancelled(CancelledBy::Return))], Ending::Returned).as_deref(),
            Some("[execbox] 1 tool call was not awaited: store.put; it was cancelled when the program returned — await it")
        );
        assert_eq!(
            unawaited(&[
                call("store.put", finished.clone()),
                call("kv.get", Fate::Cancelled(CancelledBy::TimeLimit)),
                call("store.put", Fate::Finished(Some("disk full".into()))),
            ], Ending::Returned)
            .as_deref(),
            Some("[execbox] 3 tool calls were not awaited: store.put ×2, kv.get; store.put ×2 finished after the program returned (1 failed: disk full); kv.get was cancelled at the time limit — await them")
        );
        assert_eq!(unawaited(&[], Ending::Returned), None);
    }

    #[test]
    fn calls_running_when_the_program_failed_or_timed_out_are_not_called_unawaited() {
        assert_eq!(
            unawaited(&[call("alpha.slow", Fate::Cancelled(CancelledBy::TimeLimit))], Ending::TimedOut).as_deref(),
            Some("[execbox] 1 tool call was still running when the time ran out: alpha.slow; it was cancelled at the time limit")
        );
        assert_eq!(
            unawaited(&[call("store.put", Fate::Finished(None)), call("store.put", Fate::Finished(None))], Ending::Failed).as_deref(),
            Some("[execbox] 2 tool calls were still running when the program failed: store.put ×2; they finished after the program failed")
        );
    }
}
