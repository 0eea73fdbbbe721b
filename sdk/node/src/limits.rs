//! The limits of one execution as JavaScript gives them, over the host's defaults.

use execbox_host::RuntimeOptions;
use napi_derive::napi;

/// The limits of one execution; unset fields take the host's defaults (the JavaScript merges
/// a sandbox's limits with a run's before it calls).
#[napi(object)]
pub struct RunLimits {
    /// Wall-clock limit in milliseconds.
    pub timeout_ms: Option<f64>,
    /// Memory limit of the guest's runtime in bytes.
    pub memory_limit_bytes: Option<f64>,
    /// Log lines kept.
    pub max_log_lines: Option<f64>,
    /// Log characters kept.
    pub max_log_chars: Option<f64>,
}

/// `limits` over `base`; the JavaScript has checked each is a whole number.
pub(crate) fn runtime_options(limits: &RunLimits, base: RuntimeOptions) -> RuntimeOptions {
    let pick = |v: Option<f64>, default: u64| v.map_or(default, |v| v.max(0.0) as u64);
    RuntimeOptions {
        timeout_ms: pick(limits.timeout_ms, base.timeout_ms),
        memory_limit_bytes: pick(limits.memory_limit_bytes, base.memory_limit_bytes),
        max_log_lines: pick(limits.max_log_lines, base.max_log_lines),
        max_log_chars: pick(limits.max_log_chars, base.max_log_chars),
    }
}
