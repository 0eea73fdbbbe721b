//! Shared harness of the fuzz targets: an in-process runner session fed like a transport would.
//!
//! [`Session`] runs [`run_session`] on its own thread (with [`ENGINE_STACK_BYTES`] of stack and
//! a fresh [`Engine`]), passes every item through [`Control::admit`] before queueing it, and
//! records everything the runner sends in a [`Recorder`]. [`Session::close`] sends the final
//! `Closed` and panics if the session thread does not end within [`WATCHDOG`]: a hang is a finding.
//!
//! [`check_wire`] and [`Expected`] hold the invariants both session targets assert.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, LazyLock, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use execbox_protocol::{peek_envelope, DecodeError, Done, Message, ToolResult};
use execbox_runner::engine::{Engine, Outbound, ENGINE_STACK_BYTES};
use execbox_runner::session::{run_session, Control, Inbound, SessionLimits};

/// How long a session may take to end after `Closed`, and an execute to get its `done`:
/// 5 s, or `EXECBOX_FUZZ_WATCHDOG_SECS`. Raise it to fuzz past the known finding that a loop
/// around a slow native call overruns `timeoutMs` by seconds (see README.md); libFuzzer's
/// `-timeout` must then be larger still.
pub static WATCHDOG: LazyLock<Duration> = LazyLock::new(|| {
    let secs = std::env::var("EXECBOX_FUZZ_WATCHDOG_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    Duration::from_secs(secs)
});

/// Message prefixes of the `done`s that refuse an execute without running it.
const REJECTION_PREFIXES: [&str; 3] = [
    "Runner already has an active execution",
    "invalid execute message:",
    "execute message of ",
];

/// Everything the runner sent, in order; optionally answers each `tool_call` by echoing its input.
pub struct Recorder {
    sent: Mutex<Vec<Message>>,
    changed: Condvar,
    /// Set for the echo mode: where to queue the answers, and the control to admit them through.
    echo: Mutex<Option<(Sender<Inbound>, Weak<Control>)>>,
}

impl Outbound for Recorder {
    fn send(&self, message: &Message) {
        if let Message::ToolCall(call) = message {
            let echo = self.echo.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((tx, control)) = echo.as_ref() {
                let answer = Inbound::Message(Message::ToolResult(ToolResult {
                    call_id: call.call_id.clone(),
                    outcome: Ok(call.input.clone()),
                }));
                if let Some(item) = control.upgrade().and_then(|c| c.admit(answer)) {
                    let _ = tx.send(item);
                }
            }
        }
        let mut sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        sent.push(message.clone());
        self.changed.notify_all();
    }
}

impl Recorder {
    /// Waits until `ready` holds for the messages sent so far, or `timeout` passes.
    /// Returns whether it holds.
    pub fn wait_until(&self, timeout: Duration, ready: impl Fn(&[Message]) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        let mut sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if ready(&sent) {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            sent = self
                .changed
                .wait_timeout(sent, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// How many messages were sent so far.
    /// The callIds of every `tool_call` sent so far, oldest first.
    pub fn call_ids(&self) -> Vec<String> {
        let sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        sent.iter()
            .filter_map(|m| match m {
                Message::ToolCall(call) => Some(call.call_id.clone()),
                _ => None,
            })
            .collect()
    }

    /// How many messages were sent so far.
    pub fn len(&self) -> usize {
        self.sent.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether nothing was sent yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A runner session on its own thread, fed through [`Control::admit`] like a transport's reader.
pub struct Session {
    tx: Sender<Inbound>,
    control: Arc<Control>,
    /// What the runner sent.
    pub recorder: Arc<Recorder>,
    thread: JoinHandle<()>,
    ended: Receiver<()>,
    /// Set when the runner's watchdog ended an execution the engine could not stop.
    fired: Arc<AtomicBool>,
}

impl Session {
    /// Starts a session; with `echo`, every `tool_call` is answered at once with its input.
    pub fn start(limits: SessionLimits, echo: bool) -> Session {
        let interrupt = Arc::new(AtomicBool::new(false));
        let control = Control::new(interrupt.clone());
        let (tx, rx) = mpsc::channel::<Inbound>();
        let recorder = Arc::new(Recorder {
            sent: Mutex::new(Vec::new()),
            changed: Condvar::new(),
            echo: Mutex::new(echo.then(|| (tx.clone(), Arc::downgrade(&control)))),
        });
        let out: Arc<dyn Outbound> = recorder.clone();
        // As the stdio transport does: the sink is set before the reader starts.
        control.set_sink(out.clone());
        let (end_tx, ended) = mpsc::channel();
        let session_control = control.clone();
        let thread = std::thread::Builder::new()
            .name("engine".into())
            .stack_size(ENGINE_STACK_BYTES)
            .spawn(move || {
                let mut engine = Engine::new(interrupt);
                run_session(&mut engine, &rx, &session_control, out, limits);
                let _ = end_tx.send(());
            })
            .expect("spawn the engine thread");
        // As both transports do: a watchdog answers an execution stuck in a long native call.
        let fired = Arc::new(AtomicBool::new(false));
        let (watch_control, watch_fired) = (control.clone(), fired.clone());
        std::thread::Builder::new()
            .name("watchdog".into())
            .spawn(move || {
                watch_control
                    .watch(&|| watch_fired.store(true, std::sync::atomic::Ordering::SeqCst))
            })
            .expect("spawn the watchdog thread");
        Session {
            tx,
            control,
            recorder,
            thread,
            ended,
            fired,
        }
    }

    /// Admits and queues one item; returns whether it was queued (not answered by the reader).
    pub fn feed(&self, item: Inbound) -> bool {
        match self.control.admit(item) {
            Some(item) => {
                let _ = self.tx.send(item);
                true
            }
            None => false,
        }
    }

    /// Sends the final `Closed`, waits for the session to end (panicking after [`WATCHDOG`])
    /// and returns everything the runner sent.
    pub fn close(self) -> Vec<Message> {
        self.feed(Inbound::Closed);
        let deadline = std::time::Instant::now() + *WATCHDOG;
        loop {
            if self.ended.recv_timeout(Duration::from_millis(20)).is_ok()
                || self.thread.is_finished()
            {
                break;
            }
            if self.fired.load(std::sync::atomic::Ordering::SeqCst) {
                // The watchdog answered; the engine thread ends when its native call returns,
                // as a WebSocket runner's does. Do not wait for it.
                return std::mem::take(
                    &mut *self.recorder.sent.lock().unwrap_or_else(|e| e.into_inner()),
                );
            }
            if std::time::Instant::now() >= deadline {
                panic!(
                    "hang: the session did not end within {:?} after Closed",
                    *WATCHDOG
                );
            }
        }
        if let Err(panic) = self.thread.join() {
            std::panic::resume_unwind(panic);
        }
        // Drop the echo sender so nothing keeps the recorder's channel alive.
        self.recorder
            .echo
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        std::mem::take(&mut *self.recorder.sent.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// The `done`s each id must receive, counted from what was fed to the session.
#[derive(Debug, Default)]
pub struct Expected {
    dones: BTreeMap<String, usize>,
}

impl Expected {
    /// Counts the `done` an item calls for, if any (whether or not the reader answered it):
    /// an `execute`, a malformed `execute` (with its readable id or ""), or an oversized one.
    pub fn note(&mut self, item: &Inbound) {
        let id = match item {
            Inbound::Message(Message::Execute(e)) => e.id.clone(),
            Inbound::Invalid(DecodeError::InvalidField {
                kind: "execute",
                id,
                ..
            }) => id.clone().unwrap_or_default(),
            Inbound::Oversized { prefix, .. } => {
                let envelope = peek_envelope(prefix);
                if envelope.kind.as_deref() != Some("execute") {
                    return;
                }
                envelope.id.unwrap_or_default()
            }
            _ => return,
        };
        *self.dones.entry(id).or_default() += 1;
    }

    /// How many `done`s are expected in all.
    pub fn total(&self) -> usize {
        self.dones.values().sum()
    }

    /// Waits until as many `done`s as expected were sent; panics after [`WATCHDOG`].
    pub fn wait_for_dones(&self, recorder: &Recorder) {
        let want = self.total();
        let got = |sent: &[Message]| {
            sent.iter()
                .filter(|m| matches!(m, Message::Done(_)))
                .count()
        };
        if !recorder.wait_until(*WATCHDOG, |sent| got(sent) >= want) {
            panic!(
                "hang: expected {want} done messages within {:?}, got fewer",
                *WATCHDOG
            );
        }
    }

    /// Asserts that the `done`s per id are exactly the expected ones.
    pub fn check(&self, sent: &[Message]) {
        let mut got: BTreeMap<String, usize> = BTreeMap::new();
        for message in sent {
            if let Message::Done(done) = message {
                *got.entry(done.id.clone()).or_default() += 1;
            }
        }
        assert_eq!(got, self.dones, "done messages per id");
    }
}

/// Whether a `done` refuses an execute without running it (no `started` precedes it).
pub fn is_rejection(done: &Done) -> bool {
    match &done.outcome {
        Err(error) => {
            done.duration_ms == 0
                && done.logs.is_empty()
                && REJECTION_PREFIXES
                    .iter()
                    .any(|prefix| error.message.starts_with(prefix))
        }
        Ok(_) => false,
    }
}

/// Asserts the invariants of what a runner sends, whatever it was fed:
/// - only `started`, `tool_call` and `done`, each of which encodes to one line that decodes
///   back and re-encodes to the identical text;
/// - runs do not overlap: a `started` opens a run, its `tool_call`s follow with callIds unique
///   across the whole session (a callId is never reused), and a `done` with its id closes it;
///   every run is closed at the end;
/// - a `tool_call` names an installed tool (`tools(provider, tool)` holds).
pub fn check_wire(sent: &[Message], tools: impl Fn(&str, &str) -> bool) {
    let mut open: Option<String> = None;
    let mut call_ids: HashSet<String> = HashSet::new();
    for (i, message) in sent.iter().enumerate() {
        let line = message.encode();
        assert!(!line.contains('\n'), "message {i} spans lines: {line}");
        let decoded = Message::decode(&line)
            .unwrap_or_else(|e| panic!("message {i} does not decode ({e}): {line}"));
        assert_eq!(decoded.encode(), line, "message {i} does not re-encode");
        match message {
            Message::Started(started) => {
                if let Some(id) = &open {
                    panic!("message {i}: started {:?} while {id:?} runs", started.id);
                }
                open = Some(started.id.clone());
            }
            Message::ToolCall(call) => {
                let Some(id) = &open else {
                    panic!("message {i}: tool_call {:?} outside a run", call.call_id);
                };
                assert!(
                    call_ids.insert(call.call_id.clone()),
                    "message {i}: callId {:?} reused (in run {id:?})",
                    call.call_id
                );
                assert!(
                    tools(&call.provider_name, &call.safe_tool_name),
                    "message {i}: tool_call to {}.{} which is not installed",
                    call.provider_name,
                    call.safe_tool_name
                );
            }
            Message::Done(done) if is_rejection(done) => {}
            Message::Done(done) => match open.take() {
                Some(id) if id == done.id => {}
                Some(id) => panic!("message {i}: done {:?} while {id:?} runs", done.id),
                None => panic!("message {i}: done {:?} without started", done.id),
            },
            other => panic!("message {i}: the runner sent a {}", other.kind()),
        }
    }
    if let Some(id) = open {
        panic!("run {id:?} has no done");
    }
}

/// The session limits the targets use: a small message limit, so oversized lines are cheap.
pub fn limits() -> SessionLimits {
    SessionLimits::new(1024)
}
