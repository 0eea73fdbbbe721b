//! Durable pauses of `execute_code`: a program that reaches a call needing approval, from a
//! client that can be asked neither in the answer (MCP 2026-07-28, `rounds.rs`) nor through
//! elicitation, is kept where an operator can approve it later ([`DurablePauses`]), and the
//! model is told it waits: not a failure, and nothing it can approve itself.

use execbox_host::{BoxFuture, PausedCall, PausedProgram};
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{json, Value};

/// A program of `execute_code` that paused at a call needing approval: the paused program
/// as every front end holds it, and what it takes to run it again.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PausedExecution {
    /// The program's code.
    pub code: String,
    /// Its time limit, which a resumed run gets again.
    pub timeout_ms: u64,
    /// The paused program: its principal, the call it waits on, its ledger and logs.
    pub program: PausedProgram,
}

/// Where `execute_code` keeps the programs it cannot ask approvals for: a store that
/// operators decide from (`execbox mcp` keeps them as executions in the state database, where
/// `execbox executions approve ID` resumes them).
pub trait DurablePauses: Send + Sync + std::fmt::Debug {
    /// Keeps `paused`; returns the id an operator approves it by. `Err`: why it could not be
    /// kept (the model is told, and the call does not run).
    fn pause(&self, paused: PausedExecution) -> BoxFuture<Result<String, String>>;

    /// How an operator decides the execution `id`, for the model to pass on.
    fn how_to_decide(&self, id: &str) -> String;
}

/// `execute_code`'s answer for a program kept paused as `id`: not an error (it did not fail),
/// `ok: false` and `status: "awaiting_approval"` (it has no result yet), what it waits on,
/// and what to tell the user.
pub(crate) fn paused_answer(
    id: &str,
    call: &PausedCall,
    logs: &[String],
    how: &str,
) -> CallToolResult {
    let message = format!(
        "The program paused before calling {tool}, which needs a person's approval; that call \
         has not run, nor anything after it. It waits as execution {id}: tell the user that it \
         needs approving ({how}). You cannot approve it. Once approved, it runs to its end where it \
         was approved (its earlier tool calls answered from a record, not made again); its \
         result is not sent here.",
        tool = call.tool
    );
    let structured = json!({
        "ok": false,
        "status": "awaiting_approval",
        "executionId": id,
        "waitingFor": {"tool": call.tool, "input": call.input},
        "message": message,
        "logs": logs,
    });
    let mut answer = CallToolResult::success(vec![ContentBlock::text(compact(&structured))]);
    answer.structured_content = Some(structured);
    answer
}

fn compact(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}
