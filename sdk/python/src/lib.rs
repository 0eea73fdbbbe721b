//! The extension module `execbox._native`: the host core and the runner, bound with PyO3.
//!
//! The Python layer (`python/execbox/`) is the public API; this module gives it three things:
//! [`NativeTools`] (Python callables resolved once into a tool set), [`NativePool`] (warm,
//! locked-down runner processes that run programs against a tool set) and [`serve_runner`]
//! (the runner itself, for the runner processes), [`NativePolicy`] (a policy guarding the
//! tool calls) and [`NativeOpenApi`] (an OpenAPI document's operations as tools, joined to a
//! tool set as one more namespace). Executions run on one tokio runtime per
//! process ([`runtime`]); Python code only ever runs with the GIL taken on threads of its own.

// PyO3's macros expand to unsafe code (the C API); this crate writes none of its own beyond
// `_exit` in `serve_runner`.
#![allow(unsafe_code)]

mod attach;
mod openapi;
mod outcome;
mod policy;
mod pool;
mod runtime;
mod tools;

use pyo3::prelude::*;

pub use openapi::NativeOpenApi;
pub use policy::NativePolicy;
pub use pool::{NativePool, Running};
pub use tools::NativeTools;

/// Serves one runner session on this process's stdin and stdout, locked down by the OS
/// (Landlock, seccomp, rlimits), and ends the process when the session is over.
///
/// The pool starts its runners as `python -I -S -c <boot> <path of this module>`: the boot
/// line loads this module by its path and calls this function, so a runner is this
/// interpreter running the runner's code, nothing of the user's program.
#[pyfunction]
fn serve_runner(py: Python<'_>) {
    py.detach(|| {
        let status = match execbox_runner::serve_stdio(
            execbox_runner::SessionLimits::default(),
            execbox_runner::Lockdown::Enforce,
        ) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("execbox runner: {e}");
                2
            }
        };
        // The interpreter's own shutdown could make a call the seccomp filter forbids: the
        // process ends here, with nothing of the interpreter left to run.
        // SAFETY: `_exit` ends the process without running anything else.
        unsafe { libc::_exit(status) }
    })
}

/// The TypeScript declarations of `tools`, as the guest sees them.
#[pyfunction]
fn declarations(tools: &NativeTools) -> String {
    tools.set().declarations()
}

/// The description of the sandbox a model should be given: how a program runs, its tools'
/// declarations and the limits.
#[pyfunction]
#[pyo3(signature = (tools, timeout_ms=None, memory_limit_bytes=None, max_log_lines=None, max_log_chars=None))]
fn prompt(
    tools: &NativeTools,
    timeout_ms: Option<u64>,
    memory_limit_bytes: Option<u64>,
    max_log_lines: Option<u64>,
    max_log_chars: Option<u64>,
) -> String {
    let options = pool::options(timeout_ms, memory_limit_bytes, max_log_lines, max_log_chars);
    execbox_host::model_prompt(tools.set(), &options)
}

/// The description of a tool that runs the model's program: [`prompt`]'s text with the
/// answer's shape and its limit of `max_answer_chars`.
#[pyfunction]
#[pyo3(signature = (tools, max_answer_chars, timeout_ms=None, memory_limit_bytes=None, max_log_lines=None, max_log_chars=None))]
fn code_tool_description(
    tools: &NativeTools,
    max_answer_chars: usize,
    timeout_ms: Option<u64>,
    memory_limit_bytes: Option<u64>,
    max_log_lines: Option<u64>,
    max_log_chars: Option<u64>,
) -> String {
    let options = pool::options(timeout_ms, memory_limit_bytes, max_log_lines, max_log_chars);
    execbox_host::code_tool_description(tools.set(), &options, max_answer_chars)
}

/// The model-facing answer for a result given as its parts: `value_json` (the runner's JSON
/// text of the value, or `None`), `error` (`(code, text)` of a failure, or `None`) and `logs`,
/// cut at `max_chars`; the text `execbox mcp`'s `execute_code` gives for the same result.
#[pyfunction]
fn model_answer(
    value_json: Option<&str>,
    error: Option<(String, String)>,
    logs: Vec<String>,
    max_chars: usize,
) -> String {
    let parts = execbox_host::AnswerParts {
        value_json,
        error: error
            .as_ref()
            .map(|(code, text)| (code.as_str(), text.as_str())),
        logs: &logs,
    };
    execbox_host::answer_of(parts, max_chars).text
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(serve_runner, m)?)?;
    m.add_function(wrap_pyfunction!(attach::shutdown, m)?)?;
    m.add_function(wrap_pyfunction!(declarations, m)?)?;
    m.add_function(wrap_pyfunction!(prompt, m)?)?;
    m.add_function(wrap_pyfunction!(code_tool_description, m)?)?;
    m.add_function(wrap_pyfunction!(model_answer, m)?)?;
    m.add_class::<NativeTools>()?;
    m.add_class::<NativePool>()?;
    m.add_class::<Running>()?;
    m.add_class::<NativePolicy>()?;
    m.add_class::<NativeOpenApi>()?;
    Ok(())
}
