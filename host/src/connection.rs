//! A live link to one runner, whatever carries it, and the host side of the protocol over it.
//!
//! Every transport (child process, WebSocket, in-process thread) is reduced to the same
//! [`Connection`]: a sender of host messages and a receiver of [`RunnerEvent`]s, plus a way
//! to terminate it. [`Connection::execute`] then implements the spec's host session once:
//! it ignores messages for other ids, answers every `tool_call` exactly once (concurrently),
//! enforces the host's own deadline, and turns a dead or babbling runner into `internal_error`.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use execbox_protocol::{
    Cancel, Done, ErrorBody, ErrorCode, Execute, Message, RawValue, RuntimeOptions,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::executor::ExecuteResult;
use crate::tool::ToolContext;
use crate::toolset::ToolSet;

/// Something the runner side produced.
#[derive(Debug)]
pub enum RunnerEvent {
    /// A well-formed protocol message.
    Message(Message),
    /// Output that is not a protocol message (the runner is broken or hostile).
    Garbage(String),
    /// The transport ended; the text says how (exit status, close frame, …).
    Closed(String),
}

/// Terminates the transport for good (kills the process, closes the socket).
pub type Terminate = Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// Timing knobs of the host session.
#[derive(Debug, Clone, Copy)]
pub struct SessionTimings {
    /// Added to `timeoutMs` before the host itself gives up on the runner and cancels.
    pub deadline_grace: Duration,
    /// How long to wait for `done` after sending `cancel` before terminating the transport.
    pub cancel_grace: Duration,
}

impl Default for SessionTimings {
    fn default() -> Self {
        SessionTimings {
            deadline_grace: Duration::from_millis(250),
            cancel_grace: Duration::from_millis(250),
        }
    }
}

/// One runner link. Not reusable after [`Connection::is_broken`] turns true.
pub struct Connection {
    tx: mpsc::UnboundedSender<Message>,
    rx: mpsc::UnboundedReceiver<RunnerEvent>,
    terminate: Option<Terminate>,
    broken: bool,
    /// Executions completed on this connection.
    pub executions: u64,
    timings: SessionTimings,
}

static NEXT_EXECUTION: AtomicU64 = AtomicU64::new(1);

/// A fresh execution id, unique within this process.
pub fn next_execution_id() -> String {
    format!(
        "exec-{}-{}",
        std::process::id(),
        NEXT_EXECUTION.fetch_add(1, Ordering::Relaxed)
    )
}

impl Connection {
    /// Wraps the two halves of a transport.
    pub fn new(
        tx: mpsc::UnboundedSender<Message>,
        rx: mpsc::UnboundedReceiver<RunnerEvent>,
        terminate: Terminate,
        timings: SessionTimings,
    ) -> Self {
        Connection {
            tx,
            rx,
            terminate: Some(terminate),
            broken: false,
            executions: 0,
            timings,
        }
    }

    /// True once the runner failed, was cancelled or terminated: the link must be dropped.
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// Checks an idle connection: anything the runner said while idle (it closed, crashed or
    /// printed garbage) marks it broken. Returns whether it is still usable.
    pub fn check_idle(&mut self) -> bool {
        loop {
            match self.rx.try_recv() {
                Ok(RunnerEvent::Message(message)) => {
                    tracing::debug!(kind = message.kind(), "stale runner message while idle");
                }
                Ok(_) | Err(mpsc::error::TryRecvError::Disconnected) => {
                    self.broken = true;
                    return false;
                }
                Err(mpsc::error::TryRecvError::Empty) => return !self.broken,
            }
        }
    }

    /// Terminates the transport now.
    pub async fn terminate(&mut self) {
        self.broken = true;
        if let Some(terminate) = self.terminate.take() {
            terminate().await;
        }
    }

    /// Runs one execution on a connection opened for it alone, then terminates it.
    pub async fn execute_once(
        mut self,
        code: &str,
        tools: &ToolSet,
        options: RuntimeOptions,
        cancel: &CancellationToken,
    ) -> ExecuteResult {
        let result = self.execute(code, tools, options, cancel).await;
        self.terminate().await;
        result
    }

    /// Runs one execution over this connection.
    pub async fn execute(
        &mut self,
        code: &str,
        tools: &ToolSet,
        options: RuntimeOptions,
        cancel: &CancellationToken,
    ) -> ExecuteResult {
        let started = Instant::now();
        let id = next_execution_id();
        let result = self.drive(&id, code, tools, options, cancel, started).await;
        self.executions += 1;
        if !result.is_ok() {
            // A failed execution may leave a runner in any state: never reuse it.
            self.broken = true;
        }
        if self.broken {
            self.terminate().await;
        }
        result
    }

    async fn drive(
        &mut self,
        id: &str,
        code: &str,
        tools: &ToolSet,
        options: RuntimeOptions,
        cancel: &CancellationToken,
        started: Instant,
    ) -> ExecuteResult {
        let fail = |code: ErrorCode, message: String| ExecuteResult {
            id: id.to_owned(),
            outcome: Err(ErrorBody::new(code, message)),
            logs: Vec::new(),
            duration_ms: started.elapsed().as_millis() as u64,
        };
        if self.broken {
            return fail(
                ErrorCode::InternalError,
                "runner connection is broken".into(),
            );
        }
        let execute = Message::Execute(Execute {
            id: id.to_owned(),
            code: code.to_owned(),
            options,
            providers: tools.manifests().to_vec(),
        });
        if self.tx.send(execute).is_err() {
            self.broken = true;
            return fail(
                ErrorCode::InternalError,
                "runner transport is closed".into(),
            );
        }
        let deadline = tokio::time::Instant::now()
            + Duration::from_millis(options.timeout_ms)
            + self.timings.deadline_grace;
        // Cancels every tool call of this execution when the execution ends, however.
        let tools_token = CancellationToken::new();
        let _cancel_tools = tools_token.clone().drop_guard();
        let mut seen_calls: HashSet<String> = HashSet::new();

        loop {
            let event = tokio::select! {
                event = self.rx.recv() => event,
                () = cancel.cancelled() => return self.abandon(id, started, &tools_token, "cancelled by the caller").await,
                () = tokio::time::sleep_until(deadline) => return self.abandon(id, started, &tools_token, "host deadline passed").await,
            };
            match event {
                Some(RunnerEvent::Message(Message::Done(done))) if done.id == id => {
                    return ExecuteResult::from_done(done);
                }
                Some(RunnerEvent::Message(Message::ToolCall(call))) => {
                    if !seen_calls.insert(call.call_id.clone()) {
                        tracing::warn!(call_id = %call.call_id, "runner repeated a callId; ignoring");
                        continue;
                    }
                    let ctx = ToolContext {
                        execution_id: id.to_owned(),
                        cancel: tools_token.child_token(),
                    };
                    let tools = tools.clone();
                    let tx = self.tx.clone();
                    tokio::spawn(async move {
                        let result = tools.dispatch(&call, ctx).await;
                        let _ = tx.send(Message::ToolResult(result));
                    });
                }
                Some(RunnerEvent::Message(Message::Started(_) | Message::Done(_))) => {
                    // `started`, or messages of another execution: the spec lets us ignore them.
                }
                Some(RunnerEvent::Message(other)) => {
                    self.broken = true;
                    return fail(
                        ErrorCode::InternalError,
                        format!("runner sent a host-only message ({})", other.kind()),
                    );
                }
                Some(RunnerEvent::Garbage(text)) => {
                    self.broken = true;
                    return fail(
                        ErrorCode::InternalError,
                        format!("runner sent invalid protocol output: {text}"),
                    );
                }
                Some(RunnerEvent::Closed(how)) => {
                    self.broken = true;
                    return fail(
                        ErrorCode::InternalError,
                        format!("runner ended before finishing the execution: {how}"),
                    );
                }
                None => {
                    self.broken = true;
                    return fail(
                        ErrorCode::InternalError,
                        "runner transport ended before finishing the execution".into(),
                    );
                }
            }
        }
    }

    /// Cancel path: tell the runner, stop the tools, wait a grace period for its `done`,
    /// then give up on the runner. The caller always gets `timeout`.
    async fn abandon(
        &mut self,
        id: &str,
        started: Instant,
        tools_token: &CancellationToken,
        why: &str,
    ) -> ExecuteResult {
        tracing::debug!(%id, why, "abandoning execution");
        tools_token.cancel();
        self.broken = true;
        let _ = self.tx.send(Message::Cancel(Cancel { id: id.to_owned() }));
        let grace = tokio::time::sleep(self.timings.cancel_grace);
        tokio::pin!(grace);
        let mut logs = Vec::new();
        loop {
            tokio::select! {
                event = self.rx.recv() => match event {
                    Some(RunnerEvent::Message(Message::Done(done))) if done.id == id => {
                        logs = done.logs;
                        break;
                    }
                    Some(RunnerEvent::Message(_)) => continue,
                    _ => break,
                },
                () = &mut grace => break,
            }
        }
        ExecuteResult {
            id: id.to_owned(),
            outcome: Err(ErrorBody::new(ErrorCode::Timeout, "Execution timed out")),
            logs,
            duration_ms: started.elapsed().as_millis() as u64,
        }
    }
}

impl ExecuteResult {
    fn from_done(done: Done) -> ExecuteResult {
        ExecuteResult {
            id: done.id,
            outcome: done.outcome,
            logs: done.logs,
            duration_ms: done.duration_ms,
        }
    }
}

/// Parses a result payload into a JSON tree (deep values included).
pub(crate) fn raw_to_value(raw: &RawValue) -> serde_json::Result<serde_json::Value> {
    let mut de = serde_json::Deserializer::from_str(raw.get());
    de.disable_recursion_limit();
    serde::Deserialize::deserialize(&mut de)
}
