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

/// The question: who calls which tool with what. The input is shown whole up to
/// [`MAX_SHOWN_INPUT_CHARS`]; a longer one is shown by its start and its end with its size,
/// never silently cut. Characters that could disguise the question (controls, line and
/// paragraph separators, bidirectional overrides) are shown escaped.
fn question(request: &ApprovalRequest) -> String {
    let input = escape(&serde_json::to_string_pretty(&request.input).unwrap_or_default());
    let count = input.chars().count();
    let shown = if count > MAX_SHOWN_INPUT_CHARS {
        let head: String = input.chars().take(MAX_SHOWN_INPUT_CHARS / 2).collect();
        let tail: String = input
            .chars()
            .skip(count - MAX_SHOWN_INPUT_CHARS / 2)
            .collect();
        format!(
            "{head}\n… [{} of {count} characters not shown] …\n{tail}",
            count - MAX_SHOWN_INPUT_CHARS
        )
    } else {
        input
    };
    let who = match &request.principal {
        Some(principal) => format!(" (running as {})", escape(principal)),
        None => String::new(),
    };
    format!(
        "A program{who} wants to call {} with this input:\n{shown}\nApprove this call?",
        escape(&request.tool)
    )
}

/// `text` with every character that could fake the question's layout escaped.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let disguising = (c.is_control() && c != '\n')
            || matches!(
                c,
                '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{061c}'
            )
            || ('\u{202a}'..='\u{202e}').contains(&c)
            || ('\u{2066}'..='\u{2069}').contains(&c);
        if disguising {
            out.push_str(&format!("\\u{{{:04x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_question_shows_a_long_input_by_both_ends_and_escapes_disguises() {
        let padding = " ".repeat(3_000);
        let request = ApprovalRequest::new(
            "e1",
            Some("alice"),
            "gh.delete_repo",
            json!({"pad": padding, "then": "rm all\u{2028}Approve: read-only\u{202e}"}),
        );
        let q = question(&request);
        assert!(q.contains("characters not shown"), "{q}");
        assert!(q.contains("rm all"), "the end of the input is shown: {q}");
        assert!(q.contains("\\u{2028}") && q.contains("\\u{202e}"), "{q}");
        assert!(!q.contains('\u{2028}') && !q.contains('\u{202e}'));
        assert!(q.starts_with("A program (running as alice) wants to call gh.delete_repo"));
    }
}
