//! A pool of warm runner processes: the fast path for executing many programs.

use std::sync::Arc;

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
#[derive(Clone)]
pub struct PooledExecutor {
    inner: Arc<PoolInner>,
}

/// Starts one runner connection.
pub type Spawner = Box<dyn Fn(SessionTimings) -> std::io::Result<Connection> + Send + Sync>;

struct PoolInner {
    spawn: Spawner,
    options: PoolOptions,
    idle: Mutex<Vec<Connection>>,
    permits: Semaphore,
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
            options,
        });
        if inner.options.prewarm {
            for _ in 0..size {
                PoolInner::replenish(&inner);
            }
        }
        PooledExecutor { inner }
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
            match (inner.spawn)(inner.options.timings) {
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
                None => return (self.spawn)(self.options.timings),
            }
        }
    }
}

impl Executor for PooledExecutor {
    fn execute(&self, request: ExecuteRequest) -> ExecuteFuture<'_> {
        Box::pin(async move {
            let cancel = &request.cancel;
            let inner = &self.inner;
            let _permit = tokio::select! {
                permit = inner.permits.acquire() => match permit {
                    Ok(p) => p,
                    Err(_) => return ExecuteResult::failed(ErrorCode::InternalError, "pool is closed"),
                },
                () = cancel.cancelled() => return ExecuteResult::cancelled_early(),
            };
            let mut connection = match inner.checkout().await {
                Ok(c) => c,
                Err(e) => return spawn_failure(&e),
            };
            let result = connection.execute(&request).await;
            let retire = connection.is_broken()
                || connection.executions >= inner.options.max_executions_per_runner;
            if retire {
                connection.terminate().await;
                if inner.options.prewarm {
                    PoolInner::replenish(inner);
                }
            } else {
                inner.idle.lock().await.push(connection);
            }
            result
        })
    }
}
