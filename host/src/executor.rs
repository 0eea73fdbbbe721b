//! The executor abstraction: run code with tools, get one result.

use std::future::Future;
use std::pin::Pin;

use execbox_protocol::{ErrorBody, RawValue, RuntimeOptions};
use tokio_util::sync::CancellationToken;

use crate::toolset::ToolSet;

/// A boxed future borrowing from the executor and its arguments.
pub type ExecuteFuture<'a> = Pin<Box<dyn Future<Output = ExecuteResult> + Send + 'a>>;

/// The outcome of one execution, as the runner's `done` reported it (or as the host decided
/// when the runner could not).
#[derive(Debug, Clone)]
pub struct ExecuteResult {
    /// The execution id the host chose.
    pub id: String,
    /// `Ok(None)` is a successful `undefined`; `Err` carries one of the seven codes.
    pub outcome: Result<Option<Box<RawValue>>, ErrorBody>,
    /// The guest's console lines, truncated by the runner.
    pub logs: Vec<String>,
    /// Wall time as measured by the runner (or by the host if the runner never answered).
    pub duration_ms: u64,
}

impl ExecuteResult {
    /// A failure decided by the host before or without a runner's `done`.
    pub fn failed(code: execbox_protocol::ErrorCode, message: impl Into<String>) -> ExecuteResult {
        ExecuteResult {
            id: crate::connection::next_execution_id(),
            outcome: Err(ErrorBody::new(code, message)),
            logs: Vec::new(),
            duration_ms: 0,
        }
    }

    /// True for `ok: true`.
    pub fn is_ok(&self) -> bool {
        self.outcome.is_ok()
    }

    /// The error, if the execution failed.
    pub fn error(&self) -> Option<&ErrorBody> {
        self.outcome.as_ref().err()
    }

    /// The result as a JSON tree (`None` for undefined or on failure).
    pub fn value(&self) -> Option<serde_json::Value> {
        match &self.outcome {
            Ok(Some(raw)) => crate::connection::raw_to_value(raw).ok(),
            _ => None,
        }
    }

    /// The whole `done` envelope as the runner would send it, for `--json` output.
    pub fn to_done_json(&self) -> String {
        execbox_protocol::Message::Done(execbox_protocol::Done {
            id: self.id.clone(),
            duration_ms: self.duration_ms,
            logs: self.logs.clone(),
            outcome: self.outcome.clone(),
        })
        .encode()
    }
}

/// Runs guest code against a tool set. Implementations differ in where the runner lives.
pub trait Executor: Send + Sync {
    /// Executes `code` with `tools` under `options`. Cancelling `cancel` ends the execution
    /// promptly with `timeout`. Never panics; every failure is an [`ExecuteResult`] error.
    fn execute<'a>(
        &'a self,
        code: &'a str,
        tools: &'a ToolSet,
        options: RuntimeOptions,
        cancel: CancellationToken,
    ) -> ExecuteFuture<'a>;
}
