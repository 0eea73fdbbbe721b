//! Sessions: how every user starts one ([`Session`]), and the protocol state machine it runs.
//!
//! A session serves one transport: `started`, exactly one `done` per `execute`, the wait for
//! tool results, rejections of malformed and concurrent requests. Its engine threads (two by
//! default, [`SessionBuilder::engines`]) take turns: the engine whose turn it is reads the
//! inbound items and runs the next execution in the sandbox it built beforehand; once its
//! `done` is out it hands the turn on and, while the next engine serves, frees the old
//! sandbox and builds its next one (together about four times the cost of a trivial
//! execution). Executions never overlap: the turn is one lock, held from an `execute` to its
//! `done`, tool calls included.
//! Whoever owns the transport starts it with [`Session::builder`], giving it an [`Outbound`]
//! sink for what the runner sends, and feeds it what arrives, in order, through
//! [`Session::send`] (or a [`SessionInput`] cloned for a reader thread). Each item passes the
//! session's [`Control`](crate::control::Control) first, so a `cancel` or a close stops a
//! running guest at once, and a second `execute` is refused at once, even while the engine is
//! busy. Optionally a watchdog thread ends an execution stuck in a long native call
//! ([`SessionBuilder::watchdog`]).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use execbox_protocol::names::check_provider_name;
use execbox_protocol::{
    peek_envelope, DecodeError, Done, ErrorBody, ErrorCode, Execute, Message, Received, Started,
    ToolResult,
};

use crate::ceilings::Ceilings;
use crate::control::{busy_done, Control};
use crate::engine::{Engine, Event, RunLimits, ENGINE_STACK_BYTES};
use crate::replay::{unobserved, Replaying};
use crate::transport::oversized;
// The transport's side of a session, named with it (the crate root re-exports them from here).
pub use crate::transport::{Inbound, Outbound};

/// How to start a [`Session`]: its limits, its watchdog, and what runs when it ends.
#[must_use = "a session starts only with `start`"]
pub struct SessionBuilder {
    limits: SessionLimits,
    watchdog: Option<Box<dyn Fn() + Send + Sync>>,
    on_end: Option<Box<dyn FnOnce() + Send>>,
    thread_name: String,
    engines: usize,
}

/// Engine threads of a session unless [`SessionBuilder::engines`] says otherwise.
pub const DEFAULT_ENGINES: usize = 2;

impl SessionBuilder {
    /// The session's limits; [`SessionLimits::default`] when not given.
    pub fn limits(mut self, limits: SessionLimits) -> SessionBuilder {
        self.limits = limits;
        self
    }

    /// Starts a watchdog thread: when an execution outlives its deadline, a cancel or a close
    /// by [`RuntimeOptions::DEADLINE_GRACE`](execbox_protocol::RuntimeOptions::DEADLINE_GRACE)
    /// (the engine is stuck in one long native call the interrupt handler cannot reach), the
    /// watchdog answers it with `timeout` (`memory_limit` past its memory limit) and then
    /// calls `on_fire`, which must end the session's owner: the stdio runner exits its
    /// process, since a thread cannot be killed. Without a watchdog nobody answers such an
    /// execution until its native call returns.
    pub fn watchdog(mut self, on_fire: impl Fn() + Send + Sync + 'static) -> SessionBuilder {
        self.watchdog = Some(Box::new(on_fire));
        self
    }

    /// Runs `on_end` when the session ends: on the last engine thread to return or unwind.
    pub fn on_end(mut self, on_end: impl FnOnce() + Send + 'static) -> SessionBuilder {
        self.on_end = Some(Box::new(on_end));
        self
    }

    /// The name of the engine threads (`engine` when not given).
    pub fn thread_name(mut self, name: impl Into<String>) -> SessionBuilder {
        self.thread_name = name.into();
        self
    }

    /// How many engine threads serve the session, each with its own QuickJS runtimes
    /// ([`DEFAULT_ENGINES`] when not given; 0 counts as 1). Executions still run one at a
    /// time: an engine that has sent its `done` hands the session to the next one, whose
    /// fresh sandbox is ready, and only then frees its old sandbox and builds its next one,
    /// so that work overlaps the next execution instead of delaying it. Each engine keeps
    /// one sandbox ready (a few hundred KiB) and a thread.
    pub fn engines(mut self, engines: usize) -> SessionBuilder {
        self.engines = engines.max(1);
        self
    }

    /// Starts the session's threads (the engines', and the watchdog's if asked for); `out`
    /// receives everything the runner sends. Each engine builds its first sandbox at once.
    /// Fails only when a thread cannot be spawned.
    pub fn start(self, out: Arc<dyn Outbound>) -> std::io::Result<Session> {
        let interrupt = Arc::new(AtomicBool::new(false));
        let control = Control::new(interrupt.clone());
        // Before any item is fed: an `execute` arriving while another is queued is answered
        // by the feeder, through this sink.
        control.set_sink(out.clone());
        let (tx, rx) = mpsc::channel::<Inbound>();
        let shared = Arc::new(Shared {
            turn: Mutex::new(Turn {
                inbound: rx,
                last: None,
                closed: false,
            }),
            running: AtomicUsize::new(self.engines),
            on_end: Mutex::new(self.on_end),
            first_ready: (Mutex::new(false), Condvar::new()),
            first_ready_seen: AtomicBool::new(false),
        });
        let mut engines = Vec::with_capacity(self.engines);
        for index in 0..self.engines {
            let exit = EngineExit {
                shared: shared.clone(),
                control: control.clone(),
            };
            let (interrupt, out, limits) = (interrupt.clone(), out.clone(), self.limits);
            let spawned = std::thread::Builder::new()
                .name(self.thread_name.clone())
                .stack_size(ENGINE_STACK_BYTES)
                .spawn(move || {
                    let mut engine = Engine::new(interrupt);
                    engine.report_memory_to(exit.control.memory.clone());
                    if index > 0 {
                        // The first execution waits for the first sandbox only: the others
                        // are built after it, not competing with it for the CPU.
                        exit.shared.wait_first_ready();
                    }
                    serve(&mut engine, &exit.shared, &exit.control, out, limits);
                });
            match spawned {
                Ok(engine) => engines.push(engine),
                Err(e) => {
                    // The engines that did start end once the channel's sender is dropped;
                    // the last of them ends the session.
                    let missing = self.engines - engines.len();
                    if shared.running.fetch_sub(missing, Ordering::SeqCst) == missing {
                        control.clear_sink();
                        control.shutdown();
                    }
                    return Err(e);
                }
            }
        }
        // After the engines, whose first sandbox is what the first execution waits for. If it
        // cannot start, the engines end once the channel's sender is dropped.
        if let Some(on_fire) = self.watchdog {
            let watched = control.clone();
            std::thread::Builder::new()
                .name("watchdog".into())
                .spawn(move || watched.watch(&*on_fire))?;
        }
        Ok(Session {
            input: SessionInput { tx, control },
            engines,
        })
    }
}

/// What a session's engine threads share: the session's turn, and who ends the session.
struct Shared {
    /// Held by the engine whose turn it is: it alone reads the inbound items.
    turn: Mutex<Turn>,
    /// Engine threads still running; the last one out ends the session.
    running: AtomicUsize,
    on_end: Mutex<Option<Box<dyn FnOnce() + Send>>>,
    /// Raised once the first engine has its first sandbox (or has ended).
    first_ready: (Mutex<bool>, Condvar),
    /// `first_ready`, read without its lock.
    first_ready_seen: AtomicBool,
}

impl Shared {
    fn set_first_ready(&self) {
        if self.first_ready_seen.swap(true, Ordering::SeqCst) {
            return;
        }
        let (ready, changed) = &self.first_ready;
        *ready.lock().unwrap_or_else(|e| e.into_inner()) = true;
        changed.notify_all();
    }

    fn wait_first_ready(&self) {
        let (ready, changed) = &self.first_ready;
        let mut ready = ready.lock().unwrap_or_else(|e| e.into_inner());
        while !*ready {
            ready = changed.wait(ready).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// The session's state that passes from engine to engine.
struct Turn {
    inbound: Receiver<Inbound>,
    /// The id of the last execution answered (a cancel for it is expected, not a stray).
    last: Option<String>,
    /// The transport closed: every engine returns.
    closed: bool,
}

/// Ends an engine thread, returned or unwound; the last one ends the session: the sink is
/// let go (so a transport's writer sees its last sender go), the watchdog returns, and the
/// end callback runs.
struct EngineExit {
    shared: Arc<Shared>,
    control: Arc<Control>,
}

impl Drop for EngineExit {
    fn drop(&mut self) {
        self.shared.set_first_ready();
        // An engine that unwound mid-turn poisoned the turn; the others must still end.
        self.shared
            .turn
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .closed = true;
        if self.shared.running.fetch_sub(1, Ordering::SeqCst) != 1 {
            return;
        }
        self.control.clear_sink();
        self.control.shutdown();
        let on_end = self
            .shared
            .on_end
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(on_end) = on_end {
            on_end();
        }
    }
}

/// A running session: feed it what arrives from the transport, in order, then close it.
///
/// Dropping it does not end the session; [`Session::close`] does (the engine thread then
/// finishes what was already queued and returns).
pub struct Session {
    input: SessionInput,
    engines: Vec<JoinHandle<()>>,
}

impl Session {
    /// A builder with the default limits, no watchdog and no end callback.
    pub fn builder() -> SessionBuilder {
        SessionBuilder {
            limits: SessionLimits::default(),
            watchdog: None,
            on_end: None,
            thread_name: "engine".into(),
            engines: DEFAULT_ENGINES,
        }
    }

    /// Feeds one item (see [`SessionInput::send`]).
    pub fn send(&self, item: Inbound) -> Sent {
        self.input.send(item)
    }

    /// The transport closed: see [`SessionInput::close`].
    pub fn close(&self) {
        self.input.close();
    }

    /// A handle that feeds this session from another thread or task.
    pub fn input(&self) -> SessionInput {
        self.input.clone()
    }

    /// Whether every engine thread has ended.
    pub fn is_finished(&self) -> bool {
        self.engines.iter().all(JoinHandle::is_finished)
    }

    /// Waits for the engine threads to end; `Err` holds the first one's panic.
    pub fn join(self) -> std::thread::Result<()> {
        let mut joined = Ok(());
        for engine in self.engines {
            let result = engine.join();
            if joined.is_ok() {
                joined = result;
            }
        }
        joined
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("finished", &self.is_finished())
            .finish_non_exhaustive()
    }
}

/// Feeds a [`Session`]; cheap to clone, for a transport's reader thread or task.
#[derive(Clone)]
pub struct SessionInput {
    tx: Sender<Inbound>,
    control: Arc<Control>,
}

/// What became of an item fed to a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// Queued for the engine.
    Queued,
    /// Answered at once, without the engine: an `execute` while another is active or queued.
    Answered,
    /// The session has ended: nothing more will be read.
    Ended,
}

impl SessionInput {
    /// Feeds one item from the transport. A `cancel` of the running execution (or a close
    /// during one) interrupts the guest at once; an `execute` while another is active or
    /// queued is answered here with `internal_error`; everything else is queued in order.
    pub fn send(&self, item: Inbound) -> Sent {
        match self.control.admit(item) {
            None => Sent::Answered,
            Some(item) => match self.tx.send(item) {
                Ok(()) => Sent::Queued,
                Err(_) => Sent::Ended,
            },
        }
    }

    /// The transport closed: aborts the running execution (there is nobody left to answer),
    /// and the session ends once it has run the executions already queued.
    pub fn close(&self) {
        self.send(Inbound::Closed);
    }
}

impl std::fmt::Debug for SessionInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionInput").finish_non_exhaustive()
    }
}

/// Limits of a session that are not per-execution options, and the ceilings on those options.
#[derive(Debug, Clone, Copy)]
pub struct SessionLimits {
    /// The largest message accepted or sent, in bytes.
    pub max_message_bytes: usize,
    /// Tool calls of one execution sent and not yet answered, at most.
    pub max_pending_tool_calls: usize,
    /// The largest `execute.options` accepted; an `execute` over one is refused with
    /// `validation_error` before it starts.
    pub ceilings: Ceilings,
}

/// Default of [`SessionLimits::max_pending_tool_calls`] (`--max-pending-tool-calls`).
pub const DEFAULT_MAX_PENDING_TOOL_CALLS: usize = 64;

impl Default for SessionLimits {
    /// [`DEFAULT_MAX_MESSAGE_BYTES`](execbox_protocol::DEFAULT_MAX_MESSAGE_BYTES),
    /// [`DEFAULT_MAX_PENDING_TOOL_CALLS`] and [`Ceilings::default`], the runner's flag defaults.
    fn default() -> Self {
        SessionLimits::new(execbox_protocol::DEFAULT_MAX_MESSAGE_BYTES)
    }
}

impl SessionLimits {
    /// Limits with `max_message_bytes` and the default for everything else.
    pub fn new(max_message_bytes: usize) -> Self {
        SessionLimits {
            max_message_bytes,
            max_pending_tool_calls: DEFAULT_MAX_PENDING_TOOL_CALLS,
            ceilings: Ceilings::default(),
        }
    }

    fn run(self) -> RunLimits {
        RunLimits {
            max_message_bytes: self.max_message_bytes,
            max_pending_tool_calls: self.max_pending_tool_calls,
        }
    }
}

/// One engine's share of the session, until the transport closes: it readies a sandbox, waits
/// for its turn, serves the session until it has answered one execution (or the session
/// ends), hands the turn on, and readies its next sandbox while the next engine serves.
/// Every accepted or rejected `execute` gets exactly one `done`; everything else that is
/// wrong is logged to stderr and dropped.
fn serve(
    engine: &mut Engine,
    shared: &Shared,
    control: &Control,
    out: Arc<dyn Outbound>,
    limits: SessionLimits,
) {
    loop {
        // Frees the last execution's sandbox and builds the next one, while another engine
        // holds the turn.
        engine.prepare();
        shared.set_first_ready();
        let mut turn = shared.turn.lock().unwrap_or_else(|e| e.into_inner());
        if turn.closed {
            return;
        }
        if !take_turn(engine, &mut turn, control, &out, limits) {
            turn.closed = true;
            return;
        }
    }
}

/// Serves items until one execution is answered (true) or the transport closed (false).
fn take_turn(
    engine: &mut Engine,
    turn: &mut Turn,
    control: &Control,
    out: &Arc<dyn Outbound>,
    limits: SessionLimits,
) -> bool {
    let inbound = &turn.inbound;
    loop {
        let Ok(item) = inbound.recv() else {
            return false;
        };
        match item {
            Inbound::Message(Message::Execute(exec)) => {
                if let Err((field, reason)) = check_provider_names(&exec) {
                    tracing::warn!(id = %exec.id, %field, %reason, "rejecting execute");
                    control.forget(&exec.id);
                    out.send(&Message::Done(Done {
                        id: exec.id.clone(),
                        duration_ms: 0,
                        logs: Vec::new(),
                        logs_truncated: None,
                        clock: unobserved(&exec),
                        clock_overflow: false,
                        outcome: Err(ErrorBody::new(
                            ErrorCode::ValidationError,
                            format!("invalid execute message: {field} {reason}"),
                        )),
                    }));
                    continue;
                }
                if let Err(message) = limits.ceilings.check(&exec.options) {
                    tracing::warn!(id = %exec.id, "rejecting execute: {message}");
                    control.forget(&exec.id);
                    out.send(&Message::Done(Done {
                        id: exec.id.clone(),
                        duration_ms: 0,
                        logs: Vec::new(),
                        logs_truncated: None,
                        clock: unobserved(&exec),
                        clock_overflow: false,
                        outcome: Err(ErrorBody::new(ErrorCode::ValidationError, message)),
                    }));
                    continue;
                }
                let replaying = exec.replay.as_ref().map(Replaying::new);
                control.begin(&exec.id, exec.options.timeout_ms, replaying.clone());
                out.send(&Message::Started(Started {
                    id: exec.id.clone(),
                }));
                let started = Instant::now();
                let finished = engine.run(
                    &exec,
                    started,
                    limits.run(),
                    out.clone(),
                    replaying.as_ref(),
                    &mut |deadline| wait(inbound, control, &**out, &exec, deadline, limits),
                );
                let (ended, closed, fired) = control.end();
                // A close aborts the execution whichever way the engine noticed it (the
                // interrupt flag or the event): nobody is left to read a `done`.
                if finished.aborted || closed {
                    tracing::info!(id = %exec.id, "transport closed during execution");
                    return false;
                }
                // Unless the watchdog answered already (it is ending the session).
                if !fired {
                    let (clock, clock_overflow) = match &replaying {
                        Some(replaying) => {
                            let (clock, overflow) = replaying.observed();
                            (Some(clock), overflow)
                        }
                        None => (None, false),
                    };
                    let done = Done {
                        id: exec.id.clone(),
                        duration_ms: started.elapsed().as_millis() as u64,
                        logs: finished.logs,
                        logs_truncated: finished.logs_truncated,
                        clock,
                        clock_overflow,
                        outcome: finished.outcome,
                    };
                    out.send(&fit_done(done, limits.max_message_bytes));
                }
                turn.last = ended;
                return true;
            }
            Inbound::Closed => return false,
            // A cancel racing the `done` of its execution is expected, not worth a warning.
            Inbound::Message(Message::Cancel(cancel))
                if turn.last.as_deref() == Some(&cancel.id) =>
            {
                tracing::debug!(id = %cancel.id, "cancel arrived after its execution ended");
            }
            other => handle_stray(other, control, &**out, None, limits),
        }
    }
}

/// Checks that every provider name is a JavaScript identifier that shadows nothing the guest
/// needs (see [`execbox_protocol::names`]). The error is the field (`providers[N].name`) and
/// what is wrong with it.
pub(crate) fn check_provider_names(exec: &Execute) -> Result<(), (String, String)> {
    for (i, provider) in exec.providers.iter().enumerate() {
        check_provider_name(&provider.name).map_err(|why| (format!("providers[{i}].name"), why))?;
    }
    Ok(())
}

/// Keeps a `done` within the message size limit: a result that does not fit (by itself)
/// becomes `serialization_error`, clock runs that do not fit even without logs are cut from
/// the end (with `clockOverflow`), and logs that still do not fit are dropped from the end,
/// with a last line saying how many.
fn fit_done(done: Done, limit: usize) -> Message {
    let message = Message::Done(done);
    let Some(size) = oversized(&message, limit) else {
        return message;
    };
    let Message::Done(mut done) = message else {
        unreachable!("built as a done above")
    };
    let logs = std::mem::take(&mut done.logs);
    // The result is judged alone: the clock is cut before a result is refused.
    let clock = done.clock.take();
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
    done.clock = clock;
    let mut bare = Message::Done(done.clone()).encode().len();
    if bare > limit && done.clock.as_ref().is_some_and(|c| !c.is_empty()) {
        tracing::warn!(id = %done.id, limit, "clock runs over the message size limit");
        // A run takes at most 40 bytes: cut as many runs as the excess surely needs, then
        // measure again (each pass at least halves the excess of runs of 20 bytes).
        while let Some(clock) = done
            .clock
            .as_mut()
            .filter(|c| bare > limit && !c.is_empty())
        {
            let excess = (bare - limit).div_ceil(40).clamp(1, clock.len());
            clock.truncate(clock.len() - excess);
            done.clock_overflow = true;
            bare = Message::Done(done.clone()).encode().len();
        }
    }
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
            logs_truncated: None,
            clock: None,
            clock_overflow: false,
            outcome: Err(ErrorBody::new(code, message)),
        }));
    };
    match item {
        Inbound::Message(Message::Execute(exec)) => {
            let active = active.map(|a| a.id.as_str()).unwrap_or_default();
            tracing::warn!(id = %exec.id, %active, "rejecting execute: an execution is active");
            control.forget(&exec.id);
            out.send(&busy_done(&exec, active));
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
            let limit = limits.max_message_bytes;
            // The protocol's rule, which the `--listen` supervisor counts executions by.
            match (Received::Oversized { len, prefix }).answered_execute() {
                Some(id) => {
                    tracing::warn!(%id, len, limit, "rejecting oversized execute");
                    reject(
                        &id,
                        ErrorCode::ValidationError,
                        format!(
                            "execute message of {len} bytes exceeds the limit of {limit} bytes"
                        ),
                    );
                }
                None => tracing::warn!(len, limit, "ignoring oversized message"),
            }
        }
        Inbound::NotUtf8 { len } => {
            tracing::warn!(len, "ignoring message that is not valid UTF-8");
        }
        Inbound::Closed => {}
    }
}
