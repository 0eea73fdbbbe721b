//! An execution's result as the Python layer takes it: plain tuples, made into `Result` there.

use execbox_host::{ErrorBody, ExecuteResult};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// `(ok, value_json, error, logs, duration_ms)`: `value_json` is the result as JSON text (or
/// `None` when the program returned nothing), `error` is `None` or
/// `(code, message, name, reason, retry_after_ms, location, text)`, `location` `None` or
/// `(line, column, source, caret)`.
pub fn to_python(py: Python<'_>, result: ExecuteResult) -> PyResult<Bound<'_, PyTuple>> {
    let ExecuteResult {
        outcome,
        logs,
        duration_ms,
        ..
    } = result;
    let (ok, value, error) = match outcome {
        Ok(value) => (true, value.map(|v| v.get().to_owned()), None),
        Err(body) => (false, None, Some(error(py, &body)?)),
    };
    (ok, value, error, logs, duration_ms).into_pyobject(py)
}

fn error<'py>(py: Python<'py>, body: &ErrorBody) -> PyResult<Bound<'py, PyTuple>> {
    let location = body
        .location
        .as_deref()
        .map(|at| (at.line, at.column, at.source.clone(), at.caret));
    (
        body.code.as_str(),
        body.message.as_str(),
        body.name.as_deref(),
        body.reason.as_deref(),
        body.retry_after_ms,
        location,
        body.text(),
    )
        .into_pyobject(py)
}
