//! Programs that are not capabilities (`execute_code` of `execbox mcp`) kept in the store
//! while they wait for an approval, and the tools they are resumed with.
//!
//! A front end whose program paused at a call nobody could approve at the time records it
//! here ([`CapabilityManager::pause_program`](crate::CapabilityManager::pause_program)): an
//! execution of type [`PROGRAM_TYPE`] whose `params` hold the code and the program's
//! `origin` (what its tools are: for `execbox mcp`, the MCP config and tools file it served).
//! From then on it is an execution like any other paused one: listed, shown, stopped, and
//! decided by `POST /v1/executions/{id}/approve` or `execbox executions approve|deny`. The
//! process that approves it resumes it, with the tools a [`ProgramTools`] given to its
//! manager ([`ManagerOptions::programs`](crate::ManagerOptions::programs)) builds from the
//! origin; a manager without one refuses to approve it and leaves it paused.
//!
//! Once it ends, its record keeps what its model's answer is made of ([`program_result`]):
//! the value (`result`) or the program's own error (`additionalContext.programError`), and
//! its logs.

use std::any::Any;

use execbox_host::{BoxFuture, ExecuteResult, PausedProgram, ToolSet};
use execbox_protocol::ErrorBody;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::records::{ExecutionRecord, ExecutionStatus};

/// The `type` of an execution that is a program, not a capability.
pub const PROGRAM_TYPE: &str = "program";

/// The key, in the record's `additionalContext`, of the error a program ended with (its
/// `{code, message, name?, location?, reason?}` as the runner or the host gave it).
pub const PROGRAM_ERROR: &str = "programError";

/// What program execution `record` ended with, as its front end answers a model with it
/// ([`execbox_host::model_answer`]): its value (completed), or its program's own error (failed
/// or timed out in the sandbox), with its logs. `None` when it is not a program, has not
/// ended, or ended without an answer of its program's (denied, stopped, diverged,
/// interrupted): its record's `error` says how.
pub fn program_result(record: &ExecutionRecord) -> Option<ExecuteResult> {
    if record.capability_type != PROGRAM_TYPE {
        return None;
    }
    let outcome = match record.status {
        ExecutionStatus::Completed => Ok(match &record.result {
            None => None,
            Some(value) => Some(RawValue::from_string(value.to_string()).ok()?),
        }),
        ExecutionStatus::Failed | ExecutionStatus::Timeout => {
            let error = record.additional_context.as_ref()?.get(PROGRAM_ERROR)?;
            Err(serde_json::from_value::<ErrorBody>(error.clone()).ok()?)
        }
        _ => return None,
    };
    Some(ExecuteResult {
        id: record.execution_id.clone(),
        outcome,
        logs: record.logs.clone(),
        logs_truncated: None,
        duration_ms: record
            .ended_ms
            .unwrap_or(record.updated_ms)
            .saturating_sub(record.created_ms),
        cancelled: false,
        ledger: None,
        paused: None,
    })
}

/// A program that paused at a call needing approval, to be kept in the store: the paused
/// program as every front end holds it ([`execbox_host::PausedProgram`]: its principal, the
/// call it waits on, its ledger and logs), and what it takes to run it again.
#[derive(Debug, Clone)]
pub struct KeptProgram {
    /// What ran it, shown as the record's `capability` (`execute_code`).
    pub name: String,
    /// The front end that ran it, shown as the record's `executor` (`mcp`).
    pub front_end: String,
    /// The program.
    pub code: String,
    /// What its tools are, handed to [`ProgramTools::tools`] when it resumes.
    pub origin: Value,
    /// Its time limit, which each resumed run gets again.
    pub timeout_ms: u64,
    /// The paused program; the store keeps it under an execution id of its own.
    pub paused: PausedProgram,
}

/// The tools of a resumed program, and whatever must live while they are used (upstream
/// connections): dropped when the run ends.
pub struct ProgramToolSet {
    /// The tools, under the names the program called them by.
    pub tools: ToolSet,
    /// Kept alive for the run.
    pub keep: Box<dyn Any + Send + Sync>,
}

impl std::fmt::Debug for ProgramToolSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProgramToolSet").finish_non_exhaustive()
    }
}

/// Builds the tools of a resumed program from its recorded `origin`. `Err` (a message for
/// the approver) when they cannot be had; the program then stays paused.
pub trait ProgramTools: Send + Sync {
    /// The tools of a program of `front_end` recorded with `origin`.
    fn tools(&self, front_end: &str, origin: &Value) -> BoxFuture<Result<ProgramToolSet, String>>;
}
