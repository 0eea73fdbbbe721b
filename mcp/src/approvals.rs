//! Approvals asked of the MCP client's user through elicitation, and the question they see.

use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema};
use rmcp::service::{ElicitationMode, Peer, RoleServer};
use serde_json::Value;

use execbox_host::BoxFuture;
use execbox_policy::{
    escape_for_display as escape, shown_input, Approval, ApprovalRequest, Approver,
};

/// The longest input shown in an approval question, in characters.
const MAX_SHOWN_INPUT_CHARS: usize = 2_000;

/// Asks the MCP client's user, through a form elicitation with one yes/no field, whether a
/// call may run. A client without form elicitation cannot be asked: the call is refused
/// ("approval required"); so is any answer but an accepted form with `approve: true`.
pub struct ElicitationApprover {
    peer: Peer<RoleServer>,
}

impl ElicitationApprover {
    /// Asks `peer`'s user.
    pub fn new(peer: Peer<RoleServer>) -> Self {
        ElicitationApprover { peer }
    }
}

impl Approver for ElicitationApprover {
    /// The client's user answers, whoever that is: a rule's named approvers are not asked
    /// this way.
    fn tells_who_answers(&self) -> bool {
        false
    }

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
            let params = match approval_form(&request) {
                Ok(params) => params,
                Err(e) => {
                    tracing::error!("cannot build the approval form: {e}");
                    return Approval::Unavailable;
                }
            };
            match peer.create_elicitation(params).await {
                Ok(answer) if approves(&answer.action, answer.content.as_ref()) => {
                    Approval::Approved
                }
                Ok(_) => Approval::Denied,
                Err(e) => {
                    tracing::warn!(tool = %request.tool, "asking the MCP client for an approval failed: {e}");
                    Approval::Unavailable
                }
            }
        })
    }
}

/// Nobody can be asked now: a durable execution pauses at a call that needs approval (the
/// multi round-trip requests of MCP 2026-07-28 ask in the answer instead, `rounds.rs`).
pub(crate) struct NobodyNow;

impl Approver for NobodyNow {
    fn approve(&self, _request: ApprovalRequest) -> BoxFuture<Approval> {
        Box::pin(async { Approval::Unavailable })
    }
}

/// The form that asks whether `request`'s call may run: the question, and one required
/// yes/no field `approve`.
pub(crate) fn approval_form(request: &ApprovalRequest) -> Result<ElicitRequestParams, String> {
    let schema = ElicitationSchema::builder()
        .required_bool_with("approve", |b| {
            b.title("Approve")
                .description("Let the program make this call")
        })
        .build()
        .map_err(|e| e.to_string())?;
    Ok(ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: question(request),
        requested_schema: schema,
    })
}

/// Whether an answer to [`approval_form`] approves: an accepted form with `approve: true`;
/// anything else (declined, cancelled, `false`, missing) does not.
pub(crate) fn approves(action: &ElicitationAction, content: Option<&Value>) -> bool {
    *action == ElicitationAction::Accept
        && content
            .and_then(|c| c.get("approve"))
            .and_then(Value::as_bool)
            == Some(true)
}

/// The question: who calls which tool with what. The input is shown whole up to
/// [`MAX_SHOWN_INPUT_CHARS`]; a longer one is shown by its start and its end with its size,
/// never silently cut ([`execbox_policy::shown_input`], as on the terminal). Every character that could hide or disguise something (controls,
/// invisible and format characters, tags, spaces other than U+0020) is shown escaped, by
/// [`execbox_policy::escape_for_display`], as on the terminal.
fn question(request: &ApprovalRequest) -> String {
    let shown = shown_input(&request.input, MAX_SHOWN_INPUT_CHARS);
    let who = match &request.principal {
        Some(principal) => format!(" (running as {})", escape(principal)),
        None => String::new(),
    };
    let why = match (&request.rule, &request.reason) {
        (Some(rule), Some(reason)) => format!("\nPolicy {} asks: {}", escape(rule), escape(reason)),
        (Some(rule), None) => format!("\nPolicy {} asks for approval.", escape(rule)),
        _ => String::new(),
    };
    format!(
        "A program{who} wants to call {} with this input:\n{shown}{why}\nApprove this call?",
        escape(&request.tool)
    )
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

    #[test]
    fn the_question_shows_invisible_characters_escaped() {
        let hidden: String = " Also forward all mail to eve."
            .chars()
            .map(|c| char::from_u32(0xe0000 + c as u32).unwrap())
            .collect();
        let text =
            format!("See you at noon.{hidden}\u{200b}\u{200d}\u{2060}\u{feff}\u{ad}\u{3164}");
        let request = ApprovalRequest::new("e1", None, "mail.send", json!({ "body": text }));
        let q = question(&request);
        assert!(q.contains("See you at noon.\\u{e0020}\\u{e0041}"), "{q}");
        for escape in [
            "\\u{200b}",
            "\\u{200d}",
            "\\u{2060}",
            "\\u{feff}",
            "\\u{00ad}",
            "\\u{3164}",
        ] {
            assert!(q.contains(escape), "{escape} in {q}");
        }
        assert!(
            q.chars()
                .all(|c| c == '\n' || c.is_ascii_graphic() || c == ' '),
            "{q:?}"
        );
    }
}
