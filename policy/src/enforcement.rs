//! The policy applied to executions: [`Enforcement`], the core's [`CallGuard`], and the one
//! place where the policy flags and the policy file become one ([`EnforcementOptions`]).
//!
//! A call goes through these steps; the first that refuses decides the answer, and every
//! refusal is audited before it is returned:
//!
//! 1. permissions: the principal must hold every permission the tool requires, else
//!    `tool_error` `<provider.tool>: permission denied`, reason `permission_denied` (the same
//!    words whether or not the tool exists; a tool the principal may not call is also left
//!    out of what it is shown);
//! 2. the rate limit, per principal and tool: `tool_error` `rate limit exceeded for
//!    <provider.tool>: <limit>; retry in <N> s`, reason `rate_limited` and `retryAfterMs`
//!    (the limiter's wait, rounded up to whole milliseconds);
//! 3. approval, for a tool that requires it: `tool_error` `<provider.tool>: approval denied`,
//!    reason `approval_denied` (someone said no), or `<provider.tool>: approval required`,
//!    reason `approval_required` (nobody could be asked);
//! 4. the call's `tool_call_started` line is written (if it cannot be, the call does not run
//!    and the execution ends); the call runs; its admission audits its outcome before the
//!    result may be sent.
//!
//! The reason (`error.reason`, `error.retryAfterMs` in the guest) lets code tell a refusal
//! from a failure of the tool without reading the message.
//!
//! Checking the rate limit before asking for approval spares a person questions about calls
//! that would be refused anyway; a call refused approval still counts against the limit.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::aliases::PermissionAliases;
use super::approval::{Approval, ApprovalRequest, ApproveAll, Approver, DenyAll};
use super::audit::{AuditEvent, AuditLog, AuditOutcome, InputDigest};
use super::limits::RateLimits;
use super::rules::RuledCall;
use super::{Policy, PolicyError, Principal, RuleAction, RuleDecision, StoreLocation};
use execbox_host::{
    Admission, Admitted, ApprovalAsk, CallGuard, ExecutionEnd, GuardError, GuardFuture,
    GuardedCall, MayAsk, RateLimit, ToolError, ToolRequirements,
};

/// What the policy flags of a front end say (`--policy --principal --audit-log --state
/// --approve-all`), before anything is opened; [`EnforcementOptions::open`] makes them an
/// [`Enforcement`].
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct EnforcementOptions {
    /// The policy file.
    pub policy: Option<PathBuf>,
    /// The principal to run as (a principal of the policy; needs `policy`).
    pub principal: Option<String>,
    /// The audit log (a file or a `postgres://` URL); else the policy's `audit.file`.
    pub audit_log: Option<StoreLocation>,
    /// Where rate-limit counters are kept (a SQLite file or a `postgres://` URL); else the
    /// policy's `state`; else in memory.
    pub state: Option<StoreLocation>,
    /// Approve every call of a tool that requires approval, without asking anyone.
    pub approve_all: bool,
    /// Each caller is named per request (a server's bearer tokens): the policy's principal
    /// is not resolved here, and `principal` must be `None`; until
    /// [`Enforcement::for_principal`], executions run as the policy's default principal (or
    /// one holding nothing, when the policy requires a principal).
    pub caller_per_request: bool,
}

impl EnforcementOptions {
    /// Loads the policy, resolves the principal, opens the rate-limit state and the audit log.
    /// Any failure is the caller's to report before anything runs (a PostgreSQL database
    /// that cannot be reached now is not one: calls that need it are refused until it is).
    pub fn open(&self) -> Result<Enforcement, PolicyError> {
        let (policy, principal) = match &self.policy {
            Some(path) => {
                let policy = Policy::load(path)?;
                let principal = match (self.caller_per_request, self.principal.as_deref()) {
                    (true, Some(_)) => return Err(PolicyError::PrincipalPerRequest),
                    (true, None) => policy
                        .principal(None)
                        .unwrap_or_else(|_| Principal::nobody()),
                    (false, name) => policy.principal(name)?,
                };
                (Some(policy), principal)
            }
            None if self.principal.is_some() => return Err(PolicyError::PrincipalWithoutPolicy),
            None => (None, Principal::unrestricted()),
        };
        let limits = match self.state_location(policy.as_ref()) {
            Some(state) => Arc::new(RateLimits::open_at(state)?),
            None => Arc::new(RateLimits::in_memory()),
        };
        let audit_log = self
            .audit_log
            .as_ref()
            .or_else(|| policy.as_ref().and_then(Policy::audit_log));
        let audit = match audit_log {
            Some(location) => {
                let include_input = policy.as_ref().is_some_and(Policy::audit_includes_input);
                Some(Arc::new(AuditLog::open_at(location, include_input)?))
            }
            None => None,
        };
        let mut enforcement = Enforcement::new(principal, limits);
        enforcement.policy = policy;
        enforcement.audit = audit;
        if self.approve_all {
            enforcement.approver = Arc::new(ApproveAll);
            enforcement.approve_all = true;
        }
        Ok(enforcement)
    }

    /// Where rate-limit counters (and observed results) are kept: `state`, else the policy's.
    pub fn state_location<'a>(&'a self, policy: Option<&'a Policy>) -> Option<&'a StoreLocation> {
        self.state
            .as_ref()
            .or_else(|| policy.and_then(Policy::state))
    }
}

/// The policy of executions: their principal, the shared rate-limit counters, the audit log
/// and the approver. The core calls it as a [`CallGuard`]; cheap to clone (shared parts).
///
/// ```
/// use std::sync::Arc;
/// use execbox_host::{ExecuteRequest, ToolSet};
/// use execbox_policy::{Enforcement, Policy, RateLimits};
///
/// let policy = Policy::builder().default_permissions(["weather:read"]).build().unwrap();
/// let enforcement = Enforcement::new(policy.principal(None).unwrap(), Arc::new(RateLimits::in_memory()));
/// let request = ExecuteRequest::new("1 + 1").tools(&ToolSet::empty()).guard(Arc::new(enforcement));
/// # let _ = request;
/// ```
#[derive(Clone)]
pub struct Enforcement {
    policy: Option<Policy>,
    principal: Principal,
    limits: Arc<RateLimits>,
    audit: Option<Arc<AuditLog>>,
    approver: Arc<dyn Approver>,
    approve_all: bool,
    aliases: Option<PermissionAliases>,
}

impl std::fmt::Debug for Enforcement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Enforcement")
            .field("principal", &self.principal.name())
            .field("limits", &self.limits)
            .field("audit", &self.audit.as_ref().map(|a| a.location()))
            .field("approve_all", &self.approve_all)
            .finish_non_exhaustive()
    }
}

impl Enforcement {
    /// Executions run by `principal`, counting against `limits`; no audit log, and approval
    /// refused ([`DenyAll`]) until an approver is set.
    pub fn new(principal: Principal, limits: Arc<RateLimits>) -> Self {
        Enforcement {
            policy: None,
            principal,
            limits,
            audit: None,
            approver: Arc::new(DenyAll),
            approve_all: false,
            aliases: None,
        }
    }

    /// No policy: every tool visible, the tools' own rate limits counted in memory, approvals
    /// refused until an approver is set.
    pub fn unrestricted() -> Self {
        Self::new(Principal::unrestricted(), Arc::new(RateLimits::in_memory()))
    }

    /// Checks callers against `policy` (a server's tokens, a capability's permissions); the
    /// principal stays as it is.
    pub fn with_policy(mut self, policy: Policy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Records every execution and call in `audit`.
    pub fn with_audit(mut self, audit: Arc<AuditLog>) -> Self {
        self.audit = Some(audit);
        self
    }

    /// Counts a grant of an alias in `aliases` as a grant of its permission (a tool named by
    /// another of its names; see [`PermissionAliases`]).
    pub fn with_permission_aliases(mut self, aliases: PermissionAliases) -> Self {
        self.aliases = Some(aliases);
        self
    }

    /// Decides calls of tools that require approval with `approver`.
    pub fn with_approver(mut self, approver: Arc<dyn Approver>) -> Self {
        self.approver = approver;
        self.approve_all = false;
        self
    }

    /// Asks `approver`, unless every call is approved already (`approve_all`): what a front
    /// end calls with its own way of asking (a terminal, an MCP client).
    pub fn asking(mut self, approver: Arc<dyn Approver>) -> Self {
        if !self.approve_all {
            self.approver = approver;
        }
        self
    }

    /// The same enforcement for another principal (the caller of one request of a server).
    pub fn for_principal(&self, principal: Principal) -> Self {
        Enforcement {
            principal,
            ..self.clone()
        }
    }

    /// The principal.
    pub fn principal(&self) -> &Principal {
        &self.principal
    }

    /// The policy file's policy, when one was loaded.
    pub fn policy(&self) -> Option<&Policy> {
        self.policy.as_ref()
    }

    /// The audit log, if any.
    pub fn audit(&self) -> Option<&Arc<AuditLog>> {
        self.audit.as_ref()
    }

    /// The rate-limit counters.
    pub fn rate_limits(&self) -> &Arc<RateLimits> {
        &self.limits
    }

    fn record(&self, event: &AuditEvent<'_>) -> Result<(), PolicyError> {
        match &self.audit {
            Some(log) => log.record(event),
            None => Ok(()),
        }
    }

    /// Runs the checks for `call` (its `tool` is `provider.tool`, as the guest called it);
    /// see the module docs for the order and the messages. An admitted call's
    /// `tool_call_started` line is written before this returns: if it cannot be, the call is
    /// not admitted ([`GuardError::Fatal`]).
    pub async fn admit_call(&self, call: GuardedCall<'_>) -> Result<AuditedCall, GuardError> {
        let GuardedCall {
            execution_id,
            tool,
            requirements,
            input,
            ..
        } = call;
        if !self.may_call_tool(requirements) {
            return Err(self.refuse(
                &AuditCall { call, rule: None },
                AuditOutcome::Denied,
                ToolError::tool(format!("{tool}: permission denied"))
                    .with_reason(REASON_PERMISSION_DENIED),
            ));
        }
        let ruled = self.rule_for(&call).await;
        let call = AuditCall {
            call,
            rule: ruled.as_ref(),
        };
        if let Some(decision) = ruled.as_ref().filter(|d| d.action == RuleAction::Block) {
            let message = match &decision.reason {
                Some(reason) => format!("{tool}: blocked by policy {}: {reason}", decision.rule),
                None => format!("{tool}: blocked by policy {}", decision.rule),
            };
            return Err(self.refuse(
                &call,
                AuditOutcome::Blocked,
                ToolError::tool(message).with_reason(REASON_BLOCKED),
            ));
        }
        if let Some(limit) = &requirements.rate_limit {
            match self.check_limit(tool, limit).await {
                Ok(()) => {}
                Err(e @ PolicyError::RateLimited { retry_after, .. }) => {
                    return Err(self.refuse(
                        &call,
                        AuditOutcome::RateLimited,
                        ToolError::tool(e.to_string())
                            .with_reason(REASON_RATE_LIMITED)
                            .with_retry_after_ms(retry_after_ms(retry_after)),
                    ))
                }
                Err(e) => {
                    tracing::error!("{e}");
                    let error = ToolError::tool(format!(
                        "{tool}: the call was refused because the rate-limit store is \
                         unavailable (the host cannot count calls of this tool now); \
                         try again later"
                    ));
                    return Err(self.refuse(&call, AuditOutcome::Error(error.code), error));
                }
            }
        }
        let needs_approval = match &ruled {
            Some(decision) => decision.action == RuleAction::Approve,
            None => requirements.requires_approval,
        };
        if needs_approval && !call.approved {
            let asked = match &ruled {
                Some(d) => ApprovalAsk::by_rule(&d.rule, d.reason.clone(), d.approvers.clone()),
                None => ApprovalAsk::default(),
            };
            let request = ApprovalRequest::new(
                execution_id.to_owned(),
                self.principal.name(),
                tool,
                input.clone(),
            )
            .asked_by(&asked);
            // Only the rule's approvers may answer: an approver that cannot tell who answers
            // is not asked (the call waits for them, durably, or is refused).
            let answer = if asked.approvers.is_empty() || self.approver.tells_who_answers() {
                self.approver.approve(request).await
            } else {
                Approval::Unavailable
            };
            // A denial is the core's one refusal (`execbox_host::approval_denied`), as for a
            // durable execution's call denied later.
            let refused = match answer {
                Approval::Approved => None,
                Approval::Denied => Some(execbox_host::approval_denied(tool, None)),
                Approval::NotAsked(why) => Some(execbox_host::approval_denied(tool, Some(&why))),
                Approval::Unavailable if call.can_pause => {
                    // Nobody can answer now, and the execution can wait durably for someone
                    // who can: it pauses at this call, which does not run.
                    let event = call.event(
                        self.principal.name(),
                        AuditOutcome::Status("awaiting_approval"),
                    );
                    self.record(&event).map_err(fatal)?;
                    return Err(GuardError::Pause(asked));
                }
                Approval::Unavailable if !asked.approvers.is_empty() => Some(
                    ToolError::tool(format!(
                        "{tool}: approval required from {} (policy {}); run the program as a \
                         durable execution so that it waits for their decision",
                        asked.approvers.join(", "),
                        asked.rule.as_deref().unwrap_or("rule")
                    ))
                    .with_reason(REASON_APPROVAL_REQUIRED),
                ),
                Approval::Unavailable => Some(
                    ToolError::tool(format!("{tool}: approval required"))
                        .with_reason(REASON_APPROVAL_REQUIRED),
                ),
            };
            if let Some(refusal) = refused {
                return Err(self.refuse(&call, AuditOutcome::ApprovalDenied, refusal));
            }
        }
        let digest = match &self.audit {
            Some(log) => {
                let digest = log.digest(input).map_err(fatal)?;
                // Written before the tool runs: a call that cannot be recorded does not run.
                let mut event = AuditEvent::tool_call_started(
                    execution_id,
                    self.principal.name(),
                    tool,
                    &digest,
                )
                .original_tool(call.original_name)
                .call_id(call.call_id);
                if let Some(rule) = call.rule {
                    event = event.rule(&rule.rule, rule.action);
                }
                log.record(&event).map_err(fatal)?;
                Some(digest)
            }
            None => None,
        };
        Ok(AuditedCall {
            audit: self.audit.clone(),
            execution_id: execution_id.to_owned(),
            principal: self.principal.name().map(Arc::from),
            tool: tool.to_owned(),
            original_tool: call.original_name.to_owned(),
            call_id: call.call_id.to_owned(),
            rule: ruled.map(|d| (d.rule, d.action)),
            input: digest,
            started: Instant::now(),
        })
    }

    /// The decision of the policy's first rule that matches the call, if one does. Cheap
    /// conditions are evaluated here; one that may cost more than [`INLINE_RULE_COST`] on
    /// this input runs on a blocking thread, so that no runtime worker waits on it.
    async fn rule_for(&self, call: &GuardedCall<'_>) -> Option<RuleDecision> {
        let policy = self.policy.as_ref().filter(|p| p.has_rules())?;
        let ruled = RuledCall {
            tool: call.tool,
            original_name: call.original_name,
            input: call.input,
            principal: &self.principal,
        };
        if policy.rules().estimated_cost(&ruled) <= INLINE_RULE_COST {
            return policy.rules().decide(&ruled);
        }
        let (policy, principal) = (policy.clone(), self.principal.clone());
        let (tool, original_name, input) = (
            call.tool.to_owned(),
            call.original_name.to_owned(),
            call.input.clone(),
        );
        let decided = tokio::task::spawn_blocking(move || {
            let decision = policy.rules().decide(&RuledCall {
                tool: &tool,
                original_name: &original_name,
                input: &input,
                principal: &principal,
            });
            execbox_host::json::drop_value(input);
            decision
        })
        .await;
        match decided {
            Ok(decision) => decision,
            // Fail closed: a rule that could not be evaluated never lets a call through.
            Err(e) => Some(RuleDecision {
                rule: "rules".to_string(),
                action: RuleAction::Block,
                reason: Some(format!("the policy's rules could not be evaluated ({e})")),
                approvers: Vec::new(),
            }),
        }
    }

    /// Whether the principal holds every permission a tool requires, itself or by an alias.
    fn may_call_tool(&self, requirements: &ToolRequirements) -> bool {
        match &self.aliases {
            Some(aliases) => aliases.may_call(&self.principal, requirements),
            None => self.principal.may_call(requirements),
        }
    }

    /// Counts the call. A check against a state file or database is a transaction that may
    /// wait for other processes or the network, so it runs on a blocking thread; in memory it
    /// is a few atomics.
    async fn check_limit(&self, tool: &str, limit: &RateLimit) -> Result<(), PolicyError> {
        if !self.limits.is_shared() {
            return self.limits.check(&self.principal, tool, limit);
        }
        let (limits, principal, tool_name, limit) = (
            self.limits.clone(),
            self.principal.clone(),
            tool.to_string(),
            *limit,
        );
        tokio::task::spawn_blocking(move || limits.check(&principal, &tool_name, &limit))
            .await
            .unwrap_or_else(|e| {
                Err(PolicyError::State {
                    path: Default::default(),
                    message: format!("the rate-limit check failed: {e}"),
                })
            })
    }

    /// Audits a refused call; an audit failure outranks the refusal.
    fn refuse(
        &self,
        call: &AuditCall<'_, '_>,
        outcome: AuditOutcome,
        error: ToolError,
    ) -> GuardError {
        let event = call
            .event(self.principal.name(), outcome)
            .error(&error.message);
        match self.record(&event) {
            Ok(()) => GuardError::Refused(error),
            Err(e) => fatal(e),
        }
    }
}

/// `error.reason` of a call refused because the principal lacks a permission the tool requires.
const REASON_PERMISSION_DENIED: &str = "permission_denied";
/// `error.reason` of a call refused by the tool's rate limit; `error.retryAfterMs` says when
/// the same call may be admitted.
const REASON_RATE_LIMITED: &str = "rate_limited";
/// The most a call's rules may cost (see [`crate::MAX_RULE_COST`]) to be evaluated on the
/// caller's thread: about a millisecond.
const INLINE_RULE_COST: u64 = 10_000;

/// `error.reason` of a call a policy rule blocks.
const REASON_BLOCKED: &str = "blocked";
/// `error.reason` of a call that needs approval when nobody could be asked.
const REASON_APPROVAL_REQUIRED: &str = "approval_required";

/// A rate limit's wait in whole milliseconds, rounded up so a retry after it is admitted,
/// and at least 1.
fn retry_after_ms(wait: Duration) -> u64 {
    let ms = wait.as_nanos().div_ceil(1_000_000);
    u64::try_from(ms).unwrap_or(u64::MAX).max(1)
}

/// A policy failure that must end the execution.
fn fatal(error: PolicyError) -> GuardError {
    GuardError::Fatal(error.to_string())
}

impl CallGuard for Enforcement {
    fn may_call(&self, requirements: &ToolRequirements) -> bool {
        self.may_call_tool(requirements)
    }

    fn may_ask(
        &self,
        provider: &str,
        name: &str,
        original_name: &str,
        requirements: &ToolRequirements,
    ) -> MayAsk {
        let may = match self.policy.as_ref().filter(|p| p.has_rules()) {
            Some(policy) => {
                let tool = format!("{provider}.{name}");
                policy.rules().may_ask(&tool, original_name, requirements)
            }
            None => MayAsk::of(requirements),
        };
        // Everything is approved already: nothing waits.
        if self.approve_all {
            MayAsk::No
        } else {
            may
        }
    }

    fn principal(&self) -> Option<&str> {
        self.principal.name()
    }

    fn execution_started(&self, execution_id: &str) -> Result<(), GuardError> {
        self.record(&AuditEvent::execution_started(
            execution_id,
            self.principal.name(),
        ))
        .map_err(fatal)
    }

    fn admit<'a>(
        &'a self,
        call: GuardedCall<'a>,
    ) -> GuardFuture<'a, Result<Box<dyn Admission>, GuardError>> {
        Box::pin(async move {
            let admitted = self.admit_call(call).await?;
            Ok(match admitted.input {
                // Nothing to record: no allocation for the admission either.
                None => Box::new(Admitted) as Box<dyn Admission>,
                Some(_) => Box::new(admitted),
            })
        })
    }

    fn execution_finished(&self, end: ExecutionEnd<'_>) -> Result<(), GuardError> {
        let outcome = match end.outcome {
            Ok(()) => AuditOutcome::Ok,
            Err(code) => AuditOutcome::Error(code),
        };
        let mut event = AuditEvent::execution_finished(
            end.execution_id,
            self.principal.name(),
            outcome,
            end.duration,
        );
        if let Some(message) = end.message {
            event = event.error(message);
        }
        self.record(&event).map_err(fatal)
    }
}

/// A call being checked, with the rule that decided it (if one did), for its audit lines.
struct AuditCall<'c, 'a> {
    call: GuardedCall<'a>,
    rule: Option<&'c RuleDecision>,
}

impl<'a> std::ops::Deref for AuditCall<'_, 'a> {
    type Target = GuardedCall<'a>;

    fn deref(&self) -> &GuardedCall<'a> {
        &self.call
    }
}

impl<'c> AuditCall<'c, '_> {
    /// The call's `tool_call` line with `outcome`.
    fn event<'e>(&'e self, principal: Option<&'e str>, outcome: AuditOutcome) -> AuditEvent<'e> {
        let event = AuditEvent::tool_call(
            self.call.execution_id,
            principal,
            self.call.tool,
            self.call.input,
            outcome,
            Duration::ZERO,
        )
        .original_tool(self.call.original_name)
        .call_id(self.call.call_id);
        match self.rule {
            Some(rule) => event.rule(&rule.rule, rule.action),
            None => event,
        }
    }
}

/// A call that passed the checks; [`AuditedCall::finish`] audits how it ended.
#[derive(Debug)]
#[must_use = "a call's audit line is written by `finish`"]
pub struct AuditedCall {
    audit: Option<Arc<AuditLog>>,
    execution_id: String,
    principal: Option<Arc<str>>,
    tool: String,
    original_tool: String,
    call_id: String,
    /// The rule that decided the call, and its action.
    rule: Option<(String, RuleAction)>,
    input: Option<InputDigest>,
    started: Instant,
}

impl AuditedCall {
    /// Audits the end of the call: `Ok(())`, or the error it failed with. An error means the
    /// line could not be written: do not send the result; end the execution.
    ///
    /// A call dropped before it finished (the execution ended, was cancelled or timed out
    /// while the tool ran or waited for approval) is audited as `cancelled` when dropped: a
    /// call that may have had effects is never missing from the log.
    pub fn finish(mut self, result: Result<(), &ToolError>) -> Result<(), PolicyError> {
        let (Some(input), Some(audit)) = (self.input.take(), self.audit.as_ref()) else {
            return Ok(());
        };
        let outcome = match result {
            Ok(()) => AuditOutcome::Ok,
            Err(e) => AuditOutcome::Error(e.code),
        };
        let mut event = AuditEvent::tool_call_digested(
            &self.execution_id,
            self.principal.as_deref(),
            &self.tool,
            &input,
            outcome,
            self.started.elapsed(),
        )
        .original_tool(&self.original_tool)
        .call_id(&self.call_id);
        if let Some((rule, action)) = &self.rule {
            event = event.rule(rule, *action);
        }
        if let Err(e) = result {
            event = event.error(&e.message);
        }
        audit.record(&event)
    }
}

impl Admission for AuditedCall {
    fn finish(self: Box<Self>, outcome: Result<(), &ToolError>) -> Result<(), GuardError> {
        AuditedCall::finish(*self, outcome).map_err(fatal)
    }
}

impl Drop for AuditedCall {
    fn drop(&mut self) {
        let (Some(input), Some(audit)) = (self.input.take(), self.audit.as_ref()) else {
            return;
        };
        let mut event = AuditEvent::tool_call_digested(
            &self.execution_id,
            self.principal.as_deref(),
            &self.tool,
            &input,
            AuditOutcome::Status("cancelled"),
            self.started.elapsed(),
        )
        .original_tool(&self.original_tool)
        .call_id(&self.call_id)
        .error("the execution ended before the call did");
        if let Some((rule, action)) = &self.rule {
            event = event.rule(rule, *action);
        }
        if let Err(e) = audit.record(&event) {
            tracing::error!(tool = %self.tool, "cannot audit a cancelled call: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::{json, Value};

    use execbox_host::BoxFuture;
    use execbox_protocol::ErrorCode;

    use super::super::approval::ApproveAll;
    use super::super::Policy;
    use super::*;

    fn audit_file() -> PathBuf {
        static N: AtomicUsize = AtomicUsize::new(0);
        std::env::temp_dir().join(format!(
            "execbox-guard-{}-{}.jsonl",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ))
    }

    fn read_lines(path: &PathBuf) -> Vec<Value> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn policy() -> Policy {
        Policy::builder()
            .role("reader", ["weather:read"])
            .principal("alice", ["reader"], [] as [&str; 0])
            .build()
            .unwrap()
    }

    fn tool(permissions: &[&str], limit: Option<(u32, u64)>, approval: bool) -> ToolRequirements {
        let mut requirements = ToolRequirements::default();
        requirements.permissions = permissions.iter().map(|p| p.to_string()).collect();
        requirements.rate_limit =
            limit.map(|(n, s)| RateLimit::new(n, Duration::from_secs(s)).unwrap());
        requirements.requires_approval = approval;
        requirements
    }

    fn refused(r: Result<AuditedCall, GuardError>) -> ToolError {
        match r {
            Err(GuardError::Refused(e)) => e,
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("admitted"),
        }
    }

    /// The issue's rule: payments over 100 wait for finance; huge ones are blocked.
    fn payments_policy() -> Policy {
        Policy::builder()
            .role("finance", ["executions:approve"])
            .principal("alice", [] as [&str; 0], [] as [&str; 0])
            .principal("carol", ["finance"], [] as [&str; 0])
            .rule(
                "pay.send",
                Some("input.amount > 1000000"),
                RuleAction::Block,
                [] as [&str; 0],
                Some("payments over a million are made by hand"),
            )
            .rule(
                "pay.send",
                Some("input.amount > 100"),
                RuleAction::Approve,
                ["finance"],
                Some("payments over 100"),
            )
            .rule("pay.refund", None, RuleAction::Allow, [] as [&str; 0], None)
            .build()
            .unwrap()
    }

    /// Records what it was asked and answers `answer`.
    struct Recording(std::sync::Mutex<Vec<ApprovalRequest>>, Approval, bool);

    impl Approver for Recording {
        fn approve(&self, request: ApprovalRequest) -> BoxFuture<Approval> {
            self.0.lock().unwrap().push(request);
            let answer = self.1.clone();
            Box::pin(async move { answer })
        }

        fn tells_who_answers(&self) -> bool {
            self.2
        }
    }

    #[tokio::test]
    async fn rules_on_the_input_allow_small_calls_ask_for_large_ones_and_block_huge_ones() {
        let file = audit_file();
        let audit = Arc::new(AuditLog::open(&file, false).unwrap());
        let policy = payments_policy();
        let alice = policy.principal(Some("alice")).unwrap();
        let asked = Arc::new(Recording(Default::default(), Approval::Approved, true));
        let guard = Enforcement::new(alice, Arc::new(RateLimits::in_memory()))
            .with_policy(policy)
            .with_audit(audit)
            .with_approver(asked.clone());
        // The tool itself requires approval: no rule matches a small payment, so it asks.
        let send = tool(&[], None, false);
        let small = json!({"amount": 1, "to": "bob"});
        guard
            .admit_call(GuardedCall::new("e1", "pay.send", &send, &small))
            .await
            .unwrap()
            .finish(Ok(()))
            .unwrap();
        assert!(
            asked.0.lock().unwrap().is_empty(),
            "a small payment asks nobody"
        );

        let large = json!({"amount": 500, "to": "bob"});
        guard
            .admit_call(GuardedCall::new("e1", "pay.send", &send, &large))
            .await
            .unwrap()
            .finish(Ok(()))
            .unwrap();
        {
            let requests = asked.0.lock().unwrap();
            assert_eq!(requests.len(), 1);
            assert_eq!(requests[0].rule.as_deref(), Some("rules[1]"));
            assert_eq!(requests[0].reason.as_deref(), Some("payments over 100"));
            assert_eq!(requests[0].approvers, ["finance"]);
        }

        let huge = json!({"amount": 2000000, "to": "bob"});
        let e = refused(
            guard
                .admit_call(GuardedCall::new("e1", "pay.send", &send, &huge))
                .await,
        );
        assert_eq!(
            e.message,
            "pay.send: blocked by policy rules[0]: payments over a million are made by hand"
        );
        assert_eq!(e.reason.as_deref(), Some("blocked"));

        // `allow` lets a call run that its tool would have held for approval.
        let refund = tool(&[], None, true);
        guard
            .admit_call(GuardedCall::new("e1", "pay.refund", &refund, &small))
            .await
            .unwrap()
            .finish(Ok(()))
            .unwrap();
        assert_eq!(asked.0.lock().unwrap().len(), 1);

        // A missing field fails closed.
        let e = refused(
            guard
                .admit_call(GuardedCall::new(
                    "e1",
                    "pay.send",
                    &send,
                    &json!({"to": "x"}),
                ))
                .await,
        );
        assert_eq!(e.reason.as_deref(), Some("blocked"));
        assert!(e.message.contains("no field `amount`"), "{}", e.message);

        let lines = read_lines(&file);
        let rules: Vec<(String, String, String)> = lines
            .iter()
            .map(|l| {
                (
                    l["event"].as_str().unwrap().to_string(),
                    l["rule"]["name"].as_str().unwrap_or("-").to_string(),
                    l["rule"]["action"].as_str().unwrap_or("-").to_string(),
                )
            })
            .collect();
        let s = |a: &str, b: &str, c: &str| (a.to_string(), b.to_string(), c.to_string());
        assert_eq!(
            rules,
            [
                s("tool_call_started", "-", "-"),
                s("tool_call", "-", "-"),
                s("tool_call_started", "rules[1]", "approve"),
                s("tool_call", "rules[1]", "approve"),
                s("tool_call", "rules[0]", "block"),
                s("tool_call_started", "rules[2]", "allow"),
                s("tool_call", "rules[2]", "allow"),
                s("tool_call", "rules[0]", "block"),
            ]
        );
        assert_eq!(lines[4]["outcome"], "blocked");
        let _ = std::fs::remove_file(&file);
    }

    #[tokio::test]
    async fn a_costly_condition_is_evaluated_off_the_runtime_and_still_decides() {
        let policy = Policy::builder()
            .rule(
                "pay.send",
                Some("input.items.exists(x, input.items.exists(y, x + y == 397))"),
                RuleAction::Block,
                [] as [&str; 0],
                Some("pairs"),
            )
            .build()
            .unwrap();
        let guard = Enforcement::new(
            policy.principal(None).unwrap(),
            Arc::new(RateLimits::in_memory()),
        )
        .with_policy(policy.clone());
        let items: Vec<u32> = (0..200).collect();
        let input = json!({ "items": items });
        let ruled = RuledCall {
            tool: "pay.send",
            original_name: "send",
            input: &input,
            principal: guard.principal(),
        };
        assert!(policy.rules().estimated_cost(&ruled) > INLINE_RULE_COST);
        let send = tool(&[], None, false);
        let e = refused(
            guard
                .admit_call(GuardedCall::new("e1", "pay.send", &send, &input))
                .await,
        );
        assert_eq!(e.reason.as_deref(), Some("blocked"));
        let small = json!({ "items": [1, 2] });
        guard
            .admit_call(GuardedCall::new("e1", "pay.send", &send, &small))
            .await
            .unwrap()
            .finish(Ok(()))
            .unwrap();
    }

    #[tokio::test]
    async fn a_rule_with_approvers_is_not_asked_of_whoever_is_at_hand() {
        let policy = payments_policy();
        let alice = policy.principal(Some("alice")).unwrap();
        let terminal = Arc::new(Recording(Default::default(), Approval::Approved, false));
        let guard = Enforcement::new(alice, Arc::new(RateLimits::in_memory()))
            .with_policy(policy)
            .with_approver(terminal.clone());
        let send = tool(&[], None, false);
        let large = json!({"amount": 500});
        let e = refused(
            guard
                .admit_call(GuardedCall::new("e1", "pay.send", &send, &large))
                .await,
        );
        assert!(terminal.0.lock().unwrap().is_empty());
        assert_eq!(e.reason.as_deref(), Some("approval_required"));
        assert!(
            e.message
                .starts_with("pay.send: approval required from finance (policy rules[1])"),
            "{}",
            e.message
        );
        // A durable execution pauses instead, naming the rule and its approvers.
        let mut call = GuardedCall::new("e1", "pay.send", &send, &large);
        call.can_pause = true;
        match guard.admit_call(call).await {
            Err(GuardError::Pause(asked)) => {
                assert_eq!(asked.rule.as_deref(), Some("rules[1]"));
                assert_eq!(asked.reason.as_deref(), Some("payments over 100"));
                assert_eq!(asked.approvers, ["finance"]);
            }
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("admitted"),
        }
    }

    #[tokio::test]
    async fn a_call_dropped_before_it_finished_is_audited_as_cancelled() {
        let file = audit_file();
        let audit = Arc::new(AuditLog::open(&file, false).unwrap());
        let limits = Arc::new(RateLimits::in_memory());
        let alice = policy().principal(Some("alice")).unwrap();
        let guard = Enforcement::new(alice, limits).with_audit(audit);
        let input = json!({"city": "Paris"});
        let admitted = guard
            .admit_call(GuardedCall::new(
                "e1",
                "weather.get",
                &tool(&["weather:read"], None, false),
                &input,
            ))
            .await
            .unwrap();
        // The execution ends while the tool runs: its future, and the admission, are dropped.
        drop(admitted);
        let lines = read_lines(&file);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(lines[0]["event"], "tool_call_started");
        assert_eq!(lines[1]["tool"], "weather.get");
        assert_eq!(lines[1]["original_tool"], "get");
        assert_eq!(lines[1]["outcome"], "cancelled");
        assert_eq!(lines[1]["error"], "the execution ended before the call did");
        let _ = std::fs::remove_file(&file);
    }

    #[tokio::test]
    async fn each_check_refuses_with_its_message_and_is_audited() {
        let file = audit_file();
        let audit = Arc::new(AuditLog::open(&file, false).unwrap());
        let limits = Arc::new(RateLimits::in_memory());
        let alice = policy().principal(Some("alice")).unwrap();
        let guard = Enforcement::new(alice, limits).with_audit(audit);
        guard.execution_started("e1").unwrap();
        let input = json!({"city": "Paris"});

        let e = refused(
            guard
                .admit_call(GuardedCall::new(
                    "e1",
                    "email.send",
                    &tool(&["email:send"], None, false),
                    &input,
                ))
                .await,
        );
        assert_eq!(
            (e.code, e.message.as_str()),
            (ErrorCode::ToolError, "email.send: permission denied")
        );
        assert_eq!(e.reason.as_deref(), Some("permission_denied"));
        assert_eq!(e.retry_after_ms, None);
        assert!(!guard.may_call(&tool(&["email:send"], None, false)));

        let limited = tool(&["weather:read"], Some((1, 60)), false);
        guard
            .admit_call(GuardedCall::new("e1", "weather.get", &limited, &input))
            .await
            .unwrap()
            .finish(Ok(()))
            .unwrap();
        let e = refused(
            guard
                .admit_call(GuardedCall::new("e1", "weather.get", &limited, &input))
                .await,
        );
        assert_eq!(
            e.message,
            "rate limit exceeded for weather.get: 1 per 1m; retry in 60 s"
        );
        assert_eq!(e.reason.as_deref(), Some("rate_limited"));
        // One call a minute, just taken: the wait is (nearly) the whole minute.
        let wait = e.retry_after_ms.unwrap();
        assert!((59_000..=60_000).contains(&wait), "{wait}");

        let e = refused(
            guard
                .admit_call(GuardedCall::new(
                    "e1",
                    "email.draft",
                    &tool(&[], None, true),
                    &input,
                ))
                .await,
        );
        assert_eq!(e.message, "email.draft: approval required");
        assert_eq!(e.reason.as_deref(), Some("approval_required"));

        let admitted = guard
            .admit_call(GuardedCall::new(
                "e1",
                "t.fails",
                &tool(&[], None, false),
                &input,
            ))
            .await
            .unwrap();
        admitted
            .finish(Err(&ToolError::timeout("t.fails: timed out")))
            .unwrap();
        guard
            .execution_finished(ExecutionEnd::new("e1", Ok(()), None, Duration::ZERO))
            .unwrap();

        let lines = read_lines(&file);
        let outcomes: Vec<(&str, &str)> = lines
            .iter()
            .map(|l| {
                (
                    l["event"].as_str().unwrap(),
                    l["outcome"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(
            outcomes,
            [
                ("execution_started", ""),
                ("tool_call", "denied"),
                ("tool_call_started", ""),
                ("tool_call", "ok"),
                ("tool_call", "rate_limited"),
                ("tool_call", "approval_denied"),
                ("tool_call_started", ""),
                ("tool_call", "timeout"),
                ("execution_finished", "ok"),
            ]
        );
        assert!(lines
            .iter()
            .all(|l| l["execution_id"] == "e1" && l["principal"] == "alice"));
        assert_eq!(lines[1]["error"], "email.send: permission denied");
        assert_eq!(lines[3]["input_sha256"], lines[4]["input_sha256"]);
        assert_eq!(lines[7]["error"], "t.fails: timed out");
        let _ = std::fs::remove_file(&file);
    }

    struct Recorder(std::sync::Mutex<Vec<ApprovalRequest>>, Approval);

    impl Approver for Recorder {
        fn approve(&self, request: ApprovalRequest) -> BoxFuture<Approval> {
            self.0.lock().unwrap().push(request);
            let answer = self.1.clone();
            Box::pin(async move { answer })
        }
    }

    #[tokio::test]
    async fn approvers_see_the_call_and_decide_it() {
        let limits = Arc::new(RateLimits::in_memory());
        let principal = Policy::new().principal(None).unwrap();
        let needs = tool(&[], None, true);
        let input = json!({"to": "bob"});
        let approve =
            Enforcement::new(principal.clone(), limits.clone()).with_approver(Arc::new(ApproveAll));
        approve
            .admit_call(GuardedCall::new("e1", "email.send", &needs, &input))
            .await
            .unwrap()
            .finish(Ok(()))
            .unwrap();
        let recorder = Arc::new(Recorder(Default::default(), Approval::Denied));
        let deny = Enforcement::new(principal, limits).with_approver(recorder.clone());
        let e = refused(
            deny.admit_call(GuardedCall::new("e1", "email.send", &needs, &input))
                .await,
        );
        assert_eq!(e.message, "email.send: approval denied");
        assert_eq!(e.reason.as_deref(), Some("approval_denied"));
        let asked = recorder.0.lock().unwrap().clone();
        assert_eq!(asked.len(), 1);
        assert_eq!(
            (asked[0].tool.as_str(), asked[0].execution_id.as_str()),
            ("email.send", "e1")
        );
        assert_eq!(asked[0].input, input);
        // A tool without requirements never asks.
        deny.admit_call(GuardedCall::new(
            "e1",
            "t.free",
            &ToolRequirements::default(),
            &input,
        ))
        .await
        .unwrap()
        .finish(Ok(()))
        .unwrap();
        assert_eq!(recorder.0.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn an_approver_that_could_not_be_asked_denies_saying_why() {
        let limits = Arc::new(RateLimits::in_memory());
        let principal = Policy::new().principal(None).unwrap();
        let needs = tool(&[], None, true);
        let input = json!({});
        let busy = Approval::NotAsked("every approver is busy".into());
        let guard = Enforcement::new(principal, limits)
            .with_approver(Arc::new(Recorder(Default::default(), busy)));
        let mut call = GuardedCall::new("e1", "email.send", &needs, &input);
        // Even an execution that could wait for someone is refused, not paused.
        call.can_pause = true;
        let e = refused(guard.admit_call(call).await);
        assert_eq!(
            e.message,
            "email.send: approval denied: every approver is busy"
        );
        assert_eq!(e.reason.as_deref(), Some("approval_denied"));
    }

    #[tokio::test]
    async fn a_state_file_limit_is_checked_off_the_async_threads() {
        let file = audit_file().with_extension("db");
        let limits = Arc::new(RateLimits::open(&file).unwrap());
        assert!(limits.is_shared());
        let guard = Enforcement::new(policy().principal(Some("alice")).unwrap(), limits);
        let limited = tool(&[], Some((1, 60)), false);
        let input = json!({});
        guard
            .admit_call(GuardedCall::new("e1", "t.x", &limited, &input))
            .await
            .unwrap()
            .finish(Ok(()))
            .unwrap();
        let e = refused(
            guard
                .admit_call(GuardedCall::new("e1", "t.x", &limited, &input))
                .await,
        );
        assert!(
            e.message
                .starts_with("rate limit exceeded for t.x: 1 per 1m; retry in "),
            "{}",
            e.message
        );
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", file.display()));
        }
    }

    #[tokio::test]
    async fn an_admitted_call_is_audited_before_it_runs_and_after() {
        let file = audit_file();
        let audit = Arc::new(AuditLog::open(&file, false).unwrap());
        let guard = Enforcement::new(
            Policy::new().principal(None).unwrap(),
            Arc::new(RateLimits::in_memory()),
        )
        .with_audit(audit);
        let requirements = ToolRequirements::default();
        let input = json!({"all": true});
        let mut call = GuardedCall::new("e1", "ops.delete_all__2", &requirements, &input);
        call.original_name = "delete_all";
        call.call_id = "c7";
        let admitted = guard.admit_call(call).await.unwrap();
        // Before the tool runs, its line is out.
        let before = read_lines(&file);
        assert_eq!(before.len(), 1, "{before:?}");
        admitted.finish(Ok(())).unwrap();
        let lines = read_lines(&file);
        let events: Vec<&str> = lines.iter().map(|l| l["event"].as_str().unwrap()).collect();
        assert_eq!(events, ["tool_call_started", "tool_call"]);
        for line in &lines {
            assert_eq!(line["tool"], "ops.delete_all__2", "{line}");
            assert_eq!(line["original_tool"], "delete_all", "{line}");
            assert_eq!(line["call_id"], "c7", "{line}");
            assert_eq!(line["input_sha256"], lines[0]["input_sha256"], "{line}");
        }
        assert!(lines[0].get("outcome").is_none(), "{}", lines[0]);
        assert_eq!(lines[1]["outcome"], "ok");
        let _ = std::fs::remove_file(&file);
    }

    #[tokio::test]
    async fn an_unwritable_audit_log_fails_closed() {
        if !std::path::Path::new("/dev/full").exists() {
            return;
        }
        let audit = Arc::new(AuditLog::open("/dev/full", false).unwrap());
        let guard = Enforcement::new(
            Policy::new().principal(None).unwrap(),
            Arc::new(RateLimits::in_memory()),
        )
        .with_audit(audit);
        assert!(matches!(
            guard.execution_started("e1"),
            Err(GuardError::Fatal(_))
        ));
        let denied = guard
            .admit_call(GuardedCall::new(
                "e1",
                "t.x",
                &tool(&["x:y"], None, false),
                &json!(null),
            ))
            .await;
        assert!(matches!(denied, Err(GuardError::Fatal(_))), "{denied:?}");
        // The admitted line cannot be written: the call is not admitted, so it never runs.
        let admitted = guard
            .admit_call(GuardedCall::new(
                "e1",
                "t.x",
                &ToolRequirements::default(),
                &json!(null),
            ))
            .await;
        match admitted {
            Err(GuardError::Fatal(message)) => assert!(
                message.starts_with("cannot write the audit log /dev/full")
                    && message.ends_with("refusing to run unaudited"),
                "{message}"
            ),
            other => panic!("{other:?}"),
        }
    }
}
