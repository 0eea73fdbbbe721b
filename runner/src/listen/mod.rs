//! `--listen`: a small supervisor that serves each WebSocket session with its own locked-down
//! stdio runner process.
//!
//! The supervisor runs no guest code. It accepts connections, checks the upgrade request
//! ([`Auth`]), and relays each session to a runner process started ahead of demand
//! ([`ChildCommand`], [`WARM_CHILDREN`]): `execbox-runner` in stdio mode, which locks itself
//! down and ends itself (exit status 3) when an execution is stuck in a native call. A guest
//! can therefore hold a CPU or a `--max-sessions` slot no longer than its `timeoutMs` plus the
//! watchdog's grace: the slot is released only once the session's process is reaped.
//! What bounds what:
//! - `--max-sessions`: sessions served at once (more are closed with 1013 after the upgrade);
//! - [`MAX_PENDING_HANDSHAKES`] and `--handshake-timeout-ms`: connections not yet upgraded
//!   (more are closed at accept);
//! - `--idle-timeout-ms`: a session with no execution in flight and no frame from its client;
//! - [`outbound_bound`]: runner output waiting for a client that does not read (1008);
//! - `--max-message-bytes` + 4 KiB: one frame from the client (1009);
//! - accept errors (EMFILE...) back off from 5 ms to 1 s, with one warning per second at most.

mod auth;
mod backoff;
mod child;
mod relay;

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use execbox_protocol::PEEK_BYTES;
use futures_util::SinkExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};

pub use auth::{load_token, Auth, BEARER_SUBPROTOCOL_PREFIX, SUBPROTOCOL, TOKEN_ENV};
pub use child::{ChildCommand, WARM_CHILDREN};
pub use relay::outbound_bound;

use crate::lockdown::Sandbox;
use backoff::{suppressed_note, Backoff, RateLimited};
use child::{Spawner, Warm};

/// At most this many connections may be in their WebSocket handshake at once; further ones
/// are closed as soon as they are accepted. With `--handshake-timeout-ms`, this bounds what a
/// flood of raw connections can hold.
pub const MAX_PENDING_HANDSHAKES: usize = 64;

/// How a listening runner serves sessions.
#[derive(Debug, Clone)]
pub struct ListenOptions {
    /// `--max-sessions`: sessions served at once.
    pub max_sessions: usize,
    /// `--max-message-bytes`: passed to each runner process; frames over it + 4 KiB are closed
    /// with 1009.
    pub max_message_bytes: usize,
    /// `--max-pending-tool-calls`: passed to each runner process.
    pub max_pending_tool_calls: u32,
    /// `--handshake-timeout-ms`: how long a connection may take to complete its upgrade.
    pub handshake_timeout: Duration,
    /// `--idle-timeout-ms`: how long a session may stay with no execution in flight and no
    /// frame from its client.
    pub idle_timeout: Duration,
    /// Who may open a session.
    pub auth: Auth,
    /// `--insecure-no-auth`: serve a non-loopback address without a token.
    pub insecure_no_auth: bool,
    /// `--insecure-no-sandbox`: neither the supervisor nor its runner processes lock down.
    pub insecure_no_sandbox: bool,
}

struct Server {
    options: ListenOptions,
    sessions: Arc<Semaphore>,
    handshakes: Arc<Semaphore>,
    warm: Warm,
}

/// Accepts connections on `addr` until the process ends, serving each session with a runner
/// process started from `child`. Calls `on_bound` with the bound address (port 0 picks a free
/// port) once listening and, with [`Sandbox::Enforce`], locked down
/// ([`crate::lockdown::Mode::Supervisor`]).
///
/// The order is what the lockdown needs: resolve and bind (Landlock forbids binding later),
/// Landlock on this thread, then build the runtime (its threads inherit Landlock), then the
/// rlimits and seccomp on all threads, and only then start runner processes and accept
/// connections.
pub fn serve(
    addr: &str,
    options: ListenOptions,
    child: ChildCommand,
    sandbox: Sandbox,
    on_bound: impl FnOnce(SocketAddr),
) -> anyhow::Result<()> {
    if sandbox == Sandbox::Enforce {
        crate::lockdown::close_inherited_fds();
    }
    let addrs: Vec<SocketAddr> = addr.to_socket_addrs()?.collect();
    options
        .auth
        .check_exposure(&addrs, options.insecure_no_auth)?;
    let listener = bind(&addrs)?;
    let lockdown = sandbox.begin_supervisor(options.max_sessions, child.program())?;
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
    runtime.block_on(async move {
        let spawner = Spawner::new(
            child,
            options.max_message_bytes,
            options.max_pending_tool_calls,
            options.insecure_no_sandbox,
        );
        let server = Arc::new(Server {
            sessions: Arc::new(Semaphore::new(options.max_sessions.max(1))),
            handshakes: Arc::new(Semaphore::new(MAX_PENDING_HANDSHAKES)),
            warm: Warm::start(Arc::new(spawner)),
            options,
        });
        on_bound(bound);
        accept_loop(listener, server).await;
    });
    Ok(())
}

/// Binds a listener the way `tokio::net::TcpListener::bind` does (`SO_REUSEADDR`, each address
/// in turn), before the runtime and the lockdown exist. A current-thread runtime, which starts
/// no thread, lends tokio its I/O driver for the moment.
fn bind(addrs: &[SocketAddr]) -> anyhow::Result<std::net::TcpListener> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    let listener = runtime.block_on(async { TcpListener::bind(addrs).await?.into_std() })?;
    Ok(listener)
}

async fn accept_loop(listener: TcpListener, server: Arc<Server>) {
    let mut backoff = Backoff::new(Duration::from_millis(5), Duration::from_secs(1));
    let mut accept_failed = RateLimited::new(Duration::from_secs(1));
    let mut too_many = RateLimited::new(Duration::from_secs(1));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => {
                backoff.reset();
                accepted
            }
            Err(e) => {
                // EMFILE and the like fail again at once: wait, and say so once a second.
                let delay = backoff.next();
                if let Some(suppressed) = accept_failed.allow(Instant::now()) {
                    tracing::warn!(
                        "accept failed: {e}; retrying in {delay:?}{}",
                        suppressed_note(suppressed)
                    );
                }
                tokio::time::sleep(delay).await;
                continue;
            }
        };
        let Ok(handshake) = server.handshakes.clone().try_acquire_owned() else {
            if let Some(suppressed) = too_many.allow(Instant::now()) {
                tracing::warn!(
                    %peer,
                    "closing a connection: {MAX_PENDING_HANDSHAKES} handshakes already pending{}",
                    suppressed_note(suppressed)
                );
            }
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(connection(server.clone(), stream, peer, handshake));
    }
}

fn ws_config(max_message_bytes: usize) -> WebSocketConfig {
    // Frames a little over the limit still arrive whole, so the runner can refuse them with an
    // answer; larger ones end the session with 1009.
    let cap = max_message_bytes.saturating_add(PEEK_BYTES);
    WebSocketConfig::default()
        .max_message_size(Some(cap))
        .max_frame_size(Some(cap))
}

// The handshake callback's error type is tungstenite's (an HTTP response).
#[allow(clippy::result_large_err)]
async fn connection(
    server: Arc<Server>,
    stream: TcpStream,
    peer: SocketAddr,
    handshake: OwnedSemaphorePermit,
) {
    let options = &server.options;
    let auth = options.auth.clone();
    let upgrade = tokio_tungstenite::accept_hdr_async_with_config(
        stream,
        move |request: &_, response| auth.check(request, response),
        Some(ws_config(options.max_message_bytes)),
    );
    let ws = match tokio::time::timeout(options.handshake_timeout, upgrade).await {
        Ok(Ok(ws)) => ws,
        Ok(Err(e)) => {
            tracing::debug!(%peer, "handshake failed: {e}");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "handshake timed out");
            return;
        }
    };
    drop(handshake);
    let Ok(slot) = server.sessions.clone().try_acquire_owned() else {
        tracing::warn!(%peer, "refusing a session: --max-sessions reached");
        refuse(ws).await;
        return;
    };
    let child = match server.warm.take().await {
        Ok(child) => child,
        Err(e) => {
            tracing::error!(%peer, "cannot serve a session: {e}");
            let mut ws = ws;
            let frame = CloseFrame {
                code: CloseCode::Error,
                reason: "cannot start a runner process".into(),
            };
            let _ = tokio::time::timeout(Duration::from_secs(1), ws.close(Some(frame))).await;
            return;
        }
    };
    let limits = relay::Limits {
        max_message_bytes: options.max_message_bytes,
        idle_timeout: options.idle_timeout,
    };
    relay::serve(ws, child, limits).await;
    // Released only now that the session's runner process is reaped.
    drop(slot);
}

async fn refuse(mut ws: relay::Ws) {
    let frame = CloseFrame {
        code: CloseCode::Again,
        reason: "runner at --max-sessions".into(),
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = ws
            .send(tokio_tungstenite::tungstenite::Message::Close(Some(frame)))
            .await;
        let _ = ws.close(None).await;
    })
    .await;
}
