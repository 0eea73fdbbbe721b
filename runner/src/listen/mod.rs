//! `--listen`: a small supervisor that serves each WebSocket session with its own locked-down
//! stdio runner process.
//!
//! The supervisor runs no guest code. It accepts connections, checks the upgrade request
//! (`Auth`), and relays each session to a runner process started ahead of demand
//! ([`ChildCommand`], `WARM_CHILDREN`): `execbox-runner` in stdio mode, which locks itself
//! down and ends itself (exit status 3) when an execution is stuck in a native call. A guest
//! can therefore hold a CPU or a `--max-sessions` slot no longer than its `timeoutMs` plus the
//! watchdog's grace: the slot is released only once the session's process is reaped.
//! What bounds what:
//! - `--max-sessions`: sessions served at once (more are closed with 1013 after the upgrade);
//! - `MAX_PENDING_HANDSHAKES` and `--handshake-timeout-ms`: connections not yet upgraded; a
//!   new one evicts the oldest still reading its request head (`execbox_http::ConnectionSlots`,
//!   the front door's own), so the health
//!   probes are answered whatever a flood of slow connections does;
//! - `--idle-timeout-ms`: a session with no execution in flight and no frame from its client;
//! - `outbound_bound`: runner output waiting for a client that does not read (1008);
//! - `--max-message-bytes` + 4 KiB: one frame from the client (1009);
//! - `--max-memory-limit-bytes`, `--max-timeout-ms`, `--max-log-lines`, `--max-log-chars`:
//!   what one execution may ask for, enforced by each session's runner process;
//! - accept errors (EMFILE...) back off from 5 ms to 1 s, with one warning per second at most.
//!
//! The same port answers plain `GET /livez`, `/readyz` and `/metrics` (`http.rs`, `metrics.rs`),
//! without a token: the supervisor reads each request head itself, and hands upgrade requests
//! to tungstenite with the bytes already read replayed. SIGTERM (or SIGINT) drains: `/readyz`
//! and new upgrades answer 503, sessions run on until nothing is in flight, and after
//! `--drain-timeout` their executions are cancelled; a second signal ends at once.

mod auth;
mod backoff;
pub(crate) mod child;
mod http;
mod metrics;
mod relay;

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use execbox_http::{Busy, ConnectionSlots, Slot};
use execbox_protocol::PEEK_BYTES;
use futures_util::SinkExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::{watch, Notify, Semaphore};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};

pub(crate) use auth::Auth;
pub use auth::{load_token, TokenError};
pub(crate) use child::ChildCommand;

use crate::ceilings::Ceilings;
use crate::lockdown::Lockdown;
use backoff::{suppressed_note, Backoff, RateLimited};
use child::{Spawner, Warm};
use metrics::{Metrics, Rejection};

/// At most this many connections may be in their WebSocket handshake at once (fewer when the
/// open-files limit is low: `handshake_cap`). A new one evicts the oldest still reading its
/// request head; when all of them have read theirs (they are upgrading), a new one is closed
/// as soon as it is accepted. With `--handshake-timeout-ms`, this bounds what a flood of raw
/// connections can hold, and a probe that sends its head at once is still read.
pub(crate) const MAX_PENDING_HANDSHAKES: usize = 64;

/// How a listening runner serves sessions.
#[derive(Debug, Clone)]
pub(crate) struct ListenOptions {
    /// `--max-sessions`: sessions served at once.
    pub(crate) max_sessions: usize,
    /// `--max-message-bytes`: passed to each runner process; frames over it + 4 KiB are closed
    /// with 1009.
    pub(crate) max_message_bytes: usize,
    /// `--max-pending-tool-calls`: passed to each runner process.
    pub(crate) max_pending_tool_calls: u32,
    /// `--max-timeout-ms`, `--max-memory-limit-bytes`, `--max-log-lines`, `--max-log-chars`:
    /// passed to each runner process, which refuses an `execute` asking for more.
    pub(crate) ceilings: Ceilings,
    /// `--handshake-timeout-ms`: how long a connection may take to complete its upgrade.
    pub(crate) handshake_timeout: Duration,
    /// `--idle-timeout-ms`: how long a session may stay with no execution in flight and no
    /// frame from its client.
    pub(crate) idle_timeout: Duration,
    /// Who may open a session.
    pub(crate) auth: Auth,
    /// `--insecure-no-auth`: serve a non-loopback address without a token.
    pub(crate) insecure_no_auth: bool,
    /// `--insecure-no-sandbox`: neither the supervisor nor its runner processes lock down.
    pub(crate) insecure_no_sandbox: bool,
    /// `--drain-timeout`: after SIGTERM, how long sessions may run on before their
    /// executions are cancelled.
    pub(crate) drain_timeout: Duration,
}

/// Where the supervisor is in its life; sessions watch it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Accepting sessions.
    Serving,
    /// SIGTERM: no new session; each one closes once it has nothing in flight.
    Draining,
    /// The drain timeout passed: executions in flight are cancelled, then sessions close.
    Cancelling,
}

struct Server {
    options: ListenOptions,
    sessions: Arc<Semaphore>,
    handshakes: ConnectionSlots,
    warm: Warm,
    metrics: Arc<Metrics>,
    phase: watch::Receiver<Phase>,
}

impl Server {
    fn draining(&self) -> bool {
        *self.phase.borrow() != Phase::Serving
    }

    /// Sessions being served (slots taken).
    fn active(&self) -> usize {
        self.options.max_sessions.max(1) - self.sessions.available_permits()
    }
}

/// SIGTERM and SIGINT, registered before the lockdown (tokio's signal pipe is made then).
struct Signals {
    term: Signal,
    int: Signal,
}

impl Signals {
    fn new() -> std::io::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

/// Accepts connections on `addr` until the process ends, serving each session with a runner
/// process started from `child`. Calls `on_bound` with the bound address (port 0 picks a free
/// port) once listening and, with [`Lockdown::Enforce`], locked down
/// ([`crate::lockdown::Mode::Supervisor`]).
///
/// The order is what the lockdown needs: resolve and bind (Landlock forbids binding later),
/// Landlock on this thread, then build the runtime (its threads inherit Landlock), then the
/// rlimits and seccomp on all threads, and only then start runner processes and accept
/// connections.
pub(crate) fn serve(
    addr: &str,
    options: ListenOptions,
    child: ChildCommand,
    lockdown: Lockdown,
    on_bound: impl FnOnce(SocketAddr),
) -> anyhow::Result<()> {
    if lockdown == Lockdown::Enforce {
        crate::lockdown::close_inherited_fds();
    }
    let addrs: Vec<SocketAddr> = addr.to_socket_addrs()?.collect();
    options
        .auth
        .check_exposure(&addrs, options.insecure_no_auth)?;
    let max_handshakes = handshake_cap(options.max_sessions, lockdown == Lockdown::Enforce);
    let listener = bind(&addrs)?;
    let pending = lockdown.begin_supervisor(options.max_sessions, child.program())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let (listener, mut signals) = {
        let _entered = runtime.enter();
        (TcpListener::from_std(listener)?, Signals::new()?)
    };
    let bound = listener.local_addr()?;
    if let Some(pending) = pending {
        pending.finish()?;
    }
    let outcome = runtime.block_on(async move {
        let metrics = Arc::new(Metrics::new(Default::default()));
        let spawner = Spawner::new(
            child,
            options.max_message_bytes,
            options.max_pending_tool_calls,
            options.ceilings,
            options.insecure_no_sandbox,
            metrics.pids(),
        );
        let (phase_tx, phase) = watch::channel(Phase::Serving);
        let drain_timeout = options.drain_timeout;
        let server = Arc::new(Server {
            sessions: Arc::new(Semaphore::new(options.max_sessions.max(1))),
            handshakes: ConnectionSlots::new(max_handshakes),
            warm: Warm::start(Arc::new(spawner)),
            metrics,
            phase,
            options,
        });
        on_bound(bound);
        // Accepting goes on while draining: health checks, and 503 for upgrades.
        tokio::spawn(accept_loop(listener, server.clone()));
        let first = signals.next().await;
        drain(&server, &phase_tx, &mut signals, first, drain_timeout).await
    });
    // Dropping the runtime drops every task, and with them the runner processes (killed).
    runtime.shutdown_timeout(Duration::from_secs(1));
    outcome
}

/// How many connections may be in their handshake at once: [`MAX_PENDING_HANDSHAKES`], or
/// fewer when the process may open fewer files than that needs
/// ([`execbox_http::connection_cap`]). Raises the soft open-files limit to the hard one first
/// ([`execbox_http::raise_open_files_limit`]): this must come before the lockdown, whose
/// seccomp filter forbids `setrlimit` and whose rlimits then set both limits to what the
/// supervisor needs ([`crate::lockdown::Mode::max_open_files`], never above the hard limit),
/// which is what the handshakes are sized by when `locked_down`.
fn handshake_cap(max_sessions: usize, locked_down: bool) -> usize {
    if let Err(e) = execbox_http::raise_open_files_limit() {
        tracing::warn!("cannot raise the open-files limit to its hard limit: {e}");
    }
    let mut open_files = execbox_http::open_files_limit();
    if locked_down {
        let supervisor = crate::lockdown::Mode::Supervisor { max_sessions }.max_open_files();
        open_files = Some(open_files.map_or(supervisor, |now| now.min(supervisor)));
    }
    let cap = execbox_http::connection_cap(MAX_PENDING_HANDSHAKES, open_files);
    if cap < MAX_PENDING_HANDSHAKES {
        tracing::warn!(
            "taking at most {cap} connections in their handshake at once: the process may \
             open only {} files (raise `ulimit -n` to take more)",
            open_files.unwrap_or_default()
        );
    }
    cap
}

/// Drains after the first signal: waits for the sessions to end, cancels what is in flight at
/// `drain_timeout`, and returns once no session is left; an error on a second signal.
async fn drain(
    server: &Server,
    phase: &watch::Sender<Phase>,
    signals: &mut Signals,
    first: &str,
    drain_timeout: Duration,
) -> anyhow::Result<()> {
    tracing::info!(
        sessions = server.active(),
        "{first}: draining (up to {} ms before executions are cancelled)",
        drain_timeout.as_millis()
    );
    let _ = phase.send(Phase::Draining);
    let deadline = tokio::time::Instant::now() + drain_timeout;
    let mut cancelling = false;
    loop {
        if server.active() == 0 {
            tracing::info!("drained: no session left; exiting");
            return Ok(());
        }
        tokio::select! {
            second = signals.next() => {
                tracing::warn!(sessions = server.active(), "{second} while draining: stopping now, killing the runner processes");
                anyhow::bail!("stopped by a second signal ({second}) while draining");
            }
            () = tokio::time::sleep_until(deadline), if !cancelling => {
                cancelling = true;
                tracing::info!(sessions = server.active(), "drain timeout: cancelling the executions in flight");
                let _ = phase.send(Phase::Cancelling);
            }
            () = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
    }
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
        let evicted = Arc::new(Notify::new());
        let evict = evicted.clone();
        let handshake = match server
            .handshakes
            .admit(Box::new(move || evict.notify_one()))
        {
            Ok(slot) => {
                if slot.made_room() {
                    server.metrics.rejected(Rejection::TooManyHandshakes);
                    if let Some(suppressed) = too_many.allow(Instant::now()) {
                        tracing::warn!(
                            newer = %peer,
                            "{} handshakes pending: closing the oldest connection still \
                             sending its request head{}",
                            server.handshakes.max(),
                            suppressed_note(suppressed)
                        );
                    }
                }
                Handshake {
                    slot,
                    evicted,
                    head_read: None,
                }
            }
            Err(_full) => {
                server.metrics.rejected(Rejection::TooManyHandshakes);
                if let Some(suppressed) = too_many.allow(Instant::now()) {
                    tracing::warn!(
                        %peer,
                        "closing a connection: {} handshakes already pending, all past their \
                         request head{}",
                        server.handshakes.max(),
                        suppressed_note(suppressed)
                    );
                }
                drop(stream);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(connection(server.clone(), stream, peer, handshake));
    }
}

/// A connection's place among the pending handshakes ([`ConnectionSlots`], the front door's:
/// the oldest connection still reading its head makes room for a new one).
struct Handshake {
    slot: Slot,
    /// Notified when a newer connection evicts this one.
    evicted: Arc<Notify>,
    /// Held once the head is read: the connection is upgrading and no longer evicted.
    head_read: Option<Busy>,
}

fn ws_config(max_message_bytes: usize) -> WebSocketConfig {
    // Frames a little over the limit still arrive whole, so the runner can refuse them with an
    // answer; larger ones end the session with 1009.
    let cap = max_message_bytes.saturating_add(PEEK_BYTES);
    WebSocketConfig::default()
        .max_message_size(Some(cap))
        .max_frame_size(Some(cap))
}

/// Serves one connection: a health or metrics request, or an upgrade and then its session.
async fn connection(
    server: Arc<Server>,
    mut stream: TcpStream,
    peer: SocketAddr,
    mut handshake: Handshake,
) {
    let options = &server.options;
    let deadline = tokio::time::Instant::now() + options.handshake_timeout;
    let head = tokio::select! {
        head = tokio::time::timeout_at(deadline, http::read_head(&mut stream)) => head,
        () = handshake.evicted.notified() => {
            tracing::debug!(%peer, "closing a connection still sending its request head: evicted by a newer one");
            return;
        }
    };
    // Evicted just as its whole head arrived: it is served all the same, a moment past the
    // bound, since what is left (an answer or the upgrade) takes no waiting on it. From now on
    // it is never evicted.
    handshake.head_read = Some(handshake.slot.busy());
    let head = match head {
        Ok(Ok((http::Request::Upgrade, head))) => head,
        Ok(Ok((http::Request::Plain { method, path }, _))) => {
            drop(handshake);
            return plain(&server, &mut stream, &method, &path).await;
        }
        Ok(Err(e)) => {
            server.metrics.rejected(Rejection::HandshakeFailed);
            match e {
                http::HeadError::TooLarge => {
                    http::respond(
                        &mut stream,
                        431,
                        "text/plain",
                        "request head too large\n",
                        false,
                    )
                    .await;
                }
                http::HeadError::Malformed => {
                    http::respond(&mut stream, 400, "text/plain", "bad request\n", false).await;
                }
                http::HeadError::Io(e) => {
                    tracing::debug!(%peer, "connection ended before a whole request: {e}");
                }
            }
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "handshake timed out");
            server.metrics.rejected(Rejection::HandshakeTimeout);
            return;
        }
    };
    if server.draining() {
        tracing::debug!(%peer, "refusing an upgrade: draining");
        server.metrics.rejected(Rejection::Draining);
        http::respond(&mut stream, 503, "text/plain", "runner draining\n", false).await;
        return;
    }
    let Some(ws) = upgrade(&server, http::Replay::new(head, stream), peer, deadline).await else {
        return;
    };
    drop(handshake);
    let Ok(slot) = server.sessions.clone().try_acquire_owned() else {
        tracing::warn!(%peer, "refusing a session: --max-sessions reached");
        server.metrics.rejected(Rejection::Full);
        refuse(ws).await;
        return;
    };
    let child = match server.warm.take().await {
        Ok(child) => child,
        Err(e) => {
            tracing::error!(%peer, "cannot serve a session: {e}");
            server.metrics.rejected(Rejection::NoRunner);
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
    let context = relay::Context {
        peer,
        metrics: server.metrics.clone(),
        phase: server.phase.clone(),
    };
    server.metrics.session_started();
    relay::serve(ws, child, limits, context).await;
    server.metrics.session_ended();
    // Released only now that the session's runner process is reaped.
    drop(slot);
}

/// The WebSocket upgrade, with the auth checks, by `deadline`; `None` when refused or failed.
// The handshake callback's error type is tungstenite's (an HTTP response).
#[allow(clippy::result_large_err)]
async fn upgrade(
    server: &Arc<Server>,
    stream: http::Replay,
    peer: SocketAddr,
    deadline: tokio::time::Instant,
) -> Option<relay::Ws> {
    let auth = server.options.auth.clone();
    let metrics = server.metrics.clone();
    let upgrade = tokio_tungstenite::accept_hdr_async_with_config(
        stream,
        move |request: &_, response| {
            let checked = auth.check(request, response);
            if let Err(refused) = &checked {
                metrics.rejected(match refused.status().as_u16() {
                    401 => Rejection::Unauthorized,
                    403 => Rejection::Origin,
                    _ => Rejection::HandshakeFailed,
                });
            }
            checked
        },
        Some(ws_config(server.options.max_message_bytes)),
    );
    match tokio::time::timeout_at(deadline, upgrade).await {
        Ok(Ok(ws)) => Some(ws),
        Ok(Err(e)) => {
            tracing::debug!(%peer, "handshake failed: {e}");
            None
        }
        Err(_) => {
            tracing::debug!(%peer, "handshake timed out");
            server.metrics.rejected(Rejection::HandshakeTimeout);
            None
        }
    }
}

/// `GET /livez`, `/readyz` and `/metrics`; 404 for any other path, 405 for other methods.
async fn plain(server: &Server, stream: &mut TcpStream, method: &str, path: &str) {
    let head_only = method == "HEAD";
    if method != "GET" && !head_only {
        return http::respond(stream, 405, "text/plain", "method not allowed\n", false).await;
    }
    match path {
        "/livez" => http::respond(stream, 200, "text/plain", "ok\n", head_only).await,
        "/readyz" => {
            if server.draining() {
                http::respond(stream, 503, "text/plain", "draining\n", head_only).await;
            } else if server.sessions.available_permits() == 0 {
                http::respond(stream, 503, "text/plain", "full\n", head_only).await;
            } else {
                http::respond(stream, 200, "text/plain", "ready\n", head_only).await;
            }
        }
        "/metrics" => {
            let body = server.metrics.encode();
            http::respond(stream, 200, metrics::CONTENT_TYPE, &body, head_only).await;
        }
        _ => http::respond(stream, 404, "text/plain", "not found\n", head_only).await,
    }
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
