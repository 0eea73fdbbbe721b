//! `execbox`: run model-written JavaScript against tools from the command line.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use execbox_host::{
    model_prompt, Executor, ProcessExecutor, RunnerCommand, SessionTimings, ToolSet, ToolsFile,
    WsExecutor, DEFAULT_MAX_CONCURRENT_TOOL_CALLS,
};
use execbox_protocol::RuntimeOptions;

/// Run model-written JavaScript in a sandboxed QuickJS runner, with tools the host owns.
#[derive(Debug, Parser)]
#[command(
    name = "execbox",
    version,
    after_help = "Examples:\n  \
        execbox run examples/hello.js --tools examples/tools.yaml\n  \
        echo 'await text.word_count({ text: \"a b c\" })' | execbox run - --tools examples/tools.yaml\n  \
        execbox types --tools examples/tools.yaml\n  \
        execbox check --tools examples/tools.yaml\n  \
        execbox runner --listen 127.0.0.1:7070 &  execbox run script.js --runner ws://127.0.0.1:7070\n  \
        EXECBOX_TOKEN=... execbox run script.js --runner ws://10.0.0.5:7070   # a token-protected runner\n\n\
        Exit status: 0 when the execution succeeded, 1 when it failed, 2 on bad usage or configuration."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a script; print its result as JSON on stdout and its logs on stderr.
    #[command(after_help = "Examples:\n  \
        execbox run examples/hello.js --tools examples/tools.yaml\n  \
        execbox run - --timeout-ms 500 <<< 'while (true) {}'      # fails with timeout, exit 1\n  \
        execbox run examples/hello.js --tools examples/tools.yaml --json")]
    Run(RunArgs),
    /// Print the TypeScript declarations of a tools file (for prompts).
    #[command(after_help = "Examples:\n  \
        execbox types --tools examples/tools.yaml\n  \
        execbox types --tools examples/tools.yaml --prompt --timeout-ms 10000")]
    Types(TypesArgs),
    /// Check a tools file without running anything: its format, and that every command
    /// exists and is executable; print a one-line summary.
    #[command(after_help = "Examples:\n  \
        execbox check --tools examples/tools.yaml\n\n\
        Exit status: 0 when the file is valid, 2 (with the error on stderr) when not.")]
    Check(CheckArgs),
    /// Be the runner itself (the same code as `execbox-runner`).
    #[command(after_help = "Examples:\n  \
        execbox runner                          # NDJSON on stdin/stdout\n  \
        execbox runner --listen 127.0.0.1:0     # WebSocket; prints ws://127.0.0.1:PORT")]
    Runner(execbox_runner::RunnerArgs),
}

#[derive(Debug, Args)]
struct CheckArgs {
    /// The tools file (YAML).
    #[arg(long, value_name = "FILE")]
    tools: PathBuf,
}

#[derive(Debug, Args)]
struct TypesArgs {
    /// The tools file (YAML).
    #[arg(long, value_name = "FILE")]
    tools: PathBuf,
    /// Print a prompt-ready preamble for a model first: how a program runs, what is missing,
    /// the error shape and the limits; the declarations then carry each tool's error codes.
    #[arg(long)]
    prompt: bool,
    /// With --prompt: the wall-clock limit to state, in milliseconds (as `run --timeout-ms`).
    #[arg(long, value_name = "MS", default_value_t = RuntimeOptions::DEFAULT_TIMEOUT_MS, requires = "prompt")]
    timeout_ms: u64,
    /// With --prompt: the memory limit to state, in bytes (as `run --memory-limit-bytes`).
    #[arg(long, value_name = "BYTES", default_value_t = RuntimeOptions::DEFAULT_MEMORY_LIMIT_BYTES, requires = "prompt")]
    memory_limit_bytes: u64,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// The script to run, or `-` for stdin.
    #[arg(value_name = "FILE|-")]
    script: String,
    /// Tools file (YAML) declaring providers of command tools.
    #[arg(long, value_name = "FILE")]
    tools: Option<PathBuf>,
    /// Wall-clock limit in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = RuntimeOptions::DEFAULT_TIMEOUT_MS)]
    timeout_ms: u64,
    /// Memory limit of the guest's runtime in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = RuntimeOptions::DEFAULT_MEMORY_LIMIT_BYTES)]
    memory_limit_bytes: u64,
    /// Keep at most this many log lines.
    #[arg(long, value_name = "N", default_value_t = RuntimeOptions::DEFAULT_MAX_LOG_LINES)]
    max_log_lines: u64,
    /// Keep at most this many log characters (UTF-16 units).
    #[arg(long, value_name = "N", default_value_t = RuntimeOptions::DEFAULT_MAX_LOG_CHARS)]
    max_log_chars: u64,
    /// Run at most this many tool calls at once; the others wait in arrival order.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CONCURRENT_TOOL_CALLS as u32, value_parser = clap::value_parser!(u32).range(1..))]
    max_concurrent_tool_calls: u32,
    /// Use the runner at this WebSocket address instead of spawning one (`ws://` or `wss://`;
    /// a Service in front of many runners works: turned-away sessions are retried).
    #[arg(long, value_name = "ws://ADDR")]
    runner: Option<String>,
    /// With a `wss://` --runner: also trust the CA certificates in this PEM file.
    #[arg(long, value_name = "FILE", requires = "runner")]
    runner_ca: Option<PathBuf>,
    /// With --runner: send this file's content (one trailing newline trimmed) as the bearer
    /// token; without it, the EXECBOX_TOKEN environment variable is used if set.
    #[arg(long, value_name = "FILE", requires = "runner")]
    token_file: Option<PathBuf>,
    /// Print the whole `done` envelope as JSON on stdout, whatever the outcome.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    execbox_runner::init_tracing(match &cli.command {
        Command::Runner(args) => args.log_format,
        _ => execbox_runner::LogFormat::Text,
    });
    let outcome = match cli.command {
        // With --listen, each session is served by `execbox runner` in stdio mode.
        Command::Runner(args) => execbox_runner::run(&args, || {
            execbox_runner::ChildCommand::current_exe().map(|c| c.arg("runner"))
        })
        .map(|()| ExitCode::SUCCESS),
        Command::Types(args) => types(&args),
        Command::Check(args) => check(&args),
        Command::Run(args) => run(args),
    };
    match outcome {
        Ok(code) => code,
        Err(e) => {
            eprintln!("execbox: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn load_tools(path: Option<&PathBuf>) -> anyhow::Result<ToolSet> {
    let Some(path) = path else {
        return Ok(ToolSet::empty());
    };
    let providers = ToolsFile::load_checked(path)?;
    ToolSet::new(providers).with_context(|| format!("invalid tools in {}", path.display()))
}

fn check(args: &CheckArgs) -> anyhow::Result<ExitCode> {
    let providers = ToolsFile::load_checked(&args.tools)?;
    ToolSet::new(providers.clone())
        .with_context(|| format!("invalid tools in {}", args.tools.display()))?;
    let tools: usize = providers.iter().map(|p| p.tools().len()).sum();
    let names: Vec<&str> = providers.iter().map(|p| p.name()).collect();
    println!(
        "{}: ok: {} provider{} ({}), {tools} tool{}",
        args.tools.display(),
        providers.len(),
        if providers.len() == 1 { "" } else { "s" },
        names.join(", "),
        if tools == 1 { "" } else { "s" },
    );
    Ok(ExitCode::SUCCESS)
}

fn types(args: &TypesArgs) -> anyhow::Result<ExitCode> {
    let set = load_tools(Some(&args.tools))?;
    let text = if args.prompt {
        let options = RuntimeOptions {
            timeout_ms: args.timeout_ms,
            memory_limit_bytes: args.memory_limit_bytes,
            ..RuntimeOptions::default()
        };
        model_prompt(&set, &options)
    } else {
        format!("{}\n", set.declarations())
    };
    let mut out = std::io::stdout().lock();
    if out.write_all(text.as_bytes()).is_err() {
        return Ok(ExitCode::SUCCESS); // broken pipe: the reader is gone, which is fine
    }
    Ok(ExitCode::SUCCESS)
}

fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
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
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let timings = SessionTimings {
        max_concurrent_tool_calls: args.max_concurrent_tool_calls as usize,
        ..SessionTimings::default()
    };
    let result = runtime.block_on(async {
        let executor: Box<dyn Executor> = match &args.runner {
            Some(url) => {
                let mut executor = WsExecutor::new(url.clone()).with_timings(timings);
                if let Some(ca) = &args.runner_ca {
                    let pem = std::fs::read(ca)
                        .with_context(|| format!("cannot read --runner-ca {}", ca.display()))?;
                    executor = executor
                        .with_tls_roots_pem(&pem)
                        .map_err(|e| anyhow::anyhow!("--runner-ca {}: {e}", ca.display()))?;
                }
                match execbox_runner::listen::load_token(args.token_file.as_deref())? {
                    Some(token) => Box::new(executor.with_token(token)),
                    None => Box::new(executor),
                }
            }
            None => {
                let exe = std::env::current_exe().context("cannot locate the execbox binary")?;
                Box::new(
                    ProcessExecutor::new(RunnerCommand::new(exe).arg("runner"))
                        .with_timings(timings),
                )
            }
        };
        let cancel = tokio_util::sync::CancellationToken::new();
        let on_signal = cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                on_signal.cancel();
            }
        });
        anyhow::Ok(executor.execute(&code, &tools, options, cancel).await)
    })?;

    let mut stderr = std::io::stderr().lock();
    for line in &result.logs {
        let _ = writeln!(stderr, "{line}");
    }
    let mut stdout = std::io::stdout().lock();
    if args.json {
        let _ = writeln!(stdout, "{}", result.to_done_json());
    }
    match &result.outcome {
        Ok(value) => {
            if let (false, Some(raw)) = (args.json, value) {
                let pretty = result
                    .value()
                    .and_then(|v| serde_json::to_string_pretty(&v).ok())
                    .unwrap_or_else(|| raw.get().to_owned());
                let _ = writeln!(stdout, "{pretty}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(error) => {
            let _ = writeln!(
                stderr,
                "execbox: execution failed: {}: {}",
                error.code, error.message
            );
            Ok(ExitCode::from(1))
        }
    }
}
