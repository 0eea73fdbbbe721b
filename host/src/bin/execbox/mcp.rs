//! `execbox mcp`: code mode for any MCP client, over the upstream servers of an `mcp.json` and
//! the tools of a tools file, served over stdio or streamable HTTP.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use execbox_host::{
    check_exposure, kill_all_upstreams, serve_http, serve_stdio, CodeModeOptions, CodeModeServer,
    CommandTool, HttpOptions, McpAccess, McpConfig, PoolOptions, PooledExecutor, RuntimeOptions,
    SessionTimings, ToolsFile, UpstreamOptions, Upstreams, DEFAULT_MAX_CONCURRENT_TOOL_CALLS,
    MCP_PATH,
};
use tokio_util::sync::CancellationToken;

use crate::args::{Diagnostics, EnforceArgs};
use crate::enforce::Enforcement;
use crate::signals::StopSignals;
use crate::size::parse_size;

#[derive(Debug, Args)]
pub struct McpArgs {
    /// The upstream MCP servers: a JSON file in the shape MCP clients use,
    /// {"mcpServers": {"NAME": {"command", "args", "env", "cwd"} | {"url", "headers"}}}.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// A tools file (YAML) whose providers join as more namespaces.
    #[arg(long, value_name = "FILE")]
    pub tools: Option<PathBuf>,
    /// Serve streamable HTTP on ADDR (at /mcp) instead of stdio; a non-loopback ADDR needs a
    /// token.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// With --http: the bearer token, this file's content (one trailing newline trimmed);
    /// without it, EXECBOX_TOKEN if set.
    #[arg(long, value_name = "FILE", requires = "http")]
    pub token_file: Option<PathBuf>,
    /// With --http: also accept this Host (a name or name:port; repeatable). Loopback names are
    /// always accepted, and the address given when it is a specific one.
    #[arg(long, value_name = "HOST", requires = "http")]
    pub allow_host: Vec<String>,
    /// With --http: accept requests from this browser origin (e.g. https://app.example.com:443,
    /// http://localhost:*; repeatable). Other Origin headers are refused.
    #[arg(long, value_name = "ORIGIN", requires = "http")]
    pub allow_origin: Vec<String>,
    /// Wall-clock limit of each program, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    pub timeout_ms: u64,
    /// Memory limit of each program's runtime: bytes, or with a unit (64MiB, 1GiB).
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = parse_size)]
    pub memory_limit_bytes: u64,
    /// Cut execute_code's answer at this many characters (with a marker saying so).
    #[arg(long, value_name = "N", default_value_t = 24_000, value_parser = clap::value_parser!(u64).range(100..))]
    pub max_output_chars: u64,
    /// Warm runner processes, and so programs run at once.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub runners: u32,
    /// Run at most this many tool calls of one program at once.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CONCURRENT_TOOL_CALLS as u32, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent_tool_calls: u32,
    /// How long an upstream server may take to start and list its tools, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub startup_timeout: u64,
    /// Who runs the programs and under which policy: upstream tools need the permission
    /// `server:tool` (`github:create_issue`, or `github:*`); approvals are asked of the MCP
    /// client's user through elicitation unless --approve-all.
    #[command(flatten)]
    pub enforce: EnforceArgs,
    #[command(flatten)]
    pub diagnostics: Diagnostics,
}

pub fn run(args: McpArgs) -> anyhow::Result<ExitCode> {
    if args.config.is_none() && args.tools.is_none() {
        anyhow::bail!("give --config FILE (upstream MCP servers), --tools FILE, or both");
    }
    let config = match &args.config {
        Some(path) => McpConfig::load(path)?,
        None => McpConfig::default(),
    };
    let local = match &args.tools {
        Some(path) => ToolsFile::load(path)?,
        None => Vec::new(),
    };
    let enforcement = Enforcement::load(&args.enforce)?;
    let http = match args.http {
        Some(addr) => {
            let token = execbox_runner::listen::load_token(args.token_file.as_deref())?;
            check_exposure(addr, token.as_deref())?;
            Some((
                addr,
                HttpOptions {
                    token,
                    allowed_hosts: args.allow_host.clone(),
                    allowed_origins: args.allow_origin.clone(),
                },
            ))
        }
        None => None,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let status = runtime.block_on(serve(args, config, local, enforcement, http))?;
    // No upstream or tool process outlives us, whatever happened.
    kill_all_upstreams();
    CommandTool::kill_all();
    runtime.shutdown_timeout(Duration::from_millis(100));
    Ok(status)
}

async fn serve(
    args: McpArgs,
    config: McpConfig,
    local: Vec<execbox_host::Provider>,
    enforcement: Enforcement,
    http: Option<(SocketAddr, HttpOptions)>,
) -> anyhow::Result<ExitCode> {
    // Bind first: a port in use is a usage error, before any upstream is started.
    let listener = match &http {
        Some((addr, _)) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr}"))?,
        ),
        None => None,
    };
    let upstream_options = UpstreamOptions {
        startup_timeout: Duration::from_secs(args.startup_timeout),
        ..UpstreamOptions::default()
    };
    // Started in the background: the client's `initialize` is answered at once, and its
    // first `tools/list` (or call) waits until every upstream has started or failed.
    let upstreams = Upstreams::launch(&config, local, upstream_options)?;
    let runner = args.diagnostics.runner_command()?;
    let pool = PoolOptions {
        size: args.runners as usize,
        timings: SessionTimings {
            max_concurrent_tool_calls: args.max_concurrent_tool_calls as usize,
            ..SessionTimings::default()
        },
        ..PoolOptions::default()
    };
    let executor = PooledExecutor::new(runner, pool)?;
    let options = CodeModeOptions {
        runtime: RuntimeOptions {
            timeout_ms: args.timeout_ms,
            memory_limit_bytes: args.memory_limit_bytes,
            ..RuntimeOptions::default()
        },
        max_output_chars: args.max_output_chars as usize,
        access: McpAccess {
            principal: enforcement.principal,
            rate_limits: enforcement.rate_limits,
            audit: enforcement.audit,
            approve_all: enforcement.approve_all,
        },
        ..CodeModeOptions::default()
    };
    let server = CodeModeServer::new(upstreams.clone(), Arc::new(executor), options);
    let shutdown = CancellationToken::new();
    let stopped_by = Arc::new(AtomicU8::new(0));
    tokio::spawn(watch_signals(shutdown.clone(), stopped_by.clone()));
    let served = match (listener, http) {
        (Some(listener), Some((_, options))) => {
            let addr = listener.local_addr()?;
            eprintln!("execbox mcp: serving http://{addr}{MCP_PATH}");
            serve_http(server, listener, options, shutdown.clone()).await
        }
        _ => {
            tokio::select! {
                served = serve_stdio(server) => served,
                () = shutdown.cancelled() => Ok(()),
            }
        }
    };
    shutdown.cancel();
    upstreams.shutdown().await;
    match stopped_by.load(Ordering::SeqCst) {
        0 => {
            served.context("serving MCP")?;
            Ok(ExitCode::SUCCESS)
        }
        signal => Ok(ExitCode::from(signal)),
    }
}

/// SIGINT or SIGTERM stop serving (recording which, as the exit status); a second one exits
/// at once, killing the upstreams and tool processes first.
async fn watch_signals(shutdown: CancellationToken, stopped_by: Arc<AtomicU8>) {
    let mut signals = StopSignals::new();
    while let Some(status) = signals.next().await {
        if stopped_by.load(Ordering::SeqCst) != 0 {
            kill_all_upstreams();
            CommandTool::kill_all();
            eprintln!("execbox mcp: stopped at once");
            std::process::exit(status.into());
        }
        stopped_by.store(status, Ordering::SeqCst);
        shutdown.cancel();
    }
}
