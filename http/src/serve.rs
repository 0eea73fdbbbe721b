//! The connection loop of the door: at most so many connections, a request head within its
//! time (which is also the idle time of a kept-alive connection), upgrades allowed, and a
//! prompt, bounded shutdown.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The default [`ServeOptions::header_timeout`]: 10 s.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// The default [`ServeOptions::max_connections`]: 512, well under the usual 1,024 file
/// descriptors of a process.
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
    /// At most this many connections are open at once; one more is closed as soon as it is
    /// accepted (and logged), so the process keeps descriptors to answer with. Default
    /// [`DEFAULT_MAX_CONNECTIONS`].
    pub max_connections: usize,
    /// On shutdown, connections get this long to finish their requests before they are
    /// dropped (long polls and event streams end then). Default 1 s.
    pub shutdown_grace: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
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
    let slots = Arc::new(Semaphore::new(options.max_connections.max(1)));
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
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            if !refused_logged {
                tracing::warn!(
                    max = options.max_connections,
                    "too many open connections; closing new ones until some end"
                );
                refused_logged = true;
            }
            drop(stream);
            continue;
        };
        refused_logged = false;
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
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
