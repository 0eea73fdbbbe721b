//! Taking the GIL from execbox's own threads, and never once the interpreter shuts down.
//!
//! CPython ends a thread that takes the GIL after finalization has begun with `pthread_exit`,
//! whose forced unwinding through Rust frames aborts the process. So every entry of ours into
//! Python from a thread of our own goes through [`attach`], and [`shutdown`] (registered with
//! `atexit`, which runs before finalization) closes the door and waits for those inside.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pyo3::prelude::*;

static INSIDE: AtomicUsize = AtomicUsize::new(0);
static CLOSING: AtomicBool = AtomicBool::new(false);

/// How long `shutdown` waits for threads of ours still running Python (a slow tool).
const SHUTDOWN_WAIT: Duration = Duration::from_secs(10);

/// Runs `f` with the GIL, unless the interpreter is shutting down (then `None`).
pub fn attach<R>(f: impl for<'py> FnOnce(Python<'py>) -> R) -> Option<R> {
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            INSIDE.fetch_sub(1, Ordering::SeqCst);
        }
    }
    INSIDE.fetch_add(1, Ordering::SeqCst);
    let _leave = Leave;
    if CLOSING.load(Ordering::SeqCst) {
        return None;
    }
    Some(Python::attach(f))
}

/// Whether the interpreter is shutting down (no new execution may start).
pub fn closing() -> bool {
    CLOSING.load(Ordering::SeqCst)
}

/// A Python thread waiting without the GIL (a blocking `run`) that finds the interpreter
/// shutting down must not take the GIL again: it waits for the process to end. The thread
/// that finalizes (the process's first) is never parked.
pub fn park_if_closing() {
    if !closing() || is_main_thread() {
        return;
    }
    loop {
        std::thread::park();
    }
}

fn is_main_thread() -> bool {
    // SAFETY: both calls only read the ids of this thread and process.
    unsafe { libc::gettid() == libc::getpid() }
}

/// Called at exit (`atexit`): no thread of ours enters Python from now on, and those inside
/// are waited for (at most 10 s), without the GIL so that they can finish.
#[pyfunction]
pub fn shutdown(py: Python<'_>) {
    CLOSING.store(true, Ordering::SeqCst);
    py.detach(|| {
        let started = Instant::now();
        while INSIDE.load(Ordering::SeqCst) > 0 && started.elapsed() < SHUTDOWN_WAIT {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}
