//! The records of capability executions: statuses, results, events, filters and error codes.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where an execution is in its life. `starting` and `running` are live and `stopping` is a
/// stop in progress (a process drives all three, see [`ExecutionStatus::is_running`]);
/// `awaiting_approval` is paused, with no process, until an approver answers the tool call
/// it waits on (approved: it runs again; denied or stopped: it ends); the other four are
/// terminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionStatus {
    /// Accepted; its executor is being set up.
    Starting,
    /// Its executor is running it.
    Running,
    /// Paused at a tool call that needs approval: no process runs it; its record names the
    /// call ([`ExecutionRecord::pending_approval`]) and the store keeps its replay ledger.
    AwaitingApproval,
    /// It ended with a result.
    Completed,
    /// It ended with an error (including an interrupted server).
    Failed,
    /// It ran past its time limit and was killed.
    Timeout,
    /// A stop was asked for; its executor is being ended.
    Stopping,
    /// It was stopped on request.
    Stopped,
}

impl ExecutionStatus {
    /// Every status, in life order.
    pub const ALL: [ExecutionStatus; 8] = [
        ExecutionStatus::Starting,
        ExecutionStatus::Running,
        ExecutionStatus::AwaitingApproval,
        ExecutionStatus::Completed,
        ExecutionStatus::Failed,
        ExecutionStatus::Timeout,
        ExecutionStatus::Stopping,
        ExecutionStatus::Stopped,
    ];

    /// The status as written in records and the database.
    pub fn as_str(self) -> &'static str {
        match self {
            ExecutionStatus::Starting => "starting",
            ExecutionStatus::Running => "running",
            ExecutionStatus::AwaitingApproval => "awaiting_approval",
            ExecutionStatus::Completed => "completed",
            ExecutionStatus::Failed => "failed",
            ExecutionStatus::Timeout => "timeout",
            ExecutionStatus::Stopping => "stopping",
            ExecutionStatus::Stopped => "stopped",
        }
    }

    /// Whether a process drives the execution now (starting, running or stopping): what a
    /// dead process or replica leaves in these statuses is failed as interrupted.
    pub fn is_running(self) -> bool {
        matches!(
            self,
            ExecutionStatus::Starting | ExecutionStatus::Running | ExecutionStatus::Stopping
        )
    }

    /// Whether the execution has ended (completed, failed, timeout or stopped); an execution
    /// awaiting approval has not.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            ExecutionStatus::Completed
                | ExecutionStatus::Failed
                | ExecutionStatus::Timeout
                | ExecutionStatus::Stopped
        )
    }
}

impl fmt::Display for ExecutionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ExecutionStatus {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        ExecutionStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown status `{s}`; expected one of {}",
                    ExecutionStatus::ALL.map(|s| s.as_str()).join(", ")
                )
            })
    }
}

/// The error codes of the capability system: the seed's, plus `PERMISSION_DENIED`,
/// `EXECUTION_STOPPED`, `EXECUTION_NOT_FOUND`, `TOO_MANY_EXECUTIONS` and the three of
/// durable executions (`APPROVAL_DENIED`, `REPLAY_DIVERGED`, `NOT_AWAITING_APPROVAL`), which
/// it has no word for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CapabilityErrorCode {
    /// No capability with the given name (and type).
    CapabilityNotFound,
    /// No executor supports the capability's type.
    ExecutorNotFound,
    /// A capability.yaml is malformed (from `check`).
    InvalidCapabilityConfig,
    /// An executor.yaml is malformed (from `check`).
    InvalidExecutorConfig,
    /// The request is invalid: params failing `input_schema`, a bad filter, nesting too deep,
    /// or an approval of a paused program whose tools cannot be started (it stays paused).
    InvalidRequest,
    /// The caller lacks a permission the capability requires.
    PermissionDenied,
    /// The execution ran past its time limit.
    ExecutionTimeout,
    /// The executor reported an error, or the result failed `output_schema`.
    ExecutionFailed,
    /// The execution was stopped on request.
    ExecutionStopped,
    /// No execution has this id.
    ExecutionNotFound,
    /// Starting it would run more executions at once than allowed: in the whole server, for
    /// one principal, or in one tree of nested executions. Wait for (or stop) one and retry.
    TooManyExecutions,
    /// The registry or the execution store is not usable.
    RegistryNotInitialized,
    /// An approver denied the tool call the execution was paused on, so it failed there.
    /// Nothing to retry as is: change the program or its input so it does not need that
    /// call, or ask an approver who may allow it.
    ApprovalDenied,
    /// A resumed execution, run again from the start, made a different call (or called in
    /// another order) than its replay ledger recorded before the pause, so it could not be
    /// continued. The program must be deterministic up to the call that waits for approval
    /// (take time and randomness from the host, not from other sources); start it again.
    ReplayDiverged,
    /// An approval or a denial named an execution that is not paused for approval (it is
    /// running, was already approved, denied or stopped, or ended). Get the execution to see
    /// its status; there is nothing to approve.
    NotAwaitingApproval,
    /// A decision named another call than the one the execution waits on now (an approver
    /// was shown an earlier call, since decided, and the program went on to pause at a later
    /// one), or gave an input digest that is not the waiting call's. Nothing was decided:
    /// get the execution again and decide the call it shows.
    DecisionMismatch,
}

impl CapabilityErrorCode {
    /// The code as written on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            CapabilityErrorCode::CapabilityNotFound => "CAPABILITY_NOT_FOUND",
            CapabilityErrorCode::ExecutorNotFound => "EXECUTOR_NOT_FOUND",
            CapabilityErrorCode::InvalidCapabilityConfig => "INVALID_CAPABILITY_CONFIG",
            CapabilityErrorCode::InvalidExecutorConfig => "INVALID_EXECUTOR_CONFIG",
            CapabilityErrorCode::InvalidRequest => "INVALID_REQUEST",
            CapabilityErrorCode::PermissionDenied => "PERMISSION_DENIED",
            CapabilityErrorCode::ExecutionTimeout => "EXECUTION_TIMEOUT",
            CapabilityErrorCode::ExecutionFailed => "EXECUTION_FAILED",
            CapabilityErrorCode::ExecutionStopped => "EXECUTION_STOPPED",
            CapabilityErrorCode::ExecutionNotFound => "EXECUTION_NOT_FOUND",
            CapabilityErrorCode::TooManyExecutions => "TOO_MANY_EXECUTIONS",
            CapabilityErrorCode::RegistryNotInitialized => "REGISTRY_NOT_INITIALIZED",
            CapabilityErrorCode::ApprovalDenied => "APPROVAL_DENIED",
            CapabilityErrorCode::ReplayDiverged => "REPLAY_DIVERGED",
            CapabilityErrorCode::NotAwaitingApproval => "NOT_AWAITING_APPROVAL",
            CapabilityErrorCode::DecisionMismatch => "DECISION_MISMATCH",
        }
    }

    /// Reads a code written by [`CapabilityErrorCode::as_str`].
    pub fn parse(s: &str) -> Option<CapabilityErrorCode> {
        use CapabilityErrorCode::*;
        [
            CapabilityNotFound,
            ExecutorNotFound,
            InvalidCapabilityConfig,
            InvalidExecutorConfig,
            InvalidRequest,
            PermissionDenied,
            ExecutionTimeout,
            ExecutionFailed,
            ExecutionStopped,
            ExecutionNotFound,
            TooManyExecutions,
            RegistryNotInitialized,
            ApprovalDenied,
            ReplayDiverged,
            NotAwaitingApproval,
            DecisionMismatch,
        ]
        .into_iter()
        .find(|c| c.as_str() == s)
    }
}

impl fmt::Display for CapabilityErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error of the capability system: a code and a message saying what to do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct CapabilityError {
    /// What kind of error.
    pub code: CapabilityErrorCode,
    /// What went wrong, naming the thing, what was expected and what to do.
    pub message: String,
}

impl CapabilityError {
    /// An error with `code` and `message`.
    pub fn new(code: CapabilityErrorCode, message: impl Into<String>) -> Self {
        CapabilityError {
            code,
            message: message.into(),
        }
    }
}

/// What to start: the body of `POST /v1/executions`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StartRequest {
    /// The capability's name.
    pub capability: String,
    /// Its type, if the caller wants to be sure of it (`CAPABILITY_NOT_FOUND` otherwise).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub capability_type: Option<String>,
    /// The params, checked against the capability's `input_schema`; `null` when absent.
    #[serde(default)]
    pub params: Value,
    /// The time limit, overriding the capability's `timeout_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// The parent: an execution id (a nested capability) or any id of the caller's (an agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
}

impl StartRequest {
    /// Starts `capability` with `params`.
    pub fn new(capability: impl Into<String>, params: Value) -> Self {
        StartRequest {
            capability: capability.into(),
            params,
            ..StartRequest::default()
        }
    }

    /// Requires the capability to have this type.
    pub fn capability_type(mut self, capability_type: impl Into<String>) -> Self {
        self.capability_type = Some(capability_type.into());
        self
    }

    /// The time limit in milliseconds.
    pub fn timeout_ms(mut self, timeout_ms: u64) -> Self {
        self.timeout_ms = Some(timeout_ms);
        self
    }

    /// The parent id.
    pub fn parent_id(mut self, parent_id: impl Into<String>) -> Self {
        self.parent_id = Some(parent_id.into());
        self
    }
}

/// One execution as recorded (the database row), as `GET /v1/executions/{id}` returns it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionRecord {
    /// `cap_<unix-ms>_<8 hex>`.
    pub execution_id: String,
    /// The capability's name.
    pub capability: String,
    /// Its type.
    #[serde(rename = "type")]
    pub capability_type: String,
    /// The executor that runs it.
    pub executor: String,
    /// The capability's folder.
    pub capability_path: String,
    /// The parent id, if any.
    pub parent_id: Option<String>,
    /// The principal that started it, if any.
    pub principal: Option<String>,
    /// Where it is.
    pub status: ExecutionStatus,
    /// The params it was started with.
    pub params: Value,
    /// Its result, once completed.
    pub result: Option<Value>,
    /// Extra context its executor gave, once completed; for a program (type `program`)
    /// that failed or timed out in the sandbox, `{programError: {code, message, ...}}`, the
    /// error its model's answer is rebuilt from ([`program_result`](crate::program_result)).
    pub additional_context: Option<Value>,
    /// Why it failed, timed out or stopped.
    pub error: Option<CapabilityError>,
    /// The console lines of a script execution, then the host's `[execbox]` notes (what the
    /// log limits left out, tool calls the program did not await), once it ended; absent
    /// when there are none (external executors have none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub logs: Vec<String>,
    /// When it was started, Unix milliseconds.
    pub created_ms: u64,
    /// When its status last changed, Unix milliseconds.
    pub updated_ms: u64,
    /// When it ended, Unix milliseconds.
    pub ended_ms: Option<u64>,
    /// The `execbox serve` replica that runs (or ran) it, when executions live in PostgreSQL
    /// and replicas share them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<String>,
    /// The tool call it waits on: present exactly while the status is `awaiting_approval`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_approval: Option<PendingApproval>,
    /// The decisions taken on its calls, oldest first: what a retried decision is answered
    /// from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub decisions: Vec<DecisionRecord>,
}

/// A decision taken on a call of a paused execution.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DecisionRecord {
    /// The call's number, from 1.
    pub call: u32,
    /// `provider.tool`.
    pub tool: String,
    /// The SHA-256 of its input over canonical JSON.
    pub input_sha256: String,
    /// Approved (`true`) or denied.
    pub approved: bool,
    /// The approver's principal, if any; `expiry` for a call denied because it waited past
    /// the pause expiry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// A denial's reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When, Unix milliseconds.
    pub at_ms: u64,
}

/// The call a paused execution waits on, as the approver sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingApproval {
    /// `provider.tool`, as the guest called it.
    pub tool: String,
    /// The call's input (validated against the tool's schema).
    pub input: Value,
    /// The call's position in the execution's ledger, from 1: what a decision names.
    pub call: u32,
    /// The SHA-256 of its input over canonical JSON, in lowercase hex: a decision may name
    /// it too (`inputSha256`), to be sure it decides the input it was shown.
    #[serde(default)]
    pub input_sha256: String,
    /// The permission an approver must hold.
    pub permission: String,
    /// Whether the principal that started the execution may approve it.
    pub self_approval: bool,
    /// The policy rule that asked for this approval (`rules[2]`, or the rule's `name`);
    /// `None` when the tool's own `requires_approval` asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// The rule's `reason`, shown to the approver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The roles or principals the rule names as its approvers; empty: whoever holds
    /// `permission`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvers: Vec<String>,
    /// It paused under a policy: only under a policy may it be decided and resumed (without
    /// one, nothing would check who decides, nor apply the policy's rules to the rest of
    /// the program).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub under_policy: bool,
    /// When it paused, Unix milliseconds.
    pub since_ms: u64,
}

impl PendingApproval {
    /// As stored: one paused before the input digest was recorded gets it now.
    pub(crate) fn with_digest(mut self) -> PendingApproval {
        if self.input_sha256.is_empty() {
            self.input_sha256 = execbox_host::input_sha256(&self.input);
        }
        self
    }
}

impl ExecutionRecord {
    /// The result a waiter gets (meaningful once the status is terminal, or
    /// `awaiting_approval`).
    pub fn outcome(&self) -> ExecutionOutcome {
        ExecutionOutcome {
            success: self.status == ExecutionStatus::Completed,
            execution_id: self.execution_id.clone(),
            status: self.status,
            result: self.result.clone(),
            additional_context: self.additional_context.clone(),
            error: self.error.clone(),
            logs: self.logs.clone(),
            capability_path: self.capability_path.clone(),
            pending_approval: self.pending_approval.clone(),
        }
    }
}

/// A status change, in an execution's history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusChange {
    /// The new status.
    pub status: ExecutionStatus,
    /// When, Unix milliseconds.
    pub at_ms: u64,
    /// Why, when it says more than the status.
    pub detail: Option<String>,
}

/// What [`wait`](crate::CapabilityManager::wait) returns for an ended execution.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionOutcome {
    /// True when it completed.
    pub success: bool,
    /// The execution.
    pub execution_id: String,
    /// Its terminal status.
    pub status: ExecutionStatus,
    /// Its result (completed only).
    pub result: Option<Value>,
    /// Extra context from its executor (completed only).
    pub additional_context: Option<Value>,
    /// What went wrong (not completed).
    pub error: Option<CapabilityError>,
    /// The console lines of a script execution, then the host's `[execbox]` notes (what the
    /// log limits left out, tool calls the program did not await), once it ended; absent
    /// when there are none (external executors have none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub logs: Vec<String>,
    /// The capability's folder, to resolve resources relative to it.
    pub capability_path: String,
    /// With status `awaiting_approval`: the call it waits on (it has not ended; approve or
    /// deny it with `POST /v1/executions/{id}/approve`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_approval: Option<PendingApproval>,
}

/// Which executions to list; every field narrows the list.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionFilter {
    /// Only this status.
    pub status: Option<ExecutionStatus>,
    /// Only children of this parent.
    pub parent_id: Option<String>,
    /// Only executions of this capability.
    pub capability: Option<String>,
    /// Only executions started by this principal.
    pub principal: Option<String>,
    /// At most this many, newest first (default 1,000).
    pub limit: Option<u32>,
}

/// What happened, on the event stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionEventKind {
    /// Accepted and being started.
    Started,
    /// Paused at a tool call that needs approval (`awaiting_approval`).
    AwaitingApproval,
    /// Approved and running again, from the start, with its ledger answering the calls it
    /// made before the pause.
    Resumed,
    /// Ended with a result.
    Completed,
    /// Ended with an error.
    Failed,
    /// Ran past its time limit.
    Timeout,
    /// Stopped on request.
    Stopped,
}

impl ExecutionEventKind {
    /// The event's name (`started`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            ExecutionEventKind::Started => "started",
            ExecutionEventKind::AwaitingApproval => "awaiting_approval",
            ExecutionEventKind::Resumed => "resumed",
            ExecutionEventKind::Completed => "completed",
            ExecutionEventKind::Failed => "failed",
            ExecutionEventKind::Timeout => "timeout",
            ExecutionEventKind::Stopped => "stopped",
        }
    }
}

/// One event of [`CapabilityManager::subscribe`](crate::CapabilityManager::subscribe),
/// sent after the change it reports is in the database.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionEvent {
    /// What happened.
    pub event: ExecutionEventKind,
    /// The execution.
    pub execution_id: String,
    /// Its capability.
    pub capability: String,
    /// Its parent, if any.
    pub parent_id: Option<String>,
    /// The principal that started it, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// Its status after the event.
    pub status: ExecutionStatus,
    /// The error, for failed, timeout and stopped.
    pub error: Option<CapabilityError>,
    /// With the end of a script execution: its logs, as [`ExecutionRecord::logs`]; absent
    /// when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub logs: Vec<String>,
    /// When, Unix milliseconds.
    pub at_ms: u64,
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
