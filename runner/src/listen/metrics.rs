//! What `GET /metrics` reports, in the Prometheus text format (`prometheus-client`): sessions,
//! executions by outcome and duration, tool calls, refused sessions by reason, and the resident
//! memory of the supervisor plus its runner processes. Nothing in it is secret: no token, no
//! code, no tool names, no peer addresses.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use serde::Deserialize;

/// The `Content-Type` of `/metrics` (what `prometheus-client`'s text encoder writes).
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Outcome {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Reason {
    reason: &'static str,
}

/// Why a connection got no session (the `reason` label of `execbox_session_rejections_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rejection {
    /// `--max-sessions` sessions were already served (1013).
    Full,
    /// No valid bearer token (401).
    Unauthorized,
    /// An `Origin` not allowed (403).
    Origin,
    /// The supervisor is draining (503).
    Draining,
    /// The upgrade did not complete within `--handshake-timeout-ms`.
    HandshakeTimeout,
    /// The request or the upgrade was malformed, or the connection failed during it.
    HandshakeFailed,
    /// [`super::MAX_PENDING_HANDSHAKES`] connections were already in their handshake: the
    /// oldest one still sending its request head was evicted, or a new one refused.
    TooManyHandshakes,
    /// No runner process could be started (1011).
    NoRunner,
}

impl Rejection {
    fn label(self) -> &'static str {
        match self {
            Rejection::Full => "full",
            Rejection::Unauthorized => "unauthorized",
            Rejection::Origin => "origin",
            Rejection::Draining => "draining",
            Rejection::HandshakeTimeout => "handshake_timeout",
            Rejection::HandshakeFailed => "handshake_failed",
            Rejection::TooManyHandshakes => "too_many_handshakes",
            Rejection::NoRunner => "no_runner",
        }
    }
}

/// The pids of the runner processes alive (warm or serving), for the memory figure.
pub(crate) type Pids = Arc<Mutex<BTreeSet<u32>>>;

/// The supervisor's metrics.
pub(crate) struct Metrics {
    registry: Registry,
    sessions_active: Gauge,
    sessions: Counter,
    executions: Family<Outcome, Counter>,
    duration: Histogram,
    tool_calls: Counter,
    rejections: Family<Reason, Counter>,
    resident: Gauge,
    pids: Pids,
}

/// The fields of a `done` line that the metrics need; the rest is skipped unread.
#[derive(Deserialize)]
struct Done {
    ok: Option<bool>,
    #[serde(rename = "durationMs")]
    duration_ms: Option<f64>,
    error: Option<DoneError>,
}

#[derive(Deserialize)]
struct DoneError {
    code: Option<String>,
}

/// The error codes of the wire vocabulary; anything else is counted as `other` (the label set
/// stays bounded whatever a runner writes).
const CODES: &[&str] = &[
    "timeout",
    "memory_limit",
    "validation_error",
    "tool_error",
    "runtime_error",
    "serialization_error",
    "internal_error",
];

impl Metrics {
    pub(crate) fn new(pids: Pids) -> Metrics {
        let mut registry = Registry::default();
        let sessions_active = Gauge::default();
        registry.register(
            "execbox_sessions_active",
            "Sessions being served now",
            sessions_active.clone(),
        );
        let sessions = Counter::default();
        registry.register(
            "execbox_sessions",
            "Sessions served since start",
            sessions.clone(),
        );
        let executions = Family::<Outcome, Counter>::default();
        registry.register(
            "execbox_executions",
            "Executions ended, by outcome (ok or the error code)",
            executions.clone(),
        );
        let duration = Histogram::new([
            0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
        ]);
        registry.register(
            "execbox_execution_duration_seconds",
            "Execution durations reported by the runner (durationMs)",
            duration.clone(),
        );
        let tool_calls = Counter::default();
        registry.register(
            "execbox_tool_calls",
            "Tool calls sent by guests",
            tool_calls.clone(),
        );
        let rejections = Family::<Reason, Counter>::default();
        registry.register(
            "execbox_session_rejections",
            "Connections that got no session, by reason",
            rejections.clone(),
        );
        let resident = Gauge::default();
        registry.register(
            "execbox_resident_memory_bytes",
            "Resident memory of the supervisor and its runner processes",
            resident.clone(),
        );
        Metrics {
            registry,
            sessions_active,
            sessions,
            executions,
            duration,
            tool_calls,
            rejections,
            resident,
            pids,
        }
    }

    /// The pids of the runner processes, shared with the spawner.
    pub(crate) fn pids(&self) -> Pids {
        self.pids.clone()
    }

    /// A session started.
    pub(crate) fn session_started(&self) {
        self.sessions.inc();
        self.sessions_active.inc();
    }

    /// A session ended (its process reaped).
    pub(crate) fn session_ended(&self) {
        self.sessions_active.dec();
    }

    /// A connection got no session.
    pub(crate) fn rejected(&self, why: Rejection) {
        self.rejections
            .get_or_create(&Reason {
                reason: why.label(),
            })
            .inc();
    }

    /// A `tool_call` line went to a client.
    pub(crate) fn tool_call(&self) {
        self.tool_calls.inc();
    }

    /// A `done` line went to a client.
    pub(crate) fn done(&self, line: &[u8]) {
        let (outcome, seconds) = match serde_json::from_slice::<Done>(line) {
            Ok(done) => {
                let outcome = if done.ok == Some(true) {
                    "ok".to_owned()
                } else {
                    let code = done.error.and_then(|e| e.code).unwrap_or_default();
                    match CODES.iter().find(|c| **c == code) {
                        Some(c) => (*c).to_owned(),
                        None => "other".to_owned(),
                    }
                };
                (outcome, done.duration_ms.map(|ms| ms / 1000.0))
            }
            Err(_) => ("other".to_owned(), None),
        };
        self.executions.get_or_create(&Outcome { outcome }).inc();
        if let Some(seconds) = seconds.filter(|s| s.is_finite() && *s >= 0.0) {
            self.duration.observe(seconds);
        }
    }

    /// The text exposition, with the memory figure read now.
    pub(crate) fn encode(&self) -> String {
        let pids: Vec<u32> = self
            .pids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .copied()
            .collect();
        let mut bytes = rss_bytes("self").unwrap_or(0);
        for pid in pids {
            bytes += rss_bytes(&pid.to_string()).unwrap_or(0);
        }
        self.resident.set(i64::try_from(bytes).unwrap_or(i64::MAX));
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            tracing::error!("cannot encode the metrics");
        }
        out
    }
}

/// VmRSS of `/proc/{pid}`, in bytes.
fn rss_bytes(pid: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn done_lines_count_by_outcome_and_duration() {
        let m = Metrics::new(Pids::default());
        m.done(br#"{"type":"done","id":"a","ok":true,"durationMs":12,"logs":[],"result":1}"#);
        m.done(br#"{"type":"done","id":"b","ok":false,"durationMs":3,"logs":[],"error":{"code":"timeout","message":"x"}}"#);
        m.done(br#"{"type":"done","id":"c","ok":false,"error":{"code":"made_up"}}"#);
        m.tool_call();
        m.rejected(Rejection::Full);
        let text = m.encode();
        assert!(
            text.contains("execbox_executions_total{outcome=\"ok\"} 1"),
            "{text}"
        );
        assert!(text.contains("execbox_executions_total{outcome=\"timeout\"} 1"));
        assert!(text.contains("execbox_executions_total{outcome=\"other\"} 1"));
        assert!(text.contains("execbox_execution_duration_seconds_count 2"));
        assert!(text.contains("execbox_tool_calls_total 1"));
        assert!(text.contains("execbox_session_rejections_total{reason=\"full\"} 1"));
        assert!(text.contains("execbox_resident_memory_bytes "));
    }
}
