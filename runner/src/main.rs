//! `execbox-runner`: the sandbox binary. Parses flags and hands off to the library.

use clap::Parser;

/// Sandboxed JavaScript runner for execbox: runs guest code in QuickJS and asks the host
/// for every tool call over the execbox protocol (NDJSON on stdio, or WebSocket).
#[derive(Debug, Parser)]
#[command(
    name = "execbox-runner",
    version,
    after_help = "Examples:\n  \
        execbox-runner                         # one NDJSON session on stdin/stdout\n  \
        execbox-runner --listen 127.0.0.1:0    # WebSocket; prints ws://127.0.0.1:PORT\n  \
        EXECBOX_TOKEN=... execbox-runner --listen 0.0.0.0:7070   # clients send Authorization: Bearer ...\n  \
        echo '{\"type\":\"execute\",\"id\":\"a\",\"code\":\"1 + 1\",\"providers\":[]}' | execbox-runner\n\n\
        Diagnostics go to stderr (RUST_LOG=info for more); stdout carries protocol messages only.\n\
        Exit status: 0 when the transport closed normally or a --listen drain (SIGTERM) ended, 1 on a startup error or a second signal while draining (including an \
        OS lockdown that cannot be applied, or a non-loopback --listen without a token), 3 when the \
        watchdog ended a stdio session stuck in a native call."
)]
struct Cli {
    #[command(flatten)]
    runner: execbox_runner::RunnerArgs,
}

fn main() {
    // Most runners are started with no flags (by a host, per session, on the critical path of
    // its first execution): those skip clap, whose parse costs about 0.15 ms of a start of
    // about 2.5 ms. The defaults are the same either way (a test of `RunnerArgs` holds it).
    let runner = if std::env::args_os().len() > 1 {
        Cli::parse().runner
    } else {
        execbox_runner::RunnerArgs::default()
    };
    execbox_runner::init_tracing(runner.log_format);
    // With --listen, each session is served by this same program in stdio mode.
    if let Err(e) = execbox_runner::run(&runner, execbox_runner::ChildCommand::current_exe) {
        eprintln!("execbox-runner: {e:#}");
        std::process::exit(1);
    }
    std::process::exit(0);
}
