//! Approvals over the multi round-trip requests of MCP 2026-07-28 (SEP-2322).
//!
//! On that protocol a server may not send the client requests of its own (no elicitation in
//! the middle of a call); it answers `tools/call` with an `InputRequiredResult` instead, and
//! the client retries the same request with the answers. So `execute_code` runs a client's
//! program as a durable execution ([`execbox_host::Ledger`]): a call that needs approval
//! pauses it without running, the program is parked here under a fresh opaque handle (the
//! `requestState`), and the answer asks the client's user with the approval form. The retry
//! takes it back: approved, the program is re-run from the start with every earlier call
//! answered from its ledger and the approved call run for real; denied, it is re-run with
//! that call answered "approval denied", so the program sees exactly what it would have seen
//! had it been asked through elicitation.
//!
//! The `requestState` is a random handle, never the ledger itself: tool results stay on the
//! server, a client cannot forge or alter a recorded answer, and a handle is good for one
//! retry by the principal that started the program, with the same `code`, within
//! [`ROUND_TTL`]. What is parked is bounded ([`MAX_PARKED`], [`MAX_PARKED_BYTES`]) and held
//! in this process: a retry that reaches another replica or a restarted server is told to
//! run the program again (nothing ran twice: the approved call never ran).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use execbox_host::{Ledger, PausedCall};
use rmcp::model::ElicitRequestParams;

/// The key of the approval in `inputRequests` and `inputResponses`.
pub(crate) const APPROVAL_INPUT: &str = "approval";

/// How long a parked program waits for the client's retry.
pub(crate) const ROUND_TTL: Duration = Duration::from_secs(15 * 60);

/// At most this many programs wait for a retry at once, in this process.
pub(crate) const MAX_PARKED: usize = 256;

/// At most this many bytes of ledgers wait for a retry at once, in this process.
pub(crate) const MAX_PARKED_BYTES: usize = 64 << 20;

/// The largest ledger one parked program may have.
pub(crate) const MAX_PARKED_LEDGER_BYTES: usize = 8 << 20;

/// A program waiting for the client's answer.
pub(crate) struct Parked {
    /// The execution id, kept across rounds so the audit lines of one program go together.
    pub(crate) execution_id: String,
    /// Who started it: only the same principal's retry takes it.
    pub(crate) principal: Option<String>,
    /// The program: the retry must carry the same.
    pub(crate) code: String,
    pub(crate) ledger: Ledger,
    pub(crate) call: PausedCall,
    /// The question, to ask again when the retry does not answer it.
    pub(crate) form: ElicitRequestParams,
    bytes: usize,
    expires: Instant,
}

impl Parked {
    /// A program paused at `call` with `ledger`; `Err` (a message for the model) when its
    /// ledger is larger than a parked program may hold.
    pub(crate) fn new(
        execution_id: String,
        principal: Option<String>,
        code: String,
        ledger: Ledger,
        call: PausedCall,
        form: ElicitRequestParams,
    ) -> Result<Parked, String> {
        let bytes = serde_json::to_vec(&ledger)
            .map_or(usize::MAX, |v| v.len())
            .saturating_add(code.len());
        if bytes > MAX_PARKED_LEDGER_BYTES {
            return Err(format!(
                "{} needs approval, but the program cannot wait for it: what its {} earlier tool \
                 calls returned is {bytes} bytes, more than the {MAX_PARKED_LEDGER_BYTES} bytes \
                 a waiting program may keep; make the call needing approval earlier, or return \
                 less from the calls before it",
                call.tool,
                ledger.calls.len(),
            ));
        }
        Ok(Parked {
            execution_id,
            principal,
            code,
            ledger,
            call,
            form,
            bytes,
            expires: Instant::now() + ROUND_TTL,
        })
    }
}

/// The programs of this process waiting for a client's retry, by handle.
#[derive(Default)]
pub(crate) struct Rounds {
    parked: Mutex<HashMap<String, Parked>>,
    /// Handles taken, until they would have expired: a second retry is told it was answered.
    taken: Mutex<HashMap<String, Instant>>,
}

/// Why a retry's `requestState` was not taken: for the model, never saying whether the
/// handle exists (a principal learns nothing of another's).
const UNKNOWN: &str = "this retry answers an approval that is not waiting here: it waited \
    longer than 15 minutes, or it was asked by another server or before a restart. The call \
    that needed approval has not run; to go on, run the program again (the calls it made before \
    that one would then run again)";

/// Why a retry whose handle was taken already is refused.
const ANSWERED: &str = "this approval was answered already (a retry with the same \
    requestState): its program went on then, and nothing more runs now. To run the program \
    once more, send it without requestState (all its calls would run again)";

impl Rounds {
    /// Parks `parked`; returns the handle the client echoes as `requestState`. `Err` (a
    /// message for the model) when too many programs wait already.
    pub(crate) fn park(&self, parked: Parked) -> Result<String, String> {
        let mut map = self.parked.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        map.retain(|_, p| p.expires > now);
        let bytes: usize = map.values().map(|p| p.bytes).sum();
        if map.len() >= MAX_PARKED || bytes + parked.bytes > MAX_PARKED_BYTES {
            return Err(format!(
                "{} needs approval, but this server holds as many programs waiting for an \
                 approval as it may ({} programs, {bytes} bytes); answer or abandon those \
                 first, then run the program again",
                parked.call.tool,
                map.len(),
            ));
        }
        let handle = new_handle()?;
        map.insert(handle.clone(), parked);
        Ok(handle)
    }

    /// Takes the program parked under `handle`, if `principal` parked it and `code` is its
    /// program; it cannot be taken twice. `Err`: a message for the model.
    pub(crate) fn take(
        &self,
        handle: &str,
        principal: Option<&str>,
        code: &str,
    ) -> Result<Parked, String> {
        let mut map = self.parked.lock().unwrap_or_else(|e| e.into_inner());
        let Some(parked) = map.get(handle) else {
            let taken = self.taken.lock().unwrap_or_else(|e| e.into_inner());
            return Err(match taken.get(handle) {
                Some(until) if *until > Instant::now() => ANSWERED.to_owned(),
                _ => UNKNOWN.to_owned(),
            });
        };
        if parked.expires <= Instant::now() || parked.principal.as_deref() != principal {
            return Err(UNKNOWN.to_owned());
        }
        if parked.code != code {
            return Err(
                "a retry must repeat its request: `code` is not the program that asked \
                        for this approval; send the same `code` with the answer"
                    .to_owned(),
            );
        }
        let parked = map.remove(handle).expect("checked above");
        let mut taken = self.taken.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        taken.retain(|_, until| *until > now);
        if taken.len() < MAX_PARKED * 4 {
            taken.insert(handle.to_owned(), parked.expires);
        }
        Ok(parked)
    }

    /// How many programs wait.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.parked.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// A fresh handle: 128 random bits from the system's generator.
fn new_handle() -> Result<String, String> {
    use ring::rand::SecureRandom as _;
    let mut bytes = [0u8; 16];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| "the system's random generator failed; try again".to_owned())?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("execbox-approval-{hex}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use execbox_policy::ApprovalRequest;
    use serde_json::json;

    fn parked(principal: Option<&str>, code: &str) -> Parked {
        let request = ApprovalRequest::new("e1", principal, "mail.send", json!({"to": "bob"}));
        let form = crate::approvals::approval_form(&request).unwrap();
        let mut ledger = Ledger::new();
        ledger.calls.push(execbox_host::LedgerCall {
            tool: "mail.send".into(),
            input: json!({"to": "bob"}),
            answer: None,
        });
        Parked::new(
            "e1".into(),
            principal.map(str::to_owned),
            code.into(),
            ledger,
            paused_call(),
            form,
        )
        .unwrap()
    }

    fn paused_call() -> PausedCall {
        PausedCall::new(0, "mail.send", json!({"to": "bob"}))
    }

    #[test]
    fn a_handle_is_taken_once_by_its_principal_with_its_code() {
        let rounds = Rounds::default();
        let handle = rounds
            .park(parked(Some("alice"), "await mail.send({})"))
            .unwrap();
        assert!(handle.starts_with("execbox-approval-") && handle.len() == 17 + 32);
        let other = rounds.park(parked(Some("alice"), "x")).unwrap();
        assert_ne!(handle, other, "every handle is fresh");

        let e = rounds
            .take(&handle, Some("bob"), "await mail.send({})")
            .err()
            .unwrap();
        assert_eq!(e, UNKNOWN, "another principal learns nothing");
        let e = rounds
            .take(&handle, Some("alice"), "other code")
            .err()
            .unwrap();
        assert!(e.contains("same `code`"), "{e}");
        assert_eq!(rounds.len(), 2, "a refused retry leaves it waiting");

        let taken = rounds
            .take(&handle, Some("alice"), "await mail.send({})")
            .unwrap();
        assert_eq!(taken.call.tool, "mail.send");
        let e = rounds
            .take(&handle, Some("alice"), "await mail.send({})")
            .err()
            .unwrap();
        assert_eq!(e, ANSWERED, "a handle is good for one retry");
        let e = rounds
            .take("execbox-approval-forged", None, "x")
            .err()
            .unwrap();
        assert_eq!(e, UNKNOWN, "a handle never parked");
    }

    #[test]
    fn parked_programs_are_bounded_by_count() {
        let rounds = Rounds::default();
        for _ in 0..MAX_PARKED {
            rounds.park(parked(None, "x")).unwrap();
        }
        let e = rounds.park(parked(None, "x")).unwrap_err();
        assert!(
            e.contains("mail.send needs approval") && e.contains("256 programs"),
            "{e}"
        );
    }

    #[test]
    fn a_ledger_too_large_to_park_is_refused_naming_the_call() {
        let request = ApprovalRequest::new("e1", None, "mail.send", json!({}));
        let form = crate::approvals::approval_form(&request).unwrap();
        let e = Parked::new(
            "e1".into(),
            None,
            "x".repeat(MAX_PARKED_LEDGER_BYTES + 1),
            Ledger::new(),
            paused_call(),
            form,
        )
        .err()
        .unwrap();
        assert!(
            e.starts_with("mail.send needs approval, but the program cannot wait"),
            "{e}"
        );
    }
}
