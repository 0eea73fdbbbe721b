//! Approval of calls to tools that declare `requires_approval`: a person, or the embedding
//! application, decides each call before it runs.
//!
//! An [`Approver`] gets an [`ApprovalRequest`] (the execution, the principal, the tool as
//! `provider.tool` and the input) and answers with an [`Approval`]. The call waits for the
//! answer with the execution's deadline still running: an execution that ends meanwhile
//! drops the wait. Implementations here: [`ApproveAll`] (`--approve-all`), [`DenyAll`]
//! (nobody to ask) and [`TerminalApprover`] (asks on the controlling terminal).

use std::io::{BufRead, BufReader, Write};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use execbox_host::BoxFuture;

use super::shown::{escape_for_display, shown_input, MAX_SHOWN_INPUT_CHARS};

/// What an approver is asked.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ApprovalRequest {
    /// The execution making the call.
    pub execution_id: String,
    /// The principal, if any.
    pub principal: Option<String>,
    /// `provider.tool`, as the guest called it.
    pub tool: String,
    /// The input, already validated against the tool's input schema.
    pub input: Value,
    /// The input's SHA-256 over canonical JSON (`execbox_host::input_sha256`), lowercase hex:
    /// what an approver shown elsewhere (a console, a chat) names to bind its answer to this
    /// input, as a durable execution's `inputSha256` does.
    pub input_sha256: String,
    /// The policy rule that asked (`rules[N]`, with its name); `None` when the tool's own
    /// `requires_approval` did.
    pub rule: Option<String>,
    /// The rule's reason, to show with the question.
    pub reason: Option<String>,
    /// The roles or principals the rule names as the ones who may decide (empty: whoever
    /// the policy's approve permission names). An approver of the application's own must
    /// let only those answer.
    pub approvers: Vec<String>,
}

impl ApprovalRequest {
    /// A request for a call of `tool` with `input` in `execution_id`.
    pub fn new(
        execution_id: impl Into<String>,
        principal: Option<&str>,
        tool: impl Into<String>,
        input: Value,
    ) -> Self {
        ApprovalRequest {
            execution_id: execution_id.into(),
            principal: principal.map(str::to_string),
            tool: tool.into(),
            input_sha256: execbox_host::input_sha256(&input),
            input,
            rule: None,
            reason: None,
            approvers: Vec::new(),
        }
    }

    /// The same request, asked by a policy rule: its name, reason and approvers.
    pub fn asked_by(mut self, asked: &execbox_host::ApprovalAsk) -> Self {
        self.rule = asked.rule.clone();
        self.reason = asked.reason.clone();
        self.approvers = asked.approvers.clone();
        self
    }
}

/// An approver's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Approval {
    /// The call may run.
    Approved,
    /// Someone said no: the guest sees `tool_error` "approval denied".
    Denied,
    /// Nobody could be asked (no terminal, no approver): `tool_error` "approval required".
    Unavailable,
    /// The approver exists but could not be asked, for the reason given (a sentence, shown to
    /// the guest after "approval denied: "): the call is refused as denied, never paused.
    NotAsked(String),
}

/// Decides calls of tools that require approval.
pub trait Approver: Send + Sync + 'static {
    /// Decides one call. The future may wait for a person; it is dropped if the execution
    /// ends first.
    fn approve(&self, request: ApprovalRequest) -> BoxFuture<Approval>;

    /// Whether this approver may be asked a question a policy rule reserves for named
    /// approvers ([`ApprovalRequest::approvers`]): an application's own approver gets the
    /// names and must let only them answer (the default); an approver that asks whoever is
    /// at hand (a terminal, an MCP client's user) cannot tell who answers and says `false`,
    /// and such a call waits for those approvers instead (a durable execution pauses) or is
    /// refused.
    fn tells_who_answers(&self) -> bool {
        true
    }
}

/// Approves every call (`execbox run --approve-all`).
#[derive(Clone, Copy, Debug, Default)]
pub struct ApproveAll;

impl Approver for ApproveAll {
    fn approve(&self, _request: ApprovalRequest) -> BoxFuture<Approval> {
        Box::pin(async { Approval::Approved })
    }
}

/// Approves nothing: every call is refused as [`Approval::Unavailable`] ("approval
/// required"). The default when there is nobody to ask.
#[derive(Clone, Copy, Debug, Default)]
pub struct DenyAll;

impl Approver for DenyAll {
    fn approve(&self, _request: ApprovalRequest) -> BoxFuture<Approval> {
        Box::pin(async { Approval::Unavailable })
    }
}

/// Asks on the controlling terminal (`/dev/tty`), one question at a time: shows
/// `provider.tool` and the input, and approves only on `y` or `yes`; anything else, an empty
/// line or end of input is no. Without a terminal every call is [`Approval::Unavailable`].
///
/// The question is asked on a blocking thread; if the execution ends before it is answered,
/// the call is refused at once, and the question stays on the terminal until it is answered
/// (its answer is then ignored) before the next one is asked.
#[derive(Clone, Debug, Default)]
pub struct TerminalApprover {
    /// Held while a question is on the terminal.
    asking: Arc<Mutex<()>>,
}

impl TerminalApprover {
    /// An approver asking on `/dev/tty`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether this process has a controlling terminal to ask on.
    pub fn available() -> bool {
        open_tty().is_ok()
    }
}

fn open_tty() -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
}

impl Approver for TerminalApprover {
    fn tells_who_answers(&self) -> bool {
        false
    }

    fn approve(&self, request: ApprovalRequest) -> BoxFuture<Approval> {
        let asking = self.asking.clone();
        Box::pin(async move {
            let answer = tokio::task::spawn_blocking(move || {
                let _one_at_a_time = asking.lock().unwrap_or_else(|e| e.into_inner());
                let Ok(tty) = open_tty() else {
                    return Approval::Unavailable;
                };
                let Ok(writer) = tty.try_clone() else {
                    return Approval::Unavailable;
                };
                ask(&request, &mut BufReader::new(tty), &mut { writer })
                    .unwrap_or(Approval::Unavailable)
            })
            .await;
            answer.unwrap_or(Approval::Unavailable)
        })
    }
}

/// Writes the question for `request` to `out` and reads the answer from `input`.
pub(crate) fn ask(
    request: &ApprovalRequest,
    input: &mut dyn BufRead,
    out: &mut dyn Write,
) -> std::io::Result<Approval> {
    let shown = shown_input(&request.input, MAX_SHOWN_INPUT_CHARS);
    let principal = match &request.principal {
        Some(p) => format!(" by {}", escape_for_display(p)),
        None => String::new(),
    };
    let why = match (&request.rule, &request.reason) {
        (Some(rule), Some(reason)) => format!(
            "\npolicy {} asks: {}",
            escape_for_display(rule),
            escape_for_display(reason)
        ),
        (Some(rule), None) => format!("\npolicy {} asks for approval", escape_for_display(rule)),
        _ => String::new(),
    };
    write!(
        out,
        "\nexecbox: execution {} asks to call {}{principal} with this input:\n{shown}{why}\nApprove this call? [y/N] ",
        escape_for_display(&request.execution_id),
        escape_for_display(&request.tool),
    )?;
    out.flush()?;
    let mut line = String::new();
    input.read_line(&mut line)?;
    let answer = line.trim().to_ascii_lowercase();
    Ok(if answer == "y" || answer == "yes" {
        Approval::Approved
    } else {
        Approval::Denied
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn request() -> ApprovalRequest {
        ApprovalRequest::new(
            "exec-1",
            Some("alice"),
            "email.send",
            json!({"to": "bob@example.com", "body": "hi \u{1b}[2J\u{9b}31m"}),
        )
    }

    fn answer(typed: &str) -> (Approval, String) {
        let mut out = Vec::new();
        let approval = ask(&request(), &mut typed.as_bytes(), &mut out).unwrap();
        (approval, String::from_utf8(out).unwrap())
    }

    #[test]
    fn the_question_shows_the_tool_and_the_input_and_defaults_to_no() {
        let (approval, question) = answer("\n");
        assert_eq!(approval, Approval::Denied);
        assert!(
            question.contains("asks to call email.send by alice"),
            "{question}"
        );
        assert!(
            question.contains("\"to\": \"bob@example.com\""),
            "{question}"
        );
        assert!(
            question.ends_with("Approve this call? [y/N] "),
            "{question}"
        );
        assert!(
            !question.contains('\u{1b}') && !question.contains('\u{9b}'),
            "{question:?}"
        );
        // serde_json writes ESC as `\u001b`, whose backslash is shown doubled; U+009B
        // (which JSON leaves raw) is escaped.
        assert!(question.contains("\\\\u001b[2J"), "{question}");
        assert!(question.contains("\\u{009b}31m"), "{question}");
        assert_eq!(answer("y\n").0, Approval::Approved);
        assert_eq!(answer("YES\n").0, Approval::Approved);
        assert_eq!(answer(" yes \n").0, Approval::Approved);
        assert_eq!(answer("no\n").0, Approval::Denied);
        assert_eq!(answer("yep\n").0, Approval::Denied);
        assert_eq!(answer("").0, Approval::Denied, "end of input is no");
    }

    #[test]
    fn the_question_names_the_rule_that_asked_and_its_reason() {
        let asked = execbox_host::ApprovalAsk::by_rule(
            "rules[0] (big)",
            Some("payments over 100\u{1b}[2J".into()),
            vec!["finance".into()],
        );
        let mut out = Vec::new();
        ask(&request().asked_by(&asked), &mut "n\n".as_bytes(), &mut out).unwrap();
        let question = String::from_utf8(out).unwrap();
        assert!(
            question.contains("policy rules[0] (big) asks: payments over 100\\u{001b}[2J"),
            "{question}"
        );
    }

    #[tokio::test]
    async fn approve_all_and_deny_all_answer_at_once() {
        assert_eq!(ApproveAll.approve(request()).await, Approval::Approved);
        assert_eq!(DenyAll.approve(request()).await, Approval::Unavailable);
    }

    #[tokio::test]
    async fn without_a_terminal_the_terminal_approver_cannot_approve() {
        if TerminalApprover::available() {
            return; // run by hand from a terminal; the test needs none
        }
        assert_eq!(
            TerminalApprover::new().approve(request()).await,
            Approval::Unavailable
        );
    }
}
