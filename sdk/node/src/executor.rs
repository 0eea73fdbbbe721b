//! Executions: a pool of the shipped runner, one Promise per execution, and cancellation.

use std::sync::Mutex;

use execbox_host::{
    spawn_eager, CancellationToken, ExecuteRequest, Executor, PoolOptions, PooledExecutor,
    RunnerCommand, RuntimeOptions,
};
use napi::bindgen_prelude::{within_runtime_if_available, Object, PromiseRaw};
use napi::{Env, Error, Result, Status};
use napi_derive::napi;
use tokio::runtime::Handle;

use crate::limits::{runtime_options, RunLimits};
use crate::policy::NativePolicy;
use crate::result::{convert, NativeResult};
use crate::tools::NativeTools;

/// How an execution's Promise is resolved, from whichever thread it ends on.
type Resolve = Box<dyn FnOnce(Env) -> Result<NativeResult> + Send>;

/// A cancellation token: `cancel()` ends the executions it was given to.
#[napi]
pub struct NativeCancel {
    token: CancellationToken,
}

#[napi]
impl NativeCancel {
    /// A fresh token.
    #[napi(constructor)]
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        NativeCancel {
            token: CancellationToken::new(),
        }
    }

    /// Cancels every execution given this token.
    #[napi]
    pub fn cancel(&self) {
        self.token.cancel();
    }
}

/// A pool of runner processes (the binary at `runner`), `size` at most at once.
#[napi]
pub struct NativeExecutor {
    pool: Mutex<Option<PooledExecutor>>,
}

#[napi]
impl NativeExecutor {
    /// Starts the pool (its runners at once with `prewarm`); fails when `runner` cannot be run.
    #[napi(constructor)]
    pub fn new(runner: String, size: u32, prewarm: bool) -> Result<Self> {
        let options = PoolOptions {
            size: size.max(1) as usize,
            prewarm,
            ..PoolOptions::default()
        };
        let pool = within_runtime_if_available(|| {
            PooledExecutor::new(RunnerCommand::new(runner), options)
        })
        .map_err(|e| Error::new(Status::GenericFailure, e.to_string()))?;
        Ok(NativeExecutor {
            pool: Mutex::new(Some(pool)),
        })
    }

    /// Runs `code` with `tools` under `limits`, ended early by `cancel`, every tool call
    /// guarded by `policy`; the Promise always
    /// resolves (every failure is a result), unless the pool is closed.
    #[napi]
    pub fn execute<'env>(
        &self,
        env: &'env Env,
        code: String,
        tools: Option<&NativeTools>,
        limits: RunLimits,
        cancel: Option<&NativeCancel>,
        policy: Option<&NativePolicy>,
    ) -> Result<Object<'env>> {
        let pool = self
            .pool
            .lock()
            .ok()
            .and_then(|pool| pool.clone())
            .ok_or_else(|| Error::new(Status::GenericFailure, "the sandbox is closed"))?;
        let mut request =
            ExecuteRequest::new(code).options(runtime_options(&limits, RuntimeOptions::default()));
        if let Some(tools) = tools {
            request = request.tools(tools.tool_set());
        }
        if let Some(cancel) = cancel {
            request = request.cancel_on(cancel.token.clone());
        }
        if let Some(policy) = policy {
            request = request.guard(policy.guard());
        }
        let (deferred, promise) = env.create_deferred::<NativeResult, Resolve>()?;
        // Started on this thread: the `execute` line is written before this call returns,
        // without waking a worker of the runtime for it (see `spawn_eager`).
        within_runtime_if_available(|| {
            spawn_eager(&Handle::current(), async move {
                let result = convert(pool.execute(request).await);
                deferred.resolve(Box::new(move |_| Ok(result)));
            })
        });
        Ok(promise)
    }

    /// Drops the pool: idle runners end now; executions in flight keep their runner to the end.
    #[napi]
    pub fn close(&self) {
        let pool = self.pool.lock().ok().and_then(|mut pool| pool.take());
        // Runner processes are ended where the pool is dropped, which needs the runtime.
        within_runtime_if_available(|| drop(pool));
    }
}

/// Resolves a Promise from the Tokio runtime at once: the floor of every execution's round
/// trip through Node-API (from the main thread to the runtime and back), for the benchmark.
#[napi]
pub fn ping(env: &Env) -> Result<PromiseRaw<'_, u32>> {
    env.spawn_future(async { Ok(1) })
}
