//! Command-line surface of the runner, shared by `execbox-runner` and `execbox runner`.

use std::io::Write;

use clap::Args;
use execbox_protocol::DEFAULT_MAX_MESSAGE_BYTES;

use crate::session::SessionLimits;

/// Flags of the runner. With none, it serves one NDJSON session on stdin/stdout.
#[derive(Debug, Clone, Args)]
pub struct RunnerArgs {
    /// Serve WebSocket on ADDR (e.g. 127.0.0.1:0) instead of stdio; prints `ws://HOST:PORT` on
    /// one stdout line once bound. Each connection is one session.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,

    /// With --listen: at most N concurrent sessions; further connections are closed at once
    /// with close code 1013 (try again later).
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub max_sessions: usize,

    /// Refuse any message (line or frame) larger than N bytes, before parsing it.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_MESSAGE_BYTES)]
    pub max_message_bytes: usize,
}

/// Runs the runner with parsed flags until its transport ends.
pub fn run(args: &RunnerArgs) -> anyhow::Result<()> {
    let limits = SessionLimits {
        max_message_bytes: args.max_message_bytes,
    };
    match &args.listen {
        None => crate::stdio::serve(limits),
        Some(addr) => crate::ws::serve(addr, args.max_sessions, limits, |bound| {
            let mut stdout = std::io::stdout().lock();
            let _ = writeln!(stdout, "ws://{bound}");
            let _ = stdout.flush();
            tracing::info!("listening on ws://{bound}");
        }),
    }
}

/// Sends `tracing` output to stderr, filtered by `RUST_LOG` (default: warnings).
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}
