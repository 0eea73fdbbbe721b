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

use std::any::Any;

use execbox_host::{BoxFuture, PausedProgram, ToolSet};
use serde_json::Value;

/// The `type` of an execution that is a program, not a capability.
pub const PROGRAM_TYPE: &str = "program";

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
