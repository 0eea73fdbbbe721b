//! The executor abstraction: an execution request in, one result out.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use execbox_protocol::{ErrorBody, ErrorCode, LogsTruncated, RawValue, RuntimeOptions};
use tokio_util::sync::CancellationToken;

use crate::guard::CallGuard;
use crate::ledger::{Ledger, PausedCall};

use crate::toolset::ToolSet;

/// A boxed future borrowing from the executor.
pub type ExecuteFuture<'a> = Pin<Box<dyn Future<Output = ExecuteResult> + Send + 'a>>;

/// Runs guest code against a tool set. Implementations differ in where the runner lives.
pub trait Executor: Send + Sync {
    /// Runs one execution. Never panics; every failure is an [`ExecuteResult`] error.
    fn execute(&self, request: ExecuteRequest) -> ExecuteFuture<'_>;
}

/// One execution to run: the code, the tools it may call, its limits and how to cancel it.
///
/// ```
/// use std::time::Duration;
/// use execbox_host::{CancellationToken, ExecuteRequest, ToolSet};
///
/// let tools = ToolSet::empty();
/// let cancel = CancellationToken::new();
/// let request = ExecuteRequest::new("1 + 1")
///     .tools(&tools)
///     .timeout(Duration::from_millis(500))
///     .cancel_on(cancel.clone());
/// assert_eq!(request.limits().timeout_ms, 500);
/// ```
#[derive(Clone)]
pub struct ExecuteRequest {
    pub(crate) code: String,
    pub(crate) tools: ToolSet,
    pub(crate) options: RuntimeOptions,
    pub(crate) cancel: CancellationToken,
    pub(crate) guard: Option<Arc<dyn CallGuard>>,
    pub(crate) id: Option<String>,
    pub(crate) unawaited: Unawaited,
    pub(crate) durable: Option<Durable>,
}

/// What makes an execution durable: the ledger to record into (and replay from), and the
/// call an approver approved, if it resumes from a pause.
#[derive(Debug, Clone)]
pub(crate) struct Durable {
    pub(crate) ledger: Ledger,
    pub(crate) approved: Option<u32>,
}

/// What becomes of the tool calls a program started but did not await, still running when
/// the program returned (its `done` came). None of their results reaches the program (its
/// sandbox is gone), and whatever is chosen, the result's [`logs`](ExecuteResult::logs) end
/// with one line naming them by the names the program called and saying what became of them:
///
/// ```text
/// [execbox] 2 tool calls were not awaited: store.put ×2; they finished after the program returned — await them
/// [execbox] 1 tool call was not awaited: store.put; it was cancelled when the program returned — await it
/// [execbox] 3 tool calls were not awaited: store.put ×2, kv.get; store.put ×2 finished after the program returned; kv.get was cancelled at the time limit — await them
/// ```
///
/// A call that finished with an error adds `(1 failed: <its error>)` after `returned`. The
/// outcome of the execution is the program's own either way. Calls the program awaited, or
/// whose results reached it before it returned, are not named.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Unawaited {
    /// They run to their end (queued ones start as slots free up) within the execution's time
    /// limit (`timeoutMs`, counted from when the program went to the runner); the result is
    /// returned after them, so their side effects have landed. Calls still running at the
    /// time limit, or when the caller cancels, are cancelled. The default.
    #[default]
    Finish,
    /// They are cancelled when the program returns (running ones see
    /// [`ToolContext::cancel`](crate::ToolContext::cancel), command tools are killed, queued
    /// ones never start).
    Cancel,
}

impl ExecuteRequest {
    /// Runs `code` (an async function body; its last expression or `return` is the result)
    /// with no tools and the default limits.
    pub fn new(code: impl Into<String>) -> Self {
        ExecuteRequest {
            code: code.into(),
            tools: ToolSet::empty(),
            options: RuntimeOptions::default(),
            cancel: CancellationToken::new(),
            guard: None,
            id: None,
            unawaited: Unawaited::default(),
            durable: None,
        }
    }

    /// The tools the guest may call (cheap: a tool set is shared, not copied).
    pub fn tools(mut self, tools: &ToolSet) -> Self {
        self.tools = tools.clone();
        self
    }

    /// All limits at once (time, memory, logs), as the wire's `options`.
    pub fn options(mut self, options: RuntimeOptions) -> Self {
        self.options = options;
        self
    }

    /// The wall-clock limit (default 5 s); rounded down to whole milliseconds. It counts from
    /// when the executor is given the request: time spent waiting for a runner of a
    /// [`PooledExecutor`](crate::PooledExecutor) counts too.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.options.timeout_ms = timeout.as_millis().min(u64::MAX as u128) as u64;
        self
    }

    /// The memory limit of the guest's runtime in bytes (default 64 MiB).
    pub fn memory_limit(mut self, bytes: u64) -> Self {
        self.options.memory_limit_bytes = bytes;
        self
    }

    /// Ends the execution promptly when `token` is cancelled: the guest sees its execution
    /// aborted (`timeout` on the wire) and the result says [`ExecuteResult::was_cancelled`].
    pub fn cancel_on(mut self, token: CancellationToken) -> Self {
        self.cancel = token;
        self
    }

    /// Runs every tool call through `guard` (a policy: what the execution may see, and
    /// each call's admission; see [`CallGuard`]). Without one, every tool is visible, and a
    /// tool that declares a rate limit or an approval is refused rather than run unguarded.
    pub fn guard(mut self, guard: Arc<dyn CallGuard>) -> Self {
        self.guard = Some(guard);
        self
    }

    /// The execution id to use (`execute.id` on the wire, [`ToolContext::execution_id`] of
    /// its tool calls, [`ExecuteResult::id`]), so a caller can tie tool calls to its own
    /// request; a fresh, process-unique id by default. Give each execution its own.
    ///
    /// [`ToolContext::execution_id`]: crate::ToolContext::execution_id
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// What becomes of tool calls the program did not await (default [`Unawaited::Finish`]:
    /// they finish within the time limit before the result is returned).
    pub fn unawaited(mut self, unawaited: Unawaited) -> Self {
        self.unawaited = unawaited;
        self
    }

    /// Makes the execution durable (see the [`Ledger`] docs): its calls are recorded in
    /// `ledger` (a fresh [`Ledger::new`] for a new execution) and those `ledger` answers are
    /// replayed from it, its clock and `Math.random()` replay what the ledger recorded, and a
    /// call that needs an approval nobody can give now pauses it instead of being refused.
    /// `approved` is the number (0-based) of the call an approver approved, when it resumes
    /// from a pause: that call runs without asking again. The result carries the ledger
    /// after the run ([`ExecuteResult::ledger`]) and the call it paused at, if it did
    /// ([`ExecuteResult::paused`]).
    ///
    /// The runner must support `execute.replay` (execbox's runner does; others ignore it,
    /// and then the clock and `Math.random()` are not replayed).
    pub fn durable(mut self, ledger: Ledger, approved: Option<u32>) -> Self {
        self.durable = Some(Durable { ledger, approved });
        self
    }

    /// The code as given.
    pub fn code(&self) -> &str {
        &self.code
    }

    /// The limits in effect.
    pub fn limits(&self) -> &RuntimeOptions {
        &self.options
    }
}

/// The outcome of one execution, as the runner's `done` reported it (or as the host decided
/// when the runner could not).
#[derive(Debug, Clone)]
pub struct ExecuteResult {
    /// The execution id the host chose.
    pub id: String,
    /// `Ok(None)` is a successful `undefined`; `Err` carries one of the seven codes.
    pub outcome: Result<Option<Box<RawValue>>, ErrorBody>,
    /// The guest's console lines, truncated by the runner, then the host's notes, each
    /// starting `[execbox] `: what the log limits left out (see
    /// [`ExecuteResult::logs_truncated`]) and the tool calls the program did not await
    /// (see [`Unawaited`]).
    pub logs: Vec<String>,
    /// What the runner's log limits took from `logs`, as its `done` said (`logsTruncated`).
    pub logs_truncated: Option<LogsTruncated>,
    /// Wall time as measured by the runner (or by the host if the runner never answered).
    pub duration_ms: u64,
    /// The caller's cancellation token ended the execution (the wire code is still
    /// `timeout`, as the protocol says for any aborted execution).
    pub cancelled: bool,
    /// A durable execution's ledger after this run: what a resume replays from.
    pub ledger: Option<Ledger>,
    /// The call a durable execution paused at, waiting for approval; its outcome is then an
    /// error saying so, and it is resumed with [`ExecuteRequest::durable`] given
    /// [`ExecuteResult::ledger`] and this call's [`PausedCall::index`] once approved.
    pub paused: Option<PausedCall>,
}

/// How the message of an execution whose time limit passed while it waited for a runner
/// starts. A runner's own `timeout` starts with [`execbox_protocol::TIMEOUT_MESSAGE`], so this
/// one cannot be mistaken for it.
const QUEUED_OUT_MESSAGE: &str = "the execution waited its whole time limit of ";

impl ExecuteResult {
    /// The same result, its `timeout` message naming `limit_ms`, the limit the caller set,
    /// where the runner named `sent_ms`, the part of it left when the runner got the program
    /// ("Execution timed out after 1999 ms" for a 2000 ms limit).
    pub(crate) fn naming_the_limit(mut self, sent_ms: u64, limit_ms: u64) -> ExecuteResult {
        if let Err(error) = &mut self.outcome {
            let sent = format!("{} after {sent_ms} ms", execbox_protocol::TIMEOUT_MESSAGE);
            if error.code == ErrorCode::Timeout && sent_ms != limit_ms {
                if let Some(rest) = error.message.strip_prefix(&sent) {
                    error.message = format!(
                        "{} after {limit_ms} ms{rest}",
                        execbox_protocol::TIMEOUT_MESSAGE
                    );
                }
            }
        }
        self
    }

    /// A failure decided by the host before or without a runner's `done`.
    pub fn failed(code: ErrorCode, message: impl Into<String>) -> ExecuteResult {
        ExecuteResult {
            id: next_execution_id(),
            outcome: Err(ErrorBody::new(code, message)),
            logs: Vec::new(),
            logs_truncated: None,
            duration_ms: 0,
            cancelled: false,
            ledger: None,
            paused: None,
        }
    }

    /// The result of an execution the caller cancelled before it reached a runner.
    pub(crate) fn cancelled_early() -> ExecuteResult {
        ExecuteResult {
            cancelled: true,
            ..ExecuteResult::failed(ErrorCode::Timeout, execbox_protocol::TIMEOUT_MESSAGE)
        }
    }

    /// True for `ok: true`.
    pub fn is_ok(&self) -> bool {
        self.outcome.is_ok()
    }

    /// True when the caller's cancellation ended the execution, as opposed to its time limit.
    pub fn was_cancelled(&self) -> bool {
        self.cancelled
    }

    /// The result of an execution whose time limit (`limit_ms`) passed while it waited for
    /// one of the `runners` of a pool: `timeout`, never having run.
    pub(crate) fn queued_out(limit_ms: u128, runners: usize) -> ExecuteResult {
        ExecuteResult::failed(
            ErrorCode::Timeout,
            format!(
                "{QUEUED_OUT_MESSAGE}{limit_ms} ms for a runner and never ran: all {runners} runner{} of the pool were busy",
                if runners == 1 { "" } else { "s" },
            ),
        )
    }

    /// True when the time limit passed while the execution waited for a runner (every runner
    /// of a [`PooledExecutor`](crate::PooledExecutor) was busy), so the code never ran; the
    /// error is `timeout`.
    pub fn was_queued_out(&self) -> bool {
        !self.cancelled
            && matches!(&self.outcome, Err(e) if e.code == ErrorCode::Timeout && e.message.starts_with(QUEUED_OUT_MESSAGE))
    }

    /// The error, if the execution failed.
    pub fn error(&self) -> Option<&ErrorBody> {
        self.outcome.as_ref().err()
    }

    /// The result as a JSON tree (`None` for undefined or on failure).
    pub fn value(&self) -> Option<serde_json::Value> {
        match &self.outcome {
            Ok(Some(raw)) => crate::json::raw_to_value(raw).ok(),
            _ => None,
        }
    }

    /// The whole `done` envelope as the runner would send it, for `--json` output.
    pub fn to_done_json(&self) -> String {
        execbox_protocol::Message::Done(execbox_protocol::Done {
            id: self.id.clone(),
            duration_ms: self.duration_ms,
            logs: self.logs.clone(),
            logs_truncated: self.logs_truncated,
            clock: None,
            clock_overflow: false,
            outcome: self.outcome.clone(),
        })
        .encode()
    }
}

static NEXT_EXECUTION: AtomicU64 = AtomicU64::new(1);

/// A fresh execution id, unique within this process.
pub(crate) fn next_execution_id() -> String {
    format!(
        "exec-{}-{}",
        std::process::id(),
        NEXT_EXECUTION.fetch_add(1, Ordering::Relaxed)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_wait_for_a_runner_reads_as_queued_out() {
        let queued = ExecuteResult::queued_out(2000, 2);
        assert!(queued.was_queued_out());
        assert_eq!(queued.error().map(|e| e.code), Some(ErrorCode::Timeout));
        let ran = ExecuteResult::failed(ErrorCode::Timeout, execbox_protocol::TIMEOUT_MESSAGE);
        assert!(!ran.was_queued_out());
        assert!(!ExecuteResult::cancelled_early().was_queued_out());
    }

    #[test]
    fn a_runner_timeout_names_the_limit_the_caller_set() {
        let ran = ExecuteResult::failed(
            ErrorCode::Timeout,
            "Execution timed out after 1999 ms while running JavaScript",
        );
        assert_eq!(
            ran.naming_the_limit(1999, 2000).error().unwrap().message,
            "Execution timed out after 2000 ms while running JavaScript"
        );
        // A guest's own error that happens to say so is left alone.
        let thrown =
            ExecuteResult::failed(ErrorCode::RuntimeError, "Execution timed out after 1999 ms");
        assert_eq!(
            thrown.naming_the_limit(1999, 2000).error().unwrap().message,
            "Execution timed out after 1999 ms"
        );
    }
}
