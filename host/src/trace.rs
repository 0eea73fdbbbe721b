//! Traces: the `tracing` target of execbox's spans, and the hook through which a W3C
//! `traceparent` crosses a process boundary.
//!
//! The libraries make plain `tracing` spans (`execbox.execution`, `execbox.tool_call`,
//! `execbox.capability`, `execbox.mcp.upstream_call`, `execbox.http.request`) under the target
//! [`TARGET`], with their attributes as fields (`execbox.execution_id`, `execbox.principal`,
//! `execbox.tool`, `execbox.outcome`, `otel.kind`, ...). They know nothing of OpenTelemetry:
//! a binary that exports traces gives them a [`Propagator`] ([`set_propagator`]) which reads
//! an incoming `traceparent` ([`set_parent`]) and writes ours ([`current`]). Without one,
//! both do nothing.
//!
//! Never a span field: a tool's input or result, a program's code, a token.

use std::sync::OnceLock;

/// The `tracing` target of every span meant for traces. A log filter that does not name it
/// (the CLI's stderr at `warn`) leaves the spans disabled, at no cost.
pub const TARGET: &str = "execbox::trace";

/// Reads and writes W3C trace context (`traceparent`) for `tracing` spans; implemented by the
/// binary that exports traces (the CLI, with `tracing-opentelemetry`).
pub trait Propagator: Send + Sync {
    /// Makes the remote span that `traceparent` names the parent of `span`; a value that is
    /// not a valid `traceparent` is ignored.
    fn set_parent(&self, span: &tracing::Span, traceparent: &str);

    /// The `traceparent` naming `span`, to give a service we call; `None` when `span` is not
    /// recorded.
    fn traceparent(&self, span: &tracing::Span) -> Option<String>;
}

static PROPAGATOR: OnceLock<Box<dyn Propagator>> = OnceLock::new();

/// Installs the process's propagator, once; `false` when one was installed already.
pub fn set_propagator(propagator: Box<dyn Propagator>) -> bool {
    PROPAGATOR.set(propagator).is_ok()
}

/// Makes the remote span `traceparent` names the parent of `span` (before `span` is
/// entered); nothing without a propagator.
pub fn set_parent(span: &tracing::Span, traceparent: &str) {
    if let Some(propagator) = PROPAGATOR.get() {
        propagator.set_parent(span, traceparent.trim());
    }
}

/// The `traceparent` of the current span, to carry on to a service we call; `None` without a
/// propagator or outside a recorded span.
pub fn current() -> Option<String> {
    PROPAGATOR
        .get()
        .and_then(|propagator| propagator.traceparent(&tracing::Span::current()))
}

/// Records how the work of `span` ended: `execbox.outcome` (`ok`, or the wire error code
/// `error` names), `execbox.duration_ms`, and `otel.status_code = "error"` on a failure. The
/// span must declare the three fields.
pub fn record_outcome(span: &tracing::Span, error: Option<&str>, duration_ms: u64) {
    span.record("execbox.outcome", error.unwrap_or("ok"));
    span.record("execbox.duration_ms", duration_ms);
    if error.is_some() {
        span.record("otel.status_code", "error");
    }
}
