//! Paused executions: recording a pause at a call that waits for approval, an approver's
//! decision on that call (approved: the execution is resumed here from its ledger; denied:
//! it fails and the call never runs), and the stop of a paused execution.
//!
//! Exactly one decision wins: each takes the execution with the store's one conditional
//! update (`awaiting_approval` → `running`), so approving twice, or on two replicas at once,
//! resumes it once, and the loser is told it was decided already.

use std::time::Instant;

use execbox_host::{check_named, CallRef, Decision, Ledger, PausedCall};
use execbox_policy::{
    shown_input, AuditEvent, AuditOutcome, Principal, DEFAULT_APPROVE_PERMISSION,
};
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::admission::{room_for, starting_record, time_limit};
use super::{err, new_id, not_found, CapabilityManager, Live, ProgramRun, Run};
use crate::config::{
    CapabilityConfig, CapabilityDef, ExecutorConfig, ExecutorDef, ExecutorKind,
    DEFAULT_CAPABILITY_TIMEOUT_MS,
};
use crate::programs::{KeptProgram, PROGRAM_TYPE};
use crate::records::{
    now_ms, CapabilityError, CapabilityErrorCode, DecisionRecord, ExecutionEventKind,
    ExecutionOutcome, ExecutionRecord, ExecutionStatus, PendingApproval,
};
use crate::registry::{Capability, ExecutorEntry, Source};
use crate::script_executor::Durability;
use crate::store::{Take, MAX_LEDGER_BYTES};

/// How much of a call's input a denial's message shows.
const SHOWN_INPUT_CHARS: usize = 300;

/// The most executions one principal may have waiting for approval at once.
pub const MAX_PAUSED_PER_PRINCIPAL: u64 = 100;

/// The most bytes of replay ledgers one principal's paused executions may keep: 64 MiB.
pub const MAX_PAUSED_BYTES_PER_PRINCIPAL: u64 = 64 * 1024 * 1024;

/// How long an execution may wait for a decision before it is denied with reason
/// `expired` (by default; [`ManagerOptions::pause_expiry`](crate::ManagerOptions::pause_expiry)).
pub const DEFAULT_PAUSE_EXPIRY: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// The `by` of a decision the pause expiry took, and its reason.
const EXPIRY: &str = "expiry";
const EXPIRED: &str = "expired";

impl CapabilityManager {
    /// Records that the execution paused at `call`: its ledger and the call an approver must
    /// decide, in the store; then it is no longer live here, and its waiters and subscribers
    /// hear `awaiting_approval`. `Err` (the execution then fails with it) when the ledger is
    /// too large to keep or the store refuses.
    pub(super) async fn record_pause(
        &self,
        record: &ExecutionRecord,
        call: &PausedCall,
        ledger: &Ledger,
        logs: &[String],
        done: &watch::Sender<Option<ExecutionOutcome>>,
    ) -> Result<(), String> {
        let id = record.execution_id.as_str();
        let text = serde_json::to_string(ledger)
            .map_err(|e| format!("cannot record the ledger of execution `{id}`: {e}"))?;
        if text.len() > MAX_LEDGER_BYTES {
            return Err(format!(
                "capability `{}` reached a call of {} that needs approval, but it cannot pause: \
                 its ledger of {} tool calls is {} bytes, above the {} bytes a paused execution \
                 may keep; make fewer or smaller tool calls before the one that needs approval",
                record.capability,
                call.tool,
                ledger.calls.len(),
                text.len(),
                MAX_LEDGER_BYTES
            ));
        }
        self.room_to_pause(record, call, text.len()).await?;
        let policy = self.policy();
        let pending = PendingApproval {
            tool: call.tool.clone(),
            input: call.input.clone(),
            call: call.number(),
            input_sha256: call.input_sha256.clone(),
            permission: policy
                .map_or(DEFAULT_APPROVE_PERMISSION, |p| p.approve_permission())
                .to_string(),
            self_approval: policy.is_none_or(|p| p.allows_self_approval()),
            rule: call.asked.rule.clone(),
            reason: call.asked.reason.clone(),
            approvers: call.asked.approvers.clone(),
            under_policy: policy.is_some(),
            since_ms: now_ms(),
        };
        match self.0.store.pause(id, &pending, &text, logs).await {
            Ok(true) => {}
            Ok(false) => {
                return Err(format!(
                    "execution `{id}` ended while it paused for approval of {}",
                    call.tool
                ))
            }
            Err(e) => return Err(e.message),
        }
        let paused = ExecutionRecord {
            status: ExecutionStatus::AwaitingApproval,
            pending_approval: Some(pending),
            logs: logs.to_vec(),
            updated_ms: now_ms(),
            ..record.clone()
        };
        self.live().remove(id);
        let _ = done.send(Some(paused.outcome()));
        self.emit(
            ExecutionEventKind::AwaitingApproval,
            &paused,
            ExecutionStatus::AwaitingApproval,
            None,
        );
        Ok(())
    }

    /// Decides the call the paused execution `id` waits on, as `approver` (the caller; the
    /// policy's default principal when `None`), if it is the call `named` names (the one the
    /// approver was shown: its number, and its input's digest when given). Approved, the
    /// execution is resumed in this process (from the start, its earlier calls answered
    /// from its ledger) and returned as it now is (`running`); denied, it fails with
    /// `APPROVAL_DENIED` and the call never runs.
    ///
    /// A decision is taken once per call: the same decision sent again for a call decided
    /// already (a retried request, a second approver shown the same call) is answered with
    /// the execution as it is now, and decides nothing more, even when the program has
    /// paused again at a later call meanwhile.
    ///
    /// Refused with `DECISION_MISMATCH` when `named` is not the call waiting now (nor one
    /// decided the same way before), `PERMISSION_DENIED` when the approver lacks the
    /// policy's approve permission (`executions:approve` by default) or started the
    /// execution itself (unless the policy allows that), `NOT_AWAITING_APPROVAL` when it
    /// does not wait for a decision, `EXECUTION_NOT_FOUND`, and `TOO_MANY_EXECUTIONS` when
    /// resuming it would pass a bound on executions running at once (it stays paused: decide
    /// again once there is room). Every decision and every refusal is audited
    /// (`approval_decided`).
    pub async fn decide(
        &self,
        id: &str,
        named: &CallRef,
        decision: Decision,
        approver: Option<Principal>,
    ) -> Result<ExecutionRecord, CapabilityError> {
        let approve = decision.approves();
        let record = self.get(id).await?;
        if let Some(taken) = record.decisions.iter().find(|d| d.call == named.call) {
            return retried(record.clone(), taken, named, approve);
        }
        let pending = match (&record.pending_approval, record.status) {
            (Some(pending), ExecutionStatus::AwaitingApproval) => pending.clone(),
            _ => return Err(not_awaiting(id, Some(record.status))),
        };
        let expired_before =
            now_ms().saturating_sub(self.0.options.pause_expiry.as_millis() as u64);
        if pending.since_ms < expired_before {
            self.expire_paused().await?;
            return Err(err(
                CapabilityErrorCode::NotAwaitingApproval,
                format!(
                    "execution `{id}` waited for a decision longer than the pause expiry allows, \
                     and its call was denied (reason `{EXPIRED}`); there is nothing to decide"
                ),
            ));
        }
        if let Err(mismatch) =
            check_named(pending.call, &pending.tool, &pending.input_sha256, named)
        {
            return Err(err(
                CapabilityErrorCode::DecisionMismatch,
                format!("execution `{id}`: {mismatch}"),
            ));
        }
        let approver = self.principal_or_default(approver)?;
        let approver_name = approver.as_ref().and_then(Principal::name);
        if let Err(message) = self.may_decide(id, &record, approver.as_ref()) {
            self.audit(
                AuditEvent::approval_decided(id, approver_name, &pending.tool, approve)
                    .refused(AuditOutcome::Denied)
                    .error(&message),
            )?;
            return Err(err(CapabilityErrorCode::PermissionDenied, message));
        }
        let taken = DecisionRecord {
            call: pending.call,
            tool: pending.tool.clone(),
            input_sha256: pending.input_sha256.clone(),
            approved: approve,
            by: approver_name.map(str::to_string),
            reason: decision.reason().map(str::to_string),
            at_ms: now_ms(),
        };
        self.take_decided(record, pending, taken, decision).await
    }

    /// Takes the paused execution `record` for the decision `taken` on its call `pending`,
    /// and resumes it (approved) or ends it (denied).
    async fn take_decided(
        &self,
        record: ExecutionRecord,
        pending: PendingApproval,
        taken: DecisionRecord,
        decision: Decision,
    ) -> Result<ExecutionRecord, CapabilityError> {
        let id = record.execution_id.clone();
        let id = id.as_str();
        let approve = taken.approved;
        // What a resume needs, checked (and its room taken) before the execution is taken,
        // so that a refusal leaves it paused.
        let resume = match approve {
            true => {
                let plan = self.resume_plan(&record).await?;
                let cancel = CancellationToken::new();
                let (done_tx, done_rx) = watch::channel(None);
                let mut entry = Live {
                    capability: record.capability.clone(),
                    parent: None,
                    tree: id.to_string(),
                    depth: 1,
                    principal: plan.principal.clone(),
                    cancel: cancel.clone(),
                    done: done_rx,
                    stop_requested: false,
                };
                self.reserve_resume(&record, &mut entry)?;
                Some((plan, cancel, done_tx))
            }
            false => None,
        };
        let taken_row = match self.0.store.resume(id, &Take::Decision(&taken)).await {
            Ok(Some((_, ledger_text))) => ledger_text,
            other => {
                if resume.is_some() {
                    self.live().remove(id);
                }
                other?;
                // Someone else decided meanwhile: answered as a retry of theirs would be.
                let now = self.get(id).await?;
                let named = CallRef::number(taken.call);
                if let Some(theirs) = now.decisions.iter().find(|d| d.call == taken.call) {
                    return retried(now.clone(), theirs, &named, approve);
                }
                return Err(not_awaiting(id, None));
            }
        };
        let ledger_text = taken_row;
        let decided = AuditEvent::approval_decided(id, taken.by.as_deref(), &pending.tool, approve);
        let reason = decision.reason();
        if let Err(e) = match reason {
            Some(reason) => self.audit(decided.error(reason)),
            None => self.audit(decided),
        } {
            // Taken but not audited: it must not run unaudited.
            self.live().remove(id);
            self.end_paused(
                &record,
                ExecutionStatus::Failed,
                CapabilityErrorCode::ExecutionFailed,
                format!(
                    "the decision on call {} could not be audited, so it did not run: {}",
                    taken.call, e.message
                ),
            )
            .await;
            return Err(e);
        }
        let Some((plan, cancel, done_tx)) = resume else {
            let by = match taken.by.as_deref() {
                Some(EXPIRY) => " (it waited past the pause expiry)".to_string(),
                Some(n) => format!(" by {n}"),
                None => String::new(),
            };
            let why = reason.map(|r| format!(": {r}")).unwrap_or_default();
            let message = format!(
                "the call of {} with {} was denied{by}{why}; it never ran",
                pending.tool,
                shown_input(&pending.input, SHOWN_INPUT_CHARS)
            );
            self.end_paused(
                &record,
                ExecutionStatus::Failed,
                CapabilityErrorCode::ApprovalDenied,
                message,
            )
            .await;
            return self.get(id).await;
        };
        let (ledger, index) = match resumable(id, &ledger_text, &pending) {
            Ok(resumable) => resumable,
            Err(message) => {
                self.live().remove(id);
                self.end_paused(
                    &record,
                    ExecutionStatus::Failed,
                    CapabilityErrorCode::ExecutionFailed,
                    message,
                )
                .await;
                return self.get(id).await;
            }
        };
        let mut decisions = record.decisions.clone();
        decisions.push(taken);
        let record = ExecutionRecord {
            status: ExecutionStatus::Running,
            pending_approval: None,
            updated_ms: now_ms(),
            replica: self.0.store.replica().map(str::to_string),
            decisions,
            ..record
        };
        self.emit(
            ExecutionEventKind::Resumed,
            &record,
            ExecutionStatus::Running,
            None,
        );
        let span = tracing::info_span!(
            target: execbox_host::trace::TARGET,
            "execbox.capability",
            otel.kind = "internal",
            execbox.capability = %record.capability,
            execbox.execution_id = %id,
            execbox.resumed = true,
            execbox.principal = record.principal.as_deref(),
            execbox.outcome = tracing::field::Empty,
            execbox.duration_ms = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        let run = Run {
            capability: plan.capability,
            executor: plan.executor,
            principal: plan.principal,
            accepted: Instant::now(),
            timeout_ms: plan.timeout_ms,
            cancel,
            durable: Durability::Resumed {
                ledger,
                approved: index,
            },
            resumed: true,
            program: plan.program,
        };
        let manager = self.clone();
        let resumed = record.clone();
        // Boxed, as a start's: the future of a whole run is large.
        tokio::spawn(Box::pin(tracing::Instrument::instrument(
            async move { manager.drive(resumed, run, done_tx).await },
            span,
        )));
        Ok(record)
    }

    /// Takes the room a resumed execution needs, under the same bounds as a start
    /// (executions running at once in this process, per principal, per tree): `entry` is
    /// live from here. `TOO_MANY_EXECUTIONS` when there is none: it stays paused.
    fn reserve_resume(
        &self,
        record: &ExecutionRecord,
        entry: &mut Live,
    ) -> Result<(), CapabilityError> {
        let mut live = self.live();
        let id = &record.execution_id;
        entry.tree = room_for(
            &live,
            &self.0.options,
            id,
            entry.principal.as_ref(),
            None,
            &record.capability,
        )
        .map_err(|e| {
            err(
                CapabilityErrorCode::TooManyExecutions,
                format!(
                    "execution `{id}` stays paused, not approved: resuming it now would pass a \
                     bound on executions running at once ({}); decide it again once some have \
                     ended",
                    e.message
                ),
            )
        })?;
        live.insert(
            id.clone(),
            Live {
                capability: entry.capability.clone(),
                parent: entry.parent.clone(),
                tree: entry.tree.clone(),
                depth: entry.depth,
                principal: entry.principal.clone(),
                cancel: entry.cancel.clone(),
                done: entry.done.clone(),
                stop_requested: false,
            },
        );
        Ok(())
    }

    /// Whether `record`'s principal may keep one more paused execution, whose ledger is
    /// `bytes` long: at most [`ManagerOptions::max_paused_per_principal`](crate::ManagerOptions::max_paused_per_principal) waiting, holding at most
    /// [`MAX_PAUSED_BYTES_PER_PRINCIPAL`] of ledgers. `Err`: why not, for the execution's
    /// failure.
    async fn room_to_pause(
        &self,
        record: &ExecutionRecord,
        call: &PausedCall,
        bytes: usize,
    ) -> Result<(), String> {
        let principal = record.principal.as_deref();
        let (count, held) = self
            .0
            .store
            .paused_usage(principal)
            .await
            .map_err(|e| e.message)?;
        let who = match principal {
            Some(name) => format!("principal `{name}`"),
            None => "anonymous callers".to_string(),
        };
        let most = self.0.options.max_paused_per_principal;
        if count >= most {
            return Err(format!(
                "{} reached a call of {} that needs approval, but cannot wait for one: {who} \
                 already has {count} executions waiting for approval, the most one principal \
                 may have ({most}); they must be decided or stopped first (`execbox executions \
                 list --status awaiting_approval`)",
                record.capability, call.tool
            ));
        }
        if held.saturating_add(bytes as u64) > MAX_PAUSED_BYTES_PER_PRINCIPAL {
            return Err(format!(
                "{} reached a call of {} that needs approval, but cannot wait for one: the \
                 executions of {who} waiting for approval keep {held} bytes of replay ledgers, \
                 and this one's {bytes} would pass the {MAX_PAUSED_BYTES_PER_PRINCIPAL} bytes \
                 one principal may keep; decide or stop some first",
                record.capability, call.tool
            ));
        }
        Ok(())
    }

    /// Denies, with reason `expired`, every call that has waited for a decision longer than
    /// [`ManagerOptions::pause_expiry`](crate::ManagerOptions::pause_expiry) (audited as a
    /// decision of `expiry`); returns the executions it ended. `execbox serve` runs it at
    /// start and every minute; a decision on an expired call runs it first.
    pub async fn expire_paused(&self) -> Result<Vec<String>, CapabilityError> {
        let expiry = self.0.options.pause_expiry;
        let before = now_ms().saturating_sub(expiry.as_millis() as u64);
        let mut ended = Vec::new();
        for id in self.0.store.paused_before(before).await? {
            let Some(record) = self.0.store.get(&id).await? else {
                continue;
            };
            let Some(pending) = record.pending_approval.clone() else {
                continue;
            };
            if record.status != ExecutionStatus::AwaitingApproval || pending.since_ms >= before {
                continue;
            }
            let taken = DecisionRecord {
                call: pending.call,
                tool: pending.tool.clone(),
                input_sha256: pending.input_sha256.clone(),
                approved: false,
                by: Some(EXPIRY.to_string()),
                reason: Some(EXPIRED.to_string()),
                at_ms: now_ms(),
            };
            let decision = Decision::Deny {
                reason: Some(EXPIRED.to_string()),
            };
            match self.take_decided(record, pending, taken, decision).await {
                Ok(r) if r.status.is_terminal() => ended.push(id),
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(execution = %id, "cannot expire the paused execution: {}", e.message)
                }
            }
        }
        Ok(ended)
    }

    /// Whether `approver` may decide the call of `record`: it is one of the approvers the
    /// policy rule that asked names (a principal or one of its roles), or, when the rule
    /// names none (or the tool's own `requires_approval` asked), it holds the approve
    /// permission; and it did not start the execution (unless the policy allows that).
    /// Without a policy, anyone may.
    pub(crate) fn may_decide(
        &self,
        id: &str,
        record: &ExecutionRecord,
        approver: Option<&Principal>,
    ) -> Result<(), String> {
        let Some(policy) = self.policy() else {
            let pending = record.pending_approval.as_ref();
            if pending.is_some_and(|p| p.under_policy) {
                let by = match pending.and_then(|p| p.rule.as_deref()) {
                    Some(rule) => format!(" (its call was held by policy {rule})"),
                    None => String::new(),
                };
                return Err(format!(
                    "execution `{id}` paused under a policy{by}; decide it under that policy \
                     (--policy FILE), as a principal who may decide it, so that the decision \
                     is checked and the rest of the program runs under the same rules"
                ));
            }
            return Ok(());
        };
        let permission = policy.approve_permission();
        let who = match approver.and_then(Principal::name) {
            Some(name) => format!("principal `{name}`"),
            None => "a caller without a principal".to_string(),
        };
        let approvers = record
            .pending_approval
            .as_ref()
            .map_or(&[][..], |p| p.approvers.as_slice());
        if !approvers.is_empty() {
            if !approver.is_some_and(|p| p.is_one_of(approvers)) {
                let rule = record
                    .pending_approval
                    .as_ref()
                    .and_then(|p| p.rule.as_deref())
                    .unwrap_or("rule");
                return Err(format!(
                    "the call execution `{id}` waits on may be decided by {} only (policy {rule}), \
                     and {who} is none of them; one of them must decide",
                    approvers
                        .iter()
                        .map(|a| format!("`{a}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        } else if !approver.is_some_and(|p| p.holds(permission)) {
            return Err(format!(
                "deciding the call execution `{id}` waits on needs the permission \
                 `{permission}`, which {who} does not hold; an approver holding it must decide \
                 (grant it in the policy)"
            ));
        }
        let name = approver.and_then(Principal::name);
        if !policy.allows_self_approval() && name.is_some() && name == record.principal.as_deref() {
            let others = match approvers.is_empty() {
                true => format!("another principal holding `{permission}`"),
                false => format!("another of {}", approvers.join(", ")),
            };
            return Err(format!(
                "{who} started execution `{id}` and may not decide its own call; {others} \
                 must (or allow it with `approvals: {{self_approval: true}}` in the policy)"
            ));
        }
        Ok(())
    }

    /// What resuming `record` needs: its capability and executor as the registry has them
    /// now (or, for a program, its code and the tools [`ManagerOptions::programs`] builds),
    /// its principal, its time limit.
    ///
    /// [`ManagerOptions::programs`]: crate::ManagerOptions::programs
    async fn resume_plan(&self, record: &ExecutionRecord) -> Result<ResumePlan, CapabilityError> {
        let principal = match (&record.principal, self.policy()) {
            (Some(name), Some(policy)) => Some(policy.principal(Some(name)).map_err(|e| {
                err(
                    CapabilityErrorCode::PermissionDenied,
                    format!(
                        "execution `{}` cannot be resumed as principal `{name}`: {e}",
                        record.execution_id
                    ),
                )
            })?),
            (Some(name), None) => {
                return Err(err(
                    CapabilityErrorCode::PermissionDenied,
                    format!(
                        "execution `{}` ran as principal `{name}` of a policy; resume it under a \
                         policy that defines `{name}` (--policy FILE), so that it runs with that \
                         principal's permissions and limits, not unrestricted",
                        record.execution_id
                    ),
                ))
            }
            _ => self.principal_or_default(None)?,
        };
        if record.capability_type == PROGRAM_TYPE {
            return self.program_plan(record, principal).await;
        }
        let registry = self.registry();
        let (capability, executor) =
            registry.resolve(&record.capability, Some(&record.capability_type))?;
        let (capability, executor) = (capability.clone(), executor.clone());
        drop(registry);
        let timeout_ms = time_limit(
            None,
            self.0.options.max_timeout_ms,
            &capability.config,
            &executor.config,
        )?;
        Ok(ResumePlan {
            capability,
            executor,
            principal,
            timeout_ms,
            program: None,
        })
    }

    /// [`CapabilityManager::resume_plan`] of a program: its tools are started here, before
    /// it is taken, so that a failure leaves it paused.
    async fn program_plan(
        &self,
        record: &ExecutionRecord,
        principal: Option<Principal>,
    ) -> Result<ResumePlan, CapabilityError> {
        let id = &record.execution_id;
        let Some(programs) = &self.0.options.programs else {
            return Err(err(
                CapabilityErrorCode::InvalidRequest,
                format!(
                    "execution `{id}` is a `{}` program of `execbox {}`, whose tools this server \
                     does not start; approve it from a shell with `execbox executions approve \
                     {id} --mcp-config FILE` (naming the config it was served with, whose \
                     servers that starts), or deny it",
                    record.capability, record.executor
                ),
            ));
        };
        let Some(code) = record.params.get("code").and_then(Value::as_str) else {
            return Err(err(
                CapabilityErrorCode::ExecutionFailed,
                format!("execution `{id}` is a program without its code; it cannot be resumed"),
            ));
        };
        let origin = record.params.get("origin").cloned().unwrap_or(Value::Null);
        let tools = programs
            .tools(&record.executor, &origin)
            .await
            .map_err(|why| {
                // Nothing failed: the execution waits on, and the approval can be sent again.
                err(
                    CapabilityErrorCode::InvalidRequest,
                    format!(
                        "the tools of execution `{id}` cannot be started, so it stays paused, \
                         awaiting approval (decide again once they can): {why}"
                    ),
                )
            })?;
        let timeout_ms = record
            .params
            .get("timeoutMs")
            .and_then(Value::as_u64)
            .unwrap_or(DEFAULT_CAPABILITY_TIMEOUT_MS)
            .clamp(1, self.0.options.max_timeout_ms);
        let (capability, executor) =
            program_entries(&record.capability, &record.executor, timeout_ms);
        Ok(ResumePlan {
            capability,
            executor,
            principal,
            timeout_ms,
            program: Some(ProgramRun {
                code: code.to_owned(),
                tools,
            }),
        })
    }

    /// Keeps `program`, which paused at a call nobody could approve when it ran, as an
    /// execution `awaiting_approval` (type [`PROGRAM_TYPE`]) that approvers see and decide
    /// as any other; returns its record. Refused as a pause of a capability is: a ledger too
    /// large to keep, or a store that cannot write.
    pub async fn pause_program(
        &self,
        program: KeptProgram,
    ) -> Result<ExecutionRecord, CapabilityError> {
        let id = new_id();
        let (capability, executor) =
            program_entries(&program.name, &program.front_end, program.timeout_ms);
        let params = serde_json::json!({
            "code": program.code,
            "origin": program.origin,
            "timeoutMs": program.timeout_ms,
        });
        let record = ExecutionRecord {
            status: ExecutionStatus::Running,
            principal: program.paused.principal.clone(),
            replica: self.0.store.replica().map(str::to_string),
            ..starting_record(
                &id,
                &capability.config,
                &executor.config,
                None,
                None,
                params,
            )
        };
        self.audit(AuditEvent::capability_started(
            &id,
            record.principal.as_deref(),
            &record.capability,
        ))?;
        self.0.store.insert(&record).await?;
        let (done, _) = watch::channel(None);
        if let Err(message) = self
            .record_pause(
                &record,
                &program.paused.call,
                &program.paused.ledger,
                &program.paused.logs,
                &done,
            )
            .await
        {
            let error = err(CapabilityErrorCode::ExecutionFailed, message);
            let _ = self
                .0
                .store
                .finish(
                    &id,
                    ExecutionStatus::Failed,
                    None,
                    None,
                    Some(&error),
                    &program.paused.logs,
                )
                .await;
            return Err(error);
        }
        self.get(&id).await
    }

    /// Stops a paused execution (`stopped`; the call it waited on never runs). `None` when
    /// `id` is not paused.
    pub(super) async fn stop_paused(
        &self,
        id: &str,
    ) -> Result<Option<ExecutionRecord>, CapabilityError> {
        let Some(record) = self.0.store.get(id).await? else {
            return Err(not_found(id));
        };
        if record.status != ExecutionStatus::AwaitingApproval {
            return Ok(None);
        }
        if self.0.store.resume(id, &Take::Stop).await?.is_some() {
            let tool = record
                .pending_approval
                .as_ref()
                .map_or("a tool", |p| p.tool.as_str());
            let message = format!(
                "capability `{}` was stopped on request while it waited for approval of {tool}; \
                 the call never ran",
                record.capability
            );
            self.end_paused(
                &record,
                ExecutionStatus::Stopped,
                CapabilityErrorCode::ExecutionStopped,
                message,
            )
            .await;
        }
        Ok(Some(self.get(id).await?))
    }

    /// Ends a paused execution this process has just taken, and tells its waiters.
    async fn end_paused(
        &self,
        record: &ExecutionRecord,
        status: ExecutionStatus,
        code: CapabilityErrorCode,
        message: String,
    ) {
        let id = record.execution_id.as_str();
        let error = err(code, message);
        if let Err(e) = self
            .0
            .store
            .finish(id, status, None, None, Some(&error), &record.logs)
            .await
        {
            tracing::error!(execution = %id, "cannot record the end of the paused execution: {e}");
        }
        if let Err(e) = self.audit(AuditEvent::capability_finished(
            id,
            record.principal.as_deref(),
            &record.capability,
            status.as_str(),
            std::time::Duration::ZERO,
        )) {
            tracing::error!(execution = %id, "{e}");
        }
        let ended = ExecutionRecord {
            status,
            error: Some(error.clone()),
            pending_approval: None,
            ended_ms: Some(now_ms()),
            ..record.clone()
        };
        let kind = match status {
            ExecutionStatus::Stopped => ExecutionEventKind::Stopped,
            _ => ExecutionEventKind::Failed,
        };
        self.emit(kind, &ended, status, Some(error));
    }
}

/// The ledger of execution `id` as stored (`text`), and the number of the call it waits on,
/// if it can be resumed: it reads, and the call an approver saw (`pending`) is the one it
/// holds at that number, still unanswered. `Err`: why not.
fn resumable(id: &str, text: &str, pending: &PendingApproval) -> Result<(Ledger, u32), String> {
    let ledger: Ledger = serde_json::from_str(text).map_err(|e| {
        format!("the ledger of execution `{id}` cannot be read ({e}); it cannot be resumed")
    })?;
    let index = pending.call.saturating_sub(1);
    let held = ledger.calls.get(index as usize);
    if !held
        .is_some_and(|c| c.tool == pending.tool && c.input == pending.input && c.answer.is_none())
    {
        return Err(format!(
            "the call execution `{id}` waited on ({} as call {}) is not the one its ledger holds \
             there; it cannot be resumed",
            pending.tool, pending.call
        ));
    }
    Ok((ledger, index))
}

/// What a resume runs.
struct ResumePlan {
    capability: Capability,
    executor: ExecutorEntry,
    principal: Option<Principal>,
    timeout_ms: u64,
    program: Option<ProgramRun>,
}

/// The capability and executor a program runs as: its name, no schemas, no files, the
/// built-in script executor.
fn program_entries(name: &str, front_end: &str, timeout_ms: u64) -> (Capability, ExecutorEntry) {
    let capability = CapabilityConfig {
        def: CapabilityDef {
            name: name.to_string(),
            capability_type: PROGRAM_TYPE.to_string(),
            version: None,
            description: None,
            entry: None,
            tools: None,
            input_schema: None,
            output_schema: None,
            timeout_ms: Some(timeout_ms),
            permissions: Vec::new(),
            author: None,
            config: None,
        },
        dir: std::path::PathBuf::new(),
        entry: None,
        tools: None,
        timeout_ms,
    };
    let executor = ExecutorConfig {
        def: ExecutorDef {
            name: front_end.to_string(),
            version: None,
            description: None,
            supported_types: vec![PROGRAM_TYPE.to_string()],
            command: None,
            args: Vec::new(),
            env: Default::default(),
            timeout_seconds: None,
            author: None,
        },
        dir: std::path::PathBuf::new(),
        kind: ExecutorKind::Script,
    };
    (
        Capability {
            config: capability,
            source: Source::Builtin,
        },
        ExecutorEntry {
            config: executor,
            source: Source::Builtin,
        },
    )
}

/// The answer to a decision on call `named.call`, which was decided already (`taken`): the
/// execution as it is when it is the same decision (a retry, or a second approver shown the
/// same call), else `DECISION_MISMATCH` saying what was decided.
fn retried(
    record: ExecutionRecord,
    taken: &DecisionRecord,
    named: &CallRef,
    approve: bool,
) -> Result<ExecutionRecord, CapabilityError> {
    let id = &record.execution_id;
    let digest_differs = named
        .input_sha256
        .as_ref()
        .is_some_and(|given| !given.eq_ignore_ascii_case(&taken.input_sha256));
    if taken.approved == approve && !digest_differs {
        return Ok(record);
    }
    let what = if taken.approved { "approved" } else { "denied" };
    let by = taken
        .by
        .as_deref()
        .map(|b| format!(" by {b}"))
        .unwrap_or_default();
    let message = if digest_differs {
        format!(
            "execution `{id}`: call {} ({}) was {what}{by} already, and its input's SHA-256 is {}, \
             not the one the decision names; nothing was decided",
            taken.call, taken.tool, taken.input_sha256
        )
    } else {
        format!(
            "execution `{id}`: call {} ({}) was {what}{by} already; a decision is taken once per \
             call, so nothing was decided (get the execution to see where it is now)",
            taken.call, taken.tool
        )
    };
    Err(err(CapabilityErrorCode::DecisionMismatch, message))
}

/// `NOT_AWAITING_APPROVAL`, naming the status when known.
fn not_awaiting(id: &str, status: Option<ExecutionStatus>) -> CapabilityError {
    let message = match status {
        Some(status) => format!(
            "execution `{id}` is {status}, not awaiting approval: there is no call to decide"
        ),
        None => format!(
            "execution `{id}` was decided (or stopped) by someone else meanwhile; it is no \
             longer awaiting approval"
        ),
    };
    err(CapabilityErrorCode::NotAwaitingApproval, message)
}
