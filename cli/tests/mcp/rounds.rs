//! Approvals on MCP 2026-07-28, where a server may not ask the client anything during a
//! call: `execute_code` answers with an `InputRequiredResult` (the approval form and an
//! opaque `requestState`), and the client's retry resumes the program from its ledger.
//! A real rmcp client speaking 2026-07-28 (`server/discover`, per-request metadata) against
//! the real `execbox mcp`; the upstream counts its own calls in the marks file.

use super::*;

use rmcp::model::{CallToolResponse, InputRequest, InputRequiredResult, ProtocolVersion};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt as _};

/// A clock reading and a random number go into the first call's input, so a resumed run that
/// did not replay them would make another call and diverge.
const PROGRAM: &str = "const stamp = Date.now() + ':' + Math.random();\n\
const echoed = await alpha.echo({ text: stamp });\n\
let sum;\n\
try { sum = (await alpha.add({ a: 2, b: 3 })).sum } catch (e) { sum = [e.code, e.message, e.reason] }\n\
return { stamp, echoed, sum }";

/// `execbox mcp ARGS` with a client that speaks 2026-07-28 and answers forms `approve`.
async fn start_2026(h: &Harness, args: &[&str], approve: bool) -> Result<Mcp, String> {
    let events = Events::default();
    *events.approve.lock().unwrap() = Some(approve);
    let mut child = h
        .command(args)
        .spawn()
        .map_err(|e| format!("cannot start execbox: {e}"))?;
    let stdout = child.stdout.take().unwrap();
    let stdin = child.stdin.take().unwrap();
    let lifecycle = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    let client = tokio::time::timeout(
        WAIT,
        events
            .clone()
            .serve_with_lifecycle((stdout, stdin), lifecycle),
    )
    .await
    .map_err(|_| "execbox mcp did not answer server/discover in time".to_string())?
    .map_err(|e| format!("cannot discover: {e}"))?;
    Ok(Mcp {
        client,
        child,
        events,
    })
}

impl Mcp {
    /// One `tools/call` of `execute_code`, without driving the rounds.
    async fn once(
        &self,
        code: &str,
        state: Option<&str>,
        approve: Option<Value>,
    ) -> Result<CallToolResponse, String> {
        let mut params = CallToolRequestParams::new("execute_code")
            .with_arguments(args(json!({ "code": code })));
        params.request_state = state.map(str::to_owned);
        params.input_responses =
            approve.map(|answer| [("approval".to_owned(), answer)].into_iter().collect());
        tokio::time::timeout(WAIT, self.client.call_tool_once(params))
            .await
            .map_err(|_| "execute_code did not answer in time".to_string())?
            .map_err(|e| format!("execute_code failed: {e}"))
    }
}

fn input_required(response: CallToolResponse) -> Result<InputRequiredResult, String> {
    match response {
        CallToolResponse::InputRequired(asked) => Ok(asked),
        other => Err(format!("expected input_required, got {other:?}")),
    }
}

fn complete(response: CallToolResponse) -> Result<Answer, String> {
    match response {
        CallToolResponse::Complete(result) => Ok(answer(result)),
        other => Err(format!("expected a result, got {other:?}")),
    }
}

fn calls(h: &Harness, tool: &str) -> usize {
    h.marks().matches(&format!("called {tool}\n")).count()
}

pub(crate) async fn approvals_travel_in_the_answer_on_mcp_2026_07_28(
    h: Harness,
) -> Result<(), String> {
    let mut alpha = h.upstream("alpha");
    alpha["requireApproval"] = json!(["add"]);
    let config = h.config(json!({ "alpha": alpha }));
    let audit = h.dir.join("audit.jsonl");
    let policy = h.write(
        "policy.yaml",
        &format!(
            "version: 1\nprincipals:\n  alice: {{ permissions: ['*'] }}\naudit: {{ file: {} }}\n",
            audit.display()
        ),
    );
    let flags = [
        "--config",
        config.to_str().unwrap(),
        "--policy",
        policy.to_str().unwrap(),
        "--principal",
        "alice",
    ];

    // The client's own loop answers the form through its handler: approved, the program
    // completes; each upstream call ran exactly once, the clock and Math.random() replayed.
    let mcp = start_2026(&h, &flags, true).await?;
    let done = mcp.value(PROGRAM).await?;
    check!(done["sum"] == json!(5), "{done}");
    check!(done["echoed"] == done["stamp"], "{done}");
    check!(
        calls(&h, "echo") == 1 && calls(&h, "add") == 1,
        "{}",
        h.marks()
    );
    let questions = mcp.events.questions.lock().unwrap().clone();
    check!(
        questions.len() == 1
            && questions[0].contains("alpha.add")
            && questions[0].contains("running as alice"),
        "{questions:?}"
    );

    // Driven by hand: the first answer asks, naming the call, and nothing needing approval ran.
    let asked = input_required(mcp.once(PROGRAM, None, None).await?)?;
    let state = asked.request_state.clone().ok_or("no requestState")?;
    let Some(InputRequest::Elicitation(form)) = asked
        .input_requests
        .as_ref()
        .and_then(|r| r.get("approval"))
    else {
        return Err(format!("no approval form: {asked:?}"));
    };
    let form = serde_json::to_value(&form.params).unwrap();
    check!(
        form["message"]
            .as_str()
            .is_some_and(|m| m.contains("alpha.add") && m.contains("\"a\": 2")),
        "{form}"
    );
    check!(
        calls(&h, "echo") == 2 && calls(&h, "add") == 1,
        "{}",
        h.marks()
    );

    // A retry with another program, or without the answer, does not resume it.
    let other = complete(
        mcp.once("1", Some(&state), Some(json!({"action": "accept"})))
            .await?,
    )?;
    check!(
        other.is_error && other.text.contains("same `code`"),
        "{}",
        other.text
    );
    let again = input_required(mcp.once(PROGRAM, Some(&state), None).await?)?;
    let state = again
        .request_state
        .ok_or("asked again without a requestState")?;

    // Denied: the program sees the refusal, and alpha.add never runs.
    let no = json!({"action": "accept", "content": {"approve": false}});
    let denied = complete(mcp.once(PROGRAM, Some(&state), Some(no.clone())).await?)?;
    check!(!denied.is_error, "{}", denied.text);
    check!(
        denied.result()["sum"]
            == json!([
                "tool_error",
                "alpha.add: approval denied",
                "approval_denied"
            ]),
        "{}",
        denied.text
    );
    check!(
        calls(&h, "echo") == 2 && calls(&h, "add") == 1,
        "{}",
        h.marks()
    );

    // A handle is good for one retry: the same answer again is refused, nothing runs.
    let twice = complete(mcp.once(PROGRAM, Some(&state), Some(no)).await?)?;
    check!(
        twice.is_error && twice.text.contains("answered already"),
        "{}",
        twice.text
    );
    check!(
        calls(&h, "echo") == 2 && calls(&h, "add") == 1,
        "{}",
        h.marks()
    );

    // The audit log has the pause and the decisions.
    let audit = std::fs::read_to_string(&audit).unwrap_or_default();
    check!(
        audit.contains("\"awaiting_approval\"")
            && audit.matches("\"approval_decided\"").count() == 2,
        "{audit}"
    );
    mcp.stop().await?;
    Ok(())
}
