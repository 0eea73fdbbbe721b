//! [`NativePolicy`]: a policy (principal, permissions, rate limits, approvals, audit) that
//! guards every tool call of the executions given it, with a JavaScript function as the
//! approver, asked the way tools are called (a threadsafe function, answered by id).

use std::path::PathBuf;
use std::sync::Arc;

use execbox_host::{BoxFuture, CallGuard};
use execbox_policy::{Approval, ApprovalRequest, Approver, EnforcementOptions, StoreLocation};
use napi::bindgen_prelude::{FnArgs, Unknown};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{Error, Result, Status};
use napi_derive::napi;

use crate::pending::Pending;

/// The approver's arguments: the question's id, the tool (`namespace.name`), the input as
/// JSON, the principal (`null` for none), the execution's id, the input's SHA-256, and the
/// policy rule that asked (`rules[N]`, `null` when the tool's own `requires_approval` did),
/// its reason (or `null`) and the roles or principals it names as approvers (who alone may
/// answer; empty: the policy's approvers).
type ApproveArgs = FnArgs<(
    i64,
    String,
    String,
    Option<String>,
    String,
    String,
    Option<String>,
    Option<String>,
    Vec<String>,
)>;

/// The JavaScript approver, weak like the tool dispatcher: an execution in flight keeps the
/// event loop alive, an idle policy does not.
type JsApprover =
    ThreadsafeFunction<ApproveArgs, Unknown<'static>, ApproveArgs, Status, false, true>;

/// Every approval waiting for JavaScript, in this process.
static APPROVALS: Pending<bool> = Pending::new();

/// The enforcement of a policy, shared by the executions it guards.
#[napi]
pub struct NativePolicy {
    guard: Arc<dyn CallGuard>,
}

#[napi]
impl NativePolicy {
    /// `path`: the policy file (none: every tool is permitted, rate limits are counted in
    /// memory); `approver`: called as
    /// `approver(id, tool, inputJson, principal, executionId, inputSha256, rule, reason, approvers)`
    /// for each call of a tool that requires approval or that a policy rule sends for
    /// approval, answered with [`complete_approval`]
    /// (none: such calls are refused). Fails with the policy's words (a bad file, an unknown
    /// principal).
    #[napi(constructor)]
    pub fn new(
        path: Option<String>,
        principal: Option<String>,
        audit_log: Option<String>,
        state: Option<String>,
        approver: Option<JsApprover>,
    ) -> Result<Self> {
        let mut options = EnforcementOptions::default();
        options.policy = path.map(PathBuf::from);
        options.principal = principal;
        let location = |text: Option<String>| {
            text.map(|t| StoreLocation::parse(&t))
                .transpose()
                .map_err(|e| Error::new(Status::InvalidArg, e.to_string()))
        };
        options.audit_log = location(audit_log)?;
        options.state = location(state)?;
        let mut enforcement = options
            .open()
            .map_err(|e| Error::new(Status::GenericFailure, e.to_string()))?;
        if let Some(approver) = approver {
            enforcement = enforcement.with_approver(Arc::new(JsApproverHandle {
                approver: Arc::new(approver),
            }));
        }
        Ok(NativePolicy {
            guard: Arc::new(enforcement),
        })
    }
}

impl NativePolicy {
    /// The guard to give a request.
    pub(crate) fn guard(&self) -> Arc<dyn CallGuard> {
        self.guard.clone()
    }
}

/// Asks the JavaScript approver and waits for its answer without holding the event loop;
/// only `true` from JavaScript approves.
struct JsApproverHandle {
    approver: Arc<JsApprover>,
}

impl Approver for JsApproverHandle {
    fn approve(&self, request: ApprovalRequest) -> BoxFuture<Approval> {
        let approver = self.approver.clone();
        Box::pin(async move {
            let Some(waiting) = APPROVALS.open() else {
                return Approval::Unavailable;
            };
            let args = (
                waiting.id(),
                request.tool,
                request.input.to_string(),
                request.principal,
                request.execution_id,
                request.input_sha256,
                request.rule,
                request.reason,
                request.approvers,
            );
            let status = approver.call(FnArgs::from(args), ThreadsafeFunctionCallMode::NonBlocking);
            if status != Status::Ok {
                return Approval::Unavailable;
            }
            match waiting.answer().await {
                Some(true) => Approval::Approved,
                Some(false) | None => Approval::Denied,
            }
        })
    }
}

/// Answers approval `id` (`approved` only for the approver's `true`). Returns false when the
/// call no longer waits (its execution ended).
#[napi]
pub fn complete_approval(id: i64, approved: bool) -> bool {
    APPROVALS.answer(id, approved)
}
