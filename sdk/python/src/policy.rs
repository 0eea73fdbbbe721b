//! [`NativePolicy`]: a policy (principal, permissions, rate limits, approvals, audit) that
//! guards every tool call of the executions given it, with a Python callable as the approver.

use std::path::PathBuf;
use std::sync::Arc;

use execbox_host::{BoxFuture, CallGuard};
use execbox_policy::{Approval, ApprovalRequest, Approver, EnforcementOptions, StoreLocation};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::attach::attach;

/// The enforcement of a policy, shared by the executions it guards.
#[pyclass(frozen, module = "execbox._native")]
pub struct NativePolicy {
    guard: Arc<dyn CallGuard>,
}

impl NativePolicy {
    /// The guard to give a request.
    pub fn guard(&self) -> Arc<dyn CallGuard> {
        self.guard.clone()
    }
}

#[pymethods]
impl NativePolicy {
    /// `path`: the policy file (none: every tool is permitted, rate limits are counted in
    /// memory); `approve`:
    /// `approve(tool, input_json, principal, execution_id, input_sha256, rule, reason, approvers) -> bool`,
    /// called for each call of a tool that requires approval or that a policy rule sends for
    /// approval (`rule`, `reason`: the rule's, or `None`; `approvers`: the roles or principals
    /// the rule names, who alone may answer) (none: such calls are refused).
    #[new]
    #[pyo3(signature = (path=None, principal=None, audit_log=None, state=None, approve=None))]
    fn new(
        path: Option<PathBuf>,
        principal: Option<String>,
        audit_log: Option<PathBuf>,
        state: Option<PathBuf>,
        approve: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        let mut options = EnforcementOptions::default();
        options.policy = path;
        options.principal = principal;
        let location = |path: Option<PathBuf>| {
            path.map(|p| StoreLocation::from_path(&p))
                .transpose()
                .map_err(|e| PyValueError::new_err(e.to_string()))
        };
        options.audit_log = location(audit_log)?;
        options.state = location(state)?;
        let mut enforcement = options
            .open()
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        if let Some(callback) = approve {
            enforcement = enforcement.with_approver(Arc::new(PythonApprover {
                callback: Arc::new(callback),
            }));
        }
        Ok(NativePolicy {
            guard: Arc::new(enforcement),
        })
    }
}

/// At most this many Python approvers are asked at once in a process, each on a thread.
pub const MAX_APPROVALS: usize = 256;

static APPROVALS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MAX_APPROVALS);

/// Asks a Python callable, on a thread of its own; an exception or anything but `True` is a no.
struct PythonApprover {
    callback: Arc<Py<PyAny>>,
}

impl Approver for PythonApprover {
    fn approve(&self, request: ApprovalRequest) -> BoxFuture<Approval> {
        let callback = self.callback.clone();
        Box::pin(async move {
            // A thread running Python cannot be stopped: an approver asked for an execution
            // that ended keeps its thread until it returns. So approvers get a bounded pool of
            // their own, apart from sync tools', and a call past it is denied at once.
            let Ok(permit) = APPROVALS.try_acquire() else {
                return Approval::NotAsked(format!(
                    "the approver was not asked: {MAX_APPROVALS} approvals are already waiting \
                     for Python approvers in this process (those of executions that ended wait \
                     until the approver returns); give the approver a time limit of its own, \
                     or try again once they are answered"
                ));
            };
            let input = request.input.to_string();
            tokio::task::spawn_blocking(move || {
                let _permit = permit;
                attach(|py| {
                    let answer = callback.call1(
                        py,
                        (
                            request.tool,
                            input,
                            request.principal,
                            request.execution_id,
                            request.input_sha256,
                            request.rule,
                            request.reason,
                            request.approvers,
                        ),
                    );
                    match answer.and_then(|a| a.extract::<bool>(py)) {
                        Ok(true) => Approval::Approved,
                        Ok(false) => Approval::Denied,
                        Err(e) => {
                            e.write_unraisable(py, None);
                            Approval::Denied
                        }
                    }
                })
                .unwrap_or(Approval::Unavailable)
            })
            .await
            .unwrap_or(Approval::Denied)
        })
    }
}
