//! The in-process executor: the runner's engine on threads of the host process.
//!
//! **For trusted code only.** It trades isolation for the lowest latency. The guest still
//! runs in a fresh QuickJS sandbox per execution with its limits, but:
//! - no OS lockdown applies: a guest that escaped QuickJS would hold the host's privileges;
//! - a crash of the engine takes the host down with it;
//! - a guest stuck in one long native call (`Array.prototype.reverse.call({length: 2**53-1})`)
//!   never reaches the interrupt handler, and a thread cannot be killed: the host answers
//!   `timeout` at its deadline, but the engine thread keeps running (and burning a core)
//!   until the call returns, possibly never. A runner process is killed instead.
//!
//! Each pooled slot is one runner session, whose two engine threads take turns (one serves
//! while the other builds the next sandbox); "engine thread" below means such a session.
//! So that stuck threads cannot pile up, an engine thread whose execution the host abandoned
//! (deadline or cancel, no `done`) is retired and counted as stuck until it ends. A new one
//! replaces it only while fewer than [`PoolOptions::size`] are stuck; beyond that every execution fails at once with `internal_error` ("in-process engine
//! threads are stuck in native calls; use a process runner for untrusted code").
//! Use a [`ProcessExecutor`](crate::ProcessExecutor), a [`PooledExecutor`] or a
//! [`WsExecutor`](crate::WsExecutor) for untrusted code.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use execbox_protocol::Message;
use execbox_runner::{Inbound, Outbound, Sent, Session};
use tokio::sync::mpsc;

use crate::connection::{Connection, RunnerEvent, SessionTimings, Terminate};
use crate::executor::{ExecuteFuture, ExecuteRequest, Executor};
use crate::pool::{PoolOptions, PooledExecutor};

/// Why an execution fails at once when too many engine threads are stuck.
const STUCK_ENGINES_MESSAGE: &str =
    "in-process engine threads are stuck in native calls; use a process runner for untrusted code";

/// Runs executions on a pool of engine threads inside this process. For trusted code only:
/// see the module docs.
#[derive(Clone)]
pub struct InProcessExecutor {
    pool: PooledExecutor,
    stuck: Arc<StuckEngines>,
}

impl InProcessExecutor {
    /// `options.size` engine threads, each keeping a sandbox ready; at most `options.size`
    /// more may be stuck before executions fail. Must be called inside a Tokio runtime.
    pub fn new(options: PoolOptions) -> Self {
        let stuck = Arc::new(StuckEngines {
            count: AtomicUsize::new(0),
            limit: options.size.max(1),
        });
        let spawner_stuck = stuck.clone();
        let spawner = Box::new(move |timings| spawn_engine(timings, &spawner_stuck));
        InProcessExecutor {
            pool: PooledExecutor::with_spawner(spawner, options),
            stuck,
        }
    }

    /// Engine threads the host abandoned in an execution that are still running.
    pub fn stuck_threads(&self) -> usize {
        self.stuck.count.load(Ordering::SeqCst)
    }

    /// Waits until `n` engines are idle and ready, up to `timeout`.
    pub async fn wait_idle(&self, n: usize, timeout: std::time::Duration) -> bool {
        self.pool.wait_idle(n, timeout).await
    }
}

impl Executor for InProcessExecutor {
    fn execute(&self, request: ExecuteRequest) -> ExecuteFuture<'_> {
        self.pool.execute(request)
    }
}

/// The engine threads abandoned mid-execution and still alive, shared by an executor.
struct StuckEngines {
    count: AtomicUsize,
    /// No new engine thread starts while `count` is at this.
    limit: usize,
}

/// What one engine thread is doing, as far as stuck-counting needs to know.
struct EngineThread {
    stuck: Arc<StuckEngines>,
    state: Mutex<ThreadState>,
}

#[derive(Default)]
struct ThreadState {
    /// An `execute` went in and its `done` has not come out.
    busy: bool,
    /// Counted in `StuckEngines::count`.
    counted: bool,
    /// `run_session` returned (or the thread unwound).
    ended: bool,
}

impl EngineThread {
    fn state(&self) -> std::sync::MutexGuard<'_, ThreadState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn set_busy(&self, busy: bool) {
        self.state().busy = busy;
    }

    /// The host is done with this thread: if it is still inside an execution, it is stuck.
    fn retire(&self) {
        let mut state = self.state();
        if state.busy && !state.ended && !state.counted {
            state.counted = true;
            let stuck = self.stuck.count.fetch_add(1, Ordering::SeqCst) + 1;
            tracing::warn!(
                stuck,
                "an in-process engine thread did not stop after its execution was abandoned"
            );
        }
    }

    fn end(&self) {
        let mut state = self.state();
        state.ended = true;
        if state.counted {
            state.counted = false;
            self.stuck.count.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Marks the thread ended when its closure returns or unwinds.
struct EndGuard(Arc<EngineThread>);

impl Drop for EndGuard {
    fn drop(&mut self) {
        self.0.end();
    }
}

struct ChannelSink {
    events: mpsc::UnboundedSender<RunnerEvent>,
    thread: Arc<EngineThread>,
}

impl Outbound for ChannelSink {
    fn send(&self, message: &Message) {
        if matches!(message, Message::Done(_)) {
            self.thread.set_busy(false);
        }
        let _ = self.events.send(RunnerEvent::Message(message.clone()));
    }
}

/// Starts one engine thread and connects to it through channels (no JSON on the way).
/// Refuses while too many engine threads are stuck.
fn spawn_engine(timings: SessionTimings, stuck: &Arc<StuckEngines>) -> std::io::Result<Connection> {
    if stuck.count.load(Ordering::SeqCst) >= stuck.limit {
        return Err(std::io::Error::other(STUCK_ENGINES_MESSAGE));
    }
    let thread = Arc::new(EngineThread {
        stuck: stuck.clone(),
        state: Mutex::new(ThreadState::default()),
    });
    let (event_tx, event_rx) = mpsc::unbounded_channel::<RunnerEvent>();
    let (host_tx, mut host_rx) = mpsc::unbounded_channel::<Message>();
    let closed_tx = event_tx.clone();
    let out: Arc<dyn Outbound> = Arc::new(ChannelSink {
        events: event_tx,
        thread: thread.clone(),
    });
    let ending = EndGuard(thread.clone());
    let session = Session::builder()
        .thread_name("execbox-engine")
        .on_end(move || {
            let _ending = ending;
            let _ = closed_tx.send(RunnerEvent::Closed("engine thread ended".into()));
        })
        .start(out)?;
    let input = session.input();
    let forward_thread = thread.clone();
    tokio::spawn(async move {
        while let Some(message) = host_rx.recv().await {
            if matches!(message, Message::Execute(_)) {
                forward_thread.set_busy(true);
            }
            if input.send(Inbound::Message(message)) == Sent::Ended {
                break;
            }
        }
        input.close();
    });
    let terminate: Terminate = Box::new(move || {
        Box::pin(async move {
            thread.retire();
            session.close();
        })
    });
    Ok(Connection::new(host_tx, event_rx, terminate, timings))
}
