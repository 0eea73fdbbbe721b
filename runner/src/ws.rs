//! The WebSocket transport: each connection is one session, each text frame one message.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::sync::Arc;

use execbox_protocol::{Message, PEEK_BYTES};
use futures_util::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc as tmpsc, Semaphore};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message as Frame;

use crate::engine::{Engine, Outbound, ENGINE_STACK_BYTES};
use crate::lockdown::{Mode, Sandbox};
use crate::session::{run_session, Control, Inbound, SessionLimits};

/// Queues each message as one text frame for the connection's writer task.
struct WsSink {
    tx: tmpsc::UnboundedSender<String>,
}

impl Outbound for WsSink {
    fn send(&self, message: &Message) {
        if self.tx.send(message.encode()).is_err() {
            tracing::debug!("connection writer is gone");
        }
    }
}

/// Accepts connections on `addr` until the process ends. Calls `on_bound` with the bound
/// address once listening (port 0 picks a free port) and, with [`Sandbox::Enforce`], locked down.
///
/// The order is what the lockdown needs: bind (socket, bind and listen are not allowed
/// afterwards), Landlock on this thread, build the runtime (so its worker threads, and the
/// engine threads they spawn, inherit Landlock; its I/O driver needs syscalls seccomp will not
/// allow), then rlimits and seccomp on all threads, and only then accept a connection.
pub fn serve(
    addr: &str,
    max_sessions: usize,
    limits: SessionLimits,
    sandbox: Sandbox,
    on_bound: impl FnOnce(SocketAddr),
) -> anyhow::Result<()> {
    let listener = bind(addr)?;
    let lockdown = sandbox.begin(Mode::WebSocket { max_sessions })?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let listener = {
        let _entered = runtime.enter();
        TcpListener::from_std(listener)?
    };
    let bound = listener.local_addr()?;
    if let Some(lockdown) = lockdown {
        lockdown.finish()?;
    }
    on_bound(bound);
    runtime.block_on(async move {
        let permits = Arc::new(Semaphore::new(max_sessions.max(1)));
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let permit = permits.clone().try_acquire_owned();
            tokio::spawn(async move {
                match permit {
                    Ok(permit) => {
                        if let Err(e) = connection(stream, limits).await {
                            tracing::debug!(%peer, "connection ended: {e:#}");
                        }
                        drop(permit);
                    }
                    Err(_) => refuse(stream, peer, limits).await,
                }
            });
        }
    })
}

/// Binds a listener the way `tokio::net::TcpListener::bind` does (`SO_REUSEADDR`, each address
/// `addr` resolves to in turn), before the runtime and the lockdown exist. A current-thread
/// runtime, which starts no thread, lends tokio its I/O driver for the moment.
fn bind(addr: &str) -> anyhow::Result<std::net::TcpListener> {
    let addrs: Vec<SocketAddr> = addr.to_socket_addrs()?.collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    let listener = runtime.block_on(async { TcpListener::bind(&addrs[..]).await?.into_std() })?;
    Ok(listener)
}

fn ws_config(limits: SessionLimits) -> WebSocketConfig {
    // Frames a little over the limit still arrive whole, so they can be refused with an answer.
    let cap = limits.max_message_bytes.saturating_add(PEEK_BYTES);
    WebSocketConfig::default()
        .max_message_size(Some(cap))
        .max_frame_size(Some(cap))
}

async fn refuse(stream: TcpStream, peer: SocketAddr, limits: SessionLimits) {
    tracing::warn!(%peer, "refusing connection: --max-sessions reached");
    if let Ok(mut ws) =
        tokio_tungstenite::accept_async_with_config(stream, Some(ws_config(limits))).await
    {
        let _ = ws
            .close(Some(CloseFrame {
                code: CloseCode::Again,
                reason: "runner at --max-sessions".into(),
            }))
            .await;
    }
}

async fn connection(stream: TcpStream, limits: SessionLimits) -> anyhow::Result<()> {
    let ws = tokio_tungstenite::accept_async_with_config(stream, Some(ws_config(limits))).await?;
    let (mut sink, mut frames) = ws.split();
    let (out_tx, mut out_rx) = tmpsc::unbounded_channel::<String>();
    let (in_tx, in_rx) = mpsc::channel::<Inbound>();

    let interrupt = Arc::new(AtomicBool::new(false));
    let control = Control::new(interrupt.clone());
    let session_control = control.clone();
    let out: Arc<dyn Outbound> = Arc::new(WsSink { tx: out_tx });
    control.set_sink(out.clone());
    // Set by the watchdog: the session must end now, whatever the engine is doing.
    let (end_tx, end_rx) = tokio::sync::watch::channel(false);
    let (engine_done_tx, engine_done_rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::Builder::new()
        .name("ws-engine".into())
        .stack_size(ENGINE_STACK_BYTES)
        .spawn(move || {
            run_session(
                &mut Engine::new(interrupt),
                &in_rx,
                &session_control,
                out,
                limits,
            );
            let _ = engine_done_tx.send(());
        })?;
    let watchdog_control = control.clone();
    std::thread::Builder::new()
        .name("ws-watchdog".into())
        .spawn(move || {
            watchdog_control.watch(&|| {
                let _ = end_tx.send(true);
            })
        })?;

    let mut writer_end = end_rx.clone();
    let writer = tokio::spawn(async move {
        loop {
            tokio::select! {
                text = out_rx.recv() => match text {
                    Some(text) => {
                        if sink.send(Frame::text(text)).await.is_err() {
                            return;
                        }
                    }
                    None => break,
                },
                _ = writer_end.changed() => {
                    // Flush what is queued (the watchdog's `done`), then close.
                    while let Ok(text) = out_rx.try_recv() {
                        if sink.send(Frame::text(text)).await.is_err() {
                            return;
                        }
                    }
                    break;
                }
            }
        }
        let _ = sink.close().await;
    });

    let forward = |item: Inbound| match control.admit(item) {
        Some(item) => in_tx.send(item).is_ok(),
        None => true,
    };
    let mut reader_end = end_rx;
    loop {
        let frame = tokio::select! {
            frame = frames.next() => frame,
            _ = reader_end.changed() => break,
        };
        let Some(frame) = frame else { break };
        let item = match frame {
            Ok(Frame::Text(text)) => {
                if text.len() > limits.max_message_bytes {
                    let prefix = text.as_bytes()[..PEEK_BYTES.min(text.len())].to_vec();
                    Inbound::Oversized {
                        len: text.len(),
                        prefix,
                    }
                } else {
                    Inbound::from_text(text.as_str())
                }
            }
            Ok(Frame::Binary(bytes)) => match std::str::from_utf8(&bytes) {
                Ok(text) if bytes.len() <= limits.max_message_bytes => Inbound::from_text(text),
                Ok(_) => Inbound::Oversized {
                    len: bytes.len(),
                    prefix: bytes[..PEEK_BYTES.min(bytes.len())].to_vec(),
                },
                Err(_) => Inbound::NotUtf8 { len: bytes.len() },
            },
            Ok(Frame::Close(_)) => break,
            Ok(_) => continue, // ping/pong are answered by tungstenite
            Err(e) => {
                tracing::debug!("websocket read failed: {e}");
                break;
            }
        };
        if !forward(item) {
            break;
        }
    }
    forward(Inbound::Closed);
    drop(in_tx);
    let _ = writer.await;
    // Hold the session's --max-sessions slot until its engine thread is gone, so a guest
    // stuck in a native call cannot multiply threads past the limit.
    let _ = engine_done_rx.await;
    Ok(())
}
