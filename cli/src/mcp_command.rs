//! `execbox mcp`: code mode for any MCP client, over the upstream servers of an `mcp.json` and
//! the tools of a tools file, served over stdio or streamable HTTP.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use execbox_host::{
    supervisor, PoolOptions, PooledExecutor, RuntimeOptions, SessionTimings, ToolsFile,
};
use execbox_mcp::{
    check_exposure, serve_http, serve_stdio, CodeModeOptions, CodeModeServer, DurablePauses,
    HttpOptions, McpConfig, UpstreamOptions, Upstreams, MCP_PATH,
};
use execbox_policy::{Enforcement, ObservedResults};
use tokio_util::sync::CancellationToken;

use crate::args::{McpAccount, McpArgs};
use crate::programs::{Origin, StorePauses};
use crate::signals::StopSignals;

pub fn run(mut args: McpArgs) -> anyhow::Result<ExitCode> {
    if let Some(account) = args.account.take() {
        return sign(account);
    }
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
    let enforce = args.enforce.options();
    let enforcement = enforce.open()?;
    // The shapes of tools' results live beside the rate-limit counters, when they are kept
    // in a file or a database.
    let observed = Arc::new(match enforce.state_location(enforcement.policy()) {
        Some(location) => ObservedResults::open_at(location)?,
        None => ObservedResults::in_memory(),
    });
    let http = match args.http {
        Some(addr) => {
            let token = execbox_runner::listen::load_token(args.token_file.as_deref())?;
            check_exposure(addr, token.as_deref())?;
            // Before anything is opened: connections are capped by the descriptors the process
            // may open (execbox_http::connection_cap).
            if let Err(e) = execbox_http::raise_open_files_limit() {
                tracing::warn!("cannot raise the open-files limit to its hard limit: {e}");
            }
            Some((
                addr,
                HttpOptions {
                    token,
                    allowed_hosts: args.allow_host.clone(),
                    allowed_origins: args.allow_origin.clone(),
                    serve: args.door.options(),
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
    let status = runtime.block_on(serve(args, config, local, enforcement, observed, http))?;
    // No upstream or tool process outlives us, whatever happened.
    supervisor::kill_all();
    runtime.shutdown_timeout(Duration::from_millis(100));
    Ok(status)
}

/// `execbox mcp login|logout NAME --config FILE`.
fn sign(account: McpAccount) -> anyhow::Result<ExitCode> {
    let (name, path) = match &account {
        McpAccount::Login { name, config, .. } | McpAccount::Logout { name, config } => {
            (name, config)
        }
    };
    let config = McpConfig::load(path)?;
    let Some(server) = config.servers.iter().find(|s| &s.name == name) else {
        let names: Vec<&str> = config.servers.iter().map(|s| s.name.as_str()).collect();
        anyhow::bail!(
            "{} has no server {name:?}; its servers are {}",
            path.display(),
            if names.is_empty() {
                "none".to_owned()
            } else {
                names.join(", ")
            }
        );
    };
    match account {
        McpAccount::Login { timeout_ms, .. } => {
            let options = execbox_mcp::oauth::SignInOptions {
                timeout: Duration::from_millis(timeout_ms),
                ..Default::default()
            };
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("cannot start the async runtime")?;
            let signed = runtime
                .block_on(execbox_mcp::oauth::sign_in(server, &options))
                .map_err(anyhow::Error::msg)?;
            println!("{signed}");
        }
        McpAccount::Logout { .. } => {
            if execbox_mcp::oauth::sign_out(server).map_err(anyhow::Error::msg)? {
                println!("signed out of {name}: its tokens are forgotten");
            } else {
                println!("{name} had no sign-in to forget");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn serve(
    args: McpArgs,
    config: McpConfig,
    local: Vec<execbox_host::Provider>,
    enforcement: Enforcement,
    observed: Arc<ObservedResults>,
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
        policy: enforcement.policy().cloned(),
        observed,
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
    let executor: Arc<dyn execbox_host::Executor> = Arc::new(PooledExecutor::new(runner, pool)?);
    let pauses: Option<Arc<dyn DurablePauses>> = match args.no_pause {
        true => None,
        false => {
            let roots = crate::capabilities::roots_of(args.project.as_deref())?;
            match crate::capabilities::db_location_of(args.db.as_deref(), &roots) {
                Ok(db) => {
                    let origin = Origin::of(
                        args.config.as_deref(),
                        args.tools.as_deref(),
                        args.startup_timeout,
                    )?;
                    Some(Arc::new(StorePauses::new(
                        db,
                        roots,
                        origin,
                        enforcement.clone(),
                        executor.clone(),
                    )))
                }
                // Nowhere to keep a paused program: such calls are refused, as with
                // --no-pause, and serving goes on.
                Err(e) => {
                    tracing::warn!(
                        "programs cannot pause for an operator's approval ({e:#}); calls \
                         nobody can approve now are refused"
                    );
                    None
                }
            }
        }
    };
    let options = CodeModeOptions {
        runtime: RuntimeOptions {
            timeout_ms: args.timeout_ms,
            memory_limit_bytes: args.memory_limit_bytes,
            ..RuntimeOptions::default()
        },
        max_output_chars: args.max_output_chars as usize,
        enforcement,
        pauses,
        ..CodeModeOptions::default()
    };
    let server = CodeModeServer::new(upstreams.clone(), executor, options);
    let shutdown = CancellationToken::new();
    let stopped_by = Arc::new(AtomicU8::new(0));
    tokio::spawn(watch_signals(shutdown.clone(), stopped_by.clone()));
    let served = match (listener, http) {
        (Some(listener), Some((_, options))) => {
            let addr = listener.local_addr()?;
            eprintln!("execbox mcp: serving http://{addr}{MCP_PATH}");
            serve_http(server, listener, options, shutdown.clone())
                .await
                .map_err(std::io::Error::other)
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
            supervisor::kill_all();
            eprintln!("execbox mcp: stopped at once");
            crate::telemetry::shutdown();
            std::process::exit(status.into());
        }
        stopped_by.store(status, Ordering::SeqCst);
        shutdown.cancel();
    }
}
