//! The state a session shares across threads, and the watchdog.
//!
//! A transport's reader passes every item through [`Control::admit`] before queueing it for
//! the session, so a `cancel` or a close reaches the running guest at once through the
//! interrupt flag (even in a tight CPU loop) and a second `execute` is refused at once (even
//! while the engine is busy). The session tells [`Control`] when an execution begins and ends;
//! the watchdog ([`Control::watch`], on a thread of its own) answers an execution that
//! outlives its deadline, a cancel or a close by [`WATCHDOG_GRACE`], which only one stuck in a
//! long native call can do, and then ends the session. The session and the watchdog decide
//! under one lock who answers, so an execution gets exactly one `done`.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use execbox_protocol::{Done, ErrorBody, ErrorCode, Execute, Message, RuntimeOptions};

use crate::replay::{unobserved, Replaying};
use crate::transport::{Inbound, Outbound};

/// State shared by a transport's reader and the session, guarding cancellation races.
pub(crate) struct Control {
    interrupt: Arc<AtomicBool>,
    /// Raised by the engine when the active execution exceeded its memory limit.
    pub(crate) memory: Arc<AtomicBool>,
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
    /// The active execution's `timeoutMs`.
    timeout_ms: u64,
    /// The active execution's clock, when it replays one: the watchdog's `done` carries it.
    replaying: Option<Replaying>,
    /// When the watchdog ends the active execution if the engine has not.
    watch_at: Option<Instant>,
    /// The watchdog ended the active execution (and answered it, unless the transport closed).
    fired: bool,
    /// The session is over; the watchdog returns.
    shutdown: bool,
    /// Until when the watchdog sleeps, if it does (`Some(None)`: until woken), so that a
    /// deadline later than that needs no wake-up: most executions end long before theirs.
    watchdog_sleeps: Option<Option<Instant>>,
}

/// How long past its deadline (or a cancel, or a close) an execution may take to stop before
/// the watchdog ends it: the protocol's one grace, which the host's deadline adds too. The
/// interrupt handler runs every few thousand bytecode ticks, so ordinary code stops within
/// milliseconds; only a loop around a long native call (a huge `indexOf`, `fill` or regex)
/// can run this long without reaching a tick.
pub(crate) const WATCHDOG_GRACE: Duration = RuntimeOptions::DEADLINE_GRACE;

impl Control {
    /// Control around the engine's interrupt flag.
    pub(crate) fn new(interrupt: Arc<AtomicBool>) -> Arc<Control> {
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
    pub(crate) fn set_sink(&self, out: Arc<dyn Outbound>) {
        *self.sink.lock().unwrap_or_else(|e| e.into_inner()) = Some(out);
    }

    pub(crate) fn clear_sink(&self) {
        self.sink.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    /// Called by the reader for every item before it is queued: applies cancels and closes
    /// at once, and answers an `execute` that arrives while another is active or queued.
    /// Returns the item to queue, or `None` when it was answered here.
    pub(crate) fn admit(&self, item: Inbound) -> Option<Inbound> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match &item {
            Inbound::Message(Message::Execute(e)) => {
                let busy = state.active.as_deref().or(state.queued_first.as_deref());
                let sink = self.sink.lock().unwrap_or_else(|e| e.into_inner()).clone();
                if let (Some(busy), Some(sink)) = (busy, sink) {
                    tracing::warn!(id = %e.id, active = %busy, "rejecting execute: an execution is active");
                    sink.send(&busy_done(e, busy));
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
        let at = state.watch_at.map_or(soon, |at| at.min(soon));
        self.watch_at(state, at);
    }

    /// Sets the watchdog's deadline, waking it only if it sleeps past `at`.
    fn watch_at(&self, state: &mut ControlState, at: Instant) {
        state.watch_at = Some(at);
        if let Some(until) = state.watchdog_sleeps {
            if until.is_none_or(|until| at < until) {
                self.changed.notify_all();
            }
        }
    }

    pub(crate) fn begin(&self, id: &str, timeout_ms: u64, replaying: Option<Replaying>) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.queued.remove(id);
        state.queued_first = None;
        let stop = state.cancelled.remove(id);
        state.active = Some(id.to_owned());
        let now = Instant::now();
        state.started_at = Some(now);
        state.timeout_ms = timeout_ms;
        state.replaying = replaying;
        state.fired = false;
        self.watch_at(
            &mut state,
            now + Duration::from_millis(timeout_ms) + WATCHDOG_GRACE,
        );
        if stop {
            self.watch_soon(&mut state);
        }
        self.interrupt.store(stop, Ordering::SeqCst);
    }

    /// Ends the active execution: its id, whether the transport closed during it, and
    /// whether the watchdog already ended it.
    pub(crate) fn end(&self) -> (Option<String>, bool, bool) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        self.interrupt.store(false, Ordering::SeqCst);
        state.watch_at = None;
        state.replaying = None;
        let fired = std::mem::take(&mut state.fired);
        (state.active.take(), state.closed_mid_execution, fired)
    }

    pub(crate) fn shutdown(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.shutdown = true;
        self.changed.notify_all();
    }

    /// The watchdog: run it on its own thread. When an execution outlives its deadline, a
    /// cancel or a close by [`WATCHDOG_GRACE`] (the engine is stuck in a long native call), it
    /// answers the execution with `timeout` itself (unless the transport closed) and calls
    /// `on_fire`, which must end the session (stdio exits the process, WebSocket closes the
    /// connection). Returns when the session ends.
    pub(crate) fn watch(&self, on_fire: &dyn Fn()) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if state.shutdown {
                return;
            }
            let at = match (&state.active, state.watch_at, state.fired) {
                (Some(_), Some(at), false) => at,
                _ => {
                    state.watchdog_sleeps = Some(None);
                    state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
                    state.watchdog_sleeps = None;
                    continue;
                }
            };
            let now = Instant::now();
            if now < at {
                state.watchdog_sleeps = Some(Some(at));
                state = self
                    .changed
                    .wait_timeout(state, at - now)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
                state.watchdog_sleeps = None;
                continue;
            }
            state.fired = true;
            let id = state.active.clone().unwrap_or_default();
            let elapsed = state.started_at.map(|t| t.elapsed()).unwrap_or_default();
            let timeout_ms = state.timeout_ms;
            let replaying = state.replaying.clone();
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
            } else if self.interrupt.load(Ordering::SeqCst) {
                // Cancelled: the bare message, as for any cancel.
                ErrorBody::timeout()
            } else {
                ErrorBody::new(
                    ErrorCode::Timeout,
                    format!(
                        "{} after {timeout_ms} ms while running JavaScript (one call of a \
                         built-in function, such as a search in a large array or string, ran \
                         past the limit)",
                        execbox_protocol::TIMEOUT_MESSAGE
                    ),
                )
            };
            if let Some(sink) = sink {
                let (clock, clock_overflow) = match replaying.as_ref().map(Replaying::try_observed)
                {
                    Some((clock, overflow)) => (Some(clock), overflow),
                    None => (None, false),
                };
                sink.send(&Message::Done(Done {
                    id,
                    duration_ms: elapsed.as_millis() as u64,
                    logs: Vec::new(),
                    logs_truncated: None,
                    clock,
                    clock_overflow,
                    outcome: Err(outcome),
                }));
            }
            on_fire();
            state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        }
    }

    pub(crate) fn forget(&self, id: &str) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.queued.remove(id);
        state.cancelled.remove(id);
        if state.queued_first.as_deref() == Some(id) {
            state.queued_first = None;
        }
    }
}

/// The `done` refusing `exec` because `active` holds the session.
pub(crate) fn busy_done(exec: &Execute, active: &str) -> Message {
    Message::Done(Done {
        id: exec.id.clone(),
        duration_ms: 0,
        logs: Vec::new(),
        logs_truncated: None,
        clock: unobserved(exec),
        clock_overflow: false,
        outcome: Err(ErrorBody::new(
            ErrorCode::InternalError,
            format!("Runner already has an active execution ({active:?})"),
        )),
    })
}
