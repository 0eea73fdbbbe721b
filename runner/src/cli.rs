//! Command-line surface of the runner, shared by `execbox-runner` and `execbox runner`.

use std::io::Write;

use clap::Args;
use execbox_protocol::DEFAULT_MAX_MESSAGE_BYTES;

use crate::lockdown::Sandbox;
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

    /// Tool calls of one execution sent and not yet answered, at most; further calls wait in
    /// the sandbox (in call order, counted against its memory limit) until results arrive.
    #[arg(long, value_name = "N", default_value_t = crate::session::DEFAULT_MAX_PENDING_TOOL_CALLS as u32,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_pending_tool_calls: u32,

    /// DANGEROUS: serve without the OS lockdown (Landlock, seccomp, rlimits), which is otherwise
    /// installed before any guest input is read, and without which the runner refuses to start.
    /// QuickJS still confines the guest, but a bug in the engine would then give guest code
    /// the runner's full access to files, the network and process creation. Only for
    /// debugging, or where the lockdown cannot be applied (not Linux, no Landlock, no seccomp).
    #[arg(long)]
    pub insecure_no_sandbox: bool,
}

/// Runs the runner with parsed flags until its transport ends. Unless `insecure_no_sandbox`
/// is set, the transport locks the process down (see [`crate::lockdown`]) before it reads
/// guest input, and fails if it cannot.
pub fn run(args: &RunnerArgs) -> anyhow::Result<()> {
    let limits = SessionLimits {
        max_message_bytes: args.max_message_bytes,
        max_pending_tool_calls: args.max_pending_tool_calls as usize,
    };
    let sandbox = if args.insecure_no_sandbox {
        tracing::warn!(
            "--insecure-no-sandbox: running WITHOUT the OS lockdown; an engine bug would give \
             guest code this process's full access to files, network and processes"
        );
        Sandbox::Off
    } else {
        Sandbox::Enforce
    };
    match &args.listen {
        None => crate::stdio::serve(limits, sandbox),
        Some(addr) => crate::ws::serve(addr, args.max_sessions, limits, sandbox, |bound| {
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
