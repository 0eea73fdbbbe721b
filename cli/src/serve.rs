//! `execbox serve`: the capabilities HTTP API on a port, until SIGTERM or Ctrl-C.

use std::io::Write;
use std::net::ToSocketAddrs;
use std::process::ExitCode;

use anyhow::Context as _;
use execbox_capabilities::{capabilities_router, serve_door, ManagerOptions, ReplicaOptions};
use execbox_http::{Hosts, Origins};
use tokio_util::sync::CancellationToken;

use crate::args::ServeArgs;
use crate::capabilities::manager;
use crate::signals::StopSignals;

pub fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let common = &args.common;
    if common.policy.principal.is_some() {
        anyhow::bail!(
            "--principal does not apply to `execbox serve`: each caller is the principal its bearer token belongs to (token_sha256 in the policy)"
        );
    }
    let mut options = common.enforcement_options();
    options.caller_per_request = true;
    let enforcement = options.open()?;
    let policy = enforcement.policy().cloned();
    // At most 24 hours (checked when parsed), so the milliseconds fit.
    let max_timeout_ms = u64::try_from(args.max_timeout.as_millis()).unwrap_or(u64::MAX);
    let options = ManagerOptions {
        max_live: args.max_live as usize,
        max_live_per_principal: args.max_live_per_principal as usize,
        max_live_per_tree: args.max_live_per_tree as usize,
        max_timeout_ms,
        enforcement,
        pause_expiry: args.pause_expiry,
        max_paused_per_principal: u64::from(args.max_paused_per_principal),
        ..ManagerOptions::default()
    };
    let addr = args
        .listen
        .to_socket_addrs()
        .with_context(|| {
            format!(
                "--listen {}: expected HOST:PORT, e.g. 127.0.0.1:8080",
                args.listen
            )
        })?
        .next()
        .with_context(|| format!("--listen {}: the name resolves to no address", args.listen))?;
    let hosts = Hosts::parse(&args.allow_host).context("--allow-host")?;
    let origins = Origins::parse(&args.allow_origin).context("--allow-origin")?;
    let door = serve_door(policy.as_ref()).origins(origins);
    execbox_http::check_exposure(
        &[addr],
        door.requires_token(),
        "give principals bearer tokens (token_sha256) in a --policy file",
    )?;
    // Before anything is opened: connections are capped by the descriptors the process may
    // open (execbox_http::connection_cap).
    if let Err(e) = execbox_http::raise_open_files_limit() {
        tracing::warn!("cannot raise the open-files limit to its hard limit: {e}");
    }
    let serve_options = execbox_http::ServeOptions {
        max_long_requests_per_caller: args.max_long_requests_per_principal as usize,
        ..args.door.options()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let replica = ReplicaOptions {
            name: args.replica_name.clone(),
            timeout: args.replica_timeout,
        };
        let manager = manager(common, options, usize::from(args.pool), &replica)?;
        let recovered = manager.store().recovered().len();
        if recovered > 0 {
            tracing::warn!("{recovered} execution(s) left running by a server that stopped were marked failed");
        }
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        let local = listener.local_addr().context("cannot read the bound address")?;
        {
            let mut stdout = std::io::stdout().lock();
            let _ = writeln!(stdout, "http://{local}");
            let _ = stdout.flush();
        }
        tracing::info!(db = %manager.store().location(), replica = manager.store().replica().unwrap_or("-"), "serving capabilities on http://{local}");
        let router = capabilities_router(manager.clone(), door.hosts(hosts.with_bound(local)));
        // Paused executions do not wait forever: at start and every minute (more often for a
        // short expiry), a call that has waited past --pause-expiry is denied (`expired`).
        let expiring = manager.clone();
        let every = (args.pause_expiry / 4).clamp(
            std::time::Duration::from_secs(1),
            std::time::Duration::from_secs(60),
        );
        let sweeper = tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                match expiring.expire_paused().await {
                    Ok(ended) if !ended.is_empty() => tracing::info!(
                        "{} paused execution(s) waited past --pause-expiry and were denied: {}",
                        ended.len(),
                        ended.join(", ")
                    ),
                    Ok(_) => {}
                    Err(e) => tracing::warn!("cannot expire paused executions: {}", e.message),
                }
            }
        });
        let shutdown = CancellationToken::new();
        let served = execbox_http::serve(listener, router, serve_options, shutdown.clone());
        tokio::pin!(served);
        tokio::select! {
            served = &mut served => served.context("the server failed")?,
            () = shutdown_signal() => {
                shutdown.cancel();
                tracing::info!("stopping {} running execution(s)", manager.running());
                sweeper.abort();
                manager.stop_all().await;
                manager.store().close().await;
                let _ = served.await;
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    StopSignals::new().next().await;
}
