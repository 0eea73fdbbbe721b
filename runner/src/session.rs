//! The protocol state machine of one transport session, independent of the transport.
//!
//! A transport feeds [`Inbound`] items into a channel from its own reader (thread or task)
//! and passes each through [`Control::admit`] first, so a `cancel` or a close reaches the
//! running guest at once through the interrupt flag, even in a tight CPU loop, and a second
//! `execute` is refused at once, even while the engine is busy. The session
//! ([`run_session`]) consumes the channel on the engine's thread.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use execbox_protocol::names::check_provider_name;
use execbox_protocol::{
    peek_envelope, DecodeError, Done, ErrorBody, ErrorCode, Execute, Frame, Message,
    RuntimeOptions, Started, ToolResult,
};

use crate::engine::{oversized, Engine, Event, Outbound, RunLimits};

/// One item from the transport, in arrival order.
#[derive(Debug)]
pub enum Inbound {
    /// A well-formed message.
    Message(Message),
    /// A line or frame that is not a valid message.
    Invalid(DecodeError),
    /// A line or frame refused before parsing: over the size limit.
    Oversized {
        /// Its size in bytes.
        len: usize,
        /// Its first bytes, to tell which message it was.
        prefix: Vec<u8>,
    },
    /// Bytes that are not UTF-8.
    NotUtf8 {
        /// Its size in bytes.
        len: usize,
    },
    /// The transport closed or failed; nothing follows.
    Closed,
}

impl Inbound {
    /// Classifies one framed line.
    pub fn from_frame(frame: Frame) -> Inbound {
        match frame {
            Frame::Line(line) => Inbound::from_text(&line),
            Frame::InvalidUtf8 { len } => Inbound::NotUtf8 { len },
            Frame::Oversized { len, prefix } => Inbound::Oversized { len, prefix },
        }
    }

    /// Decodes one message text.
    pub fn from_text(text: &str) -> Inbound {
        match Message::decode(text) {
            Ok(message) => Inbound::Message(message),
            Err(error) => Inbound::Invalid(error),
        }
    }
}

/// State shared by a transport's reader and the session, guarding cancellation races.
pub struct Control {
    interrupt: Arc<AtomicBool>,
    /// Raised by the engine when the active execution exceeded its memory limit.
    memory: Arc<AtomicBool>,
    state: Mutex<ControlState>,
    /// Wakes the watchdog when the state changes.
    changed: Condvar,
    /// The session's sink, for answers the reader gives without waiting for the engine.
    /// Cleared when the session ends, so the transport's writer sees its last sender go.
    sink: Mutex<Option<Arc<dyn Outbound>>>,
}

#[derive(Debug, Default)]
struct ControlState {
    active: Option<String>,
    /// Executes read but not yet picked up by the session.
    queued: HashSet<String>,
    /// Queued executes already cancelled.
    cancelled: HashSet<String>,
    /// The oldest queued execute, which will run next.
    queued_first: Option<String>,
    /// The transport closed while an execution was active.
    closed_mid_execution: bool,
    /// When the active execution started.
    started_at: Option<Instant>,
    /// When the watchdog ends the active execution if the engine has not.
    watch_at: Option<Instant>,
    /// The watchdog ended the active execution (and answered it, unless the transport closed).
    fired: bool,
    /// The session is over; the watchdog returns.
    shutdown: bool,
}

/// How long past its deadline (or a cancel, or a close) an execution may take to stop before
/// the watchdog ends it: the protocol's one grace, which the host's deadline adds too. The
/// interrupt handler runs every few thousand bytecode ticks, so ordinary code stops within
/// milliseconds; only a loop around a long native call (a huge `indexOf`, `fill` or regex)
/// can run this long without reaching a tick.
pub const WATCHDOG_GRACE: Duration = RuntimeOptions::DEADLINE_GRACE;

impl Control {
    /// Control around the engine's interrupt flag.
    pub fn new(interrupt: Arc<AtomicBool>) -> Arc<Control> {
        Arc::new(Control {
            interrupt,
            memory: Arc::new(AtomicBool::new(false)),
            state: Mutex::new(ControlState::default()),
            changed: Condvar::new(),
            sink: Mutex::new(None),
        })
    }

    /// Gives the reader the session's sink; call it before the reader starts. (The session
    /// sets it too, but a reader that starts first could queue a concurrent `execute`.)
    pub fn set_sink(&self, out: Arc<dyn Outbound>) {
        *self.sink.lock().unwrap_or_else(|e| e.into_inner()) = Some(out);
    }

    fn clear_sink(&self) {
        self.sink.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    /// Called by the reader for every item before it is queued: applies cancels and closes
    /// at once, and answers an `execute` that arrives while another is active or queued.
    /// Returns the item to queue, or `None` when it was answered here.
    pub fn admit(&self, item: Inbound) -> Option<Inbound> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match &item {
            Inbound::Message(Message::Execute(e)) => {
                let busy = state.active.as_deref().or(state.queued_first.as_deref());
                let sink = self.sink.lock().unwrap_or_else(|e| e.into_inner()).clone();
                if let (Some(busy), Some(sink)) = (busy, sink) {
                    tracing::warn!(id = %e.id, active = %busy, "rejecting execute: an execution is active");
                    sink.send(&busy_done(&e.id, busy));
                    return None;
                }
                state.queued.insert(e.id.clone());
                if state.queued_first.is_none() {
                    state.queued_first = Some(e.id.clone());
                }
            }
            Inbound::Message(Message::Cancel(c)) => {
                if state.active.as_deref() == Some(c.id.as_str()) {
                    self.interrupt.store(true, Ordering::SeqCst);
                    self.watch_soon(&mut state);
                } else if state.queued.contains(&c.id) {
                    state.cancelled.insert(c.id.clone());
                }
            }
            // Aborts the running execution; executes already read still run (a closed
            // transport can deliver no tool results, so any that waits on one ends).
            Inbound::Closed if state.active.is_some() => {
                state.closed_mid_execution = true;
                self.interrupt.store(true, Ordering::SeqCst);
                self.watch_soon(&mut state);
            }
            _ => {}
        }
        Some(item)
    }

    /// Brings the watchdog's deadline forward to a grace period from now.
    fn watch_soon(&self, state: &mut ControlState) {
        let soon = Instant::now() + WATCHDOG_GRACE;
        state.watch_at = Some(state.watch_at.map_or(soon, |at| at.min(soon)));
        self.changed.notify_all();
    }

    fn begin(&self, id: &str, timeout_ms: u64) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.queued.remove(id);
        state.queued_first = None;
        let stop = state.cancelled.remove(id);
        state.active = Some(id.to_owned());
        let now = Instant::now();
        state.started_at = Some(now);
        state.fired = false;
        state.watch_at = Some(now + Duration::from_millis(timeout_ms) + WATCHDOG_GRACE);
        if stop {
            self.watch_soon(&mut state);
        }
        self.interrupt.store(stop, Ordering::SeqCst);
        self.changed.notify_all();
    }

    /// Ends the active execution: its id, whether the transport closed during it, and
    /// whether the watchdog already ended it.
    fn end(&self) -> (Option<String>, bool, bool) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        self.interrupt.store(false, Ordering::SeqCst);
        state.watch_at = None;
        let fired = std::mem::take(&mut state.fired);
        (state.active.take(), state.closed_mid_execution, fired)
    }

    fn shutdown(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.shutdown = true;
        self.changed.notify_all();
    }

    /// The watchdog: run it on its own thread. When an execution outlives its deadline, a
    /// cancel or a close by [`WATCHDOG_GRACE`] (the engine is stuck in a long native call), it
    /// answers the execution with `timeout` itself (unless the transport closed) and calls
    /// `on_fire`, which must end the session (stdio exits the process, WebSocket closes the
    /// connection). Returns when the session ends.
    pub fn watch(&self, on_fire: &dyn Fn()) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if state.shutdown {
                return;
            }
            let at = match (&state.active, state.watch_at, state.fired) {
                (Some(_), Some(at), false) => at,
                _ => {
                    state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
                    continue;
                }
            };
            let now = Instant::now();
            if now < at {
                state = self
                    .changed
                    .wait_timeout(state, at - now)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
                continue;
            }
            state.fired = true;
            let id = state.active.clone().unwrap_or_default();
            let elapsed = state.started_at.map(|t| t.elapsed()).unwrap_or_default();
            let sink = if state.closed_mid_execution {
                None
            } else {
                self.sink.lock().unwrap_or_else(|e| e.into_inner()).clone()
            };
            drop(state);
            tracing::warn!(%id, ?elapsed, "execution did not stop in time (a long native call?); ending the session");
            // An execution past its memory limit that could not be stopped (one slow native
            // call per loop turn) still ends as what it is.
            let outcome = if self.memory.load(Ordering::Relaxed) {
                ErrorBody::memory_limit()
            } else {
                ErrorBody::timeout()
            };
            if let Some(sink) = sink {
                sink.send(&Message::Done(Done {
                    id,
                    duration_ms: elapsed.as_millis() as u64,
                    logs: Vec::new(),
                    outcome: Err(outcome),
                }));
            }
            on_fire();
            state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        }
    }

    fn forget(&self, id: &str) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.queued.remove(id);
        state.cancelled.remove(id);
        if state.queued_first.as_deref() == Some(id) {
            state.queued_first = None;
        }
    }
}

/// Limits of a session that are not per-execution options.
#[derive(Debug, Clone, Copy)]
pub struct SessionLimits {
    /// The largest message accepted or sent, in bytes.
    pub max_message_bytes: usize,
    /// Tool calls of one execution sent and not yet answered, at most.
    pub max_pending_tool_calls: usize,
}

/// Default of [`SessionLimits::max_pending_tool_calls`] (`--max-pending-tool-calls`).
pub const DEFAULT_MAX_PENDING_TOOL_CALLS: usize = 64;

impl SessionLimits {
    /// Limits with `max_message_bytes` and the default for everything else.
    pub fn new(max_message_bytes: usize) -> Self {
        SessionLimits {
            max_message_bytes,
            max_pending_tool_calls: DEFAULT_MAX_PENDING_TOOL_CALLS,
        }
    }

    fn run(self) -> RunLimits {
        RunLimits {
            max_message_bytes: self.max_message_bytes,
            max_pending_tool_calls: self.max_pending_tool_calls,
        }
    }
}

/// Runs the session until the transport closes. Every accepted or rejected `execute` gets
/// exactly one `done`; everything else that is wrong is logged to stderr and dropped.
pub fn run_session(
    engine: &mut Engine,
    inbound: &Receiver<Inbound>,
    control: &Control,
    out: Arc<dyn Outbound>,
    limits: SessionLimits,
) {
    control.set_sink(out.clone());
    engine.report_memory_to(control.memory.clone());
    serve_items(engine, inbound, control, out, limits);
    control.clear_sink();
    control.shutdown();
}

fn serve_items(
    engine: &mut Engine,
    inbound: &Receiver<Inbound>,
    control: &Control,
    out: Arc<dyn Outbound>,
    limits: SessionLimits,
) {
    engine.prepare();
    let mut last: Option<String> = None;
    loop {
        let Ok(item) = inbound.recv() else { return };
        match item {
            Inbound::Message(Message::Execute(exec)) => {
                if let Err((field, reason)) = check_provider_names(&exec) {
                    tracing::warn!(id = %exec.id, %field, %reason, "rejecting execute");
                    control.forget(&exec.id);
                    out.send(&Message::Done(Done {
                        id: exec.id.clone(),
                        duration_ms: 0,
                        logs: Vec::new(),
                        outcome: Err(ErrorBody::new(
                            ErrorCode::ValidationError,
                            format!("invalid execute message: {field} {reason}"),
                        )),
                    }));
                    continue;
                }
                control.begin(&exec.id, exec.options.timeout_ms);
                out.send(&Message::Started(Started {
                    id: exec.id.clone(),
                }));
                let started = Instant::now();
                let finished =
                    engine.run(&exec, started, limits.run(), out.clone(), &mut |deadline| {
                        wait(inbound, control, &*out, &exec, deadline, limits)
                    });
                let (ended, closed, fired) = control.end();
                // A close aborts the execution whichever way the engine noticed it (the
                // interrupt flag or the event): nobody is left to read a `done`.
                if finished.aborted || closed {
                    tracing::info!(id = %exec.id, "transport closed during execution");
                    return;
                }
                if fired {
                    // The watchdog answered already, and is ending the session.
                    last = ended;
                    continue;
                }
                let done = Done {
                    id: exec.id.clone(),
                    duration_ms: started.elapsed().as_millis() as u64,
                    logs: finished.logs,
                    outcome: finished.outcome,
                };
                out.send(&fit_done(done, limits.max_message_bytes));
                engine.prepare();
                last = ended;
            }
            Inbound::Closed => return,
            // A cancel racing the `done` of its execution is expected, not worth a warning.
            Inbound::Message(Message::Cancel(cancel)) if last.as_deref() == Some(&cancel.id) => {
                tracing::debug!(id = %cancel.id, "cancel arrived after its execution ended");
            }
            other => handle_stray(other, control, &*out, None, limits),
        }
    }
}

/// Checks that every provider name is a JavaScript identifier that shadows nothing the guest
/// needs (see [`execbox_protocol::names`]). The error is the field (`providers[N].name`) and
/// what is wrong with it.
pub fn check_provider_names(exec: &Execute) -> Result<(), (String, String)> {
    for (i, provider) in exec.providers.iter().enumerate() {
        check_provider_name(&provider.name).map_err(|why| (format!("providers[{i}].name"), why))?;
    }
    Ok(())
}

/// Keeps a `done` within the message size limit: a result that does not fit becomes
/// `serialization_error`, and logs that still do not fit are dropped from the end, with a
/// last line saying how many.
fn fit_done(done: Done, limit: usize) -> Message {
    let message = Message::Done(done);
    let Some(size) = oversized(&message, limit) else {
        return message;
    };
    let Message::Done(mut done) = message else {
        unreachable!("built as a done above")
    };
    let logs = std::mem::take(&mut done.logs);
    let result_too_large = matches!(done.outcome, Ok(Some(_))) && {
        let bare = Message::Done(done);
        let over = oversized(&bare, limit).is_some();
        let Message::Done(back) = bare else {
            unreachable!("built as a done above")
        };
        done = back;
        over
    };
    if result_too_large {
        tracing::warn!(id = %done.id, size, limit, "result over the message size limit");
        done.outcome = Err(ErrorBody::new(
            ErrorCode::SerializationError,
            format!(
                "Guest code returned a value too large to send: the done message would be \
                 {size} bytes, over the runner's message limit of {limit} bytes; return less \
                 data"
            ),
        ));
    }
    if let Err(body) = &mut done.outcome {
        let keep = (limit / 4).min(64 * 1024);
        if body.message.len() > keep {
            let mut cut = keep;
            while !body.message.is_char_boundary(cut) {
                cut -= 1;
            }
            let dropped = body.message.len() - cut;
            body.message.truncate(cut);
            body.message.push_str(&format!(
                "… [{dropped} bytes of the message cut: over the message limit]"
            ));
        }
    }
    let bare = Message::Done(done.clone()).encode().len();
    let total = logs.len();
    // Room for the kept lines and the closing note (its number has at most 20 digits).
    let note = |dropped: usize| {
        format!("[{dropped} log lines dropped: with them the done message would exceed the runner's message limit of {limit} bytes]")
    };
    let mut room = limit.saturating_sub(bare + note(usize::MAX).len() + 8);
    for line in logs {
        let cost = serde_json::to_string(&line).map_or(usize::MAX, |s| s.len() + 1);
        if cost > room {
            break;
        }
        room -= cost;
        done.logs.push(line);
    }
    let dropped = total - done.logs.len();
    if dropped > 0 {
        tracing::warn!(id = %done.id, dropped, limit, "logs over the message size limit");
        done.logs.push(note(dropped));
    }
    Message::Done(done)
}

/// Waits, during an execution, for the next event the engine cares about.
fn wait(
    inbound: &Receiver<Inbound>,
    control: &Control,
    out: &dyn Outbound,
    exec: &Execute,
    deadline: Instant,
    limits: SessionLimits,
) -> Event {
    loop {
        let item = match recv_soon(inbound, deadline) {
            Ok(item) => item,
            Err(RecvTimeoutError::Timeout) => return Event::Deadline,
            Err(RecvTimeoutError::Disconnected) => return Event::Closed,
        };
        match item {
            Inbound::Message(Message::ToolResult(result)) => return Event::ToolResult(result),
            Inbound::Message(Message::Cancel(cancel)) if cancel.id == exec.id => {
                return Event::Cancel
            }
            Inbound::Closed => return Event::Closed,
            Inbound::Oversized { len, prefix } => {
                let envelope = peek_envelope(&prefix);
                if envelope.kind.as_deref() == Some("tool_result") {
                    if let Some(call_id) = envelope.call_id {
                        tracing::warn!(%call_id, len, "tool_result over the message size limit");
                        return Event::ToolResult(ToolResult {
                            call_id,
                            outcome: Err(ErrorBody::new(
                                ErrorCode::SerializationError,
                                format!(
                                    "Tool result of {len} bytes exceeds the runner's message limit of {} bytes",
                                    limits.max_message_bytes
                                ),
                            )),
                        });
                    }
                }
                handle_stray(
                    Inbound::Oversized { len, prefix },
                    control,
                    out,
                    Some(exec),
                    limits,
                );
            }
            other => handle_stray(other, control, out, Some(exec), limits),
        }
    }
}

/// The `done` refusing `id` because `active` holds the session.
fn busy_done(id: &str, active: &str) -> Message {
    Message::Done(Done {
        id: id.to_owned(),
        duration_ms: 0,
        logs: Vec::new(),
        outcome: Err(ErrorBody::new(
            ErrorCode::InternalError,
            format!("Runner already has an active execution ({active:?})"),
        )),
    })
}

/// Receives the next item by the deadline. A tool result usually follows its call within
/// microseconds, so the engine briefly polls (yielding its core) before it sleeps: a sleeping
/// thread's wake-up would otherwise dominate the tool-call round trip.
fn recv_soon(inbound: &Receiver<Inbound>, deadline: Instant) -> Result<Inbound, RecvTimeoutError> {
    const POLL_FOR: std::time::Duration = std::time::Duration::from_micros(50);
    let polling_until = Instant::now() + POLL_FOR;
    while Instant::now() < polling_until.min(deadline) {
        match inbound.try_recv() {
            Ok(item) => return Ok(item),
            Err(std::sync::mpsc::TryRecvError::Empty) => std::thread::yield_now(),
            Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                return Err(RecvTimeoutError::Disconnected)
            }
        }
    }
    inbound.recv_timeout(deadline.saturating_duration_since(Instant::now()))
}

/// Anything that does not drive the active execution: answered if it is an `execute`,
/// otherwise logged and dropped.
fn handle_stray(
    item: Inbound,
    control: &Control,
    out: &dyn Outbound,
    active: Option<&Execute>,
    limits: SessionLimits,
) {
    let reject = |id: &str, code: ErrorCode, message: String| {
        control.forget(id);
        out.send(&Message::Done(Done {
            id: id.to_owned(),
            duration_ms: 0,
            logs: Vec::new(),
            outcome: Err(ErrorBody::new(code, message)),
        }));
    };
    match item {
        Inbound::Message(Message::Execute(exec)) => {
            let active = active.map(|a| a.id.as_str()).unwrap_or_default();
            tracing::warn!(id = %exec.id, %active, "rejecting execute: an execution is active");
            control.forget(&exec.id);
            out.send(&busy_done(&exec.id, active));
        }
        Inbound::Message(Message::Cancel(cancel)) => {
            tracing::warn!(id = %cancel.id, "ignoring cancel: no active execution with that id");
        }
        Inbound::Message(Message::ToolResult(result)) => {
            tracing::warn!(call_id = %result.call_id, "ignoring tool_result: no active execution");
        }
        Inbound::Message(other) => {
            tracing::warn!(
                kind = other.kind(),
                "ignoring a message only a runner sends"
            );
        }
        Inbound::Invalid(DecodeError::InvalidField {
            kind: "execute",
            id,
            field,
            reason,
            ..
        }) => {
            let id = id.unwrap_or_default();
            tracing::warn!(%id, %field, %reason, "rejecting malformed execute");
            reject(
                &id,
                ErrorCode::ValidationError,
                format!("invalid execute message: {field} {reason}"),
            );
        }
        Inbound::Invalid(error) => tracing::warn!("ignoring message: {error}"),
        Inbound::Oversized { len, prefix } => {
            let envelope = peek_envelope(&prefix);
            let limit = limits.max_message_bytes;
            if envelope.kind.as_deref() == Some("execute") {
                let id = envelope.id.unwrap_or_default();
                tracing::warn!(%id, len, limit, "rejecting oversized execute");
                reject(
                    &id,
                    ErrorCode::ValidationError,
                    format!("execute message of {len} bytes exceeds the limit of {limit} bytes"),
                );
            } else {
                tracing::warn!(len, limit, kind = ?envelope.kind, "ignoring oversized message");
            }
        }
        Inbound::NotUtf8 { len } => {
            tracing::warn!(len, "ignoring message that is not valid UTF-8");
        }
        Inbound::Closed => {}
    }
}
