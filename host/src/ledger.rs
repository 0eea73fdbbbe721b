//! The replay ledger of a durable execution: its tool calls with their answers, in the order
//! the program made them, and the clock and random values it saw, so that it can be re-run
//! from the start in a fresh sandbox with every earlier call answered from the record.
//!
//! An execution is durable when its request carries a ledger
//! ([`ExecuteRequest::durable`](crate::ExecuteRequest::durable)). Then:
//! - calls are numbered in the order their `tool_call`s arrive; a call whose number the ledger
//!   answers is answered from it: the tool is not called, the guard is not asked;
//! - a call the ledger holds but does not answer (it was cut short, or it is the approved one)
//!   runs for real; the approved one without asking for approval again;
//! - a call whose tool or input differs from the recorded one at its number ends the
//!   execution: "replay diverged at call N: recorded ns.a({...}), now ns.b({...})";
//! - `Math.random()` is seeded from the ledger, and the clock readings it recorded are
//!   answered first (the runner's `replay`), so the program takes the same path;
//! - a call the guard pauses ([`GuardError::Pause`](crate::GuardError::Pause)) ends the run:
//!   the runner is cancelled, calls already running finish and are recorded, calls not yet
//!   started never start, and the result carries the paused call
//!   ([`ExecuteResult::paused`](crate::ExecuteResult::paused)) and the ledger to resume with.
//!
//! What the ledger cannot capture is named in docs/durable.md: a program whose path depends
//! on anything else (which of two concurrent calls finished first, `performance.now()`) may
//! diverge on replay, and is then stopped with the message above rather than run twice.

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::guard::ApprovalAsk;
use execbox_protocol::{ClockRun, ErrorBody, RawValue, Replay};

/// The record a durable execution is resumed from (stored as JSON).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ledger {
    /// The seed of the program's `Math.random()`: the same seed, the same values.
    pub random_seed: u64,
    /// The clock readings the program made (`Date.now()`, `new Date()`, `Date()`), run-length
    /// encoded as `[ms, count]`.
    #[serde(default)]
    pub clock: Vec<(f64, u32)>,
    /// The tool calls, by number (0-based) in the order the program made them.
    #[serde(default)]
    pub calls: Vec<LedgerCall>,
}

/// One tool call in a [`Ledger`].
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LedgerCall {
    /// `provider.tool`, as the program called it.
    pub tool: String,
    /// Its input, parsed.
    pub input: Value,
    /// Its answer, once it had one: the result, or the error the program saw. Absent for a
    /// call cut short, or the one waiting for approval: such a call runs again on replay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<Answer>,
}

/// What a recorded call answered.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Answer {
    /// The tool's result, as it went to the program.
    Result(Box<RawValue>),
    /// The error the program saw.
    Error(ErrorBody),
}

/// The call a durable execution paused at, waiting for approval.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct PausedCall {
    /// Its number in the ledger, 0-based (approvers see it from 1: [`PausedCall::number`]).
    pub index: u32,
    /// `provider.tool`, as the program called it.
    pub tool: String,
    /// Its input, validated against the tool's input schema.
    pub input: Value,
    /// The SHA-256 of its input over canonical JSON ([`input_sha256`](crate::json::input_sha256)), in lowercase hex.
    pub input_sha256: String,
    /// Who must decide it, and why (the rule that asked, when a policy rule did).
    pub asked: ApprovalAsk,
}

impl PausedCall {
    /// Call `index` (0-based) of `tool` (`provider.tool`) with `input`.
    pub fn new(index: u32, tool: impl Into<String>, input: Value) -> PausedCall {
        PausedCall {
            index,
            tool: tool.into(),
            input_sha256: crate::json::input_sha256(&input),
            input,
            asked: ApprovalAsk::default(),
        }
    }

    /// The same call, asked of the approvers `asked` names.
    pub fn asked(mut self, asked: ApprovalAsk) -> PausedCall {
        self.asked = asked;
        self
    }

    /// Its number as approvers see it: from 1.
    pub fn number(&self) -> u32 {
        self.index.saturating_add(1)
    }
}

/// The largest seed a JSON number carries exactly (2^53 - 1).
const MAX_SEED: u64 = (1 << 53) - 1;

impl Ledger {
    /// An empty ledger for a new durable execution, with a fresh random seed.
    pub fn new() -> Ledger {
        use std::hash::{BuildHasher, Hasher};
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0),
        );
        Ledger {
            random_seed: hasher.finish() & MAX_SEED,
            clock: Vec::new(),
            calls: Vec::new(),
        }
    }

    /// How many calls it answers from the record.
    pub fn answered(&self) -> usize {
        self.calls.iter().filter(|c| c.answer.is_some()).count()
    }

    /// What the runner is sent to replay the clock and `Math.random()`.
    pub(crate) fn replay(&self) -> Replay {
        Replay {
            random_seed: self.random_seed.min(MAX_SEED),
            clock: self
                .clock
                .iter()
                .map(|&(ms, count)| ClockRun { ms, count })
                .collect(),
        }
    }
}

/// What to do with a call of a durable execution.
#[derive(Debug)]
pub(crate) enum Step {
    /// Answer it from the ledger.
    Replayed(Answer),
    /// Run it; `approved` when it is the call an approver approved.
    Live { approved: bool },
    /// The program made another call than the recorded one: end the execution.
    Diverged(String),
}

/// The ledger of one running durable execution, shared by its call tasks.
#[derive(Debug)]
pub(crate) struct Recorder {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    random_seed: u64,
    clock: Vec<(f64, u32)>,
    calls: BTreeMap<u32, LedgerCall>,
    /// The call approved out of band, by number.
    approved: Option<u32>,
    /// Whether the approved call was reached in this run.
    reached_approved: bool,
    paused: Option<PausedCall>,
}

impl Recorder {
    pub(crate) fn new(ledger: &Ledger, approved: Option<u32>) -> Recorder {
        Recorder {
            state: Mutex::new(State {
                random_seed: ledger.random_seed,
                clock: ledger.clock.clone(),
                // A gap (a call refused before it was numbered) is live again on replay.
                calls: (0u32..)
                    .zip(ledger.calls.iter().cloned())
                    .filter(|(_, call)| !call.tool.is_empty())
                    .collect(),
                approved,
                reached_approved: false,
                paused: None,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Decides call `index` of `tool` with `input`: from the ledger, live, or diverged.
    pub(crate) fn before(&self, index: u32, tool: &str, input: &Value) -> Step {
        let mut state = self.state();
        let approved = state.approved == Some(index);
        match state.calls.get(&index) {
            Some(recorded) if recorded.tool != tool || recorded.input != *input => {
                Step::Diverged(format!(
                    "replay diverged at call {}: recorded {}({}), now {tool}({}); the program \
                     must make the same calls in the same order when it is resumed (its path \
                     may depend only on tool results, Date and Math.random)",
                    index + 1,
                    recorded.tool,
                    shown(&recorded.input),
                    shown(input),
                ))
            }
            Some(LedgerCall {
                answer: Some(answer),
                ..
            }) if !approved => Step::Replayed(answer.clone()),
            Some(_) => {
                if approved {
                    state.reached_approved = true;
                }
                Step::Live { approved }
            }
            None => {
                state.calls.insert(
                    index,
                    LedgerCall {
                        tool: tool.to_owned(),
                        input: input.clone(),
                        answer: None,
                    },
                );
                Step::Live { approved: false }
            }
        }
    }

    /// Records the answer of a live call.
    pub(crate) fn record(&self, index: u32, answer: Answer) {
        if let Some(call) = self.state().calls.get_mut(&index) {
            call.answer = Some(answer);
        }
    }

    /// Records the pause at call `index`; `false` when the execution has paused already (at
    /// another call, which stays the one an approver sees).
    pub(crate) fn pause(&self, index: u32, tool: &str, input: &Value, asked: ApprovalAsk) -> bool {
        let mut state = self.state();
        if state.paused.is_some() {
            return false;
        }
        state.paused = Some(PausedCall::new(index, tool, input.clone()).asked(asked));
        true
    }

    /// The approved call that this run never reached, as the error that ends it.
    pub(crate) fn unreached_approval(&self) -> Option<String> {
        let state = self.state();
        let index = state.approved?;
        if state.reached_approved {
            return None;
        }
        let tool = state.calls.get(&index).map_or("?", |c| c.tool.as_str());
        Some(format!(
            "replay diverged: the program ended before it made call {} ({tool}), the one that \
             was approved; the program must make the same calls in the same order when it is \
             resumed",
            index + 1
        ))
    }

    /// The ledger as the run left it, with the clock readings the runner reported (all of
    /// them: the replayed ones and the new ones), and the call it paused at.
    pub(crate) fn finish(&self, clock: Option<Vec<ClockRun>>) -> (Ledger, Option<PausedCall>) {
        let state = self.state();
        let clock = match clock {
            Some(runs) => runs.into_iter().map(|r| (r.ms, r.count)).collect(),
            None => state.clock.clone(),
        };
        // Numbers are dense: a gap (a call refused before it was recorded) is kept as an
        // unanswered call of no tool, which [`Recorder::new`] leaves out.
        let mut calls = Vec::with_capacity(state.calls.len());
        for (index, call) in &state.calls {
            while calls.len() < *index as usize {
                calls.push(LedgerCall {
                    tool: String::new(),
                    input: Value::Null,
                    answer: None,
                });
            }
            calls.push(call.clone());
        }
        let ledger = Ledger {
            random_seed: state.random_seed,
            clock,
            calls,
        };
        (ledger, state.paused.clone())
    }
}

/// A value as a divergence message shows it: compact JSON, at most 200 characters.
fn shown(value: &Value) -> String {
    const MAX: usize = 200;
    let text = serde_json::to_string(value).unwrap_or_default();
    if text.chars().count() <= MAX {
        return text;
    }
    let mut cut: String = text.chars().take(MAX).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn recorded() -> Ledger {
        Ledger {
            random_seed: 7,
            clock: vec![(1000.0, 2)],
            calls: vec![
                LedgerCall {
                    tool: "ledger.note".into(),
                    input: json!({"text": "a"}),
                    answer: Some(Answer::Result(RawValue::from_string("1".into()).unwrap())),
                },
                LedgerCall {
                    tool: "mail.send".into(),
                    input: json!({"to": "b"}),
                    answer: None,
                },
            ],
        }
    }

    #[test]
    fn recorded_calls_are_replayed_and_the_approved_one_runs() {
        let recorder = Recorder::new(&recorded(), Some(1));
        assert!(matches!(
            recorder.before(0, "ledger.note", &json!({"text": "a"})),
            Step::Replayed(Answer::Result(_))
        ));
        assert!(recorder.unreached_approval().is_some());
        assert!(matches!(
            recorder.before(1, "mail.send", &json!({"to": "b"})),
            Step::Live { approved: true }
        ));
        assert_eq!(recorder.unreached_approval(), None);
        assert!(matches!(
            recorder.before(2, "ledger.note", &json!({})),
            Step::Live { approved: false }
        ));
        recorder.record(
            1,
            Answer::Result(RawValue::from_string("2".into()).unwrap()),
        );
        let (ledger, paused) = recorder.finish(None);
        assert_eq!(paused, None);
        assert_eq!(ledger.calls.len(), 3);
        assert_eq!(ledger.answered(), 2);
        assert_eq!(ledger.clock, vec![(1000.0, 2)]);
    }

    #[test]
    fn another_call_at_a_recorded_number_diverges_and_says_which() {
        let recorder = Recorder::new(&recorded(), Some(1));
        let Step::Diverged(message) = recorder.before(0, "mail.send", &json!({"to": "x"})) else {
            panic!("expected a divergence");
        };
        assert!(
            message.starts_with(
                r#"replay diverged at call 1: recorded ledger.note({"text":"a"}), now mail.send({"to":"x"})"#
            ),
            "{message}"
        );
        assert!(matches!(
            recorder.before(0, "ledger.note", &json!({"text": "b"})),
            Step::Diverged(_)
        ));
    }

    #[test]
    fn the_first_pause_is_the_one_kept_and_the_ledger_round_trips_as_json() {
        let recorder = Recorder::new(&Ledger::new(), None);
        assert!(matches!(
            recorder.before(0, "mail.send", &json!({"to": "b"})),
            Step::Live { approved: false }
        ));
        assert!(recorder.pause(0, "mail.send", &json!({"to": "b"}), ApprovalAsk::default()));
        assert!(!recorder.pause(3, "mail.other", &json!({}), ApprovalAsk::default()));
        let (ledger, paused) = recorder.finish(Some(vec![ClockRun { ms: 5.0, count: 3 }]));
        assert_eq!(paused.unwrap().tool, "mail.send");
        assert_eq!(ledger.clock, vec![(5.0, 3)]);
        assert!(ledger.random_seed <= MAX_SEED);
        let json = serde_json::to_string(&recorded()).unwrap();
        let back: Ledger = serde_json::from_str(&json).unwrap();
        assert_eq!(serde_json::to_string(&back).unwrap(), json);
    }
}
