//! [`NativePool`]: warm runner processes, and executions on them, blocking or with a callback.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Mutex;
use std::time::Duration;

use execbox_host::{
    spawn_eager, CancellationToken, ExecuteRequest, ExecuteResult, Executor, PoolOptions,
    PooledExecutor, RunnerCommand, RuntimeOptions,
};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::outcome::to_python;
use crate::policy::NativePolicy;
use crate::runtime::runtime;
use crate::tools::NativeTools;

/// How often a blocking `run` looks for a signal (Ctrl-C) while it waits.
const SIGNAL_POLL: Duration = Duration::from_millis(50);

/// How long a blocking `run` interrupted by a signal waits for its execution to stop.
const STOP_WAIT: Duration = Duration::from_secs(5);

/// The wire's limits: the defaults, with what was given.
pub fn options(
    timeout_ms: Option<u64>,
    memory_limit_bytes: Option<u64>,
    max_log_lines: Option<u64>,
    max_log_chars: Option<u64>,
) -> RuntimeOptions {
    let mut options = RuntimeOptions::default();
    if let Some(v) = timeout_ms {
        options.timeout_ms = v;
    }
    if let Some(v) = memory_limit_bytes {
        options.memory_limit_bytes = v;
    }
    if let Some(v) = max_log_lines {
        options.max_log_lines = v;
    }
    if let Some(v) = max_log_chars {
        options.max_log_chars = v;
    }
    options
}

/// Runner processes, started as `argv`, kept warm and reused after clean executions.
#[pyclass(frozen, module = "execbox._native")]
pub struct NativePool {
    executor: Mutex<Option<PooledExecutor>>,
    /// The process that made the pool: its runners and runtime are not a forked child's.
    owner: u32,
    next_id: AtomicU64,
}

/// An execution started with [`NativePool::start`].
#[pyclass(frozen, module = "execbox._native")]
pub struct Running {
    cancel: CancellationToken,
}

#[pymethods]
impl Running {
    /// Ends the execution promptly (its callback still comes, with a cancelled result).
    fn cancel(&self) {
        self.cancel.cancel();
    }
}

/// What an execution needs, made under the GIL and moved to the runtime.
struct Prepared {
    executor: PooledExecutor,
    request: ExecuteRequest,
    id: String,
    cancel: CancellationToken,
}

#[pymethods]
impl NativePool {
    /// `argv` starts one runner; `size` runners are kept (started at once with `prewarm`);
    /// with `overflow`, an execution never waits for a runner: it starts an extra one.
    #[new]
    fn new(argv: Vec<String>, size: usize, prewarm: bool, overflow: bool) -> PyResult<Self> {
        let Some((program, args)) = argv.split_first() else {
            return Err(PyValueError::new_err("the runner command is empty"));
        };
        if size == 0 {
            return Err(PyValueError::new_err("pool must be at least 1"));
        }
        let mut command = RunnerCommand::new(program);
        command.args = args.iter().map(Into::into).collect();
        let options = PoolOptions {
            size,
            prewarm,
            ..PoolOptions::default()
        };
        let runtime = runtime()?;
        let _entered = runtime.enter();
        let executor = PooledExecutor::new(command, options)
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        let executor = if overflow {
            executor.overflowing()
        } else {
            executor
        };
        Ok(NativePool {
            executor: Mutex::new(Some(executor)),
            owner: std::process::id(),
            next_id: AtomicU64::new(1),
        })
    }

    /// Runs `code` and waits for its result, looking for signals while it waits: Ctrl-C
    /// cancels the execution and raises `KeyboardInterrupt` once it has stopped.
    #[pyo3(signature = (tools, code, timeout_ms=None, memory_limit_bytes=None, max_log_lines=None, max_log_chars=None, event_loop=None, policy=None))]
    #[allow(clippy::too_many_arguments)]
    fn run<'py>(
        &self,
        py: Python<'py>,
        tools: &NativeTools,
        code: String,
        timeout_ms: Option<u64>,
        memory_limit_bytes: Option<u64>,
        max_log_lines: Option<u64>,
        max_log_chars: Option<u64>,
        event_loop: Option<Py<PyAny>>,
        policy: Option<PyRef<'py, NativePolicy>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let limits = options(timeout_ms, memory_limit_bytes, max_log_lines, max_log_chars);
        let prepared = self.prepare(tools, code, limits, event_loop, policy.as_deref())?;
        let cancel = prepared.cancel.clone();
        let (tx, rx) = mpsc::sync_channel::<ExecuteResult>(1);
        spawn(py, tools, prepared, move |result| {
            let _ = tx.send(result);
        })?;
        // `Receiver` is not `Sync`: it goes into each wait without the GIL and comes back.
        let rx = std::sync::Mutex::new(rx);
        let wait = |limit| {
            py.detach(|| {
                let got = rx
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .recv_timeout(limit);
                // A daemon thread still waiting at exit must not take the GIL again.
                crate::attach::park_if_closing();
                got
            })
        };
        loop {
            match wait(SIGNAL_POLL) {
                Ok(result) => return to_python(py, result),
                Err(RecvTimeoutError::Timeout) => {
                    if let Err(interrupted) = py.check_signals() {
                        cancel.cancel();
                        let _ = wait(STOP_WAIT);
                        return Err(interrupted);
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(PyRuntimeError::new_err(
                        "the execution stopped without a result (execbox's runtime shut down)",
                    ))
                }
            }
        }
    }

    /// Starts `code` and returns at once; `callback(result)` is called (with the GIL, on
    /// another thread) when it ends, cancelled or not.
    #[pyo3(signature = (tools, code, callback, timeout_ms=None, memory_limit_bytes=None, max_log_lines=None, max_log_chars=None, event_loop=None, policy=None))]
    #[allow(clippy::too_many_arguments)]
    fn start(
        &self,
        py: Python<'_>,
        tools: &NativeTools,
        code: String,
        callback: Py<PyAny>,
        timeout_ms: Option<u64>,
        memory_limit_bytes: Option<u64>,
        max_log_lines: Option<u64>,
        max_log_chars: Option<u64>,
        event_loop: Option<Py<PyAny>>,
        policy: Option<PyRef<'_, NativePolicy>>,
    ) -> PyResult<Running> {
        let limits = options(timeout_ms, memory_limit_bytes, max_log_lines, max_log_chars);
        let prepared = self.prepare(tools, code, limits, event_loop, policy.as_deref())?;
        let cancel = prepared.cancel.clone();
        spawn(py, tools, prepared, move |result| {
            // At exit nobody waits for the result any more: it is dropped.
            let _ = crate::attach::attach(|py| {
                let delivered = to_python(py, result).and_then(|t| callback.call1(py, (t,)));
                if let Err(e) = delivered {
                    e.write_unraisable(py, None);
                }
            });
        })?;
        Ok(Running { cancel })
    }

    /// Stops the idle runners and refuses new executions; those running finish first.
    fn close(&self) {
        let executor = self.lock().take();
        drop(executor);
    }

    /// Whether [`NativePool::close`] was called.
    #[getter]
    fn closed(&self) -> bool {
        self.lock().is_none()
    }

    /// Runner processes started so far (the warm ones and their replacements).
    #[getter]
    fn runners_started(&self) -> u64 {
        self.lock().as_ref().map_or(0, |e| e.runners_started())
    }
}

impl NativePool {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<PooledExecutor>> {
        self.executor.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn prepare(
        &self,
        tools: &NativeTools,
        code: String,
        limits: RuntimeOptions,
        event_loop: Option<Py<PyAny>>,
        policy: Option<&NativePolicy>,
    ) -> PyResult<Prepared> {
        if crate::attach::closing() {
            return Err(PyRuntimeError::new_err(
                "execbox has shut down: the interpreter is exiting",
            ));
        }
        if std::process::id() != self.owner {
            return Err(PyRuntimeError::new_err(
                "this Sandbox was made before this process was forked: make a new one in this process",
            ));
        }
        let Some(executor) = self.lock().clone() else {
            return Err(PyRuntimeError::new_err(
                "this Sandbox is closed: make a new one to run more programs",
            ));
        };
        let id = format!(
            "py-{}-{}",
            self.owner,
            self.next_id.fetch_add(1, Ordering::Relaxed)
        );
        let cancel = CancellationToken::new();
        let mut request = ExecuteRequest::new(code)
            .tools(tools.set())
            .options(limits)
            .id(&id)
            .cancel_on(cancel.clone());
        if let Some(policy) = policy {
            request = request.guard(policy.guard());
        }
        tools.loops().remember(&id, event_loop);
        Ok(Prepared {
            executor,
            request,
            id,
            cancel,
        })
    }
}

/// Runs `prepared` on the runtime and hands its result to `deliver`. The execution starts on
/// this thread, without the GIL: its `execute` line is written before this returns, and no
/// worker of the runtime is woken for it (see `spawn_eager`).
fn spawn(
    py: Python<'_>,
    tools: &NativeTools,
    prepared: Prepared,
    deliver: impl FnOnce(ExecuteResult) + Send + 'static,
) -> PyResult<()> {
    let loops = tools.loops().clone();
    let Prepared {
        executor,
        request,
        id,
        ..
    } = prepared;
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(e) => {
            loops.forget(&id);
            return Err(e);
        }
    };
    py.detach(|| {
        spawn_eager(runtime.handle(), async move {
            let result = executor.execute(request).await;
            loops.forget(&id);
            deliver(result);
        })
    });
    Ok(())
}
