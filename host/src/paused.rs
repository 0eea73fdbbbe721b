//! A durable execution paused at a call that waits for approval ([`PausedProgram`]), and the
//! one way to decide it ([`PausedProgram::decide`]), which every front end uses: the policy's
//! refusal, `execbox mcp`'s retries and the capabilities' `approve`/`deny`.
//!
//! A decision names the call it decides ([`CallRef`]: its number, and optionally the SHA-256
//! of its input over canonical JSON), never just "the execution": a program that paused at a
//! harmless call, was approved, and paused again at a harmful one is not released by a second
//! approval meant for the first. A decision naming any other call is refused and changes
//! nothing ([`Mismatch`]).

use serde::{Deserialize, Serialize};

use crate::ledger::{Answer, Ledger, PausedCall};
use crate::tool::ToolError;

/// The `reason` of a call an approver denied, on the wire and in the guest.
pub const APPROVAL_DENIED: &str = "approval_denied";

impl PausedCall {
    /// Whether `named` is this call: the same number and, when it gives one, the same input
    /// digest. `Err` says which differs, for the approver.
    pub fn check(&self, named: &CallRef) -> Result<(), Mismatch> {
        check_named(self.number(), &self.tool, &self.input_sha256, named)
    }
}

/// Whether `named` names call `number` of `tool` whose input digest is `sha256`.
pub fn check_named(number: u32, tool: &str, sha256: &str, named: &CallRef) -> Result<(), Mismatch> {
    if named.call != number {
        return Err(Mismatch(format!(
            "the decision names call {}, but the call waiting for a decision now is call {number} \
             ({tool}); nothing was decided: look at the execution again and decide the call it \
             shows",
            named.call
        )));
    }
    match &named.input_sha256 {
        Some(given) if !given.eq_ignore_ascii_case(sha256) => Err(Mismatch(format!(
            "the decision names call {number} with input SHA-256 {given}, but the input of \
             call {number} ({tool}) has SHA-256 {sha256}; nothing was decided: look at the \
             execution again and decide the call it shows"
        ))),
        _ => Ok(()),
    }
}

/// The call a decision is for, as the approver was shown it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallRef {
    /// The call's number, from 1 (`pendingApproval.call`).
    pub call: u32,
    /// The SHA-256 of its input (`pendingApproval.inputSha256`), when the approver checks it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_sha256: Option<String>,
}

impl CallRef {
    /// Call `number` (from 1), with no digest.
    pub fn number(number: u32) -> CallRef {
        CallRef {
            call: number,
            input_sha256: None,
        }
    }
}

/// A decision that named another call than the one waiting: why, for the approver.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Mismatch(pub String);

/// An approver's answer to the call a paused execution waits on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The call may run: the execution resumes.
    Approve,
    /// The call must not run.
    Deny {
        /// Why, in the approver's words.
        reason: Option<String>,
    },
}

impl Decision {
    /// Whether it approves.
    pub fn approves(&self) -> bool {
        matches!(self, Decision::Approve)
    }

    /// The denial's reason, trimmed, when it has one that is not blank.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Decision::Deny { reason } => reason.as_deref().map(str::trim).filter(|r| !r.is_empty()),
            Decision::Approve => None,
        }
    }
}

/// The one refusal of a call an approver denied: `tool_error` with reason
/// [`APPROVAL_DENIED`], `provider.tool: approval denied` and the reason when there is one.
pub fn approval_denied(tool: &str, why: Option<&str>) -> ToolError {
    let message = match why {
        Some(why) => format!("{tool}: approval denied: {why}"),
        None => format!("{tool}: approval denied"),
    };
    ToolError::tool(message).with_reason(APPROVAL_DENIED)
}

/// A durable execution paused at a call that waits for approval: what every front end keeps
/// (in memory, or in the execution store) and what every decision is made on.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct PausedProgram {
    /// The execution's id.
    pub execution_id: String,
    /// The principal it ran as, if any (a policy's principal name).
    pub principal: Option<String>,
    /// The call it waits on.
    pub call: PausedCall,
    /// Its ledger, as the paused run left it.
    pub ledger: Ledger,
    /// Its console lines so far.
    pub logs: Vec<String>,
}

/// What a decision leaves to run: the ledger to resume from, and the call approved in it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Decided {
    /// The ledger to resume with ([`ExecuteRequest::durable`](crate::ExecuteRequest::durable)):
    /// denied, the waiting call is answered in it with [`approval_denied`], so a re-run sees
    /// the refusal a live approver's "no" would have given.
    pub ledger: Ledger,
    /// The approved call's index (0-based), `None` when denied.
    pub approved: Option<u32>,
    /// The refusal, when denied.
    pub refusal: Option<ToolError>,
}

impl PausedProgram {
    /// The program `execution_id` of `principal`, paused at `call` with `ledger` and `logs`.
    pub fn new(
        execution_id: impl Into<String>,
        principal: Option<String>,
        call: PausedCall,
        ledger: Ledger,
        logs: Vec<String>,
    ) -> PausedProgram {
        PausedProgram {
            execution_id: execution_id.into(),
            principal,
            call,
            ledger,
            logs,
        }
    }

    /// Decides the call it waits on, if `named` is that call (else `Err`, and nothing is
    /// decided); returns what to resume with.
    pub fn decide(self, named: &CallRef, decision: &Decision) -> Result<Decided, Mismatch> {
        self.call.check(named)?;
        Ok(self.decided(decision))
    }

    /// Decides the call it waits on, which the approver was asked about directly (a form
    /// answered for this very call).
    pub fn decided(self, decision: &Decision) -> Decided {
        let mut ledger = self.ledger;
        match decision {
            Decision::Approve => Decided {
                ledger,
                approved: Some(self.call.index),
                refusal: None,
            },
            Decision::Deny { .. } => {
                let refusal = approval_denied(&self.call.tool, decision.reason());
                if let Some(call) = ledger.calls.get_mut(self.call.index as usize) {
                    call.answer = Some(Answer::Error(refusal.clone().into()));
                }
                Decided {
                    ledger,
                    approved: None,
                    refusal: Some(refusal),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::json::{canonical_json, input_sha256};
    use crate::ledger::LedgerCall;
    use serde_json::Value;

    fn paused() -> PausedProgram {
        let input = json!({"to": "bob", "amount": 1});
        PausedProgram::new(
            "e1",
            Some("alice".into()),
            PausedCall::new(1, "pay.send", input.clone()),
            Ledger {
                random_seed: 1,
                clock: Vec::new(),
                calls: vec![
                    LedgerCall {
                        tool: "pay.balance".into(),
                        input: json!({}),
                        answer: None,
                    },
                    LedgerCall {
                        tool: "pay.send".into(),
                        input,
                        answer: None,
                    },
                ],
            },
            Vec::new(),
        )
    }

    #[test]
    fn the_digest_does_not_depend_on_key_order_or_spacing() {
        let a: Value =
            serde_json::from_str(r#"{"b": 1, "a": [true, {"y": null, "x": "é"}]}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":[true,{"x":"é","y":null}],"b":1}"#).unwrap();
        assert_eq!(
            canonical_json(&a),
            r#"{"a":[true,{"x":"é","y":null}],"b":1}"#
        );
        assert_eq!(input_sha256(&a), input_sha256(&b));
        assert_ne!(input_sha256(&a), input_sha256(&json!({"b": 2})));
        assert_eq!(
            input_sha256(&json!({})),
            "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
    }

    #[test]
    fn a_decision_for_another_call_decides_nothing() {
        let e = paused()
            .decide(&CallRef::number(1), &Decision::Approve)
            .unwrap_err();
        assert!(e.0.contains("names call 1"), "{e}");
        assert!(e.0.contains("call 2 (pay.send)"), "{e}");
        let wrong = CallRef {
            call: 2,
            input_sha256: Some(input_sha256(&json!({"to": "mallory", "amount": 1}))),
        };
        let e = paused().decide(&wrong, &Decision::Approve).unwrap_err();
        assert!(e.0.contains("has SHA-256"), "{e}");
    }

    #[test]
    fn approving_the_named_call_releases_it_and_denying_answers_it_with_the_refusal() {
        let p = paused();
        let named = CallRef {
            call: 2,
            input_sha256: Some(p.call.input_sha256.to_uppercase()),
        };
        let approved = p.clone().decide(&named, &Decision::Approve).unwrap();
        assert_eq!(approved.approved, Some(1));
        assert!(approved.refusal.is_none());
        let denied = p
            .decide(
                &named,
                &Decision::Deny {
                    reason: Some("  too much ".into()),
                },
            )
            .unwrap();
        assert_eq!(denied.approved, None);
        let refusal = denied.refusal.unwrap();
        assert_eq!(refusal.message, "pay.send: approval denied: too much");
        assert_eq!(refusal.reason.as_deref(), Some(APPROVAL_DENIED));
        assert!(matches!(
            denied.ledger.calls[1].answer,
            Some(Answer::Error(ref e)) if e.reason.as_deref() == Some(APPROVAL_DENIED)
        ));
    }
}
