//! Python callables as the host's tools: [`NativeTools`], resolved once into a `ToolSet`.
//!
//! The Python layer wraps every callable in an adapter that takes the input as JSON text and
//! returns `(status, text, reason, retry_after_ms)`: `status` is `"ok"` (then `text` is the
//! result as JSON), `"tool_error"` or `"serialization_error"` (then `text` is the message).
//! So all of Python's semantics (exceptions, `execbox.ToolError`, JSON) stay in Python, and
//! this side only moves text. A sync adapter runs on a blocking thread with the GIL; an async
//! one is scheduled on the execution's event loop and awaited without holding a thread.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use execbox_host::{
    BoxFuture, ErrorCode, Provider, RateLimit, Tool, ToolContext, ToolError, ToolHandler, ToolSet,
};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCFunction, PyTuple};
use serde_json::Value;
use tokio::sync::oneshot;

use crate::attach::attach;
use crate::openapi::NativeOpenApi;

/// At most this many calls of sync Python tools run at once in a process, each on a thread.
pub const MAX_SYNC_CALLS: usize = 256;

/// What to do when a tool with a rate limit or requiring approval is called without a policy.
const POLICY_HINT: &str = "give run(), run_async() or Sandbox() a policy=execbox.Policy(...) \
                           (with approve= to decide the calls of tools that require approval)";

static SYNC_CALLS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MAX_SYNC_CALLS);

/// The event loops async tools run on, by execution id: the caller's running loop for
/// `run_async`, the package's background loop for `run`.
#[derive(Default)]
pub struct Loops(Mutex<HashMap<String, Arc<Py<PyAny>>>>);

impl Loops {
    /// Async tools of execution `id` run on `event_loop` until [`Loops::forget`].
    pub fn remember(&self, id: &str, event_loop: Option<Py<PyAny>>) {
        if let Some(event_loop) = event_loop {
            self.lock().insert(id.to_owned(), Arc::new(event_loop));
        }
    }

    /// Execution `id` has ended.
    pub fn forget(&self, id: &str) {
        // Dropping a `Py` without the GIL is deferred by PyO3 to the next time it is held.
        let gone = self.lock().remove(id);
        drop(gone);
    }

    fn get(&self, id: &str) -> Option<Arc<Py<PyAny>>> {
        self.lock().get(id).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Py<PyAny>>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One tool as the Python layer describes it (see [`NativeTools::new`]).
type ToolSpec = (
    (
        String,
        String,
        Py<PyAny>,
        bool,
        Option<String>,
        Option<String>,
        Option<String>,
    ),
    (Vec<String>, Option<String>, bool),
);

/// A tool set made of Python callables, shared by every execution given it.
#[pyclass(frozen, module = "execbox._native")]
pub struct NativeTools {
    set: ToolSet,
    loops: Arc<Loops>,
}

impl NativeTools {
    /// The resolved tool set.
    pub fn set(&self) -> &ToolSet {
        &self.set
    }

    /// The event loops of its executions in flight.
    pub fn loops(&self) -> &Arc<Loops> {
        &self.loops
    }
}

#[pymethods]
impl NativeTools {
    /// `specs`: `(namespace, name, adapter, is_async, description, input_schema,
    /// output_schema, permissions, rate_limit, requires_approval)` per tool, the schemas as
    /// JSON text or `None`, the rate limit as `100 per 1h` or `None`.
    /// `openapi`: `(namespace, provider)` of each OpenAPI provider, after the Python tools.
    #[new]
    #[pyo3(signature = (specs, openapi=Vec::new()))]
    fn new(
        specs: Vec<ToolSpec>,
        openapi: Vec<(String, PyRef<'_, NativeOpenApi>)>,
    ) -> PyResult<Self> {
        let loops = Arc::new(Loops::default());
        let mut namespaces: Vec<(String, Vec<Tool>)> = Vec::new();
        for spec in specs {
            let (namespace, name, adapter, is_async, description, input, output) = spec.0;
            let (permissions, rate_limit, requires_approval) = spec.1;
            let handler = PythonTool {
                adapter: Arc::new(adapter),
                is_async,
                loops: loops.clone(),
                label: format!("{namespace}.{name}"),
            };
            let mut tool = Tool::from_handler(&name, handler);
            if let Some(description) = description {
                tool = tool.description(description);
            }
            if let Some(schema) = input {
                tool = tool.input_schema(schema_value(&namespace, &name, "input_schema", &schema)?);
            }
            if let Some(schema) = output {
                tool =
                    tool.output_schema(schema_value(&namespace, &name, "output_schema", &schema)?);
            }
            if !permissions.is_empty() {
                tool = tool.permissions(permissions);
            }
            if let Some(limit) = rate_limit {
                let limit = limit.parse::<RateLimit>().map_err(|e| {
                    PyValueError::new_err(format!("tools[{namespace:?}][{name:?}].rate_limit: {e}"))
                })?;
                tool = tool.rate_limit(limit);
            }
            tool = tool.requires_approval(requires_approval);
            match namespaces.iter_mut().find(|(n, _)| *n == namespace) {
                Some((_, tools)) => tools.push(tool),
                None => namespaces.push((namespace, vec![tool])),
            }
        }
        let providers = namespaces
            .into_iter()
            .map(|(namespace, tools)| {
                tools
                    .into_iter()
                    .fold(Provider::new(namespace), Provider::tool)
            })
            .chain(
                openapi
                    .iter()
                    .map(|(namespace, api)| api.provider(namespace)),
            )
            .collect();
        let set = ToolSet::new(providers)
            .map_err(|e| PyValueError::new_err(e.to_string()))?
            .with_policy_hint(POLICY_HINT);
        Ok(NativeTools { set, loops })
    }

    /// Whether there are no tools at all.
    fn is_empty(&self) -> bool {
        self.set.is_empty()
    }
}

fn schema_value(namespace: &str, name: &str, field: &str, text: &str) -> PyResult<Value> {
    serde_json::from_str(text).map_err(|e| {
        PyTypeError::new_err(format!(
            "tools[{namespace:?}][{name:?}].{field} is not JSON: {e}"
        ))
    })
}

/// One Python tool: its adapter, and how to call it.
struct PythonTool {
    adapter: Arc<Py<PyAny>>,
    is_async: bool,
    loops: Arc<Loops>,
    /// `ns.name`, for messages.
    label: String,
}

impl ToolHandler for PythonTool {
    fn call(&self, input: Value, ctx: ToolContext) -> BoxFuture<Result<Value, ToolError>> {
        let text = input.to_string();
        let adapter = self.adapter.clone();
        let label = self.label.clone();
        if !self.is_async {
            return Box::pin(async move {
                // A thread running Python cannot be stopped: a call of an execution that ended
                // keeps its thread until it returns. So their number is bounded per process.
                let Ok(permit) = SYNC_CALLS.try_acquire() else {
                    return Err(ToolError::tool(format!(
                        "{label} did not run: {MAX_SYNC_CALLS} calls of sync Python tools are \
                         running in this process (calls of executions that ended run until they \
                         return); give slow tools a time limit of their own, or make them async"
                    )));
                };
                let name = label.clone();
                tokio::task::spawn_blocking(move || {
                    let _permit = permit;
                    attach(|py| {
                        let out = adapter.call1(py, (text,));
                        answer(py, &label, out.map(|o| o.into_bound(py)))
                    })
                    .unwrap_or_else(|| Err(exiting(&label)))
                })
                .await
                .unwrap_or_else(|_| Err(ToolError::tool(format!("{name} stopped abruptly"))))
            });
        }
        let event_loop = self.loops.get(&ctx.execution_id);
        Box::pin(async move {
            let Some(event_loop) = event_loop else {
                return Err(ToolError::tool(format!(
                    "{label} is an async tool and this execution has no event loop to run it on"
                )));
            };
            let (tx, rx) = oneshot::channel();
            let future = attach(|py| {
                schedule(py, &adapter, &event_loop, text, tx).map_err(|e| {
                    ToolError::tool(format!(
                        "{label} could not be started: {}",
                        python_error_in(py, &e)
                    ))
                })
            })
            .unwrap_or_else(|| Err(exiting(&label)))?;
            tokio::select! {
                settled = rx => match settled {
                    Ok(Settled::Done(out)) => attach(|py| answer(py, &label, out.map(|o| o.into_bound(py))))
                        .unwrap_or_else(|| Err(exiting(&label))),
                    // The tool cancelled itself (raised `CancelledError`); the execution did not.
                    Ok(Settled::Cancelled) => Err(ToolError::tool(format!("{label} was cancelled"))),
                    Err(_) => Err(ToolError::cancelled()),
                },
                _ = ctx.cancel.cancelled() => {
                    attach(|py| {
                        let _ = future.call_method0(py, "cancel");
                    });
                    Err(ToolError::cancelled())
                }
            }
        })
    }
}

enum Settled {
    Done(PyResult<Py<PyAny>>),
    Cancelled,
}

/// `asyncio.run_coroutine_threadsafe(adapter(text), event_loop)`, whose end is sent on `tx`.
fn schedule(
    py: Python<'_>,
    adapter: &Py<PyAny>,
    event_loop: &Py<PyAny>,
    text: String,
    tx: oneshot::Sender<Settled>,
) -> PyResult<Py<PyAny>> {
    let coroutine = adapter.call1(py, (text,))?;
    let asyncio = py.import("asyncio")?;
    let future = match asyncio.call_method1("run_coroutine_threadsafe", (&coroutine, event_loop)) {
        Ok(future) => future,
        Err(e) => {
            // A closed loop refuses it: the coroutine must not be left unawaited.
            let _ = coroutine.call_method0(py, "close");
            return Err(e);
        }
    };
    let tx = Mutex::new(Some(tx));
    let on_done = PyCFunction::new_closure(
        py,
        None,
        None,
        move |args: &Bound<'_, PyTuple>, _kwargs| -> PyResult<()> {
            let future = args.get_item(0)?;
            let settled = if future.call_method0("cancelled")?.is_truthy()? {
                Settled::Cancelled
            } else {
                Settled::Done(future.call_method0("result").map(Bound::unbind))
            };
            if let Some(tx) = tx.lock().unwrap_or_else(|e| e.into_inner()).take() {
                let _ = tx.send(settled);
            }
            Ok(())
        },
    )?;
    future.call_method1("add_done_callback", (on_done,))?;
    Ok(future.unbind())
}

/// The adapter's answer, as the tool's result or error.
fn answer(
    py: Python<'_>,
    label: &str,
    out: PyResult<Bound<'_, PyAny>>,
) -> Result<Value, ToolError> {
    let out =
        out.map_err(|e| ToolError::tool(format!("{label} failed: {}", python_error_in(py, &e))))?;
    let (status, text, reason, retry_after_ms): (String, String, Option<String>, Option<u64>) =
        out.extract().map_err(|_| {
            ToolError::new(
                ErrorCode::InternalError,
                format!("{label}: the execbox adapter answered something unexpected"),
            )
        })?;
    let mut error = match status.as_str() {
        "ok" => {
            return serde_json::from_str(&text).map_err(|e| {
                ToolError::serialization(format!("{label} returned a value that is not JSON: {e}"))
            })
        }
        "serialization_error" => ToolError::serialization(text),
        _ => ToolError::tool(text),
    };
    error.reason = reason;
    error.retry_after_ms = retry_after_ms;
    Err(error)
}

/// The tool could not run: the interpreter is shutting down.
fn exiting(label: &str) -> ToolError {
    ToolError::tool(format!(
        "{label} did not run: the Python interpreter is shutting down"
    ))
}

/// `str(exception)`, or its class name when that is empty.
fn python_error_in(py: Python<'_>, e: &PyErr) -> String {
    let text = e.value(py).to_string();
    if text.is_empty() {
        e.get_type(py)
            .name()
            .map(|n| n.to_string())
            .unwrap_or_else(|_| "an exception".into())
    } else {
        text
    }
}
