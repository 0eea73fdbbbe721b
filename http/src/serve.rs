//! The connection loop of the door: at most so many connections, never more than the process
//! can open ([`connection_cap`]), the oldest idle one making room for a newcomer (see
//! [`ConnectionSlots`]), long requests kept off the slots short ones need ([`long_requests`]),
//! a request head within its time (which is also the idle time of a kept-alive connection),
//! upgrades allowed, and a prompt, bounded shutdown.
//!
//! [`long_requests`]: crate::long_requests

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::Service;

use crate::descriptors::{connection_cap, open_files_limit};
use crate::guarded::Guarded;
use crate::long::{LongRequests, DEFAULT_MAX_LONG_REQUESTS_PER_CALLER};
use crate::slots::{Busy, ConnectionSlots, Slot};

/// The default [`ServeOptions::header_timeout`]: 10 s.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// The default [`ServeOptions::max_connections`]: 512, well under the usual 1,024 file
/// descriptors of a process (and never more than [`connection_cap`] allows).
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;

/// The largest request head read (a longer one gets `431`); also the connection's read
/// buffer, which bodies stream through.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// How [`serve`] treats connections.
#[derive(Clone, Copy, Debug)]
pub struct ServeOptions {
    /// A request head must be complete this long after the connection opened or the previous
    /// response was sent; otherwise the connection is closed (a half-sent head, or an idle
    /// kept-alive connection, holds nothing longer). Default [`DEFAULT_HEADER_TIMEOUT`].
    pub header_timeout: Duration,
    /// At most this many connections are open at once, so the process keeps descriptors to
    /// answer with; fewer when the open-files limit is lower ([`connection_cap`] of the soft
    /// `RLIMIT_NOFILE` when [`serve`] starts: raise it first with
    /// [`raise_open_files_limit`](crate::raise_open_files_limit)). One more evicts the
    /// connection that has waited longest without a request in progress (a half-sent head
    /// first, else an idle keep-alive); when every connection carries a request, the newcomer
    /// is closed as soon as it is accepted (and logged). Default [`DEFAULT_MAX_CONNECTIONS`].
    pub max_connections: usize,
    /// At most this many long requests (routes marked with
    /// [`long_requests`](crate::long_requests): event streams, long polls) of one caller at
    /// once; and whatever the callers, long requests never hold the last quarter of the
    /// connections, kept for short requests. Past either, `429 TOO_MANY_REQUESTS`. Default
    /// [`DEFAULT_MAX_LONG_REQUESTS_PER_CALLER`].
    pub max_long_requests_per_caller: usize,
    /// On shutdown, connections get this long to finish their requests before they are
    /// dropped (long polls and event streams end then). Default 1 s.
    pub shutdown_grace: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_long_requests_per_caller: DEFAULT_MAX_LONG_REQUESTS_PER_CALLER,
            shutdown_grace: Duration::from_secs(1),
        }
    }
}

/// Serves `router` (put behind a [`FrontDoor`](crate::FrontDoor)) on `listener` until
/// `shutdown` is cancelled; see [`ServeOptions`].
pub async fn serve(
    listener: TcpListener,
    router: Router,
    options: ServeOptions,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let open_files = open_files_limit();
    let max_connections = connection_cap(options.max_connections, open_files);
    if max_connections < options.max_connections {
        tracing::warn!(
            asked = options.max_connections,
            open_files = open_files.unwrap_or_default(),
            "taking at most {max_connections} connections at once: the process may open only \
             {} files, and keeps the rest for its own (raise `ulimit -n` to take more)",
            open_files.unwrap_or_default()
        );
    }
    let slots = ConnectionSlots::new(max_connections);
    let long = LongRequests::new(options.max_long_requests_per_caller, max_connections);
    tracing::debug!(
        max_connections,
        long_requests = long.total(),
        "serving connections"
    );
    let connections = TaskTracker::new();
    let mut refused_logged = false;
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors or a connection reset before accept: wait a little, go on.
                tracing::warn!("accepting a connection failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let evicted = CancellationToken::new();
        let evict = evicted.clone();
        let slot = match slots.admit(Box::new(move || evict.cancel())) {
            Ok(slot) => Arc::new(slot),
            Err(full) => {
                if !refused_logged {
                    tracing::warn!(
                        max = full.max,
                        "every connection carries a request; closing new ones until some end"
                    );
                    refused_logged = true;
                }
                drop(stream);
                continue;
            }
        };
        refused_logged = false;
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(Requests {
            router: router.clone(),
            slot: slot.clone(),
            long: long.clone(),
        });
        let shutdown = shutdown.clone();
        let header_timeout = options.header_timeout;
        connections.spawn(async move {
            let _slot = slot;
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .max_buf_size(MAX_HEAD_BYTES)
                .keep_alive(true);
            let connection = builder
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            tokio::pin!(connection);
            let ended = tokio::select! {
                ended = connection.as_mut() => ended,
                () = evicted.cancelled() => {
                    tracing::debug!(%peer, "closing an idle connection to make room for a new one");
                    return;
                }
                () = shutdown.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(e) = ended {
                tracing::debug!(%peer, "connection ended: {e}");
            }
        });
    }
    connections.close();
    if tokio::time::timeout(options.shutdown_grace, connections.wait())
        .await
        .is_err()
    {
        tracing::debug!("connections still open after the shutdown grace; dropping them");
    }
    Ok(())
}

/// The router, for one connection: every request marks the connection busy (never evicted)
/// until its response body has been sent or dropped, and carries the server's long requests.
#[derive(Clone)]
struct Requests {
    router: Router,
    slot: Arc<Slot>,
    long: LongRequests,
}

impl Service<hyper::Request<Incoming>> for Requests {
    type Response = hyper::Response<Body>;
    type Error = Infallible;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: hyper::Request<Incoming>) -> Self::Future {
        let busy: Busy = self.slot.busy();
        request.extensions_mut().insert(self.long.clone());
        let mut router = self.router.clone();
        Box::pin(async move {
            let response = router.call(request).await?;
            Ok(response.map(|body| Body::new(Guarded::new(body, busy))))
        })
    }
}
