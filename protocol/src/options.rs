//! Runtime options of an execution and their defaults, applied per missing field.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Limits for one execution (`execute.options`, `ExecutorRuntimeOptions` in the spec).
///
/// Every field is optional on the wire; a missing (or `null`) field takes its default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeOptions {
    /// Wall-clock budget in milliseconds, counted from `started`. Default 5000.
    ///
    /// Covers CPU loops, microtask loops and time spent waiting for tool results. It does not
    /// cover the time before `started` (parsing the request). Enforced by the runner's
    /// interrupt handler and by its wait for host messages; past it by
    /// [`RuntimeOptions::DEADLINE_GRACE`], by the runner's watchdog and the host's deadline.
    pub timeout_ms: u64,
    /// Memory the guest's JavaScript runtime may allocate, in bytes. Default 64 MiB.
    ///
    /// Covers every allocation of the runtime (heap objects, strings, bytecode, intrinsics).
    /// It does not cover the runner process itself (its Rust heap, stacks, message buffers).
    /// Enforced by the runner's allocator.
    pub memory_limit_bytes: u64,
    /// Keep at most this many log lines, the earliest ones. Default 100.
    pub max_log_lines: u64,
    /// Keep at most this many characters (UTF-16 code units) across the kept lines. Default 64000.
    pub max_log_chars: u64,
}

impl RuntimeOptions {
    /// Default `timeoutMs`.
    pub const DEFAULT_TIMEOUT_MS: u64 = 5_000;
    /// Default `memoryLimitBytes` (64 MiB).
    pub const DEFAULT_MEMORY_LIMIT_BYTES: u64 = 64 * 1024 * 1024;
    /// Default `maxLogLines`.
    pub const DEFAULT_MAX_LOG_LINES: u64 = 100;
    /// Default `maxLogChars`.
    pub const DEFAULT_MAX_LOG_CHARS: u64 = 64_000;

    /// How long past `timeoutMs` (or a cancel) an execution may take to stop before it is
    /// ended from outside: 250 ms. The runner's watchdog then answers `timeout` itself (the
    /// engine is stuck in one long native call the interrupt handler cannot reach) and ends
    /// its session; the host's own deadline (`timeoutMs` + this) cancels and then kills.
    /// One constant for both, so the runner answers before the host gives up on it.
    /// Not on the wire: a runner in another language picks its own.
    pub const DEADLINE_GRACE: Duration = Duration::from_millis(250);

    /// The wire names of the four fields, in declaration order.
    pub const FIELDS: [&'static str; 4] = [
        "timeoutMs",
        "memoryLimitBytes",
        "maxLogLines",
        "maxLogChars",
    ];
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions {
            timeout_ms: Self::DEFAULT_TIMEOUT_MS,
            memory_limit_bytes: Self::DEFAULT_MEMORY_LIMIT_BYTES,
            max_log_lines: Self::DEFAULT_MAX_LOG_LINES,
            max_log_chars: Self::DEFAULT_MAX_LOG_CHARS,
        }
    }
}
