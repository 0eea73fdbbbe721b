//! [`Pg`]: the bounded pool, on a runtime of its own, that every PostgreSQL store shares.

use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use tokio_postgres::error::SqlState;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::error::describe;
use super::{PgError, PgUrl};

/// The default of [`PoolOptions::call_timeout`]: once it has a connection, a call (all its
/// statements) gets an answer from the database within 5 s or gives up.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a connection may sit idle before TCP keepalive probes start (then one every
/// [`KEEPALIVE_INTERVAL`], [`KEEPALIVE_RETRIES`] times): a peer that vanished (a partition, a
/// host lost) is noticed on an idle connection within about 25 s.
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
/// The pause between two TCP keepalive probes.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// How many unanswered keepalive probes close a connection.
pub const KEEPALIVE_RETRIES: u32 = 3;
/// `TCP_USER_TIMEOUT`: data sent and not acknowledged for this long closes the connection
/// (a partition that drops packets while a statement is on its way).
pub const TCP_USER_TIMEOUT: Duration = Duration::from_secs(15);

/// How long a migration may take (its statements are still bounded by `statement_timeout`).
pub(crate) const MIGRATION_TIMEOUT: Duration = Duration::from_secs(60);

/// The bounds of a [`Pg`]'s pool.
///
/// Every wait is bounded on this side of the wire, whatever the server does (a stalled server,
/// `SIGSTOP`ped or cut off by a partition that drops packets, enforces nothing, not even its
/// own `statement_timeout`): the checkout by `connect_timeout`, then the call by
/// `call_timeout`. A connection whose call ran out of time is closed, never pooled again.
#[derive(Debug, Clone, Copy)]
pub struct PoolOptions {
    /// The most connections open at once (a call waits for a free one).
    pub max_size: usize,
    /// How long a call waits for a connection (to open one, or for a busy one to be free).
    pub connect_timeout: Duration,
    /// The server cancels a statement that runs longer (`statement_timeout`, and
    /// `lock_timeout`): enforced by the server, so not when it is the thing that stalled.
    pub statement_timeout: Duration,
    /// Once a call has its connection, how long its statements may take together before it
    /// fails as [`PgError::Unavailable`], enforced by this process (default
    /// [`DEFAULT_CALL_TIMEOUT`]). Migrations get 60 s.
    pub call_timeout: Duration,
}

impl Default for PoolOptions {
    /// 16 connections, 5 s to get one, 10 s per statement (server side), 5 s per call
    /// (client side).
    fn default() -> PoolOptions {
        PoolOptions {
            max_size: 16,
            connect_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(10),
            call_timeout: DEFAULT_CALL_TIMEOUT,
        }
    }
}

/// The connection [`Pg::run`] lends: a pooled `tokio_postgres::Client` (with
/// `prepare_cached`, `transaction`, ...). It goes back to the pool when dropped, unless its
/// call ran out of time: then it is closed, so no later call inherits a connection still
/// waiting for a stalled server.
pub struct Client {
    object: Option<deadpool_postgres::Object>,
    broken: Arc<AtomicBool>,
}

impl Deref for Client {
    type Target = deadpool_postgres::Object;
    fn deref(&self) -> &deadpool_postgres::Object {
        self.object
            .as_ref()
            .expect("a client's connection is there until it drops")
    }
}

impl DerefMut for Client {
    fn deref_mut(&mut self) -> &mut deadpool_postgres::Object {
        self.object
            .as_mut()
            .expect("a client's connection is there until it drops")
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if let Some(object) = self.object.take() {
            if self.broken.load(Ordering::Acquire) {
                // Out of the pool, and dropping the wrapper ends its connection's task.
                drop(deadpool_postgres::Object::take(object));
            }
        }
    }
}

/// A PostgreSQL database: a bounded pool of connections and the runtime that drives them.
/// Cheap to clone; the clones share the pool.
#[derive(Clone)]
pub struct Pg {
    inner: Arc<Inner>,
}

struct Inner {
    url: PgUrl,
    /// The URL's configuration with the pool's keepalives and timeouts.
    config: tokio_postgres::Config,
    pool: Pool,
    tls: MakeRustlsConnect,
    options: PoolOptions,
    handle: tokio::runtime::Handle,
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Not `Runtime::drop`, which panics when the last clone goes away on an async thread.
        if let Some(runtime) = self
            .runtime
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            runtime.shutdown_background();
        }
    }
}

impl std::fmt::Debug for Pg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pg({})", self.inner.url)
    }
}

impl Pg {
    /// A pool for `url`. Opens no connection yet: the first call does (see [`Pg::check`]).
    pub fn new(url: &PgUrl, options: PoolOptions) -> Result<Pg, PgError> {
        let unusable = |reason: String| PgError::Url {
            url: url.to_string(),
            reason,
        };
        let tls = tls(url).map_err(unusable)?;
        let mut config = url.config().clone();
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(options.connect_timeout);
        }
        config.keepalives(true);
        if config.get_keepalives_idle() == Duration::from_secs(2 * 60 * 60) {
            // tokio-postgres's default: the URL did not set `keepalives_idle`.
            config.keepalives_idle(KEEPALIVE_IDLE);
        }
        if config.get_keepalives_interval().is_none() {
            config.keepalives_interval(KEEPALIVE_INTERVAL);
        }
        if config.get_keepalives_retries().is_none() {
            config.keepalives_retries(KEEPALIVE_RETRIES);
        }
        if config.get_tcp_user_timeout().is_none() {
            config.tcp_user_timeout(TCP_USER_TIMEOUT);
        }
        let statement_ms = options.statement_timeout.as_millis();
        let extra = format!("-c statement_timeout={statement_ms} -c lock_timeout={statement_ms}");
        let merged = match config.get_options() {
            Some(given) if !given.is_empty() => format!("{given} {extra}"),
            _ => extra,
        };
        config.options(&merged);
        let manager = Manager::from_config(
            config.clone(),
            tls.clone(),
            ManagerConfig {
                // A connection whose socket closed is dropped and replaced on its next use.
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.max_size.max(1))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(options.connect_timeout))
            .create_timeout(Some(options.connect_timeout))
            .recycle_timeout(Some(options.connect_timeout))
            .build()
            .map_err(|e| unusable(e.to_string()))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("execbox-pg")
            .enable_all()
            .build()
            .map_err(|e| unusable(format!("cannot start its threads: {e}")))?;
        Ok(Pg {
            inner: Arc::new(Inner {
                url: url.clone(),
                config,
                pool,
                tls,
                options,
                handle: runtime.handle().clone(),
                runtime: Mutex::new(Some(runtime)),
            }),
        })
    }

    /// The database's URL (password hidden when shown).
    pub fn url(&self) -> &PgUrl {
        &self.inner.url
    }

    /// The pool's bounds.
    pub fn options(&self) -> PoolOptions {
        self.inner.options
    }

    /// How many connections the pool holds now (in use or idle).
    pub fn connections(&self) -> usize {
        self.inner.pool.status().size
    }

    /// Runs `task` on the pool's runtime (a store's background work: heartbeats, listeners),
    /// whatever runtime, if any, the caller is on.
    pub fn spawn<F>(&self, task: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.inner.handle.spawn(task)
    }

    pub(crate) fn handle(&self) -> &tokio::runtime::Handle {
        &self.inner.handle
    }

    pub(crate) fn tls(&self) -> MakeRustlsConnect {
        self.inner.tls.clone()
    }

    /// The configuration connections are made with (the URL's, with keepalives and timeouts).
    pub(crate) fn config(&self) -> &tokio_postgres::Config {
        &self.inner.config
    }

    /// Connects once and runs `SELECT 1`: an error here names the database and what to check.
    pub fn check(&self) -> Result<(), PgError> {
        self.block(|client| async move { client.simple_query("SELECT 1").await.map(|_| ()) })
    }

    /// Runs `f` with a pooled connection on the pool's runtime, from async code on any runtime.
    /// The driver's errors become [`PgError`]s naming the database; a call that gets no
    /// connection within `connect_timeout`, or no answer within `call_timeout` after, is
    /// [`PgError::Unavailable`], and its connection is closed.
    pub async fn run<T, F, Fut>(&self, f: F) -> Result<T, PgError>
    where
        F: FnOnce(Client) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, tokio_postgres::Error>> + Send + 'static,
        T: Send + 'static,
    {
        let inner = self.inner.clone();
        let deadline = self.inner.options.call_timeout;
        let task = self
            .inner
            .handle
            .spawn(async move { inner.call(deadline, f).await });
        match task.await {
            Ok(result) => result,
            Err(e) => Err(self.unavailable(format!("its connection task ended: {e}"))),
        }
    }

    /// [`Pg::run`] for sync code: blocks the calling thread until `f` is done. Any thread may
    /// call it (a blocking thread, a plain thread, briefly an async worker) except the pool's
    /// own threads.
    pub fn block<T, F, Fut>(&self, f: F) -> Result<T, PgError>
    where
        F: FnOnce(Client) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, tokio_postgres::Error>> + Send + 'static,
        T: Send + 'static,
    {
        self.block_within(self.inner.options.call_timeout, f)
    }

    /// [`Pg::block`] with a call deadline of its own (migrations).
    pub(crate) fn block_within<T, F, Fut>(&self, deadline: Duration, f: F) -> Result<T, PgError>
    where
        F: FnOnce(Client) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, tokio_postgres::Error>> + Send + 'static,
        T: Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let inner = self.inner.clone();
        self.inner.handle.spawn(async move {
            let _ = tx.send(inner.call(deadline, f).await);
        });
        rx.recv()
            .unwrap_or_else(|_| Err(self.unavailable("its connection task ended".into())))
    }

    /// A driver error as a [`PgError`] naming this database.
    pub fn error(&self, e: &tokio_postgres::Error) -> PgError {
        self.inner.error(e)
    }

    fn unavailable(&self, reason: String) -> PgError {
        PgError::Unavailable {
            url: self.inner.url.to_string(),
            reason,
        }
    }
}

impl Inner {
    /// A connection from the pool (within `connect_timeout`), then `f` with it within
    /// `deadline`; past it, `f` is dropped and its connection closed.
    async fn call<T, F, Fut>(&self, deadline: Duration, f: F) -> Result<T, PgError>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let object = self.pool.get().await.map_err(|e| PgError::Unavailable {
            url: self.url.to_string(),
            reason: pool_error(&e),
        })?;
        let broken = Arc::new(AtomicBool::new(false));
        let work = Box::pin(f(Client {
            object: Some(object),
            broken: broken.clone(),
        }));
        let mut work = work;
        match tokio::time::timeout(deadline, &mut work).await {
            Ok(result) => result.map_err(|e| self.error(&e)),
            Err(_) => {
                // Marked before the work (and the client it holds) is dropped.
                broken.store(true, Ordering::Release);
                drop(work);
                Err(PgError::Unavailable {
                    url: self.url.to_string(),
                    reason: format!(
                        "no answer within {deadline:?} (the database is stalled, overloaded or cut off); its connection was closed"
                    ),
                })
            }
        }
    }

    fn error(&self, e: &tokio_postgres::Error) -> PgError {
        let url = self.url.to_string();
        let reason = describe(e);
        let lost = e.is_closed()
            || matches!(
                e.code(),
                Some(c) if *c == SqlState::ADMIN_SHUTDOWN
                    || *c == SqlState::CANNOT_CONNECT_NOW
                    || *c == SqlState::CRASH_SHUTDOWN
                    || *c == SqlState::CONNECTION_FAILURE
                    || *c == SqlState::CONNECTION_EXCEPTION
            )
            || (e.as_db_error().is_none() && e.code().is_none());
        if lost {
            PgError::Unavailable { url, reason }
        } else {
            PgError::Query { url, reason }
        }
    }
}

fn pool_error(e: &deadpool_postgres::PoolError) -> String {
    use deadpool_postgres::PoolError;
    match e {
        PoolError::Timeout(_) => "no connection within the timeout (the database is slow or down, or every pooled connection is busy)".into(),
        PoolError::Backend(e) => describe(e),
        other => other.to_string(),
    }
}

/// TLS for `sslmode=prefer|require`: the CA of `sslrootcert` when the URL names one, the
/// public CAs otherwise.
fn tls(url: &PgUrl) -> Result<MakeRustlsConnect, String> {
    let mut roots = rustls::RootCertStore::empty();
    match url.root_cert() {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| format!("sslrootcert {}: {e}", path.display()))?;
            for cert in certs {
                let cert = cert.map_err(|e| format!("sslrootcert {}: {e}", path.display()))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("sslrootcert {}: {e}", path.display()))?;
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

/// The pools [`Pg::shared`] handed out, by URL, for as long as someone holds them.
static SHARED: Mutex<Vec<(String, std::sync::Weak<Inner>)>> = Mutex::new(Vec::new());

impl Pg {
    /// The process's pool for `url` with the default bounds: one per database, however many
    /// stores of the process (executions, rate limits, audit) live in it.
    pub fn shared(url: &PgUrl) -> Result<Pg, PgError> {
        let key = url.config_key();
        let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        shared.retain(|(_, weak)| weak.strong_count() > 0);
        if let Some(inner) = shared
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, weak)| weak.upgrade())
        {
            return Ok(Pg { inner });
        }
        let pg = Pg::new(url, PoolOptions::default())?;
        shared.push((key, Arc::downgrade(&pg.inner)));
        Ok(pg)
    }
}
