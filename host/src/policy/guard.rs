//! One execution under a policy: which tools exist for its principal, and the checks and the
//! audit line of each call.
//!
//! A call goes through these steps; the first that refuses decides the answer, and every
//! refusal is audited before it is returned:
//!
//! 1. permissions: the principal must hold every permission the tool requires, else
//!    `tool_error` `<provider.tool>: permission denied` (the same words whether or not the
//!    tool exists; a tool the principal may not call is also left out of what it is shown);
//! 2. the rate limit, per principal and tool: `tool_error` `rate limit exceeded for
//!    <provider.tool>: <limit>; retry in <N> s`;
//! 3. approval, for a tool that requires it: `tool_error` `<provider.tool>: approval denied`
//!    (someone said no) or `<provider.tool>: approval required` (nobody could be asked);
//! 4. the call runs; [`Admitted::finish`] audits its outcome before the result may be sent.
//!
//! Checking the rate limit before asking for approval spares a person questions about calls
//! that would be refused anyway; a call refused approval still counts against the limit.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::approval::{Approval, ApprovalRequest, Approver, DenyAll};
use super::audit::{AuditEvent, AuditLog, AuditOutcome, InputDigest};
use super::limits::{RateLimit, RateLimits};
use super::{PolicyError, Principal, ToolPolicy};
use crate::tool::ToolError;

/// Why [`ExecutionGuard::admit`] did not admit a call.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    /// The call is refused: answer it with this error; the execution goes on.
    #[error("{0}")]
    Refused(ToolError),
    /// The audit log cannot be written: end the execution (failed closed).
    #[error(transparent)]
    Audit(PolicyError),
}

/// The policy of one execution: its principal, the shared rate-limit counters, the audit
/// log and the approver. Cheap to build per execution.
///
/// ```
/// use std::sync::Arc;
/// use execbox_host::{ExecutionGuard, Policy, RateLimits, ToolPolicy};
///
/// # async fn demo() {
/// let policy = Policy::builder().default_permissions(["weather:read"]).build().unwrap();
/// let limits = Arc::new(RateLimits::in_memory());
/// let guard = ExecutionGuard::new("exec-1", policy.principal(None).unwrap(), limits);
/// let input = serde_json::json!({"city": "Paris"});
/// let admitted = guard.admit("weather.get", &ToolPolicy::default(), &input).await.unwrap();
/// // ... run the tool, then record how it went:
/// admitted.finish(Ok(())).unwrap();
/// # }
/// ```
pub struct ExecutionGuard {
    execution_id: String,
    principal: Principal,
    limits: Arc<RateLimits>,
    audit: Option<Arc<AuditLog>>,
    approver: Arc<dyn Approver>,
    started: Instant,
}

impl std::fmt::Debug for ExecutionGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutionGuard")
            .field("execution_id", &self.execution_id)
            .field("principal", &self.principal.name())
            .field("limits", &self.limits)
            .field("audit", &self.audit.as_ref().map(|a| a.path()))
            .finish_non_exhaustive()
    }
}

impl ExecutionGuard {
    /// A guard for `execution_id` run by `principal`, counting against `limits`; no audit
    /// log, and approval refused ([`DenyAll`]) until an approver is set.
    pub fn new(
        execution_id: impl Into<String>,
        principal: Principal,
        limits: Arc<RateLimits>,
    ) -> Self {
        ExecutionGuard {
            execution_id: execution_id.into(),
            principal,
            limits,
            audit: None,
            approver: Arc::new(DenyAll),
            started: Instant::now(),
        }
    }

    /// Records every event in `audit`.
    pub fn with_audit(mut self, audit: Arc<AuditLog>) -> Self {
        self.audit = Some(audit);
        self
    }

    /// Decides calls of tools that require approval with `approver`.
    pub fn with_approver(mut self, approver: Arc<dyn Approver>) -> Self {
        self.approver = approver;
        self
    }

    /// The principal.
    pub fn principal(&self) -> &Principal {
        &self.principal
    }

    /// Whether the tool exists for this principal (it holds every permission required).
    pub fn may_call(&self, tool: &ToolPolicy) -> bool {
        self.principal.may_call(tool)
    }

    /// Audits the start of the execution; an error means it must not run.
    pub fn started(&self) -> Result<(), PolicyError> {
        self.record(&AuditEvent::execution_started(
            &self.execution_id,
            self.principal.name(),
        ))
    }

    /// Audits the end of the execution with its outcome (and error message).
    pub fn finished(&self, outcome: AuditOutcome, error: Option<&str>) -> Result<(), PolicyError> {
        let mut event = AuditEvent::execution_finished(
            &self.execution_id,
            self.principal.name(),
            outcome,
            self.started.elapsed(),
        );
        if let Some(error) = error {
            event = event.error(error);
        }
        self.record(&event)
    }

    fn record(&self, event: &AuditEvent<'_>) -> Result<(), PolicyError> {
        match &self.audit {
            Some(log) => log.record(event),
            None => Ok(()),
        }
    }

    /// Runs the checks for a call of `tool` (`provider.tool`, as the guest called it) with
    /// `input`; see the module docs for the order and the messages.
    pub async fn admit<'g>(
        &'g self,
        tool: &'g str,
        policy: &ToolPolicy,
        input: &Value,
    ) -> Result<Admitted<'g>, GuardError> {
        if !self.principal.may_call(policy) {
            return Err(self.refuse(
                tool,
                input,
                AuditOutcome::Denied,
                ToolError::tool(format!("{tool}: permission denied")),
            ));
        }
        if let Some(limit) = &policy.rate_limit {
            match self.check_limit(tool, limit).await {
                Ok(()) => {}
                Err(e @ PolicyError::RateLimited { .. }) => {
                    return Err(self.refuse(
                        tool,
                        input,
                        AuditOutcome::RateLimited,
                        ToolError::tool(e.to_string()),
                    ))
                }
                Err(e) => {
                    tracing::error!("{e}");
                    let error = ToolError::tool(format!(
                        "{tool}: the host cannot check this tool's rate limit now \
                         (its rate-limit state is unavailable)"
                    ));
                    return Err(self.refuse(tool, input, AuditOutcome::Error(error.code), error));
                }
            }
        }
        if policy.requires_approval {
            let request = ApprovalRequest::new(
                self.execution_id.clone(),
                self.principal.name(),
                tool,
                input.clone(),
            );
            let refused = match self.approver.approve(request).await {
                Approval::Approved => None,
                Approval::Denied => Some("approval denied"),
                Approval::Unavailable => Some("approval required"),
            };
            if let Some(why) = refused {
                return Err(self.refuse(
                    tool,
                    input,
                    AuditOutcome::ApprovalDenied,
                    ToolError::tool(format!("{tool}: {why}")),
                ));
            }
        }
        let input = match &self.audit {
            Some(log) => Some(log.digest(input).map_err(GuardError::Audit)?),
            None => None,
        };
        Ok(Admitted {
            guard: self,
            tool,
            input,
            started: Instant::now(),
        })
    }

    /// Counts the call. A check against a state file is a SQLite transaction that may wait
    /// for other processes, so it runs on a blocking thread; in memory it is a few atomics.
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
        tool: &str,
        input: &Value,
        outcome: AuditOutcome,
        error: ToolError,
    ) -> GuardError {
        let event = AuditEvent::tool_call(
            &self.execution_id,
            self.principal.name(),
            tool,
            input,
            outcome,
            Duration::ZERO,
        )
        .error(&error.message);
        match self.record(&event) {
            Ok(()) => GuardError::Refused(error),
            Err(e) => GuardError::Audit(e),
        }
    }
}

/// A call that passed the checks; [`Admitted::finish`] audits how it ended.
#[derive(Debug)]
#[must_use = "a call's audit line is written by `finish`"]
pub struct Admitted<'g> {
    guard: &'g ExecutionGuard,
    tool: &'g str,
    input: Option<InputDigest>,
    started: Instant,
}

impl Admitted<'_> {
    /// Audits the end of the call: `Ok(())`, or the error it failed with. An error means the
    /// line could not be written: do not send the result; end the execution.
    ///
    /// A call dropped before it finished (the execution ended, was cancelled or timed out
    /// while the tool ran or waited for approval) is audited as `cancelled` when dropped: a
    /// call that may have had effects is never missing from the log.
    pub fn finish(mut self, result: Result<(), &ToolError>) -> Result<(), PolicyError> {
        let Some(input) = self.input.take() else {
            return Ok(());
        };
        let input = &input;
        let outcome = match result {
            Ok(()) => AuditOutcome::Ok,
            Err(e) => AuditOutcome::Error(e.code),
        };
        let mut event = AuditEvent::tool_call_digested(
            &self.guard.execution_id,
            self.guard.principal.name(),
            self.tool,
            input,
            outcome,
            self.started.elapsed(),
        );
        if let Err(e) = result {
            event = event.error(&e.message);
        }
        self.guard.record(&event)
    }
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        let Some(input) = self.input.take() else {
            return;
        };
        let event = AuditEvent::tool_call_digested(
            &self.guard.execution_id,
            self.guard.principal.name(),
            self.tool,
            &input,
            AuditOutcome::Status("cancelled"),
            self.started.elapsed(),
        )
        .error("the execution ended before the call did");
        if let Err(e) = self.guard.record(&event) {
            tracing::error!(tool = %self.tool, "cannot audit a cancelled call: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use execbox_protocol::ErrorCode;
    use serde_json::json;

    use super::super::approval::ApproveAll;
    use super::super::Policy;
    use super::*;
    use crate::tool::BoxFuture;

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

    fn tool(permissions: &[&str], limit: Option<(u32, u64)>, approval: bool) -> ToolPolicy {
        ToolPolicy {
            permissions: permissions.iter().map(|p| p.to_string()).collect(),
            rate_limit: limit.map(|(n, s)| RateLimit::new(n, Duration::from_secs(s)).unwrap()),
            requires_approval: approval,
        }
    }

    fn refused(r: Result<Admitted<'_>, GuardError>) -> ToolError {
        match r {
            Err(GuardError::Refused(e)) => e,
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
        let guard = ExecutionGuard::new("e1", alice, limits).with_audit(audit);
        let input = json!({"city": "Paris"});
        let admitted = guard
            .admit("weather.get", &tool(&["weather:read"], None, false), &input)
            .await
            .unwrap();
        // The execution ends while the tool runs: its future, and the admission, are dropped.
        drop(admitted);
        let lines = read_lines(&file);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(lines[0]["tool"], "weather.get");
        assert_eq!(lines[0]["outcome"], "cancelled");
        assert_eq!(lines[0]["error"], "the execution ended before the call did");
        let _ = std::fs::remove_file(&file);
    }

    #[tokio::test]
    async fn each_check_refuses_with_its_message_and_is_audited() {
        let file = audit_file();
        let audit = Arc::new(AuditLog::open(&file, false).unwrap());
        let limits = Arc::new(RateLimits::in_memory());
        let alice = policy().principal(Some("alice")).unwrap();
        let guard = ExecutionGuard::new("e1", alice, limits).with_audit(audit);
        guard.started().unwrap();
        let input = json!({"city": "Paris"});

        let e = refused(
            guard
                .admit("email.send", &tool(&["email:send"], None, false), &input)
                .await,
        );
        assert_eq!(
            (e.code, e.message.as_str()),
            (ErrorCode::ToolError, "email.send: permission denied")
        );
        assert!(!guard.may_call(&tool(&["email:send"], None, false)));

        let limited = tool(&["weather:read"], Some((1, 60)), false);
        guard
            .admit("weather.get", &limited, &input)
            .await
            .unwrap()
            .finish(Ok(()))
            .unwrap();
        let e = refused(guard.admit("weather.get", &limited, &input).await);
        assert_eq!(
            e.message,
            "rate limit exceeded for weather.get: 1 per 1m; retry in 60 s"
        );

        let e = refused(
            guard
                .admit("email.draft", &tool(&[], None, true), &input)
                .await,
        );
        assert_eq!(e.message, "email.draft: approval required");

        let admitted = guard
            .admit("t.fails", &tool(&[], None, false), &input)
            .await
            .unwrap();
        admitted
            .finish(Err(&ToolError::timeout("t.fails: timed out")))
            .unwrap();
        guard.finished(AuditOutcome::Ok, None).unwrap();

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
                ("tool_call", "ok"),
                ("tool_call", "rate_limited"),
                ("tool_call", "approval_denied"),
                ("tool_call", "timeout"),
                ("execution_finished", "ok"),
            ]
        );
        assert!(lines
            .iter()
            .all(|l| l["execution_id"] == "e1" && l["principal"] == "alice"));
        assert_eq!(lines[1]["error"], "email.send: permission denied");
        assert_eq!(lines[2]["input_sha256"], lines[3]["input_sha256"]);
        assert_eq!(lines[5]["error"], "t.fails: timed out");
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
        let approve = ExecutionGuard::new("e", principal.clone(), limits.clone())
            .with_approver(Arc::new(ApproveAll));
        approve
            .admit("email.send", &needs, &input)
            .await
            .unwrap()
            .finish(Ok(()))
            .unwrap();
        let recorder = Arc::new(Recorder(Default::default(), Approval::Denied));
        let deny = ExecutionGuard::new("e2", principal, limits).with_approver(recorder.clone());
        let e = refused(deny.admit("email.send", &needs, &input).await);
        assert_eq!(e.message, "email.send: approval denied");
        let asked = recorder.0.lock().unwrap().clone();
        assert_eq!(asked.len(), 1);
        assert_eq!(
            (asked[0].tool.as_str(), asked[0].execution_id.as_str()),
            ("email.send", "e2")
        );
        assert_eq!(asked[0].input, input);
        // A tool without requirements never asks.
        deny.admit("t.free", &ToolPolicy::default(), &input)
            .await
            .unwrap()
            .finish(Ok(()))
            .unwrap();
        assert_eq!(recorder.0.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_state_file_limit_is_checked_off_the_async_threads() {
        let file = audit_file().with_extension("db");
        let limits = Arc::new(RateLimits::open(&file).unwrap());
        assert!(limits.is_shared());
        let guard = ExecutionGuard::new("e", policy().principal(Some("alice")).unwrap(), limits);
        let limited = tool(&[], Some((1, 60)), false);
        let input = json!({});
        guard
            .admit("t.x", &limited, &input)
            .await
            .unwrap()
            .finish(Ok(()))
            .unwrap();
        let e = refused(guard.admit("t.x", &limited, &input).await);
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
    async fn an_unwritable_audit_log_fails_closed() {
        if !std::path::Path::new("/dev/full").exists() {
            return;
        }
        let audit = Arc::new(AuditLog::open("/dev/full", false).unwrap());
        let guard = ExecutionGuard::new(
            "e",
            Policy::new().principal(None).unwrap(),
            Arc::new(RateLimits::in_memory()),
        )
        .with_audit(audit);
        assert!(matches!(guard.started(), Err(PolicyError::Audit { .. })));
        let denied = guard
            .admit("t.x", &tool(&["x:y"], None, false), &json!(null))
            .await;
        assert!(matches!(denied, Err(GuardError::Audit(_))), "{denied:?}");
        let admitted = guard
            .admit("t.x", &ToolPolicy::default(), &json!(null))
            .await
            .unwrap();
        assert!(admitted.finish(Ok(())).is_err());
    }
}
