//! Executors against real runner processes: pooling, recycling, crashes, garbage, cancellation,
//! deadlines, WebSocket and in-process runners.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use execbox_host::{
    Executor, InProcessExecutor, PoolOptions, PooledExecutor, ProcessExecutor, Provider,
    RunnerCommand, Tool, ToolError, ToolSet, WsExecutor,
};
use execbox_protocol::{ErrorCode, RuntimeOptions};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

fn runner() -> RunnerCommand {
    RunnerCommand::new(env!("CARGO_BIN_EXE_execbox")).arg("runner")
}

/// A runner started through `sh`, which first appends its pid to `pids`.
fn counted_runner(pids: &Path) -> RunnerCommand {
    let script = format!(
        "echo $$ >> '{}'; exec '{}' runner",
        pids.display(),
        env!("CARGO_BIN_EXE_execbox")
    );
    RunnerCommand::new("/bin/sh").arg("-c").arg(script)
}

fn fake_runner(script: &str) -> RunnerCommand {
    RunnerCommand::new("/bin/sh")
        .arg("-c")
        .arg(script.to_owned())
}

fn temp_file(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("execbox-host-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    path
}

fn pids(path: &Path) -> Vec<u32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// True when the process is gone entirely: not running, not a zombie.
fn is_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.split_whitespace().nth(2) == Some("X"),
    }
}

async fn wait_gone(pid: u32) -> bool {
    for _ in 0..200 {
        if is_gone(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

fn tools() -> ToolSet {
    let echo = Tool::new("echo", |input: Value, _ctx| async move { Ok(input) });
    let fail = Tool::new("fail", |_input: Value, _ctx| async move {
        Err(ToolError::tool("upstream said no"))
    });
    ToolSet::new(vec![Provider::new("t").tool(echo).tool(fail)]).unwrap()
}

fn options(timeout_ms: u64) -> RuntimeOptions {
    RuntimeOptions {
        timeout_ms,
        ..RuntimeOptions::default()
    }
}

async fn run(executor: &dyn Executor, code: &str) -> execbox_host::ExecuteResult {
    executor
        .execute(code, &tools(), options(5000), CancellationToken::new())
        .await
}

#[tokio::test]
async fn fresh_process_executor_runs_tools_and_reports_trusted_errors() {
    let executor = ProcessExecutor::new(runner());
    let result = run(&executor, "const r = await t.echo({ n: 41 }); r.n + 1").await;
    assert_eq!(result.value(), Some(json!(42)), "{result:?}");
    let result = run(&executor, "await t.fail({})").await;
    let error = result.error().unwrap();
    assert_eq!(
        (error.code, error.message.as_str()),
        (ErrorCode::ToolError, "upstream said no")
    );
}

#[tokio::test]
async fn pool_prewarms_reuses_and_recycles_after_n_executions() {
    let file = temp_file("recycle.pids");
    let pool = PooledExecutor::new(
        counted_runner(&file),
        PoolOptions {
            size: 1,
            prewarm: false,
            max_executions_per_runner: 2,
            ..PoolOptions::default()
        },
    );
    for i in 0..5 {
        let result = run(&pool, &format!("{i} * 2")).await;
        assert_eq!(result.value(), Some(json!(i * 2)));
    }
    // Executions 1-2, 3-4 and 5 ran on three runners.
    assert_eq!(pids(&file).len(), 3, "{:?}", pids(&file));
    for pid in &pids(&file)[..2] {
        assert!(wait_gone(*pid).await, "retired runner {pid} left behind");
    }

    let file = temp_file("prewarm.pids");
    let pool = PooledExecutor::new(
        counted_runner(&file),
        PoolOptions {
            size: 2,
            ..PoolOptions::default()
        },
    );
    assert!(pool.wait_idle(2, Duration::from_secs(10)).await);
    // The connections exist; give `sh` the moment it needs to record its pid.
    for _ in 0..500 {
        if pids(&file).len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        pids(&file).len(),
        2,
        "prewarm starts the runners before any execution"
    );
    assert_eq!(run(&pool, "'warm'").await.value(), Some(json!("warm")));
    assert_eq!(pids(&file).len(), 2, "a warm runner served the execution");
}

#[tokio::test]
async fn pool_replaces_a_runner_after_a_failed_execution() {
    let file = temp_file("failure.pids");
    let pool = PooledExecutor::new(
        counted_runner(&file),
        PoolOptions {
            size: 1,
            prewarm: false,
            ..PoolOptions::default()
        },
    );
    assert!(run(&pool, "throw new Error('x')").await.error().is_some());
    assert!(run(&pool, "1").await.is_ok());
    let spawned = pids(&file);
    assert_eq!(
        spawned.len(),
        2,
        "the failed execution's runner was not reused"
    );
    assert!(wait_gone(spawned[0]).await);
}

#[tokio::test]
async fn pool_replaces_a_runner_that_crashed_while_idle() {
    let file = temp_file("crash.pids");
    let pool = PooledExecutor::new(
        counted_runner(&file),
        PoolOptions {
            size: 1,
            ..PoolOptions::default()
        },
    );
    assert!(pool.wait_idle(1, Duration::from_secs(10)).await);
    let victim = pids(&file)[0];
    std::process::Command::new("kill")
        .arg("-9")
        .arg(victim.to_string())
        .status()
        .unwrap();
    assert!(wait_gone(victim).await);
    let result = run(&pool, "'after crash'").await;
    assert_eq!(result.value(), Some(json!("after crash")), "{result:?}");
}

#[tokio::test]
async fn runner_killed_mid_execution_is_internal_error_and_leaves_no_zombie() {
    let file = temp_file("killed.pids");
    let executor = ProcessExecutor::new(counted_runner(&file));
    let killer = tokio::spawn({
        let file = file.clone();
        async move {
            for _ in 0..500 {
                if let Some(pid) = pids(&file).first() {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    std::process::Command::new("kill")
                        .arg("-9")
                        .arg(pid.to_string())
                        .status()
                        .unwrap();
                    return *pid;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            panic!("runner never started");
        }
    });
    let result = executor
        .execute(
            "while (true) {}",
            &tools(),
            options(30_000),
            CancellationToken::new(),
        )
        .await;
    let pid = killer.await.unwrap();
    let error = result.error().expect("failed");
    assert_eq!(error.code, ErrorCode::InternalError, "{error:?}");
    assert!(error.message.contains("signal"), "{}", error.message);
    assert!(wait_gone(pid).await, "zombie runner {pid}");
}

#[tokio::test]
async fn runner_printing_garbage_is_internal_error_and_is_killed() {
    let file = temp_file("garbage.pids");
    let script = format!(
        "echo $$ >> '{}'; read line; echo 'this is not json'; sleep 30",
        file.display()
    );
    let executor = ProcessExecutor::new(fake_runner(&script));
    let started = Instant::now();
    let result = run(&executor, "1").await;
    let error = result.error().expect("failed");
    assert_eq!(error.code, ErrorCode::InternalError);
    assert!(
        error.message.contains("invalid protocol output"),
        "{}",
        error.message
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(wait_gone(pids(&file)[0]).await);
}

#[tokio::test]
async fn runner_exiting_at_once_is_internal_error_with_its_status() {
    let executor = ProcessExecutor::new(fake_runner("echo 'boom' >&2; exit 3"));
    let error = run(&executor, "1").await.error().cloned().expect("failed");
    assert_eq!(error.code, ErrorCode::InternalError);
    assert!(
        error.message.contains("exit status: 3"),
        "{}",
        error.message
    );
    assert!(error.message.contains("boom"), "{}", error.message);
}

#[tokio::test]
async fn silent_runner_hits_the_host_deadline_and_is_killed() {
    let file = temp_file("silent.pids");
    let script = format!("echo $$ >> '{}'; exec cat > /dev/null", file.display());
    let executor = ProcessExecutor::new(fake_runner(&script));
    let result = executor
        .execute("1", &tools(), options(100), CancellationToken::new())
        .await;
    assert_eq!(result.error().unwrap().code, ErrorCode::Timeout);
    assert!(wait_gone(pids(&file)[0]).await);
}

#[tokio::test]
async fn cancel_during_a_tool_call_cancels_the_tool_and_times_out() {
    // The tool's work ends either by seeing its token cancelled or by its future being
    // dropped; both set the flag (the guard's drop).
    struct Stopped(Arc<AtomicBool>);
    impl Drop for Stopped {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let observed = Arc::new(AtomicBool::new(false));
    let seen = observed.clone();
    let hang = Tool::new(
        "hang",
        move |_input: Value, ctx: execbox_host::ToolContext| {
            let guard = Stopped(seen.clone());
            async move {
                ctx.cancel.cancelled().await;
                drop(guard);
                Err(ToolError::cancelled())
            }
        },
    );
    let tools = ToolSet::new(vec![Provider::new("t").tool(hang)]).unwrap();
    let executor = ProcessExecutor::new(runner());
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        trigger.cancel();
    });
    let result = executor
        .execute("await t.hang({})", &tools, options(30_000), cancel)
        .await;
    assert_eq!(result.error().unwrap().code, ErrorCode::Timeout);
    for _ in 0..100 {
        if observed.load(Ordering::SeqCst) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        observed.load(Ordering::SeqCst),
        "the tool never saw the cancellation"
    );
}

#[tokio::test]
async fn cancel_during_a_cpu_loop_is_prompt() {
    let executor = ProcessExecutor::new(runner());
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        trigger.cancel();
    });
    let started = Instant::now();
    let result = executor
        .execute("while (true) {}", &tools(), options(30_000), cancel)
        .await;
    assert_eq!(result.error().unwrap().code, ErrorCode::Timeout);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn concurrent_tool_calls_are_dispatched_concurrently() {
    // Each call waits until both have started: only concurrent dispatch can finish.
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let meet = Tool::new("meet", move |input: Value, _ctx| {
        let barrier = barrier.clone();
        async move {
            barrier.wait().await;
            Ok(input)
        }
    });
    let tools = ToolSet::new(vec![Provider::new("t").tool(meet)]).unwrap();
    let executor = ProcessExecutor::new(runner());
    let result = executor
        .execute(
            "await Promise.all([t.meet(1), t.meet(2)])",
            &tools,
            options(5000),
            CancellationToken::new(),
        )
        .await;
    assert_eq!(result.value(), Some(json!([1, 2])), "{result:?}");
}

#[tokio::test]
async fn websocket_executor_runs_against_a_listening_runner() {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_execbox"))
        .args(["runner", "--listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let executor = WsExecutor::new(line.trim());
    let result = run(&executor, "(await t.echo([1, 2])).length").await;
    assert_eq!(result.value(), Some(json!(2)), "{result:?}");
    let result = executor
        .execute(
            "while (true) {}",
            &tools(),
            options(100),
            CancellationToken::new(),
        )
        .await;
    assert_eq!(result.error().unwrap().code, ErrorCode::Timeout);
    let _ = child.kill();
    let _ = child.wait();
    let refused = WsExecutor::new("ws://127.0.0.1:1");
    assert_eq!(
        run(&refused, "1").await.error().unwrap().code,
        ErrorCode::InternalError
    );
}

#[tokio::test]
async fn websocket_executor_sends_its_token_to_a_protected_runner() {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_execbox"))
        .args(["runner", "--listen", "127.0.0.1:0"])
        .env("EXECBOX_TOKEN", "s3cret")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let url = line.trim();
    let with_token = WsExecutor::new(url).with_token("s3cret");
    let result = run(&with_token, "(await t.echo([1, 2])).length").await;
    assert_eq!(result.value(), Some(json!(2)), "{result:?}");
    for refused in [
        WsExecutor::new(url),
        WsExecutor::new(url).with_token("wrong"),
    ] {
        let error = run(&refused, "1").await.error().unwrap().clone();
        assert_eq!(error.code, ErrorCode::InternalError);
        assert!(error.message.contains("401"), "{}", error.message);
    }
    assert!(!format!("{with_token:?}").contains("s3cret"));
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test]
async fn in_process_executor_runs_tools_limits_and_cancel() {
    let executor = InProcessExecutor::new(PoolOptions {
        size: 2,
        ..PoolOptions::default()
    });
    let result = run(&executor, "(await t.echo({ a: 'b' })).a").await;
    assert_eq!(result.value(), Some(json!("b")));
    let result = executor
        .execute(
            "while (true) {}",
            &tools(),
            options(50),
            CancellationToken::new(),
        )
        .await;
    assert_eq!(result.error().unwrap().code, ErrorCode::Timeout);
    let cancel = CancellationToken::new();
    cancel.cancel();
    let result = executor.execute("1", &tools(), options(5000), cancel).await;
    assert_eq!(result.error().unwrap().code, ErrorCode::Timeout);
    assert_eq!(
        run(&executor, "'still fine'").await.value(),
        Some(json!("still fine"))
    );
}
