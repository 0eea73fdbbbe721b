//! The tokio runtime every execution of this process runs on, made again after a `fork`.

use std::sync::{Arc, Mutex};

use pyo3::exceptions::PyRuntimeError;
use pyo3::PyResult;

/// The runtime of this process. A child made by `fork` (multiprocessing's default start
/// method on Linux) inherits the parent's runtime without its threads: it gets its own.
pub fn runtime() -> PyResult<Arc<tokio::runtime::Runtime>> {
    static RUNTIME: Mutex<Option<(u32, Arc<tokio::runtime::Runtime>)>> = Mutex::new(None);
    let pid = std::process::id();
    let mut slot = RUNTIME.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((owner, runtime)) = slot.as_ref() {
        if *owner == pid {
            return Ok(runtime.clone());
        }
        // The parent's runtime cannot be shut down from here (its threads are not in this
        // process); it is left as it is.
        std::mem::forget(slot.take());
    }
    let runtime = Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("execbox")
            // Sync Python tools (at most `MAX_SYNC_CALLS`) and approvers (at most
            // `MAX_APPROVALS`) run on blocking threads; the rest is headroom, so neither
            // bound can be reached with a permit held and no thread to run on.
            .max_blocking_threads(crate::tools::MAX_SYNC_CALLS + crate::policy::MAX_APPROVALS + 64)
            .enable_all()
            .build()
            .map_err(|e| {
                PyRuntimeError::new_err(format!("execbox could not start its threads: {e}"))
            })?,
    );
    *slot = Some((pid, runtime.clone()));
    Ok(runtime)
}
