//! Phase 3: runners killed with SIGKILL while a tool call is pending, under the host's executors.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use execbox_host::{
    ExecuteRequest, ExecuteResult, Executor, PoolOptions, PooledExecutor, ProcessExecutor,
    Provider, Tool, ToolError, ToolSet,
};
use execbox_protocol::{ErrorCode, RuntimeOptions};
use serde_json::{json, Value};

use super::{Report, Scale, GRACE};
use crate::support::process::{read_pids, signal};
use crate::support::runners::counted_runner;
use crate::support::temp::TempDir;

/// `t.echo` and `t.kill_runner`, which SIGKILLs the newest runner in `pids` (the one running
/// the call: executions are sequential and nothing is prewarmed) and then waits, as a slow
/// tool would, until the host cancels it.
fn kill_tools(pids: PathBuf, killed: Arc<Mutex<Vec<u32>>>) -> ToolSet {
    let echo = Tool::new("echo", |input: Value, _ctx| async move { Ok(input) });
    let kill = Tool::new(
        "kill_runner",
        move |_input: Value, ctx: execbox_host::ToolContext| {
            let pids = pids.clone();
            let killed = killed.clone();
            async move {
                let Some(pid) = read_pids(&pids).last().copied() else {
                    return Err(ToolError::tool("no runner pid recorded"));
                };
                killed.lock().unwrap_or_else(|e| e.into_inner()).push(pid);
                if let Err(e) = signal(pid, libc::SIGKILL) {
                    return Err(ToolError::tool(format!("kill -9 {pid} failed: {e}")));
                }
                ctx.cancel.cancelled().await;
                Err(ToolError::cancelled())
            }
        },
    );
    ToolSet::new(vec![Provider::new("t").tool(echo).tool(kill)]).expect("tool set")
}

async fn execute_bounded(
    executor: &dyn Executor,
    code: &str,
    tools: &ToolSet,
    timeout_ms: u64,
) -> Option<ExecuteResult> {
    let options = RuntimeOptions {
        timeout_ms,
        ..RuntimeOptions::default()
    };
    tokio::time::timeout(
        Duration::from_millis(timeout_ms) + GRACE,
        executor.execute(ExecuteRequest::new(code).tools(tools).options(options)),
    )
    .await
    .ok()
}

/// Kills `kills` runners under `executor` while each has a tool call pending; each must end
/// as `internal_error` naming the signal, and the next execution must succeed on a new runner.
async fn kill_under(
    executor: &dyn Executor,
    label: &str,
    kills: u64,
    expected_spawns: u64,
    pid_file: &Path,
    report: &mut Report,
) {
    const PHASE: &str = "killed runners";
    let killed = Arc::new(Mutex::new(Vec::new()));
    let tools = kill_tools(pid_file.to_owned(), killed.clone());
    let fault = format!("kill -9 mid tool call ({label})");
    for k in 0..kills {
        let code = "const a = await t.echo({ n: 1 });\nawait t.kill_runner({});\n'unreachable'";
        match execute_bounded(executor, code, &tools, 30_000).await {
            None => report.lose(format!(
                "{PHASE} ({label}) kill {k}: no result within the bound"
            )),
            Some(result) => {
                let class = result.error().map_or("ok", |e| e.code.as_str());
                report.outcome(PHASE, class);
                match result.error() {
                    Some(e) if e.code == ErrorCode::InternalError && e.message.contains("signal") => {}
                    other => report.violation(format!(
                        "{PHASE} ({label}) kill {k}: expected internal_error naming the signal, got {}",
                        other.map_or("ok".to_owned(), |e| format!("{}: {}", e.code, e.message))
                    )),
                }
            }
        }
        let code = "let s = 0;\nfor (let i = 0; i < 5; i++) s += (await t.echo({ n: i })).n;\ns";
        let survived = match execute_bounded(executor, code, &tools, 5_000).await {
            None => {
                report.lose(format!(
                    "{PHASE} ({label}) after kill {k}: no result within the bound"
                ));
                false
            }
            Some(result) => {
                report.outcome(PHASE, result.error().map_or("ok", |e| e.code.as_str()));
                if result.value() == Some(json!(10)) {
                    true
                } else {
                    report.violation(format!(
                        "{PHASE} ({label}) after kill {k}: the next execution failed: {:?}",
                        result.error()
                    ));
                    false
                }
            }
        };
        report.fault(&fault, 1, u64::from(survived));
    }
    let killed = killed.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if killed.len() as u64 != kills {
        report.violation(format!(
            "{PHASE} ({label}): {} of {kills} kills happened",
            killed.len()
        ));
    }
    let spawned = read_pids(pid_file);
    if spawned.len() as u64 != expected_spawns {
        report.violation(format!(
            "{PHASE} ({label}): {} runners started for {kills} kills, expected {expected_spawns}",
            spawned.len()
        ));
    }
    for pid in &killed {
        if !spawned.contains(pid) {
            report.violation(format!(
                "{PHASE} ({label}): killed pid {pid} was never spawned"
            ));
        }
    }
    report.pids.extend(spawned);
}

/// Runner processes killed with SIGKILL while a tool call is pending, under the pool and under
/// the fresh-process executor.
pub(crate) async fn kills(scale: &Scale) -> Report {
    let began = std::time::Instant::now();
    let mut report = Report::default();
    let dir = TempDir::new("soak-kills");
    let pool_pids = dir.join("pool.pids");
    {
        let pool = PooledExecutor::new(
            counted_runner(&pool_pids),
            PoolOptions {
                size: 1,
                prewarm: false,
                ..PoolOptions::default()
            },
        )
        .unwrap();
        // A killed runner is replaced by a new one, which serves the next success and is then
        // reused (warm) for the next kill: one runner per kill, plus the first.
        kill_under(
            &pool,
            "PooledExecutor",
            scale.pool_kills,
            scale.pool_kills + 1,
            &pool_pids,
            &mut report,
        )
        .await;
    }
    let process_pids = dir.join("process.pids");
    let process = ProcessExecutor::new(counted_runner(&process_pids)).unwrap();
    kill_under(
        &process,
        "ProcessExecutor",
        scale.process_kills,
        2 * scale.process_kills,
        &process_pids,
        &mut report,
    )
    .await;
    report.measure(
        "killed runners: wall time",
        format!("{:.1?}", began.elapsed()),
    );
    report.check_orphans().await;
    report
}
