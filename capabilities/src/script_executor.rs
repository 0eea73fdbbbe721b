//! The built-in `script` executor: a capability's `entry` run in the QuickJS sandbox through
//! an [`Executor`], with the tools of its `tools` file and the `capabilities` namespace.
//!
//! The program sees its params as the global-like constant `params` (declared on the
//! program's first line, so line numbers in errors stay those of the file), the tools of its
//! tools file under their providers, and `capabilities.run({name, type, params, timeoutMs})`
//! to start another capability and await its result. Its value (the last expression, or
//! `return`) is the result; `{result, additionalContext}` is taken apart as for external
//! executors. The execution id of the runner is the capability execution's id, so tool
//! calls see it as [`ToolContext::execution_id`](execbox_host::ToolContext).

use std::sync::Arc;
use std::time::Duration;

use execbox_host::{
    CallGuard, ExecuteRequest, Executor, Ledger, MayAsk, ToolSet, ToolsFile, REPLAY_DIVERGED,
};
use execbox_protocol::ErrorCode;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::config::CapabilityConfig;
use super::manager::NestedTools;
use super::outcome::{split_result, RunOutcome};

/// One run's inputs.
pub(crate) struct ScriptRun<'a> {
    pub executor: &'a Arc<dyn Executor>,
    pub capability: &'a CapabilityConfig,
    pub params: &'a Value,
    pub execution_id: &'a str,
    /// The whole time limit, as asked for (for messages).
    pub time_limit: Duration,
    /// What is left of it: it runs from the execution's acceptance.
    pub timeout: Duration,
    pub cancel: CancellationToken,
    /// The `capabilities` namespace (nested runs), when nesting is allowed.
    pub nested: Option<&'a NestedTools>,
    /// The policy of its tool calls, for the caller who started it.
    pub guard: Arc<dyn CallGuard>,
    /// How it is durable: resumed from a ledger (with the approved call's number), or, for
    /// a top-level execution whose tools include one that requires approval, a fresh
    /// ledger; `None` for one that cannot pause (nested, or nothing to approve).
    pub durable: Durability,
    /// A program that is not the capability's entry (a paused `execute_code` resumed): its
    /// code and tools, run as they are (no params, no nested capabilities).
    pub program: Option<(&'a str, &'a ToolSet)>,
}

/// Whether a script execution records a ledger and may pause for approval.
pub(crate) enum Durability {
    /// It cannot pause: a call nobody can approve is refused.
    None,
    /// A new execution: durable when one of its tools requires approval.
    IfApprovalNeeded,
    /// Resumed from `ledger`, the call numbered `approved` (0-based) approved.
    Resumed { ledger: Ledger, approved: u32 },
}

/// The program: `const params = JSON.parse("<json>");` and the entry's text, on the same
/// first line.
///
/// The params go through `JSON.parse`, not into an object literal: in a literal a
/// `"__proto__"` key sets the prototype instead of making a property, so the program would
/// see values the `input_schema` never checked (`params.role` from `{"__proto__": {"role":
/// "admin"}}`). A JSON string is a valid JavaScript string literal, and neither it nor
/// serde_json's compact output has a line break, so the entry's lines keep their numbers.
pub(crate) fn program(entry_text: &str, params: &Value) -> String {
    let json = params.to_string();
    let literal = Value::String(json).to_string();
    format!("const params = JSON.parse({literal}); {entry_text}")
}

/// Runs the script; returns its end and its logs (none when it never ran).
pub(crate) async fn run(run: ScriptRun<'_>) -> (RunOutcome, Vec<String>) {
    let mut logs = Vec::new();
    let outcome = run_logged(run, &mut logs).await;
    (outcome, logs)
}

async fn run_logged(mut run: ScriptRun<'_>, logs: &mut Vec<String>) -> RunOutcome {
    if let Some((code, tools)) = run.program {
        return execute(code.to_owned(), tools, run, logs).await;
    }
    let name = &run.capability.def.name;
    let Some(entry) = &run.capability.entry else {
        return RunOutcome::Failed(format!(
            "capability `{name}` has no `entry`; a script capability needs one (e.g. `entry: index.js`)"
        ));
    };
    // Read here, not on a blocking thread (`tokio::fs`): an entry is a small file of the
    // project, read at every run (an edit counts at the next run), and handing the read to
    // another thread and back cost more than the read.
    let text = match std::fs::read_to_string(entry) {
        Ok(t) => t,
        Err(e) => return RunOutcome::Failed(format!("cannot read entry {}: {e}", entry.display())),
    };
    let mut providers = match &run.capability.tools {
        // No tools file: the namespace alone, as it was built once.
        None => {
            let code = program(&text, run.params);
            return match run.nested {
                Some(nested) => execute(code, &nested.alone, run, logs).await,
                None => execute(code, &ToolSet::empty(), run, logs).await,
            };
        }
        Some(path) => {
            let path = path.clone();
            match tokio::task::spawn_blocking(move || ToolsFile::load_checked(&path)).await {
                Ok(Ok(p)) => p,
                Ok(Err(e)) => {
                    return RunOutcome::Failed(format!("tools of capability `{name}`: {e}"))
                }
                Err(e) => return RunOutcome::Failed(format!("tools of capability `{name}`: {e}")),
            }
        }
    };
    if let Some(nested) = run.nested.take() {
        let nested = &nested.provider;
        if providers.iter().any(|p| p.name() == nested.name()) {
            return RunOutcome::Failed(format!(
                "the tools file of capability `{name}` declares a provider `{}`, a name execbox keeps for nested capabilities; rename it",
                nested.name()
            ));
        }
        providers.push(nested.clone());
    }
    let tools = match ToolSet::new(providers) {
        Ok(t) => t,
        Err(e) => return RunOutcome::Failed(format!("tools of capability `{name}`: {e}")),
    };
    let code = program(&text, run.params);
    execute(code, &tools, run, logs).await
}

/// Runs `code` with `tools`, as `run` says.
async fn execute(
    code: String,
    tools: &ToolSet,
    run: ScriptRun<'_>,
    logs: &mut Vec<String>,
) -> RunOutcome {
    let is_program = run.program.is_some();
    let name = &run.capability.def.name;
    let what = match is_program {
        true => format!("the paused `{name}` program"),
        false => format!("capability `{name}`"),
    };
    let may_ask = tools.may_ask(run.guard.as_ref());
    let mut request = ExecuteRequest::new(code)
        .tools(tools)
        .timeout(run.timeout)
        .cancel_on(run.cancel.clone())
        .id(run.execution_id)
        .guard(run.guard);
    match run.durable {
        Durability::None => {}
        Durability::IfApprovalNeeded => {
            if may_ask != MayAsk::No {
                request = request.durable(Ledger::new(), None);
            }
        }
        Durability::Resumed { ledger, approved } => {
            request = request.durable(ledger, Some(approved));
        }
    }
    let mut result = run.executor.execute(request).await;
    logs.clone_from(&result.logs);
    if result.was_cancelled() {
        return RunOutcome::Stopped;
    }
    if let Some(call) = result.paused.take() {
        return RunOutcome::Paused {
            call,
            ledger: Box::new(result.ledger.take().unwrap_or_default()),
        };
    }
    let limit_ms = run.time_limit.as_millis();
    if result.was_queued_out() {
        return RunOutcome::TimedOut(format!(
            "{what} waited its whole time limit of {limit_ms} ms for a runner and never ran: every pooled runner was busy with other executions (the wait counts against timeoutMs); start it again later, with a longer timeoutMs, or serve with more runners (`execbox serve --pool`)"
        ));
    }
    match &result.outcome {
        // A program's value is its result as it is; a capability may add context.
        Ok(_) if is_program => RunOutcome::Completed {
            result: result.value(),
            additional_context: None,
        },
        Ok(_) => split_result(result.value()),
        Err(e) if e.code == ErrorCode::Timeout => {
            let message =
                format!("{what} ran past its time limit of {limit_ms} ms and was stopped");
            match is_program {
                // The program's own error is what its model is answered (`execution_result`).
                true => RunOutcome::ProgramFailed {
                    error: e.clone(),
                    message,
                },
                false => RunOutcome::TimedOut(message),
            }
        }
        Err(e) if e.reason.as_deref() == Some(REPLAY_DIVERGED) => RunOutcome::Diverged(format!(
            "{what} was resumed after an approval and {}",
            e.message
        )),
        Err(e) if is_program => RunOutcome::ProgramFailed {
            error: e.clone(),
            message: e.to_string(),
        },
        Err(e) => RunOutcome::Failed(e.to_string()),
    }
}
