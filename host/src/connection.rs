//! A live link to one runner, whatever carries it, and the host side of the protocol over it.
//!
//! Every transport (child process, WebSocket, in-process thread) is reduced to the same
//! [`Connection`]: a sender of host messages and a receiver of [`RunnerEvent`]s, plus a way
//! to terminate it. [`Connection::execute`] then implements the spec's host session once:
//! it ignores messages for other ids, answers every `tool_call` exactly once, enforces the
//! host's own deadline, and turns a dead or babbling runner into `internal_error`.
//!
//! Tool calls of one execution run concurrently, at most
//! [`SessionTimings::max_concurrent_tool_calls`] at a time; the rest wait in arrival order,
//! at most [`MAX_QUEUED_TOOL_CALLS`] calls and [`MAX_QUEUED_TOOL_INPUT_BYTES`] of input, and
//! a call beyond either bound is answered at once with `tool_error`. The runner is not
//! trusted to keep its own pending calls in check.
//!
//! When the runner's `done` comes while tool calls of the execution are still running or
//! waiting (the program did not await them), the request's [`Unawaited`] decides: by default
//! they finish within the execution's time limit, else they are cancelled; either way the
//! result's logs end with a note naming them (see [`Unawaited`]). This is the one place that
//! rule lives, so every executor follows it.
//!
//! When an execution ends otherwise (the deadline, a cancel, a dead runner), or once its
//! unawaited calls are settled, its queued calls are dropped unstarted, its running calls are
//! cancelled (their [`ToolContext::cancel`] fires, command tools are killed) and waited for,
//! and no result of theirs is sent to the runner: every `tool_result` goes out from the
//! session loop, which has stopped by then. Only then does [`Connection::execute`] return,
//! so a pooled runner is reused only after its previous execution's calls are gone.
//!
//! A `tool_call` whose callId this connection has already seen is refused (logged, never run
//! a second time). Runners number calls per process, so an id never legitimately repeats.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use execbox_protocol::{
    Cancel, ClockRun, Done, ErrorBody, ErrorCode, Execute, Frame, LogsTruncated, Message, ToolCall,
    ToolResult,
};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::executor::{next_execution_id, ExecuteRequest, ExecuteResult, Unawaited};
use crate::guard::{CallGuard, ExecutionEnd};
use crate::ledger::Recorder;
use crate::notes::{self, CancelledBy, Fate};
#[cfg(unix)]
use crate::pipe_writer::PipeWriter;
use crate::tool::ToolContext;
use crate::toolset::{Halt, ToolSet};
use crate::trace;

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

/// The default of [`SessionTimings::max_concurrent_tool_calls`].
pub const DEFAULT_MAX_CONCURRENT_TOOL_CALLS: usize = 16;

/// Tool calls of one execution that may wait for a free slot; a call beyond is answered at
/// once with `tool_error`.
pub const MAX_QUEUED_TOOL_CALLS: usize = 1024;

/// Bytes of input the waiting tool calls of one execution may hold together; a call beyond is
/// answered at once with `tool_error`.
pub const MAX_QUEUED_TOOL_INPUT_BYTES: usize = 64 << 20;

/// A connection that has seen more callIds than this is retired after its execution, so the
/// set of seen ids stays bounded.
const MAX_SEEN_CALL_IDS: usize = 1 << 16;

/// How long an ended execution waits for its cancelled tool calls to stop.
const TOOL_SHUTDOWN_WAIT: Duration = Duration::from_secs(2);

/// Host-side knobs of a session: grace periods and the tool-call cap.
#[derive(Debug, Clone, Copy)]
pub struct SessionTimings {
    /// Added to `timeoutMs` before the host itself gives up on the runner and cancels.
    pub deadline_grace: Duration,
    /// How long to wait for `done` after sending `cancel` before terminating the transport.
    pub cancel_grace: Duration,
    /// At most this many tool calls of one execution run at once; the others wait in arrival
    /// order (see the module docs for the bound on waiting calls). Default
    /// [`DEFAULT_MAX_CONCURRENT_TOOL_CALLS`] (16); 0 counts as 1. Enforced by the host
    /// whatever the runner sends; it does not limit calls across executions.
    pub max_concurrent_tool_calls: usize,
}

impl Default for SessionTimings {
    fn default() -> Self {
        SessionTimings {
            deadline_grace: execbox_protocol::RuntimeOptions::DEADLINE_GRACE,
            cancel_grace: Duration::from_millis(250),
            max_concurrent_tool_calls: DEFAULT_MAX_CONCURRENT_TOOL_CALLS,
        }
    }
}

/// Where a connection's messages to its runner go.
enum Outgoing {
    /// To the transport's writer (a WebSocket, an in-process session).
    Channel(mpsc::UnboundedSender<Message>),
    /// Into a runner's stdin, by the sender itself.
    #[cfg(unix)]
    Pipe(Arc<PipeWriter>),
}

/// The transport is closed: nothing sent reaches the runner any more.
struct TransportClosed;

impl Outgoing {
    fn send(&self, message: Message) -> Result<(), TransportClosed> {
        match self {
            Outgoing::Channel(tx) => tx.send(message).map_err(|_| TransportClosed),
            #[cfg(unix)]
            Outgoing::Pipe(pipe) => pipe.send(&message).map_err(|_| TransportClosed),
        }
    }
}

/// One runner link. Not reusable after [`Connection::is_broken`] turns true.
pub struct Connection {
    tx: Outgoing,
    rx: mpsc::UnboundedReceiver<RunnerEvent>,
    terminate: Option<Terminate>,
    broken: bool,
    /// Executions completed on this connection.
    pub executions: u64,
    timings: SessionTimings,
    /// Every callId the runner sent on this connection: runners never reuse one, so a repeat
    /// is refused instead of running a tool twice.
    seen_calls: HashSet<String>,
}

impl Connection {
    /// Wraps the two halves of a transport.
    pub fn new(
        tx: mpsc::UnboundedSender<Message>,
        rx: mpsc::UnboundedReceiver<RunnerEvent>,
        terminate: Terminate,
        timings: SessionTimings,
    ) -> Self {
        Connection::with_outgoing(Outgoing::Channel(tx), rx, terminate, timings)
    }

    /// A connection whose messages are written straight into a runner's stdin by whoever
    /// sends them ([`PipeWriter`]).
    #[cfg(unix)]
    pub(crate) fn with_pipe(
        pipe: Arc<PipeWriter>,
        rx: mpsc::UnboundedReceiver<RunnerEvent>,
        terminate: Terminate,
        timings: SessionTimings,
    ) -> Self {
        Connection::with_outgoing(Outgoing::Pipe(pipe), rx, terminate, timings)
    }

    fn with_outgoing(
        tx: Outgoing,
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
            seen_calls: HashSet::new(),
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
    pub async fn execute_once(mut self, request: &ExecuteRequest) -> ExecuteResult {
        let result = self.execute(request).await;
        self.terminate().await;
        result
    }

    /// Runs one execution over this connection, in an `execbox.execution` span
    /// ([`trace`](crate::trace)).
    pub async fn execute(&mut self, request: &ExecuteRequest) -> ExecuteResult {
        let id = request.id.clone().unwrap_or_else(next_execution_id);
        let span = tracing::info_span!(
            target: trace::TARGET,
            "execbox.execution",
            otel.kind = "internal",
            execbox.execution_id = %id,
            execbox.principal = request.guard.as_ref().and_then(|g| g.principal()),
            execbox.outcome = tracing::field::Empty,
            execbox.duration_ms = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        let result = self.execute_as(id, request).instrument(span.clone()).await;
        let outcome = if result.paused.is_some() {
            Some(trace::AWAITING_APPROVAL)
        } else {
            result.error().map(|e| e.code.as_str())
        };
        trace::record_outcome(&span, outcome, result.duration_ms);
        result
    }

    async fn execute_as(&mut self, id: String, request: &ExecuteRequest) -> ExecuteResult {
        let started = Instant::now();
        let guard = request.guard.clone();
        if let Some(guard) = &guard {
            if let Err(e) = guard.execution_started(&id) {
                return guard_failed(&id, &e.to_string());
            }
        }
        let tools = match &guard {
            Some(guard) => request.tools.visible_to(guard.as_ref()),
            None => request.tools.clone(),
        };
        let mut result = self
            .drive(&id, request, &tools, guard.clone(), started)
            .await;
        if let Some(guard) = guard {
            let end = ExecutionEnd {
                execution_id: &id,
                outcome: result.outcome.as_ref().map(|_| ()).map_err(|e| e.code),
                message: result.error().map(|e| e.message.as_str()),
                duration: started.elapsed(),
            };
            if let Err(e) = guard.execution_finished(end) {
                result = guard_failed(&id, &e.to_string());
            }
        }
        tracing::debug!(
            %id,
            ok = result.is_ok(),
            duration_ms = result.duration_ms,
            cancelled = result.cancelled,
            "execution finished"
        );
        self.executions += 1;
        if !result.is_ok() {
            // A failed execution may leave a runner in any state: never reuse it.
            self.broken = true;
        }
        if self.seen_calls.len() > MAX_SEEN_CALL_IDS {
            tracing::debug!("retiring a runner connection that has seen many tool calls");
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
        request: &ExecuteRequest,
        tools: &ToolSet,
        guard: Option<Arc<dyn CallGuard>>,
        started: Instant,
    ) -> ExecuteResult {
        // Cancels every tool call of this execution when the execution ends, however.
        let tools_token = CancellationToken::new();
        let recorder = request
            .durable
            .as_ref()
            .map(|d| Arc::new(Recorder::new(&d.ledger, d.approved)));
        let mut calls = ToolCalls::new(
            self.timings.max_concurrent_tool_calls,
            tools.clone(),
            guard,
            id,
            tools_token.clone(),
            recorder.clone(),
        );
        let mut result = self.session(id, request, tools, started, &mut calls).await;
        tools_token.cancel();
        calls.shutdown().await;
        if let Some(recorder) = recorder {
            let (ledger, paused) = recorder.finish(calls.clock.take());
            if paused.is_some() && calls.clock_overflow {
                result.outcome = Err(ErrorBody::new(
                    ErrorCode::InternalError,
                    format!(
                        "the execution cannot pause for approval: it read the clock more than \
                          {} distinct times, more than its ledger keeps",
                        execbox_protocol::MAX_CLOCK_RUNS
                    ),
                ));
            } else if paused.is_none() && result.is_ok() {
                if let Some(message) = recorder.unreached_approval() {
                    result.outcome = Err(diverged(message));
                }
            }
            // A call the program left running that paused after it returned never ran, and
            // the program's own result stands: only a run that ended at its pause is paused.
            if !calls.clock_overflow && !result.is_ok() {
                result.paused = paused;
            }
            result.ledger = Some(ledger);
        }
        result
    }

    async fn session(
        &mut self,
        id: &str,
        request: &ExecuteRequest,
        tools: &ToolSet,
        started: Instant,
        calls: &mut ToolCalls,
    ) -> ExecuteResult {
        let ExecuteRequest {
            code,
            options,
            cancel,
            unawaited,
            ..
        } = request;
        let options = *options;
        let fail = |code: ErrorCode, message: String| ExecuteResult {
            id: id.to_owned(),
            outcome: Err(ErrorBody::new(code, message)),
            logs: Vec::new(),
            logs_truncated: None,
            duration_ms: started.elapsed().as_millis() as u64,
            cancelled: false,
            ledger: None,
            paused: None,
        };
        if self.broken {
            return fail(
                ErrorCode::InternalError,
                "runner connection is broken".into(),
            );
        }
        let execute = Message::Execute(Execute {
            id: id.to_owned(),
            code: code.clone(),
            options,
            providers: tools.manifests().to_vec(),
            replay: request.durable.as_ref().map(|d| d.ledger.replay()),
        });
        if self.tx.send(execute).is_err() {
            self.broken = true;
            return fail(
                ErrorCode::InternalError,
                "runner transport is closed".into(),
            );
        }
        let time_limit = tokio::time::Instant::now() + Duration::from_millis(options.timeout_ms);
        let deadline = time_limit + self.timings.deadline_grace;
        let tools_token = calls.token().clone();

        loop {
            let event = tokio::select! {
                event = self.rx.recv() => event,
                Some(result) = calls.next_result() => match result {
                    Ok(result) => {
                        if self.tx.send(Message::ToolResult(result)).is_err() {
                            tracing::debug!("runner transport closed while answering a tool call");
                        }
                        continue;
                    }
                    Err(Halt::Fatal(fatal)) => {
                        let mut result = self.abandon(id, started, &tools_token, false, &options, calls).await;
                        result.outcome = Err(guard_failure(&fatal));
                        return result;
                    }
                    Err(Halt::Diverged(message)) => {
                        let mut result = self.abandon(id, started, &tools_token, false, &options, calls).await;
                        result.outcome = Err(diverged(message));
                        return result;
                    }
                    Err(Halt::Pause) => {
                        return self.pause(id, started, time_limit, cancel, &options, calls).await;
                    }
                },
                () = cancel.cancelled() => return self.abandon(id, started, &tools_token, true, &options, calls).await,
                () = tokio::time::sleep_until(deadline) => return self.abandon(id, started, &tools_token, false, &options, calls).await,
            };
            match event {
                Some(RunnerEvent::Message(Message::Done(mut done))) if done.id == id => {
                    calls.keep_clock(&mut done);
                    let ending = notes::Ending::of(&done.outcome);
                    let mut result = ExecuteResult::from_done(done, &options);
                    result.logs.extend(notes::no_value(code, &result.outcome));
                    let settled = calls.settle(*unawaited, time_limit, cancel).await;
                    result.logs.extend(notes::unawaited(&settled.calls, ending));
                    match settled.halt {
                        Some(Halt::Fatal(fatal)) => result.outcome = Err(guard_failure(&fatal)),
                        Some(Halt::Diverged(message)) => result.outcome = Err(diverged(message)),
                        // A call the program left running paused after it returned: it never
                        // ran, and the program's own result stands.
                        Some(Halt::Pause) | None => {}
                    }
                    return result;
                }
                Some(RunnerEvent::Message(Message::ToolCall(call))) => {
                    if !self.admit_call_id(&call.call_id) {
                        continue;
                    }
                    if let Some(refused) = calls.submit(call) {
                        let _ = self.tx.send(Message::ToolResult(refused));
                    }
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

    /// Whether a `tool_call` with this callId may run: false for an id this connection has
    /// already seen.
    fn admit_call_id(&mut self, call_id: &str) -> bool {
        if !self.seen_calls.insert(call_id.to_owned()) {
            tracing::warn!(%call_id, "runner repeated a callId; refusing the call");
            return false;
        }
        true
    }

    /// Cancel path: tell the runner, stop the tools, wait a grace period for its `done`,
    /// then give up on the runner. The caller always gets `timeout`.
    async fn abandon(
        &mut self,
        id: &str,
        started: Instant,
        tools_token: &CancellationToken,
        by_caller: bool,
        options: &execbox_protocol::RuntimeOptions,
        calls: &mut ToolCalls,
    ) -> ExecuteResult {
        let why = if by_caller {
            "cancelled by the caller"
        } else {
            "host deadline passed"
        };
        tracing::debug!(%id, why, "abandoning execution");
        tools_token.cancel();
        self.broken = true;
        let _ = self.tx.send(Message::Cancel(Cancel { id: id.to_owned() }));
        let (logs, logs_truncated) = self.last_done(id, options, calls).await;
        ExecuteResult {
            id: id.to_owned(),
            outcome: Err(ErrorBody::timeout()),
            logs,
            logs_truncated,
            duration_ms: started.elapsed().as_millis() as u64,
            cancelled: by_caller,
            ledger: None,
            paused: None,
        }
    }

    /// A call paused the durable execution: the runner is cancelled, so no answer reaches
    /// the program any more; calls already running finish (within the time limit) and are
    /// recorded, calls not yet started never start, and the runner's last `done` brings the
    /// clock readings.
    async fn pause(
        &mut self,
        id: &str,
        started: Instant,
        time_limit: tokio::time::Instant,
        cancel: &CancellationToken,
        options: &execbox_protocol::RuntimeOptions,
        calls: &mut ToolCalls,
    ) -> ExecuteResult {
        tracing::debug!(%id, "pausing execution for approval");
        self.broken = true;
        let _ = self.tx.send(Message::Cancel(Cancel { id: id.to_owned() }));
        let mut fatal = None;
        calls.drop_waiting();
        while calls.is_running() {
            tokio::select! {
                result = calls.next_result() => match result {
                    Some(Err(Halt::Fatal(message))) => fatal = Some(message),
                    Some(_) => {}
                    None => break,
                },
                () = cancel.cancelled() => break,
                () = tokio::time::sleep_until(time_limit) => break,
            }
        }
        calls.token().cancel();
        let (logs, logs_truncated) = self.last_done(id, options, calls).await;
        let outcome = match fatal {
            Some(message) => guard_failure(&message),
            None => ErrorBody {
                reason: Some(AWAITING_APPROVAL.into()),
                ..ErrorBody::new(
                    ErrorCode::ToolError,
                    "the execution paused: a tool call waits for approval",
                )
            },
        };
        ExecuteResult {
            id: id.to_owned(),
            outcome: Err(outcome),
            logs,
            logs_truncated,
            duration_ms: started.elapsed().as_millis() as u64,
            cancelled: false,
            ledger: None,
            paused: None,
        }
    }

    /// Waits a grace period for the `done` of a cancelled execution: its logs, and its clock
    /// readings kept in `calls`.
    async fn last_done(
        &mut self,
        id: &str,
        options: &execbox_protocol::RuntimeOptions,
        calls: &mut ToolCalls,
    ) -> (Vec<String>, Option<LogsTruncated>) {
        let grace = tokio::time::sleep(self.timings.cancel_grace);
        tokio::pin!(grace);
        let mut logs = Vec::new();
        let mut logs_truncated = None;
        loop {
            tokio::select! {
                event = self.rx.recv() => match event {
                    Some(RunnerEvent::Message(Message::Done(mut done))) if done.id == id => {
                        calls.keep_clock(&mut done);
                        logs_truncated = done.logs_truncated;
                        logs = done.logs;
                        logs.extend(notes::logs_truncated(logs_truncated, logs.len(), options));
                        break;
                    }
                    Some(RunnerEvent::Message(_)) => continue,
                    _ => break,
                },
                () = &mut grace => break,
            }
        }
        (logs, logs_truncated)
    }
}

/// `error.reason` of a durable execution that paused for approval.
pub(crate) const AWAITING_APPROVAL: &str = "awaiting_approval";

/// `error.reason` of a durable execution whose replay diverged from its ledger.
pub const REPLAY_DIVERGED: &str = "replay_diverged";

/// The error of a durable execution whose replay diverged from its ledger.
fn diverged(message: String) -> ErrorBody {
    ErrorBody {
        reason: Some(REPLAY_DIVERGED.into()),
        ..ErrorBody::new(ErrorCode::InternalError, message)
    }
}

/// The tool calls of one execution: at most `limit` running, the rest waiting in arrival
/// order. Results come back through [`ToolCalls::next_result`]; nothing here talks to the
/// runner, so once the session loop stops, no result can reach it.
struct ToolCalls {
    limit: usize,
    tools: ToolSet,
    /// The guard of this execution, if any.
    guard: Option<Arc<dyn CallGuard>>,
    execution_id: String,
    token: CancellationToken,
    /// Each task's answer, or the message of a guard that failed fatally.
    running: JoinSet<Result<ToolResult, Halt>>,
    /// The callId of each running task, to answer for a task that panicked.
    running_ids: HashMap<tokio::task::Id, String>,
    queue: VecDeque<(ToolCall, u32)>,
    queued_bytes: usize,
    /// Every call running or waiting, by callId: the order it came in and the name the
    /// program called it by (`store.put`), to name the calls the program did not await.
    pending: HashMap<String, (u64, String)>,
    arrived: u64,
    /// The ledger of a durable execution.
    recorder: Option<Arc<Recorder>>,
    /// The number of the next call, in the ledger's order.
    next_index: u32,
    /// The clock readings the runner's `done` reported (durable executions).
    clock: Option<Vec<ClockRun>>,
    /// The runner recorded more clock readings than a ledger keeps.
    clock_overflow: bool,
}

/// What became of the calls still running or waiting when the program returned.
struct Settled {
    /// Each call's name as the program called it and its fate, in the order they came in.
    calls: Vec<(String, Fate)>,
    /// Why the execution must stop, when a call said so meanwhile.
    halt: Option<Halt>,
}

impl ToolCalls {
    fn new(
        limit: usize,
        tools: ToolSet,
        guard: Option<Arc<dyn CallGuard>>,
        execution_id: &str,
        token: CancellationToken,
        recorder: Option<Arc<Recorder>>,
    ) -> Self {
        ToolCalls {
            limit: limit.max(1),
            tools,
            guard,
            execution_id: execution_id.to_owned(),
            token,
            running: JoinSet::new(),
            running_ids: HashMap::new(),
            queue: VecDeque::new(),
            queued_bytes: 0,
            pending: HashMap::new(),
            arrived: 0,
            recorder,
            next_index: 0,
            clock: None,
            clock_overflow: false,
        }
    }

    fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// Keeps the clock readings of the runner's `done`.
    fn keep_clock(&mut self, done: &mut Done) {
        if let Some(clock) = done.clock.take() {
            self.clock = Some(clock);
        }
        self.clock_overflow |= done.clock_overflow;
    }

    /// Whether a call is running.
    fn is_running(&self) -> bool {
        !self.running.is_empty()
    }

    /// Forgets the calls waiting for a slot: they never start.
    fn drop_waiting(&mut self) {
        for call in self.queue.drain(..) {
            self.pending.remove(&call.0.call_id);
        }
        self.queued_bytes = 0;
    }

    /// Starts the call, or queues it; returns the answer of a call refused at once.
    fn submit(&mut self, call: ToolCall) -> Option<ToolResult> {
        let index = self.next_index;
        self.next_index = self.next_index.saturating_add(1);
        if self.running.len() < self.limit && self.queue.is_empty() {
            self.track(&call);
            self.start(call, index);
            return None;
        }
        let bytes = input_bytes(&call);
        if self.queue.len() >= MAX_QUEUED_TOOL_CALLS
            || self.queued_bytes + bytes > MAX_QUEUED_TOOL_INPUT_BYTES
        {
            tracing::warn!(call_id = %call.call_id, "too many tool calls waiting; refusing one");
            let message = format!(
                "Too many tool calls at once: {} running and {} waiting (at most {} waiting, {} bytes of input)",
                self.running.len(),
                self.queue.len(),
                MAX_QUEUED_TOOL_CALLS,
                MAX_QUEUED_TOOL_INPUT_BYTES
            );
            return Some(ToolResult {
                call_id: call.call_id,
                outcome: Err(ErrorBody::new(ErrorCode::ToolError, message)),
            });
        }
        self.track(&call);
        self.queued_bytes += bytes;
        self.queue.push_back((call, index));
        None
    }

    /// Remembers an admitted call until its result comes back.
    fn track(&mut self, call: &ToolCall) {
        self.arrived += 1;
        let name = format!("{}.{}", call.provider_name, call.safe_tool_name);
        self.pending
            .insert(call.call_id.clone(), (self.arrived, name));
    }

    /// The program returned: the calls still running or waiting are settled as `mode` says,
    /// `time_limit` and `cancel` cutting a wait for them short. Returns what became of each;
    /// none is left running or waiting.
    async fn settle(
        &mut self,
        mode: Unawaited,
        time_limit: tokio::time::Instant,
        cancel: &CancellationToken,
    ) -> Settled {
        let mut order: Vec<(String, u64, String)> = self
            .pending
            .iter()
            .map(|(id, (seq, name))| (id.clone(), *seq, name.clone()))
            .collect();
        order.sort_by_key(|(_, seq, _)| *seq);
        let mut fates: HashMap<String, Fate> = HashMap::new();
        let mut halt = None;
        let mut cancelled_by = CancelledBy::Return;
        if mode == Unawaited::Finish {
            while !self.pending.is_empty() {
                tokio::select! {
                    result = self.next_result() => match result {
                        Some(Ok(result)) => {
                            let error = result.outcome.err().map(|e| e.text());
                            fates.insert(result.call_id, Fate::Finished(error));
                        }
                        Some(Err(Halt::Pause)) => {
                            // Not run: it waits for an approval the program can no longer
                            // use; named as cancelled.
                        }
                        Some(Err(stop)) => {
                            halt = Some(stop);
                            cancelled_by = CancelledBy::HostError;
                            break;
                        }
                        None => break,
                    },
                    () = cancel.cancelled() => {
                        cancelled_by = CancelledBy::Caller;
                        break;
                    }
                    () = tokio::time::sleep_until(time_limit) => {
                        cancelled_by = CancelledBy::TimeLimit;
                        break;
                    }
                }
            }
        }
        self.shutdown().await;
        let calls = order
            .into_iter()
            .map(|(id, _, name)| {
                let fate = fates.remove(&id).unwrap_or(Fate::Cancelled(cancelled_by));
                (name, fate)
            })
            .collect();
        Settled { calls, halt }
    }

    fn start(&mut self, call: ToolCall, index: u32) {
        if self.token.is_cancelled() {
            return;
        }
        let ctx = ToolContext {
            execution_id: self.execution_id.clone(),
            principal: self
                .guard
                .as_ref()
                .and_then(|g| g.principal())
                .map(Into::into),
            cancel: self.token.child_token(),
        };
        let tools = self.tools.clone();
        let call_id = call.call_id.clone();
        let guard = self.guard.clone();
        let recorder = self.recorder.clone();
        // In the execution's span, so that the call's span is its child.
        let handle = self.running.spawn(
            async move {
                let journal = recorder.as_deref().map(|r| (r, index));
                tools
                    .dispatch_recorded(&call, ctx, guard.as_deref(), journal)
                    .await
            }
            .in_current_span(),
        );
        self.running_ids.insert(handle.id(), call_id);
    }

    /// The next finished call's result, after starting the next waiting call in its slot;
    /// `Err` when the execution must stop. Pending forever while nothing runs. Cancel-safe.
    async fn next_result(&mut self) -> Option<Result<ToolResult, Halt>> {
        if self.running.is_empty() {
            return std::future::pending().await;
        }
        let joined = self.running.join_next_with_id().await?;
        let result = match joined {
            Ok((task, result)) => {
                if let Some(call_id) = self.running_ids.remove(&task) {
                    self.pending.remove(&call_id);
                }
                result
            }
            Err(error) => {
                let call_id = self.running_ids.remove(&error.id())?;
                self.pending.remove(&call_id);
                tracing::error!(%call_id, "tool call task failed: {error}");
                Ok(ToolResult {
                    call_id,
                    outcome: Err(ErrorBody::new(
                        ErrorCode::ToolError,
                        "Tool call failed in the host",
                    )),
                })
            }
        };
        while self.running.len() < self.limit {
            let Some((call, index)) = self.queue.pop_front() else {
                break;
            };
            self.queued_bytes -= input_bytes(&call);
            self.start(call, index);
        }
        Some(result)
    }

    /// Drops the waiting calls unstarted, cancels the running ones and waits (boundedly) until
    /// they are gone: their futures dropped, their command processes killed.
    async fn shutdown(&mut self) {
        self.token.cancel();
        self.queue.clear();
        self.queued_bytes = 0;
        self.running.abort_all();
        let drained = tokio::time::timeout(TOOL_SHUTDOWN_WAIT, async {
            while self.running.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!("tool calls did not stop within {TOOL_SHUTDOWN_WAIT:?}; detaching them");
        }
        self.running.detach_all();
        self.running_ids.clear();
        self.pending.clear();
    }
}

fn input_bytes(call: &ToolCall) -> usize {
    call.input.as_ref().map_or(0, |raw| raw.get().len())
}

impl ExecuteResult {
    /// The result the runner's `done` reports, with the note on what the log limits took.
    fn from_done(done: Done, options: &execbox_protocol::RuntimeOptions) -> ExecuteResult {
        let mut logs = done.logs;
        logs.extend(notes::logs_truncated(
            done.logs_truncated,
            logs.len(),
            options,
        ));
        ExecuteResult {
            id: done.id,
            outcome: done.outcome,
            logs,
            logs_truncated: done.logs_truncated,
            duration_ms: done.duration_ms,
            cancelled: false,
            ledger: None,
            paused: None,
        }
    }
}

impl RunnerEvent {
    /// Classifies one line or frame from a runner.
    pub(crate) fn from_frame(frame: Frame) -> RunnerEvent {
        match frame {
            Frame::Line(line) => match Message::decode(&line) {
                Ok(message) => RunnerEvent::Message(message),
                Err(e) => {
                    let mut shown: String = line.chars().take(200).collect();
                    if shown.len() < line.len() {
                        shown.push('…');
                    }
                    RunnerEvent::Garbage(format!("{e}: {shown}"))
                }
            },
            Frame::InvalidUtf8 { len } => {
                RunnerEvent::Garbage(format!("{len} bytes of invalid UTF-8"))
            }
            Frame::Oversized { len, .. } => {
                RunnerEvent::Garbage(format!("a message of {len} bytes, over the size limit"))
            }
        }
    }
}

/// The error of an execution ended by its guard ([`GuardError::Fatal`]).
fn guard_failure(message: &str) -> ErrorBody {
    tracing::error!("{message}");
    ErrorBody::new(
        ErrorCode::InternalError,
        format!("{message}; the execution was stopped rather than run unguarded"),
    )
}

/// An execution that its guard refused to start or to finish (or no longer counts as run).
fn guard_failed(id: &str, message: &str) -> ExecuteResult {
    ExecuteResult {
        id: id.to_owned(),
        outcome: Err(guard_failure(message)),
        ..ExecuteResult::failed(ErrorCode::InternalError, "")
    }
}

#[cfg(test)]
mod done_tests {
    use execbox_protocol::{LogsTruncated, RuntimeOptions};

    use super::*;

    #[test]
    fn a_done_with_truncated_logs_says_so_in_the_logs_and_keeps_the_wire_field() {
        let done = Done {
            id: "e1".into(),
            duration_ms: 3,
            logs: vec!["0".into(), "1".into()],
            logs_truncated: Some(LogsTruncated {
                omitted_lines: 400,
                cut_line: false,
            }),
            clock: None,
            clock_overflow: false,
            outcome: Ok(None),
        };
        let options = RuntimeOptions {
            max_log_lines: 2,
            ..RuntimeOptions::default()
        };
        let result = ExecuteResult::from_done(done, &options);
        assert_eq!(
            result.logs,
            [
                "0",
                "1",
                "[execbox] 400 more log lines not shown (limit 2 lines)"
            ]
        );
        let json: serde_json::Value = serde_json::from_str(&result.to_done_json()).unwrap();
        assert_eq!(
            json["logsTruncated"],
            serde_json::json!({"omittedLines": 400, "cutLine": false})
        );
    }
}
