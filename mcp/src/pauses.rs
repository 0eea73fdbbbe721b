//! Durable pauses of `execute_code`: a program that reaches a call needing approval, from a
//! client that can be asked neither in the answer (MCP 2026-07-28, `rounds.rs`) nor through
//! elicitation, is kept where an operator can approve it later ([`DurablePauses`]), and the
//! model is told it waits: not a failure, and nothing it can approve itself. Later,
//! `execution_result {id}` tells that model where it is and, once it ended, its answer.

use execbox_host::{BoxFuture, ExecuteResult, PausedCall, PausedProgram};
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

    /// Where the kept execution `id` is now, for `principal` (the one `execute_code` ran it
    /// as). `Ok(None)` when there is no such execution of `execute_code`'s, or it is another
    /// principal's: the two are answered alike, so ids cannot be probed. `Err`: why it cannot
    /// be read now (the model is told).
    fn state(
        &self,
        id: &str,
        principal: Option<&str>,
    ) -> BoxFuture<Result<Option<KeptState>, String>>;
}

/// Where a kept program is, as `execution_result` tells its model.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum KeptState {
    /// It waits for an operator's decision on its call of `tool` with `input`.
    Waiting {
        /// `ns.tool`, as the program called it.
        tool: String,
        /// The call's input.
        input: Value,
    },
    /// Approved, it runs again (from the start, its earlier calls answered from a record).
    Running,
    /// It ended with its program's own answer: its value, or the error it failed with.
    Done(Box<ExecuteResult>),
    /// The call it waited on was denied (the message says by whom and why); it never ran.
    Denied(String),
    /// It ended without an answer of its program's (stopped, diverged on replay, its tools
    /// could not be started, interrupted): the message says how.
    Failed(String),
}

/// The name of the tool that reads a kept program's status and answer.
pub const EXECUTION_RESULT: &str = "execution_result";

/// `execution_result`'s answer for `state` of execution `id`: once done, exactly
/// `execute_code`'s answer for its result; before, `ok: false` with its `status` and what to
/// do, not an error (it did not fail); denied or failed, an error saying why.
pub(crate) fn state_answer(id: &str, state: KeptState, max_chars: usize) -> CallToolResult {
    let (status, message, is_error, waiting) = match state {
        KeptState::Done(result) => return result_answer(&result, max_chars),
        KeptState::Waiting { tool, input } => (
            "awaiting_approval",
            format!(
                "Execution {id} still waits for a person's approval of its call of {tool}, \
                 which has not run. You cannot approve it; if the user has not been told, tell \
                 them it needs approving. Call {EXECUTION_RESULT} again later."
            ),
            false,
            Some(json!({"tool": tool, "input": input})),
        ),
        KeptState::Running => (
            "running",
            format!(
                "Execution {id} was approved and is running now, where it was approved. Call \
                 {EXECUTION_RESULT} again shortly for its answer."
            ),
            false,
            None,
        ),
        KeptState::Denied(why) => (
            "denied",
            format!("Execution {id} was denied and did not finish: {why}"),
            true,
            None,
        ),
        KeptState::Failed(why) => (
            "failed",
            format!("Execution {id} ended without an answer: {why}"),
            true,
            None,
        ),
    };
    let mut structured = json!({
        "ok": false,
        "status": status,
        "executionId": id,
        "message": message,
    });
    if let Some(waiting) = waiting {
        structured["waitingFor"] = waiting;
    }
    let text = vec![ContentBlock::text(compact(&structured))];
    let mut answer = match is_error {
        true => CallToolResult::error(text),
        false => CallToolResult::success(text),
    };
    answer.structured_content = Some(structured);
    answer
}

/// `execution_result`'s refusal of an id that is unknown or another principal's: one
/// answer for both.
pub(crate) fn no_execution(id: &str) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(format!(
        "no execution {id} for you: {EXECUTION_RESULT} reads the executions execute_code paused \
         for you; give the executionId of such an answer"
    ))])
}

/// `execute_code`'s answer for `result`: the model-facing answer every SDK gives too
/// ([`execbox_host::model_answer`]).
pub(crate) fn result_answer(result: &ExecuteResult, max_chars: usize) -> CallToolResult {
    let answer = execbox_host::model_answer(result, max_chars);
    let mut out = if answer.ok {
        CallToolResult::success(vec![ContentBlock::text(answer.text)])
    } else {
        CallToolResult::error(vec![ContentBlock::text(answer.text)])
    };
    out.structured_content = Some(answer.structured);
    out
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
         was approved (its earlier tool calls answered from a record, not made again). Call \
         {EXECUTION_RESULT} {{\"id\": \"{id}\"}} later for its status (waiting, running, done, \
         denied or failed) and, once done, its answer.",
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
