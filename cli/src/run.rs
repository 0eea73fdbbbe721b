//! `execbox run`: one execution, with Ctrl-C and SIGTERM stopping it cleanly.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use anyhow::Context as _;
use execbox_host::{
    supervisor, CancellationToken, ExecuteRequest, ExecuteResult, Executor, ProcessExecutor,
    RunnerCommand, RuntimeOptions, SessionTimings, ToolSet, ToolsFile, WsExecutor,
};
use execbox_policy::TerminalApprover;

use crate::args::RunArgs;
use crate::signals::{StopSignals, EXIT_INTERRUPTED};

/// Loads a tools file into a tool set, or the empty set without one.
pub fn load_tools(path: Option<&PathBuf>) -> anyhow::Result<ToolSet> {
    let Some(path) = path else {
        return Ok(ToolSet::empty());
    };
    let providers = ToolsFile::load_checked(path)?;
    ToolSet::new(providers).with_context(|| format!("invalid tools in {}", path.display()))
}

pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let code = if args.script == "-" {
        let mut code = String::new();
        std::io::stdin()
            .read_to_string(&mut code)
            .context("cannot read the script from stdin")?;
        code
    } else {
        std::fs::read_to_string(&args.script)
            .with_context(|| format!("cannot read script {}", args.script))?
    };
    let tools = load_tools(args.tools.as_ref())?;
    let options = RuntimeOptions {
        timeout_ms: args.timeout_ms,
        memory_limit_bytes: args.memory_limit_bytes,
        max_log_lines: args.max_log_lines,
        max_log_chars: args.max_log_chars,
    };
    let timings = SessionTimings {
        max_concurrent_tool_calls: args.max_concurrent_tool_calls as usize,
        ..SessionTimings::default()
    };
    let enforcement = args
        .enforce
        .options()
        .open()?
        .asking(Arc::new(TerminalApprover::new()));
    let request = ExecuteRequest::new(code)
        .tools(&tools)
        .options(options)
        .unawaited(args.unawaited.into())
        .guard(Arc::new(enforcement));
    let executor = executor(&args, timings)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let cancel = CancellationToken::new();
    let request = request.cancel_on(cancel.clone());
    let stopped_by = Arc::new(AtomicU8::new(0));
    let result = runtime.block_on(async {
        tokio::spawn(watch_signals(cancel, stopped_by.clone()));
        executor.execute(request).await
    });
    // Whatever the runner did, no tool process of ours outlives us.
    supervisor::kill_all();
    print(&result, args.json);
    Ok(match stopped_by.load(Ordering::SeqCst) {
        0 if result.is_ok() => ExitCode::SUCCESS,
        0 => ExitCode::from(1),
        signal => ExitCode::from(signal),
    })
}

/// `runner` with its ceilings raised to what the flags ask for: the runner `execbox run`
/// spawns serves this one execution of ours, so what we ask is what it must allow (a
/// ceiling is only ever raised, never set below the runner's defaults).
fn raised_ceilings(args: &RunArgs, runner: RunnerCommand) -> RunnerCommand {
    let asks = [
        (
            "--max-timeout-ms",
            args.timeout_ms,
            execbox_runner::DEFAULT_MAX_TIMEOUT_MS,
        ),
        (
            "--max-memory-limit-bytes",
            args.memory_limit_bytes,
            execbox_runner::DEFAULT_MAX_MEMORY_LIMIT_BYTES,
        ),
        (
            "--max-log-lines",
            args.max_log_lines,
            execbox_runner::DEFAULT_MAX_LOG_LINES,
        ),
        (
            "--max-log-chars",
            args.max_log_chars,
            execbox_runner::DEFAULT_MAX_LOG_CHARS,
        ),
    ];
    asks.into_iter()
        .filter(|(_, asked, ceiling)| asked > ceiling)
        .fold(runner, |runner, (flag, asked, _)| {
            runner.arg(flag).arg(asked.to_string())
        })
}

/// The executor the flags ask for: a remote runner, or this binary as a child runner.
fn executor(args: &RunArgs, timings: SessionTimings) -> anyhow::Result<Box<dyn Executor>> {
    let Some(url) = &args.runner else {
        let executor =
            ProcessExecutor::new(raised_ceilings(args, args.diagnostics.runner_command()?))?;
        return Ok(Box::new(executor.with_timings(timings)));
    };
    let mut executor = WsExecutor::new(url.clone())
        .context("--runner")?
        .with_timings(timings);
    if let Some(ca) = &args.runner_ca {
        let pem = std::fs::read(ca)
            .with_context(|| format!("cannot read --runner-ca {}", ca.display()))?;
        executor = executor
            .with_tls_roots_pem(&pem)
            .with_context(|| format!("--runner-ca {}", ca.display()))?;
    }
    if let Some(token) = execbox_runner::listen::load_token(args.token_file.as_deref())? {
        executor = executor.with_token(token);
    }
    Ok(Box::new(executor))
}

/// Ctrl-C cancels the execution (a second one exits at once, killing tool processes first);
/// SIGTERM cancels it too. Records which signal stopped it, as the exit status to use.
async fn watch_signals(cancel: CancellationToken, stopped_by: Arc<AtomicU8>) {
    let mut signals = StopSignals::new();
    while let Some(status) = signals.next().await {
        if cancel.is_cancelled() {
            // The second signal: stop waiting for a clean end.
            supervisor::kill_all();
            eprintln!("execbox: stopped at once");
            crate::telemetry::shutdown();
            std::process::exit(status.into());
        }
        stopped_by.store(status, Ordering::SeqCst);
        if status == EXIT_INTERRUPTED {
            eprintln!("execbox: cancelling the execution (Ctrl-C again to stop at once)");
        }
        cancel.cancel();
    }
}

/// Logs on stderr; the result (or the whole `done` with `--json`) on stdout; the failure on
/// stderr.
fn print(result: &ExecuteResult, json: bool) {
    let mut stderr = std::io::stderr().lock();
    for line in &result.logs {
        let _ = writeln!(stderr, "{line}");
    }
    let mut stdout = std::io::stdout().lock();
    if json {
        let _ = writeln!(stdout, "{}", result.to_done_json());
    }
    match &result.outcome {
        Ok(Some(raw)) if !json => {
            let pretty = result
                .value()
                .and_then(|v| serde_json::to_string_pretty(&v).ok())
                .unwrap_or_else(|| raw.get().to_owned());
            let _ = writeln!(stdout, "{pretty}");
        }
        Ok(_) => {}
        Err(_) if result.was_cancelled() => {
            let _ = writeln!(stderr, "execbox: execution cancelled");
        }
        Err(error) => {
            let _ = writeln!(stderr, "execbox: execution failed: {error}");
        }
    }
}
