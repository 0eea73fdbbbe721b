//! The hook the core calls around every execution and tool call, and that a policy implements.
//!
//! The core knows no policy. An [`ExecuteRequest`](crate::ExecuteRequest) may carry a
//! [`CallGuard`]; [`Connection::execute`](crate::Connection::execute) then asks it, in order:
//! 1. [`CallGuard::may_call`] for each tool, once: the tools it refuses do not exist for the
//!    execution (absent from the manifest and the declarations, and a call of one is answered
//!    as a call of a missing tool, "permission denied");
//! 2. [`CallGuard::execution_started`] before the runner sees the code;
//! 3. [`CallGuard::admit`] for every call, after the tool is found and before its input is
//!    validated and its handler runs; a refusal is the call's answer, an
//!    [`Admission`] is kept while the call runs and [`Admission::finish`]ed with its outcome
//!    before the result may reach the runner;
//! 4. [`CallGuard::execution_finished`] with the outcome, before the result is returned.
//!
//! [`GuardError::Fatal`] from any of them ends the execution with `internal_error`: a guard
//! that cannot do its duty (an audit log that cannot be written) stops the execution rather
//! than let it run unguarded.
//!
//! **Fail closed without a guard**: a tool that declares a rate limit or an approval
//! ([`ToolRequirements::needs_guard`]) is refused, never run, in an execution that carries no
//! guard; a front end that forgot to attach one gets an error naming the tool, not a tool
//! running unlimited. Permissions alone need no guard: without one there is no principal to
//! hold them, and every tool is visible.
//!
//! `execbox-policy` implements this trait (permissions, rate limits, approvals, audit).

use std::time::Duration;

use serde_json::Value;

use crate::requirements::ToolRequirements;
use crate::tool::ToolError;

/// A boxed future that may borrow (from the guard and the call).
pub type GuardFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// One tool call as the guard sees it.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct GuardedCall<'a> {
    /// The execution the call belongs to.
    pub execution_id: &'a str,
    /// The runner's id of the call (`callId`), unique within the execution; empty when the
    /// call has none (a call made outside a runner).
    pub call_id: &'a str,
    /// `provider.tool` as the guest called it (the sandbox's name, a JavaScript identifier).
    pub tool: &'a str,
    /// The tool's own name, as its definition gives it (an MCP server's `delete-all`, a tools
    /// file's key); the same as the sandbox's name when that is a valid identifier.
    pub original_name: &'a str,
    /// What the tool declares it needs.
    pub requirements: &'a ToolRequirements,
    /// The call's input, parsed, not yet validated against the tool's schema.
    pub input: &'a Value,
    /// An approver approved this very call out of band, while its durable execution was
    /// paused at it: a guard must not ask again (it still checks everything else).
    pub approved: bool,
    /// The execution is durable ([`crate::ExecuteRequest::durable`]): a call that needs an
    /// approval nobody can give now may pause it ([`GuardError::Pause`]) instead of being
    /// refused.
    pub can_pause: bool,
}

impl<'a> GuardedCall<'a> {
    /// A call of `tool` (`provider.tool`, also its original name) with `input`.
    pub fn new(
        execution_id: &'a str,
        tool: &'a str,
        requirements: &'a ToolRequirements,
        input: &'a Value,
    ) -> Self {
        GuardedCall {
            execution_id,
            call_id: "",
            tool,
            original_name: tool.split_once('.').map_or(tool, |(_, name)| name),
            requirements,
            input,
            approved: false,
            can_pause: false,
        }
    }
}

/// Why a guard did not admit a call, or cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    /// The call is refused: it is answered with this error and the execution goes on.
    #[error("{0}")]
    Refused(ToolError),
    /// The guard cannot do its duty (for example its audit log cannot be written): the
    /// execution ends with `internal_error` and this message.
    #[error("{0}")]
    Fatal(String),
    /// Only when [`GuardedCall::can_pause`]: the call needs an approval nobody can give now.
    /// The execution pauses at it: it ends its run, and the result names the call
    /// ([`ExecuteResult::paused`](crate::ExecuteResult::paused)) so that it can be resumed
    /// once someone approves.
    #[error("the call waits for approval")]
    Pause(ApprovalAsk),
}

/// Who must decide a call that waits for approval, and why: what a guard that pauses an
/// execution ([`GuardError::Pause`]) says, kept with the paused call for its approvers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApprovalAsk {
    /// The policy rule that asked (its name, or `rules[N]`); `None` when the tool's own
    /// `requires_approval` did.
    pub rule: Option<String>,
    /// Why, in the rule's words, for the approver.
    pub reason: Option<String>,
    /// The roles or principals that may decide; empty: whoever the policy's approve
    /// permission names.
    pub approvers: Vec<String>,
}

impl ApprovalAsk {
    /// Asked by `rule`, for `reason`, of `approvers` (empty: the policy's approvers).
    pub fn by_rule(
        rule: impl Into<String>,
        reason: Option<String>,
        approvers: Vec<String>,
    ) -> Self {
        ApprovalAsk {
            rule: Some(rule.into()),
            reason,
            approvers,
        }
    }
}

/// How an execution ended, for [`CallGuard::execution_finished`].
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct ExecutionEnd<'a> {
    /// The execution's id.
    pub execution_id: &'a str,
    /// `Ok(())` or the wire error code it failed with (`timeout`, `tool_error`, ...).
    pub outcome: Result<(), execbox_protocol::ErrorCode>,
    /// The error's message, when it failed.
    pub message: Option<&'a str>,
    /// Wall time from the start of `Connection::execute`.
    pub duration: Duration,
}

impl<'a> ExecutionEnd<'a> {
    /// The end of `execution_id`, `Ok(())` or with the error code and message it failed with.
    pub fn new(
        execution_id: &'a str,
        outcome: Result<(), execbox_protocol::ErrorCode>,
        message: Option<&'a str>,
        duration: Duration,
    ) -> Self {
        ExecutionEnd {
            execution_id,
            outcome,
            message,
            duration,
        }
    }
}

/// A call the guard admitted; finished with the call's outcome before the result may be sent.
///
/// An admission dropped without [`finish`](Admission::finish) is a call cut short by the end
/// of its execution (cancelled, timed out, the runner gone): an implementation that records
/// calls records that on drop.
pub trait Admission: Send {
    /// Records the end of the call: `Ok(())` or the error it failed with. A
    /// [`GuardError::Fatal`] means the result must not be sent; the execution ends.
    fn finish(self: Box<Self>, outcome: Result<(), &ToolError>) -> Result<(), GuardError>;
}

/// An admission that records nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct Admitted;

impl Admission for Admitted {
    fn finish(self: Box<Self>, _: Result<(), &ToolError>) -> Result<(), GuardError> {
        Ok(())
    }
}

/// The hook of a policy: which tools an execution may see, and admission of each call.
///
/// Implemented by `execbox-policy`'s `Enforcement`; any embedding application may implement
/// its own. See the module docs for when each method is called.
pub trait CallGuard: Send + Sync {
    /// Whether a tool with these requirements exists for executions under this guard.
    fn may_call(&self, requirements: &ToolRequirements) -> bool;

    /// Who may have to approve a call of `provider.name` (`original_name` the tool's own
    /// name) before its input is known: what decides whether an execution records a ledger
    /// so that it can pause ([`crate::ExecuteRequest::durable`]). An answer may err towards
    /// asking; by default the tool's own `requires_approval`.
    fn may_ask(
        &self,
        provider: &str,
        name: &str,
        original_name: &str,
        requirements: &ToolRequirements,
    ) -> MayAsk {
        let _ = (provider, name, original_name);
        MayAsk::of(requirements)
    }

    /// The principal executions under this guard run as, when it names one: an attribute of
    /// their trace spans ([`trace`](crate::trace)), never a decision.
    fn principal(&self) -> Option<&str> {
        None
    }

    /// Called before the execution runs; a [`GuardError::Fatal`] means it must not.
    fn execution_started(&self, execution_id: &str) -> Result<(), GuardError> {
        let _ = execution_id;
        Ok(())
    }

    /// Decides a call: an [`Admission`] to run it, or the refusal to answer it with.
    fn admit<'a>(
        &'a self,
        call: GuardedCall<'a>,
    ) -> GuardFuture<'a, Result<Box<dyn Admission>, GuardError>>;

    /// Called once the execution has ended, before its result is returned; a
    /// [`GuardError::Fatal`] turns the result into an `internal_error`.
    fn execution_finished(&self, end: ExecutionEnd<'_>) -> Result<(), GuardError> {
        let _ = end;
        Ok(())
    }
}

/// Whether a call of a tool may wait for an approval, before its input is known
/// ([`CallGuard::may_ask`]); ordered from least to most.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum MayAsk {
    /// It never waits for an approval.
    No,
    /// It may wait for an approver: whoever the embedding asks may answer.
    Anyone,
    /// It may wait for approvers a policy names: only they may answer, so the execution must
    /// be able to wait for them durably.
    Named,
}

impl MayAsk {
    /// What a tool's own requirements say: [`MayAsk::Anyone`] for one that requires
    /// approval, else [`MayAsk::No`].
    pub fn of(requirements: &ToolRequirements) -> MayAsk {
        if requirements.requires_approval {
            MayAsk::Anyone
        } else {
            MayAsk::No
        }
    }
}

/// The refusal of a call that needs a guard in an execution that has none; `hint` says how
/// the embedding attaches a policy ([`crate::ToolSet::with_policy_hint`]).
pub(crate) fn unguarded(
    tool: &str,
    requirements: &ToolRequirements,
    hint: Option<&str>,
) -> ToolError {
    let what = if requirements.requires_approval {
        "requires approval"
    } else {
        "has a rate limit"
    };
    let todo = hint.unwrap_or(
        "attach a guard to the execution (execbox-policy's Enforcement, as the execbox CLI \
         does) to run it",
    );
    ToolError::tool(format!(
        "{tool}: this tool {what}, and this execution has no policy to enforce that, so the \
         call was refused; {todo}"
    ))
}
