//! Phase 2: a storm of WebSocket sessions against one listening runner.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{
    catalog, choose_fault, pick, probe_case, run_case, ws_open, Case, Failure, Fault, Host, In,
    Ran, Report, Rng, Scale, WsRunner, GRACE, MAX_SESSIONS, WS_WAVES,
};
use crate::support::process::{self, tree_rss, wait_gone};

/// `scale.ws_sessions` concurrent sessions against one `--listen` runner, each completing
/// `scale.ws_executions_per_session` executions among cancels and abrupt disconnects; then
/// `scale.ws_fresh_sessions` new sessions at once, each of which must complete an execution,
/// and every session's runner process must be gone (reaped) afterwards.
/// How far above its idle figure the listening runner's RSS (with its runner processes) may
/// stay once the storm is over: 32 MiB.
const RSS_SLACK_KIB: u64 = 32 * 1024;

pub(crate) async fn ws_storm(scale: &Scale) -> Report {
    const PHASE: &str = "WebSocket sessions";
    let began = std::time::Instant::now();
    let mut report = Report::default();
    let server = WsRunner::spawn(&["--max-sessions", &MAX_SESSIONS.to_string()]).await;
    report.pids.push(server.pid);
    // The supervisor keeps a few runner processes warm; each session takes one.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let idle_children = process::children(server.pid).len();
    let rss_before = tree_rss(server.pid);
    let cases = Arc::new(catalog());
    let mut wave_rss = Vec::new();
    for wave in 0..WS_WAVES {
        let mut workers = Vec::new();
        for worker in 0..scale.ws_sessions {
            let url = server.url.clone();
            let cases = cases.clone();
            let executions = scale.ws_executions_per_session;
            let n = (wave * scale.ws_sessions + worker) as u64 + 1;
            let seed = scale.seed ^ n.wrapping_mul(0xA076_1D64_78BD_642F);
            let label = format!("{wave}.{worker}");
            workers.push(tokio::spawn(async move {
                ws_worker(&url, &label, executions, seed, &cases).await
            }));
        }
        for worker in workers {
            match worker.await {
                Ok(r) => report.merge(r),
                Err(e) => report.violation(format!("{PHASE}: a session task panicked: {e}")),
            }
        }
        wave_rss.push(tree_rss(server.pid));
    }
    report.measure(
        "WebSocket storm: waves x sessions x executions, wall time",
        format!(
            "{WS_WAVES} x {} x {} in {:.1?}",
            scale.ws_sessions,
            scale.ws_executions_per_session,
            began.elapsed()
        ),
    );
    // No stuck sessions: this many new sessions at once, each completing an execution.
    let fresh_began = std::time::Instant::now();
    let barrier = Arc::new(tokio::sync::Barrier::new(scale.ws_fresh_sessions));
    let mut fresh = Vec::new();
    for k in 0..scale.ws_fresh_sessions {
        let url = server.url.clone();
        let barrier = barrier.clone();
        fresh.push(tokio::spawn(async move {
            fresh_session(&url, k, &barrier).await
        }));
    }
    let mut slowest = Duration::ZERO;
    for task in fresh {
        match task.await {
            Ok((r, took)) => {
                slowest = slowest.max(took);
                report.merge(r);
            }
            Err(e) => report.violation(format!("{PHASE}: a fresh session task panicked: {e}")),
        }
    }
    report.measure(
        "after the storm: sessions open at once, each completed an execution; slowest",
        format!(
            "{} (of --max-sessions {MAX_SESSIONS}); {:.0?}, all in {:.1?}",
            scale.ws_fresh_sessions,
            slowest,
            fresh_began.elapsed()
        ),
    );

    // Every session's runner process is reaped once its session ends: only the warm ones stay.
    let until = Instant::now() + GRACE;
    let mut children = process::children(server.pid);
    while children.len() > idle_children && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
        children = process::children(server.pid);
    }
    if children.len() > idle_children {
        report.violation(format!(
            "{PHASE}: {} session process(es) still alive {GRACE:?} after every session closed ({} children, {idle_children} when idle)",
            children.len() - idle_children,
            children.len()
        ));
    }
    // The RSS of the supervisor and its runner processes comes back to within
    // RSS_SLACK_KIB of its idle figure: each session is a process of its own (about 6 MiB when
    // idle), freed when it is reaped, and the supervisor keeps no per-session state.
    let until = Instant::now() + GRACE;
    let mut rss_after = tree_rss(server.pid);
    while rss_after > rss_before + RSS_SLACK_KIB && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
        rss_after = tree_rss(server.pid);
    }
    if rss_after > rss_before + RSS_SLACK_KIB {
        report.violation(format!(
            "{PHASE}: RSS of the supervisor and its runner processes {} KiB after the storm, over its idle {} KiB + {} KiB",
            rss_after, rss_before, RSS_SLACK_KIB
        ));
    }
    let mib = |kib: &u64| format!("{:.1} MiB", *kib as f64 / 1024.0);
    let waves: Vec<String> = wave_rss.iter().map(mib).collect();
    report.measure(
        "listening runner: runner processes when idle / after the storm",
        format!("{idle_children} / {}", children.len()),
    );
    report.measure(
        "listening runner + its runner processes, RSS: idle / after each wave / at the end",
        format!(
            "{} / {} / {}",
            mib(&rss_before),
            waves.join(", "),
            mib(&rss_after)
        ),
    );
    if let Err(e) = server.stop().await {
        report.violation(format!("{PHASE}: {e}"));
    }
    // Its warm runner processes see their stdin close with it, and exit.
    for child in children {
        if !wait_gone(child, GRACE).await {
            report.violation(format!(
                "{PHASE}: runner process {child} outlived its supervisor"
            ));
        }
    }
    report.check_orphans().await;
    report
}

/// One storm session: `executions` executions of the mix, reconnecting after every disconnect
/// (injected or not), then a graceful close.
async fn ws_worker(url: &str, worker: &str, executions: u64, seed: u64, cases: &[Case]) -> Report {
    const PHASE: &str = "WebSocket sessions";
    let mut report = Report::default();
    let mut rng = Rng::new(seed);
    let mut host = Host::default();
    let mut peer = match ws_open(url, &mut report).await {
        Ok(p) => p,
        Err(e) => {
            report.violation(format!("{PHASE} worker {worker}: {e}"));
            return report;
        }
    };
    let mut completed = 0u64;
    // Disconnects injected since the last execution that completed on a new session.
    let mut disconnects = 0u64;
    let mut i = 0u64;
    while completed < executions {
        let case = pick(cases, &mut rng);
        let fault = choose_fault(case, &mut rng);
        let id = format!("w{worker}-{i}");
        i += 1;
        let mut violations = Vec::new();
        let result = run_case(&mut peer, &id, case, &fault, &mut host, &mut violations).await;
        let clean = violations.is_empty();
        for v in violations {
            report.violation(format!("{PHASE} {id} ({}): {v}", case.name));
        }
        let reconnect = match result {
            Ok(Ran::Done(classes)) => {
                completed += classes.len() as u64;
                for class in &classes {
                    report.outcome(PHASE, class);
                }
                match fault {
                    Fault::Cancel(_) => report.fault("cancel (WebSocket)", 1, u64::from(clean)),
                    Fault::Concurrent => report.fault(
                        "second execute while one is active (WebSocket)",
                        1,
                        u64::from(clean),
                    ),
                    _ => {}
                }
                if disconnects > 0 {
                    report.fault(
                        "abrupt disconnect mid-execution (WebSocket)",
                        0,
                        disconnects,
                    );
                    disconnects = 0;
                }
                false
            }
            Ok(Ran::Disconnected) => {
                report.fault("abrupt disconnect mid-execution (WebSocket)", 1, 0);
                disconnects += 1;
                true
            }
            Err(Failure::Refused) => {
                report.fault("sessions refused at --max-sessions (1013), retried", 1, 1);
                tokio::time::sleep(Duration::from_millis(20)).await;
                true
            }
            Err(Failure::Lost(why)) => {
                report.lose(format!("{PHASE}: {why}"));
                true
            }
        };
        if reconnect {
            host.stale.clear();
            peer.abort();
            peer = match ws_open(url, &mut report).await {
                Ok(p) => p,
                Err(e) => {
                    report.violation(format!("{PHASE} worker {worker}: cannot reconnect: {e}"));
                    return report;
                }
            };
        } else {
            host.flush_stale(&peer, &mut report);
        }
    }
    // A graceful end: nothing may arrive but the close.
    peer.close();
    match peer.recv(Instant::now() + GRACE).await {
        Some(In::Closed { .. }) => {}
        Some(other) => report.violation(format!(
            "{PHASE} worker {worker}: {other:?} after the last done"
        )),
        None => report.violation(format!(
            "{PHASE} worker {worker}: the runner did not close the session within {GRACE:?}"
        )),
    }
    report.stale_survived();
    report
}

/// One session after the storm: connects (retrying while refused at `--max-sessions`, up to
/// [`GRACE`]), runs the probe, and holds the session open until every fresh session has.
async fn fresh_session(url: &str, k: usize, barrier: &tokio::sync::Barrier) -> (Report, Duration) {
    const PHASE: &str = "fresh sessions after the storm";
    let mut report = Report::default();
    let began = std::time::Instant::now();
    let until = Instant::now() + GRACE;
    let mut session = None;
    loop {
        let mut peer = match ws_open(url, &mut report).await {
            Ok(p) => p,
            Err(e) => {
                report.violation(format!("{PHASE} {k}: {e}"));
                break;
            }
        };
        let mut violations = Vec::new();
        let case = probe_case();
        let id = format!("fresh-{k}");
        let result = run_case(
            &mut peer,
            &id,
            &case,
            &Fault::None,
            &mut Host::default(),
            &mut violations,
        )
        .await;
        for v in violations {
            report.violation(format!("{PHASE} {id}: {v}"));
        }
        match result {
            Ok(Ran::Done(classes)) => {
                for class in &classes {
                    report.outcome(PHASE, class);
                }
                session = Some(peer);
                break;
            }
            Err(Failure::Refused) if Instant::now() < until => {
                report.fault("sessions refused at --max-sessions (1013), retried", 1, 1);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(Failure::Refused) => {
                report.violation(format!(
                    "{PHASE} {k}: still refused at --max-sessions {GRACE:?} after the storm: a session is stuck"
                ));
                break;
            }
            Err(Failure::Lost(why)) => {
                report.lose(format!("{PHASE}: {why}"));
                break;
            }
            Ok(Ran::Disconnected) => break,
        }
    }
    let took = began.elapsed();
    if took > GRACE + GRACE {
        report.violation(format!(
            "{PHASE} {k}: took {took:.1?} to complete one execution"
        ));
    }
    // Hold every session open until all have run, so they are open at the same time.
    if tokio::time::timeout(GRACE * 3, barrier.wait())
        .await
        .is_err()
    {
        report.violation(format!(
            "{PHASE} {k}: the other fresh sessions never finished"
        ));
    }
    if let Some(peer) = session {
        peer.close();
    }
    (report, took)
}
