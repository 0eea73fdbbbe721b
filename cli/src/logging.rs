//! Diagnostics of the `execbox` CLI: a `tracing` subscriber on stderr, set by `-v`/`-q`,
//! `--log-format` and `RUST_LOG`.

use clap::ValueEnum;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

use crate::telemetry::TracesLayer;

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// The level `-v` (counted) and `-q` ask for.
pub fn level(verbose: u8, quiet: bool) -> &'static str {
    match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "info",
        (false, 2) => "debug",
        (false, _) => "trace",
    }
}

/// Installs the subscriber. `RUST_LOG`, when set, wins; else `verbose` (`-v` count) and `quiet`
/// pick the level: errors with `-q`, warnings by default, then info, debug, trace. `traces`, the
/// export of spans (with a filter of its own), is added beside the log lines when given; the
/// lines leave the trace spans out unless `RUST_LOG` names their target.
pub fn init(verbose: u8, quiet: bool, format: LogFormat, traces: Option<TracesLayer>) {
    let level = level(verbose, quiet);
    let mut filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    // The trace spans are for the export: log lines do not carry them unless RUST_LOG names
    // their target (RUST_LOG=info,execbox::trace=info).
    let named = std::env::var("RUST_LOG").is_ok_and(|v| v.contains(execbox_host::trace::TARGET));
    if !named {
        if let Ok(off) = format!("{}=off", execbox_host::trace::TARGET).parse() {
            filter = filter.add_directive(off);
        }
    }
    // The MCP SDK's OAuth code logs the authorization code at debug: never below info there,
    // whatever RUST_LOG says (the last directive for a target wins).
    if let Ok(capped) = "rmcp::transport::auth=info".parse() {
        filter = filter.add_directive(capped);
    }
    let lines = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_target(verbose >= 2);
    let lines = match format {
        LogFormat::Text => lines
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => lines.json().with_ansi(false).with_filter(filter).boxed(),
    };
    let layers: Vec<TracesLayer> = std::iter::once(lines).chain(traces).collect();
    let _ = tracing_subscriber::registry().with(layers).try_init();
}
