//! A pool of warm runner processes: the fast path for executing many programs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use execbox_protocol::ErrorCode;
use tokio::sync::{Mutex, Semaphore};

use crate::connection::{Connection, SessionTimings};
use crate::executor::{ExecuteFuture, ExecuteRequest, ExecuteResult, Executor};
use crate::runner_process::{spawn_failure, RunnerCommand, RunnerNotFound};

/// Pool sizing and recycling policy.
#[derive(Debug, Clone)]
pub struct PoolOptions {
    /// At most this many runners (and so concurrent executions). Default 4.
    pub size: usize,
    /// Start `size` runners at creation and replace retired ones in the background. Default true.
    pub prewarm: bool,
    /// Retire a runner after this many executions. Default 1000.
    pub max_executions_per_runner: u64,
    /// Host-side grace periods.
    pub timings: SessionTimings,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            size: 4,
            prewarm: true,
            max_executions_per_runner: 1000,
            timings: SessionTimings::default(),
        }
    }
}

/// Executes on warm runner processes. A runner is reused only after a clean, successful
/// execution; after any failure (guest error, timeout, cancel, crash) it is killed and
/// replaced, so no state can leak from a failed execution into the next one.
///
/// An execution waits for a free runner when all `size` are busy, and that wait counts
/// against its time limit: when the limit passes first, it ends `timeout` without having
/// run ([`ExecuteResult::was_queued_out`]). [`PooledExecutor::overflowing`] is a view of the
/// same pool for executions that must not wait at all.
#[derive(Clone)]
pub struct PooledExecutor {
    inner: Arc<PoolInner>,
    /// Never wait for a runner: take a free one, else start an extra one.
    overflow: bool,
}

/// Starts one runner connection.
pub type Spawner = Box<dyn Fn(SessionTimings) -> std::io::Result<Connection> + Send + Sync>;

struct PoolInner {
    spawn: Spawner,
    options: PoolOptions,
    idle: Mutex<Vec<Connection>>,
    permits: Semaphore,
    /// Runner processes started so far (prewarmed, replacements and extra ones).
    started: AtomicU64,
}

impl PooledExecutor {
    /// Creates a pool of `command` processes; with `prewarm`, starts them in the background
    /// at once. Fails when `command` cannot be run (see [`RunnerCommand::find`] for the usual
    /// runner). Must be called inside a Tokio runtime.
    pub fn new(command: RunnerCommand, options: PoolOptions) -> Result<Self, RunnerNotFound> {
        let command = command.checked()?;
        Ok(Self::with_spawner(
            Box::new(move |timings| command.spawn(timings)),
            options,
        ))
    }

    /// Creates a pool whose runners `spawn` starts.
    pub fn with_spawner(spawn: Spawner, options: PoolOptions) -> Self {
        let size = options.size.max(1);
        let inner = Arc::new(PoolInner {
            spawn,
            idle: Mutex::new(Vec::with_capacity(size)),
            permits: Semaphore::new(size),
            started: AtomicU64::new(0),
            options,
        });
        if inner.options.prewarm {
            for _ in 0..size {
                PoolInner::replenish(&inner);
            }
        }
        PooledExecutor {
            inner,
            overflow: false,
        }
    }

    /// The same pool, for executions that must not wait for a runner: those started while
    /// their caller holds a runner of this pool and waits for them (a nested capability, whose
    /// parent's runner waits for its result). Waiting could last forever when the runners
    /// are all held by such callers, so each takes a free runner of the pool when there is
    /// one, and otherwise starts an extra runner beyond `size`, which afterwards joins the
    /// idle ones if there is room, or ends. The pool does not bound how many extra runners
    /// run at once: bound the executions given to this view (the capability manager bounds
    /// each tree of nested executions).
    pub fn overflowing(&self) -> PooledExecutor {
        PooledExecutor {
            inner: self.inner.clone(),
            overflow: true,
        }
    }

    /// How many runner processes this pool has started so far: prewarmed ones, replacements
    /// of retired ones and extra ones of [`PooledExecutor::overflowing`].
    pub fn runners_started(&self) -> u64 {
        self.inner.started.load(Ordering::Relaxed)
    }

    /// Runners currently idle and ready.
    pub async fn idle_count(&self) -> usize {
        self.inner.idle.lock().await.len()
    }

    /// Waits until `n` runners are idle (for tests and benchmarks), up to `timeout`.
    pub async fn wait_idle(&self, n: usize, timeout: std::time::Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        while tokio::time::Instant::now() < deadline {
            if self.idle_count().await >= n {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        false
    }
}

impl PoolInner {
    fn replenish(inner: &Arc<PoolInner>) {
        let inner = inner.clone();
        tokio::spawn(async move {
            match inner.spawn_runner() {
                Ok(connection) => {
                    let mut idle = inner.idle.lock().await;
                    if idle.len() < inner.options.size.max(1) {
                        idle.push(connection);
                    }
                }
                Err(e) => tracing::warn!("cannot prewarm a runner: {e}"),
            }
        });
    }

    fn spawn_runner(&self) -> std::io::Result<Connection> {
        self.started.fetch_add(1, Ordering::Relaxed);
        (self.spawn)(self.options.timings)
    }

    async fn checkout(&self) -> std::io::Result<Connection> {
        loop {
            let candidate = self.idle.lock().await.pop();
            match candidate {
                Some(mut connection) => {
                    if connection.check_idle() {
                        return Ok(connection);
                    }
                    tracing::info!("replacing a runner that died while idle");
                    connection.terminate().await;
                }
                None => return self.spawn_runner(),
            }
        }
    }
}

impl Executor for PooledExecutor {
    fn execute(&self, request: ExecuteRequest) -> ExecuteFuture<'_> {
        Box::pin(async move {
            let mut request = request;
            let accepted = Instant::now();
            let limit = Duration::from_millis(request.options.timeout_ms);
            let inner = &self.inner;
            let permit = if self.overflow {
                inner.permits.try_acquire().ok()
            } else if request.cancel.is_cancelled() {
                return ExecuteResult::cancelled_early();
            } else if let Ok(permit) = inner.permits.try_acquire() {
                // The usual case, without arming a timer: from a thread outside the runtime
                // (an SDK's caller, see `spawn_eager`) that would wake a worker for nothing.
                Some(permit)
            } else {
                tokio::select! {
                    permit = inner.permits.acquire() => match permit {
                        Ok(p) => Some(p),
                        Err(_) => return ExecuteResult::failed(ErrorCode::InternalError, "pool is closed"),
                    },
                    () = request.cancel.cancelled() => return ExecuteResult::cancelled_early(),
                    () = tokio::time::sleep(limit) => return inner.queued_out(limit),
                }
            };
            let mut connection = match inner.checkout().await {
                Ok(c) => c,
                Err(e) => return spawn_failure(&e),
            };
            // The time limit runs from acceptance: the runner gets what is left of it.
            let left = limit.saturating_sub(accepted.elapsed());
            if left.is_zero() {
                inner.give_back(connection, permit.is_some()).await;
                return inner.queued_out(limit);
            }
            let limit_ms = request.options.timeout_ms;
            request.options.timeout_ms = left.as_millis().max(1) as u64;
            let result = connection.execute(&request).await;
            inner.give_back(connection, permit.is_some()).await;
            result.naming_the_limit(request.options.timeout_ms, limit_ms)
        })
    }
}

impl PoolInner {
    /// A runner after an execution: idle again if it is sound and there is room, else ended
    /// (and replaced, when it held one of the pool's places and the pool prewarms).
    async fn give_back(self: &Arc<Self>, mut connection: Connection, pooled: bool) {
        let retire = connection.is_broken()
            || connection.executions >= self.options.max_executions_per_runner;
        if !retire {
            let mut idle = self.idle.lock().await;
            if idle.len() < self.options.size.max(1) {
                idle.push(connection);
                return;
            }
        }
        connection.terminate().await;
        if retire && pooled && self.options.prewarm {
            PoolInner::replenish(self);
        }
    }

    /// The end of an execution whose time limit passed while it waited for a runner.
    fn queued_out(&self, limit: Duration) -> ExecuteResult {
        ExecuteResult::queued_out(limit.as_millis(), self.options.size.max(1))
    }
}
