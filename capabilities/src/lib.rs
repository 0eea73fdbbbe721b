//! Capabilities for execbox: saved programs and the executors that run them, with tracked, stoppable,
//! persistent executions.
//!
//! - [`Registry`] discovers capabilities (`capabilities/<name>/capability.yaml`) and executors
//!   (`executors/<name>/executor.yaml`) from three roots ([`RegistryRoots`]): the project's
//!   `.execbox/`, the global root, and the built-in root shipped in the binary (the `script`
//!   executor). A higher root overrides a lower one by name, and its executors win a type.
//!   Invalid configurations are skipped with a warning and listed by [`Registry::issues`].
//! - [`ExecutionStore`] records every execution and its status history in SQLite (or
//!   PostgreSQL), and the replay ledger of an execution paused awaiting approval.
//! - [`CapabilityManager`] starts executions ([`StartRequest`]), tracks them
//!   ([`ExecutionRecord`], [`ExecutionStatus`]), waits for them ([`ExecutionOutcome`]), stops
//!   them (a whole tree with [`CapabilityManager::stop_all_for_parent`]) and publishes
//!   [`ExecutionEvent`]s.
//! - with the `serve` feature, [`capabilities_router`] is the HTTP API over a manager, with
//!   the approval console at `/console`.
//!
//! Module graph: `records` and `outcome` are leaves, `programs` reads `records`; `config` ← `registry`; `store`;
//! `external_executor` and `script_executor` (one executor each); `manager` uses them all;
//! `serve` uses `manager`, and mounts `console` (which reads `manager` and `store`).

mod config;
#[cfg(feature = "serve")]
mod console;
mod external_executor;
mod manager;
mod outcome;
mod programs;
mod records;
mod registry;
mod script_executor;
#[cfg(feature = "serve")]
mod serve;
mod store;

pub use config::{DEFAULT_CAPABILITY_TIMEOUT_MS, MAX_CAPABILITY_TIMEOUT_MS};
#[cfg(feature = "serve")]
pub use console::CONTENT_SECURITY_POLICY;
pub use external_executor::{MAX_EXECUTOR_STDERR_BYTES, MAX_EXECUTOR_STDOUT_BYTES, STOP_GRACE};
pub use manager::{
    CallRef, CapabilityManager, Decision, ManagerOptions, DEFAULT_MAX_DEPTH, DEFAULT_MAX_LIVE,
    DEFAULT_MAX_LIVE_PER_PRINCIPAL, DEFAULT_MAX_LIVE_PER_TREE, DEFAULT_PAUSE_EXPIRY,
    EVENT_CAPACITY, MAX_PAUSED_BYTES_PER_PRINCIPAL, MAX_PAUSED_PER_PRINCIPAL,
};
pub use programs::{
    program_result, KeptProgram, ProgramToolSet, ProgramTools, PROGRAM_ERROR, PROGRAM_TYPE,
};
pub use records::{
    CapabilityError, CapabilityErrorCode, DecisionRecord, ExecutionEvent, ExecutionEventKind,
    ExecutionFilter, ExecutionOutcome, ExecutionRecord, ExecutionStatus, PendingApproval,
    StartRequest, StatusChange,
};
pub use registry::{CapabilityInfo, ConfigIssue, ExecutorInfo, Registry, RegistryRoots, Source};
#[cfg(feature = "serve")]
pub use serve::{capabilities_router, serve_door, ADMIN_PERMISSION, MAX_REQUEST_BODY_BYTES};
pub use store::{
    ExecutionStore, ReplicaOptions, DEFAULT_REPLICA_TIMEOUT, INTERRUPTED_MESSAGE, MAX_LEDGER_BYTES,
};
