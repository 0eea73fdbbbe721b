//! Running an execution: on its executor to its end or its pause, then its end written,
//! audited and told to its waiters and subscribers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use execbox_host::{trace, Schema};
use execbox_policy::{AuditEvent, Principal};
use execbox_protocol::ErrorCode;
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{err, CapabilityManager};
use crate::config::{CapabilityDef, ExecutorKind};
use crate::external_executor::{self as external, ExternalRun};
use crate::outcome::RunOutcome;
use crate::programs::{ProgramToolSet, PROGRAM_ERROR};
use crate::records::{
    now_ms, CapabilityError, CapabilityErrorCode, ExecutionEventKind, ExecutionOutcome,
    ExecutionRecord, ExecutionStatus,
};
use crate::registry::{Capability, ExecutorEntry};
use crate::script_executor::{self as script, Durability, ScriptRun};

/// What [`CapabilityManager::drive`] runs: the capability on its executor, for its
/// principal, within its time limit.
pub(crate) struct Run {
    pub(crate) capability: Capability,
    pub(crate) executor: ExecutorEntry,
    pub(crate) principal: Option<Principal>,
    /// When its time limit started.
    pub(crate) accepted: Instant,
    pub(crate) timeout_ms: u64,
    pub(crate) cancel: CancellationToken,
    pub(crate) durable: Durability,
    /// Resumed after an approval: its status is `running` already.
    pub(crate) resumed: bool,
    /// A program that is not a capability (resumed after an approval): its code and tools.
    pub(crate) program: Option<ProgramRun>,
}

/// The code and tools of a program that is not a capability.
pub(crate) struct ProgramRun {
    pub(crate) code: String,
    pub(crate) tools: ProgramToolSet,
}

impl CapabilityManager {
    /// Runs a started (or resumed) execution to its end or its pause, then records it and
    /// reports it.
    pub(crate) async fn drive(
        &self,
        record: ExecutionRecord,
        run: Run,
        done: watch::Sender<Option<ExecutionOutcome>>,
    ) {
        let started = run.accepted;
        let id_owned = record.execution_id.clone();
        let id = id_owned.as_str();
        // A resumed execution is `running` already: the resume took it.
        let running = match run.resumed {
            true => Ok(()),
            false => {
                self.0
                    .store
                    .set_status(id, ExecutionStatus::Running, None)
                    .await
            }
        };
        let def = run.capability.config.def.clone();
        let (outcome, logs) = match running {
            Err(e) => (RunOutcome::Failed(e.message), Vec::new()),
            Ok(()) if run.cancel.is_cancelled() => (RunOutcome::Stopped, Vec::new()),
            Ok(()) => self.run(&record, run).await,
        };
        // A stop was asked for: whatever failure followed (a child stopped first, the run
        // cancelled) is the stop. A run that completed meanwhile keeps its result.
        let stop_requested = self.live().get(id).is_some_and(|l| l.stop_requested);
        let outcome = match outcome {
            RunOutcome::Failed(_)
            | RunOutcome::TimedOut(_)
            | RunOutcome::ProgramFailed { .. }
            | RunOutcome::Paused { .. }
                if stop_requested =>
            {
                RunOutcome::Stopped
            }
            other => other,
        };
        let outcome = match outcome {
            RunOutcome::Paused { call, ledger } => {
                if let Err(e) = self.stop_all_for_parent(id).await {
                    tracing::error!(execution = %id, "cannot stop the children of the execution: {e}");
                }
                match self
                    .record_pause(&record, &call, &ledger, &logs, &done)
                    .await
                {
                    Ok(()) => {
                        trace::record_outcome(
                            &tracing::Span::current(),
                            Some(trace::AWAITING_APPROVAL),
                            started.elapsed().as_millis() as u64,
                        );
                        return;
                    }
                    Err(e) => RunOutcome::Failed(e),
                }
            }
            other => other,
        };
        let ending = Ending {
            logs,
            ..Ending::of(outcome, &def)
        };
        trace::record_outcome(
            &tracing::Span::current(),
            (ending.status != ExecutionStatus::Completed).then(|| ending.status.as_str()),
            started.elapsed().as_millis() as u64,
        );
        // No child outlives its parent's end: children it did not wait for are stopped (and
        // have ended) before the parent's terminal status is written.
        if let Err(e) = self.stop_all_for_parent(id).await {
            tracing::error!(execution = %id, "cannot stop the children of the execution: {e}");
        }
        self.record_end(record, ending, started, &done).await;
    }

    /// Runs the execution on its executor: a script in a runner (nested capabilities
    /// available, tool calls under the caller's policy), or an external command. Returns
    /// the end and the logs (a script's; none for an external command).
    async fn run(&self, record: &ExecutionRecord, run: Run) -> (RunOutcome, Vec<String>) {
        let limit = TimeLimit {
            accepted: run.accepted,
            limit: Duration::from_millis(run.timeout_ms),
        };
        let Run {
            capability,
            executor,
            principal,
            cancel,
            durable,
            program,
            ..
        } = run;
        let id = record.execution_id.as_str();
        match &executor.config.kind {
            ExecutorKind::Script => {
                // Always there: a run past the depth bound is refused with a clear error. A
                // program (`execute_code`) has the tools it was written for, and no more.
                let nested = match program {
                    Some(_) => None,
                    None => Some(self.nested_tools()),
                };
                let executor = match (&record.parent_id, &self.0.options.nested_executor) {
                    (Some(parent), Some(nested)) if self.live().contains_key(parent) => nested,
                    _ => &self.0.executor,
                };
                script::run(ScriptRun {
                    executor,
                    capability: &capability.config,
                    params: &record.params,
                    execution_id: id,
                    time_limit: limit.limit,
                    timeout: limit.left(),
                    cancel: cancel.clone(),
                    nested,
                    guard: Arc::new(match principal {
                        Some(p) => self.0.options.enforcement.for_principal(p),
                        None => self.0.options.enforcement.clone(),
                    }),
                    durable,
                    program: program.as_ref().map(|p| (p.code.as_str(), &p.tools.tools)),
                })
                .await
            }
            ExecutorKind::External { .. } => {
                let store = self.0.store.clone();
                let outcome = external::run(
                    ExternalRun {
                        executor: &executor.config,
                        capability: &capability.config,
                        params: &record.params,
                        execution_id: id,
                        parent_id: record.parent_id.as_deref(),
                        // Started at once (nothing to wait for), with its whole limit, as
                        // its envelope says.
                        timeout: limit.limit,
                        cancel: cancel.clone(),
                    },
                    |pgid| {
                        let (store, id) = (store.clone(), id.to_string());
                        tokio::spawn(async move {
                            if let Err(e) = store.set_pgid(&id, Some(pgid)).await {
                                tracing::warn!(execution = %id, "cannot record the executor's process group: {e}");
                            }
                        });
                    },
                )
                .await;
                (outcome, Vec::new())
            }
        }
    }

    /// Writes the end of an execution, audits it, and tells its waiters and the subscribers.
    /// When another process ended it first (recovered it as interrupted), that end stands
    /// and is what they are told.
    async fn record_end(
        &self,
        record: ExecutionRecord,
        ending: Ending,
        started: Instant,
        done: &watch::Sender<Option<ExecutionOutcome>>,
    ) {
        let id_owned = record.execution_id.clone();
        let id = id_owned.as_str();
        let Ending {
            status,
            result,
            additional_context: context,
            error,
            logs,
        } = ending;
        let ended = match self
            .0
            .store
            .finish(
                id,
                status,
                result.as_ref(),
                context.as_ref(),
                error.as_ref(),
                &logs,
            )
            .await
        {
            Ok(Some(t)) => t,
            Ok(None) => {
                let stored = self.0.store.get(id).await.ok().flatten();
                self.live().remove(id);
                if let Some(stored) = stored {
                    let _ = done.send(Some(stored.outcome()));
                    let status = stored.status;
                    let error = stored.error.clone();
                    self.emit(ExecutionEventKind::Failed, &stored, status, error);
                }
                return;
            }
            Err(e) => {
                // The end cannot be written: it is still reported (waiters must not hang),
                // and the next open of the store marks the row interrupted.
                tracing::error!(execution = %id, "cannot record the end of the execution: {e}");
                now_ms()
            }
        };
        if let Err(e) = self.audit(AuditEvent::capability_finished(
            id,
            record.principal.as_deref(),
            &record.capability,
            status.as_str(),
            started.elapsed(),
        )) {
            tracing::error!(execution = %id, "{e}");
        }
        let finished = ExecutionRecord {
            status,
            result,
            additional_context: context,
            error: error.clone(),
            logs,
            updated_ms: ended,
            ended_ms: Some(ended),
            pending_approval: None,
            ..record
        };
        self.live().remove(id);
        let _ = done.send(Some(finished.outcome()));
        let kind = match status {
            ExecutionStatus::Completed => ExecutionEventKind::Completed,
            ExecutionStatus::Timeout => ExecutionEventKind::Timeout,
            ExecutionStatus::Stopped => ExecutionEventKind::Stopped,
            _ => ExecutionEventKind::Failed,
        };
        self.emit(kind, &finished, status, error);
    }
}

/// How an execution ends, as its record says.
struct Ending {
    status: ExecutionStatus,
    result: Option<Value>,
    additional_context: Option<Value>,
    error: Option<CapabilityError>,
    /// The run's logs (a script's console lines and the host's notes).
    logs: Vec<String>,
}

impl Ending {
    /// The end of a run of the capability `def`: a result that does not match its
    /// `output_schema` is a failure (a fault of the capability).
    fn of(outcome: RunOutcome, def: &CapabilityDef) -> Ending {
        let name = &def.name;
        let failed = |status, code, message| Ending {
            status,
            result: None,
            additional_context: None,
            error: Some(err(code, message)),
            logs: Vec::new(),
        };
        match outcome {
            RunOutcome::Completed {
                result,
                additional_context,
            } => match output_mismatch(def, result.as_ref()) {
                None => Ending {
                    status: ExecutionStatus::Completed,
                    result,
                    additional_context,
                    error: None,
                    logs: Vec::new(),
                },
                Some(why) => failed(
                    ExecutionStatus::Failed,
                    CapabilityErrorCode::ExecutionFailed,
                    format!("capability `{name}` returned a result that does not match its output_schema (a fault of the capability): {why}"),
                ),
            },
            RunOutcome::Failed(message) => failed(
                ExecutionStatus::Failed,
                CapabilityErrorCode::ExecutionFailed,
                message,
            ),
            // Its answer is rebuilt from the program's error, kept beside the record's.
            RunOutcome::ProgramFailed { error, message } => {
                let (status, code) = match error.code {
                    ErrorCode::Timeout => (
                        ExecutionStatus::Timeout,
                        CapabilityErrorCode::ExecutionTimeout,
                    ),
                    _ => (
                        ExecutionStatus::Failed,
                        CapabilityErrorCode::ExecutionFailed,
                    ),
                };
                Ending {
                    additional_context: Some(
                        serde_json::json!({ PROGRAM_ERROR: error }),
                    ),
                    ..failed(status, code, message)
                }
            }
            RunOutcome::TimedOut(message) => failed(
                ExecutionStatus::Timeout,
                CapabilityErrorCode::ExecutionTimeout,
                message,
            ),
            RunOutcome::Stopped => failed(
                ExecutionStatus::Stopped,
                CapabilityErrorCode::ExecutionStopped,
                format!("capability `{name}` was stopped on request"),
            ),
            RunOutcome::Diverged(message) => failed(
                ExecutionStatus::Failed,
                CapabilityErrorCode::ReplayDiverged,
                message,
            ),
            // `drive` records a pause before it comes to an end.
            RunOutcome::Paused { call, .. } => failed(
                ExecutionStatus::Failed,
                CapabilityErrorCode::ExecutionFailed,
                format!("capability `{name}` paused for approval of {} and could not be kept paused", call.tool),
            ),
        }
    }
}

/// Why `result` (null when `None`) does not match the capability's `output_schema`, if it
/// has one and it does not.
fn output_mismatch(def: &CapabilityDef, result: Option<&Value>) -> Option<String> {
    def.output_schema.as_ref().and_then(|schema| {
        let value = result.cloned().unwrap_or(Value::Null);
        match Schema::compile(schema) {
            Err(e) => Some(format!("its output_schema is unusable: {e}")),
            Ok(s) => s.validate(&value, "result").err(),
        }
    })
}

/// An execution's time limit, counted from when it was accepted.
#[derive(Clone, Copy)]
struct TimeLimit {
    accepted: Instant,
    limit: Duration,
}

impl TimeLimit {
    /// What is left of it now.
    fn left(&self) -> Duration {
        self.limit.saturating_sub(self.accepted.elapsed())
    }
}
