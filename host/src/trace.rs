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

/// The outcome of an execution that paused at a call waiting for approval: recorded by
/// [`record_outcome`] as the span's outcome, without an error status.
pub const AWAITING_APPROVAL: &str = "awaiting_approval";

/// Records how the work of `span` ended: `execbox.outcome` (`ok`, the wire error code `error`
/// names, or [`AWAITING_APPROVAL`] for a pause), `execbox.duration_ms`, and
/// `otel.status_code = "error"` on a failure (never on a pause). The span must declare the
/// three fields.
pub fn record_outcome(span: &tracing::Span, error: Option<&str>, duration_ms: u64) {
    if error == Some(AWAITING_APPROVAL) {
        // A pause is not a failure: the span says where it stopped, with no error status.
        span.record("execbox.outcome", AWAITING_APPROVAL);
        span.record("execbox.duration_ms", duration_ms);
        return;
    }
    span.record("execbox.outcome", error.unwrap_or("ok"));
    span.record("execbox.duration_ms", duration_ms);
    if error.is_some() {
        span.record("otel.status_code", "error");
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Metadata, Subscriber};

    use super::*;

    /// Every field value recorded on a span after its creation, as `name=value`.
    #[derive(Clone, Default)]
    struct Recorded(Arc<Mutex<Vec<String>>>);

    impl Visit for Recorded {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            self.0
                .lock()
                .unwrap()
                .push(format!("{}={value:?}", field.name()));
        }
        fn record_str(&mut self, field: &Field, value: &str) {
            self.0
                .lock()
                .unwrap()
                .push(format!("{}={value}", field.name()));
        }
    }

    impl Subscriber for Recorded {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, values: &Record<'_>) {
            values.record(&mut self.clone());
        }
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, _: &Event<'_>) {}
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    fn recorded(error: Option<&str>) -> Vec<String> {
        let recorder = Recorded::default();
        tracing::subscriber::with_default(recorder.clone(), || {
            let span = tracing::info_span!(
                "execbox.execution",
                execbox.outcome = tracing::field::Empty,
                execbox.duration_ms = tracing::field::Empty,
                otel.status_code = tracing::field::Empty,
            );
            record_outcome(&span, error, 7);
        });
        let fields = recorder.0.lock().unwrap().clone();
        fields
    }

    #[test]
    fn a_failure_has_an_error_status_and_a_pause_does_not() {
        assert_eq!(
            recorded(None),
            ["execbox.outcome=ok", "execbox.duration_ms=7"]
        );
        assert_eq!(
            recorded(Some("timeout")),
            [
                "execbox.outcome=timeout",
                "execbox.duration_ms=7",
                "otel.status_code=error"
            ]
        );
        assert_eq!(
            recorded(Some(AWAITING_APPROVAL)),
            ["execbox.outcome=awaiting_approval", "execbox.duration_ms=7"]
        );
    }
}
