//! Traces over OTLP: the CLI's spans exported when the standard `OTEL_EXPORTER_OTLP_*`
//! variables ask for it, and nothing at all (no exporter, no thread) when they do not.
//!
//! The libraries make `tracing` spans under [`execbox_host::trace::TARGET`]; here they become
//! OpenTelemetry spans (`tracing-opentelemetry`), batched on the SDK's own thread and sent over
//! OTLP/HTTP with protobuf bodies (a blocking client: the batch thread has no Tokio runtime).
//! The W3C `traceparent` hook of [`execbox_host::trace`] is installed here too. Every span
//! still open or waiting in the batch is sent before the process exits ([`shutdown`]).

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::Context as _;
use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::{TraceContextExt as _, TracerProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::{Layer, Registry};

/// The variables that turn the export on (either endpoint).
const ENDPOINTS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// The variables that choose the protocol, the specific one first.
const PROTOCOLS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
];

/// The one protocol spoken.
const HTTP_PROTOBUF: &str = "http/protobuf";

/// The service name without `OTEL_SERVICE_NAME`.
const DEFAULT_SERVICE_NAME: &str = "execbox";

/// The longest wait for the last spans to be sent when the process exits.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// The subscriber layer that turns spans into OpenTelemetry spans, with its own filter.
pub type TracesLayer = Box<dyn Layer<Registry> + Send + Sync>;

static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// The export of this process's traces; dropping it sends what is left ([`shutdown`]).
pub struct Telemetry {
    layer: Option<TracesLayer>,
}

impl Telemetry {
    /// No export.
    pub fn off() -> Telemetry {
        Telemetry { layer: None }
    }

    /// Starts the export when `OTEL_EXPORTER_OTLP_ENDPOINT` or
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set (and `OTEL_SDK_DISABLED` is not `true`);
    /// else [`Telemetry::off`]. Fails on a protocol other than `http/protobuf`. Call it
    /// before any Tokio runtime is started.
    pub fn from_env() -> anyhow::Result<Telemetry> {
        let set = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let disabled = set("OTEL_SDK_DISABLED").is_some_and(|v| v.trim() == "true");
        if disabled || ENDPOINTS.iter().all(|name| set(name).is_none()) {
            return Ok(Telemetry::off());
        }
        if let Some((name, value)) = PROTOCOLS
            .iter()
            .find_map(|name| set(name).map(|value| (name, value)))
        {
            if value.trim() != HTTP_PROTOBUF {
                anyhow::bail!(
                    "{name}={value}: execbox exports traces over OTLP/HTTP with protobuf only; \
                     set it to {HTTP_PROTOBUF} (or unset it), with a collector's HTTP endpoint \
                     (port 4318)"
                );
            }
        }
        let service = set("OTEL_SERVICE_NAME").unwrap_or_else(|| DEFAULT_SERVICE_NAME.into());
        // The HTTP client is reqwest over rustls without a default crypto provider: ours.
        let _ = rustls::crypto::ring::default_provider().install_default();
        // The endpoint, headers and timeout come from the standard variables.
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .build()
            .context("cannot set up the export of traces (OTEL_EXPORTER_OTLP_*)")?;
        let resource = Resource::builder()
            .with_service_name(service)
            .with_attribute(opentelemetry::KeyValue::new(
                "service.version",
                env!("CARGO_PKG_VERSION"),
            ))
            .build();
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build();
        let tracer = provider.tracer("execbox");
        let _ = PROVIDER.set(provider);
        execbox_host::trace::set_propagator(Box::new(W3cTraceContext));
        // Only execbox's trace spans, whatever -v or RUST_LOG say about the logs on stderr.
        let filter = Targets::new().with_target(execbox_host::trace::TARGET, tracing::Level::INFO);
        let layer = tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_filter(filter)
            .boxed();
        Ok(Telemetry { layer: Some(layer) })
    }

    /// The layer to add to the subscriber, once; `None` without an export.
    pub fn layer(&mut self) -> Option<TracesLayer> {
        self.layer.take()
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        shutdown();
    }
}

/// Sends the spans that have ended and not been sent yet, and stops the export; call it before
/// `std::process::exit`. Nothing without an export, or once done.
pub fn shutdown() {
    if let Some(provider) = PROVIDER.get() {
        match provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT) {
            Ok(()) | Err(opentelemetry_sdk::error::OTelSdkError::AlreadyShutdown) => {}
            Err(_) => eprintln!(
                "execbox: the last traces could not be sent to the OTLP endpoint \
                 (OTEL_EXPORTER_OTLP_ENDPOINT): is the collector up?"
            ),
        }
    }
}

/// W3C Trace Context for the libraries' hook, over `tracing-opentelemetry`.
struct W3cTraceContext;

/// The header (and `_meta` key) of W3C Trace Context.
const TRACEPARENT: &str = "traceparent";

impl execbox_host::trace::Propagator for W3cTraceContext {
    fn set_parent(&self, span: &tracing::Span, traceparent: &str) {
        let carrier = HashMap::from([(TRACEPARENT.to_owned(), traceparent.to_owned())]);
        let parent = TraceContextPropagator::new().extract(&carrier);
        if parent.span().span_context().is_valid() {
            let _ = span.set_parent(parent);
        }
    }

    fn traceparent(&self, span: &tracing::Span) -> Option<String> {
        let context = span.context();
        if !context.span().span_context().is_valid() {
            return None;
        }
        let mut carrier = HashMap::new();
        TraceContextPropagator::new().inject_context(&context, &mut carrier);
        carrier.remove(TRACEPARENT)
    }
}
