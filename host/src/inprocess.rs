//! The in-process executor: the runner's engine on threads of the host process.
//!
//! For trusted code and the lowest latency. The guest still runs in a fresh QuickJS sandbox
//! per execution with every limit enforced, but a crash of the engine would take the host
//! down with it, and no OS lockdown applies: use a process or WebSocket runner for
//! untrusted code.

use std::sync::atomic::AtomicBool;
use std::sync::{mpsc as std_mpsc, Arc};

use execbox_protocol::{Message, RuntimeOptions, DEFAULT_MAX_MESSAGE_BYTES};
use execbox_runner::engine::{Engine, Outbound, ENGINE_STACK_BYTES};
use execbox_runner::session::{run_session, Control, Inbound, SessionLimits};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::connection::{Connection, RunnerEvent, SessionTimings, Terminate};
use crate::executor::{ExecuteFuture, Executor};
use crate::pool::{PoolOptions, PooledExecutor};
use crate::toolset::ToolSet;

/// Runs executions on a pool of engine threads inside this process.
#[derive(Clone)]
pub struct InProcessExecutor {
    pool: PooledExecutor,
}

impl InProcessExecutor {
    /// `options.size` engine threads, each keeping a sandbox ready. Must be called inside a
    /// Tokio runtime.
    pub fn new(options: PoolOptions) -> Self {
        InProcessExecutor {
            pool: PooledExecutor::with_spawner(Box::new(spawn_engine), options),
        }
    }

    /// Waits until `n` engines are idle and ready, up to `timeout`.
    pub async fn wait_idle(&self, n: usize, timeout: std::time::Duration) -> bool {
        self.pool.wait_idle(n, timeout).await
    }
}

impl Executor for InProcessExecutor {
    fn execute<'a>(
        &'a self,
        code: &'a str,
        tools: &'a ToolSet,
        options: RuntimeOptions,
        cancel: CancellationToken,
    ) -> ExecuteFuture<'a> {
        self.pool.execute(code, tools, options, cancel)
    }
}

struct ChannelSink {
    events: mpsc::UnboundedSender<RunnerEvent>,
}

impl Outbound for ChannelSink {
    fn send(&self, message: &Message) {
        let _ = self.events.send(RunnerEvent::Message(message.clone()));
    }
}

/// Starts one engine thread and connects to it through channels (no JSON on the way).
fn spawn_engine(timings: SessionTimings) -> std::io::Result<Connection> {
    let interrupt = Arc::new(AtomicBool::new(false));
    let control = Control::new(interrupt.clone());
    let (inbound_tx, inbound_rx) = std_mpsc::channel::<Inbound>();
    let (event_tx, event_rx) = mpsc::unbounded_channel::<RunnerEvent>();
    let (host_tx, mut host_rx) = mpsc::unbounded_channel::<Message>();
    let limits = SessionLimits::new(DEFAULT_MAX_MESSAGE_BYTES);
    let session_control = control.clone();
    let closed_tx = event_tx.clone();
    let out: Arc<dyn Outbound> = Arc::new(ChannelSink { events: event_tx });
    control.set_sink(out.clone());
    std::thread::Builder::new()
        .name("execbox-engine".into())
        .stack_size(ENGINE_STACK_BYTES)
        .spawn(move || {
            run_session(
                &mut Engine::new(interrupt),
                &inbound_rx,
                &session_control,
                out,
                limits,
            );
            let _ = closed_tx.send(RunnerEvent::Closed("engine thread ended".into()));
        })?;
    let forward_control = control.clone();
    let forward_tx = inbound_tx.clone();
    tokio::spawn(async move {
        while let Some(message) = host_rx.recv().await {
            if let Some(item) = forward_control.admit(Inbound::Message(message)) {
                if forward_tx.send(item).is_err() {
                    break;
                }
            }
        }
        let _ = forward_control.admit(Inbound::Closed);
        let _ = forward_tx.send(Inbound::Closed);
    });
    let terminate: Terminate = Box::new(move || {
        Box::pin(async move {
            let _ = control.admit(Inbound::Closed);
            let _ = inbound_tx.send(Inbound::Closed);
        })
    });
    Ok(Connection::new(host_tx, event_rx, terminate, timings))
}
