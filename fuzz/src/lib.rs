//! Shared harness of the fuzz targets: an in-process runner session fed like a transport would.
//!
//! [`Session`] starts a runner session as every transport does ([`execbox_runner::Session`],
//! with its watchdog), feeds it items as a transport's reader would, and records everything
//! the runner sends in a [`Recorder`]. [`Session::close`] sends the final `Closed` and panics
//! if the session does not end within [`WATCHDOG`]: a hang is a finding.
//!
//! [`check_wire`] and [`Expected`] hold the invariants both session targets assert.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, LazyLock, Mutex};
use std::time::{Duration, Instant};

use execbox_protocol::{peek_envelope, DecodeError, Done, Message, ToolResult};
use execbox_runner::{Inbound, Outbound, Sent, SessionInput, SessionLimits};

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
    /// Set for the echo mode: the session to feed the answers to.
    echo: Mutex<Option<SessionInput>>,
}

impl Outbound for Recorder {
    fn send(&self, message: &Message) {
        if let Message::ToolCall(call) = message {
            let echo = self.echo.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(input) = echo.as_ref() {
                input.send(Inbound::Message(Message::ToolResult(ToolResult {
                    call_id: call.call_id.clone(),
                    outcome: Ok(call.input.clone()),
                })));
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

/// A runner session fed like a transport's reader feeds one.
pub struct Session {
    session: execbox_runner::Session,
    /// What the runner sent.
    pub recorder: Arc<Recorder>,
    /// Set when the runner's watchdog ended an execution the engine could not stop.
    fired: Arc<AtomicBool>,
}

impl Session {
    /// Starts a session; with `echo`, every `tool_call` is answered at once with its input.
    pub fn start(limits: SessionLimits, echo: bool) -> Session {
        let recorder = Arc::new(Recorder {
            sent: Mutex::new(Vec::new()),
            changed: Condvar::new(),
            echo: Mutex::new(None),
        });
        // As the stdio transport does: a watchdog answers an execution stuck in a long native
        // call (and here, instead of exiting the process, records that it did).
        let fired = Arc::new(AtomicBool::new(false));
        let watch_fired = fired.clone();
        let session = execbox_runner::Session::builder()
            .limits(limits)
            .watchdog(move || watch_fired.store(true, Ordering::SeqCst))
            .start(recorder.clone())
            .expect("start a runner session");
        if echo {
            // Nothing is fed before this returns, so no tool_call can come before it is set.
            *recorder.echo.lock().unwrap_or_else(|e| e.into_inner()) = Some(session.input());
        }
        Session {
            session,
            recorder,
            fired,
        }
    }

    /// Admits and queues one item; returns whether it was queued (not answered by the reader).
    pub fn feed(&self, item: Inbound) -> bool {
        self.session.send(item) == Sent::Queued
    }

    /// Sends the final `Closed`, waits for the session to end (panicking after [`WATCHDOG`])
    /// and returns everything the runner sent.
    pub fn close(self) -> Vec<Message> {
        self.session.close();
        let deadline = Instant::now() + *WATCHDOG;
        while !self.session.is_finished() {
            if self.fired.load(Ordering::SeqCst) {
                // The watchdog answered; the engine thread ends when its native call returns,
                // as a runner process's would if it did not exit. Do not wait for it.
                return std::mem::take(
                    &mut *self.recorder.sent.lock().unwrap_or_else(|e| e.into_inner()),
                );
            }
            if Instant::now() >= deadline {
                panic!(
                    "hang: the session did not end within {:?} after Closed",
                    *WATCHDOG
                );
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        if let Err(panic) = self.session.join() {
            std::panic::resume_unwind(panic);
        }
        // Drop the echo input so nothing keeps the session's channel alive.
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
