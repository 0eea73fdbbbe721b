//! Who runs `execute_code`'s programs, and how the policy reaches them: the principal, the
//! rate-limit store, the audit log, and approvals asked of the MCP client's user through
//! elicitation.

use std::sync::Arc;

use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema};
use rmcp::service::{ElicitationMode, Peer, RoleServer};
use serde_json::Value;

use crate::executor::ExecuteRequest;
use crate::policy::{
    Approval, ApprovalRequest, ApproveAll, Approver, AuditLog, Principal, RateLimits,
};
use crate::tool::BoxFuture;

/// The longest input shown in an approval question, in characters.
const MAX_SHOWN_INPUT_CHARS: usize = 2_000;

/// The policy of every `execute_code`: by default nobody in particular (every tool visible,
/// the tools' own rate limits counted in memory, approvals asked of the client's user).
#[derive(Clone, Debug, Default)]
pub struct McpAccess {
    /// Programs run as this principal: the tools it may not call are absent from the index,
    /// `search_tools` and the sandbox, and refused as "permission denied".
    pub principal: Option<Principal>,
    /// Where rate limits are counted (a SQLite state file shares them across processes).
    pub rate_limits: Option<Arc<RateLimits>>,
    /// Where executions and tool calls are written before the guest sees a result.
    pub audit: Option<Arc<AuditLog>>,
    /// Approve every call of a tool that requires approval without asking anyone.
    pub approve_all: bool,
}

impl McpAccess {
    /// `request` with this policy applied; approvals go to `peer`'s user (through MCP
    /// elicitation) unless every call is approved.
    pub(crate) fn apply(
        &self,
        mut request: ExecuteRequest,
        peer: &Peer<RoleServer>,
    ) -> ExecuteRequest {
        if let Some(principal) = &self.principal {
            request = request.principal(principal.clone());
        }
        if let Some(limits) = &self.rate_limits {
            request = request.rate_limits(limits.clone());
        }
        if let Some(audit) = &self.audit {
            request = request.audit_log(audit.clone());
        }
        let approver: Arc<dyn Approver> = if self.approve_all {
            Arc::new(ApproveAll)
        } else {
            Arc::new(ElicitationApprover { peer: peer.clone() })
        };
        request.approver(approver)
    }
}

/// Asks the MCP client's user, through a form elicitation with one yes/no field, whether a
/// call may run. A client without form elicitation cannot be asked: the call is refused
/// ("approval required"); so is any answer but an accepted form with `approve: true`.
struct ElicitationApprover {
    peer: Peer<RoleServer>,
}

impl Approver for ElicitationApprover {
    fn approve(&self, request: ApprovalRequest) -> BoxFuture<Approval> {
        let peer = self.peer.clone();
        Box::pin(async move {
            if !peer
                .supported_elicitation_modes()
                .contains(&ElicitationMode::Form)
            {
                tracing::info!(
                    tool = %request.tool,
                    "the MCP client cannot be asked for an approval (no form elicitation)"
                );
                return Approval::Unavailable;
            }
            let schema = match ElicitationSchema::builder()
                .required_bool_with("approve", |b| {
                    b.title("Approve")
                        .description("Let the program make this call")
                })
                .build()
            {
                Ok(schema) => schema,
                Err(e) => {
                    tracing::error!("cannot build the approval form: {e}");
                    return Approval::Unavailable;
                }
            };
            let params = ElicitRequestParams::FormElicitationParams {
                meta: None,
                message: question(&request),
                requested_schema: schema,
            };
            match peer.create_elicitation(params).await {
                Ok(answer) => match answer.action {
                    ElicitationAction::Accept
                        if answer
                            .content
                            .as_ref()
                            .and_then(|c| c.get("approve"))
                            .and_then(Value::as_bool)
                            == Some(true) =>
                    {
                        Approval::Approved
                    }
                    _ => Approval::Denied,
                },
                Err(e) => {
                    tracing::warn!(tool = %request.tool, "asking the MCP client for an approval failed: {e}");
                    Approval::Unavailable
                }
            }
        })
    }
}

/// The question: who calls which tool with what.
fn question(request: &ApprovalRequest) -> String {
    let mut input = serde_json::to_string_pretty(&request.input).unwrap_or_default();
    if input.chars().count() > MAX_SHOWN_INPUT_CHARS {
        input = input
            .chars()
            .take(MAX_SHOWN_INPUT_CHARS)
            .collect::<String>()
            + "\n…";
    }
    let who = match &request.principal {
        Some(principal) => format!(" (running as {principal})"),
        None => String::new(),
    };
    format!(
        "A program{who} wants to call {} with this input:\n{input}\nApprove this call?",
        request.tool
    )
}
