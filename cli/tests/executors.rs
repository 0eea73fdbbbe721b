//! Executors against real runner processes: pooling, recycling, crashes, garbage, cancellation,
//! deadlines, WebSocket and in-process runners, the tool-call cap, and tool calls outliving
//! their execution.

mod support;

#[path = "executors/unawaited.rs"]
mod unawaited;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use execbox_host::{
    CommandTool, Connection, ExecuteRequest, Executor, InProcessExecutor, PoolOptions,
    PooledExecutor, ProcessExecutor, Provider, RetryPolicy, RunnerEvent, SessionTimings, Tool,
    ToolError, ToolSet, Unawaited, WsExecutor, DEFAULT_MAX_CONCURRENT_TOOL_CALLS,
    MAX_QUEUED_TOOL_CALLS,
};
use execbox_protocol::{ErrorCode, Message, RawValue, RuntimeOptions, Started, ToolCall};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use support::process::{eventually, read_pid, read_pids, signal, wait_for_pid, wait_gone};
use support::runners::{counted_runner, fake_runner, runner, tapped_runner, ListeningRunner};
use support::temp::TempDir;

/// How long a runner or tool process may take to be gone (killed and reaped).
const REAPED_WITHIN: Duration = Duration::from_secs(2);

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
        .execute(
            ExecuteRequest::new(code)
                .tools(&tools())
                .options(options(5000)),
        )
        .await
}

#[tokio::test]
async fn fresh_process_executor_runs_tools_and_reports_trusted_errors() {
    let executor = ProcessExecutor::new(runner()).unwrap();
    let result = run(&executor, "const r = await t.echo({ n: 41 }); r.n + 1").await;
    assert_eq!(result.value(), Some(json!(42)), "{result:?}");
    let result = run(&executor, "await t.fail({})").await;
    let error = result.error().unwrap();
    assert_eq!(
        (error.code, error.message.as_str()),
        (ErrorCode::ToolError, "t.fail: upstream said no")
    );
}

#[tokio::test]
async fn pool_prewarms_reuses_and_recycles_after_n_executions() {
    let dir = TempDir::new("recycle");
    let file = dir.join("runner.pids");
    let pool = PooledExecutor::new(
        counted_runner(&file),
        PoolOptions {
            size: 1,
            prewarm: false,
            max_executions_per_runner: 2,
            ..PoolOptions::default()
        },
    )
    .unwrap();
    for i in 0..5 {
        let result = run(&pool, &format!("{i} * 2")).await;
        assert_eq!(result.value(), Some(json!(i * 2)));
    }
    // Executions 1-2, 3-4 and 5 ran on three runners.
    assert_eq!(read_pids(&file).len(), 3, "{:?}", read_pids(&file));
    for pid in &read_pids(&file)[..2] {
        assert!(
            wait_gone(*pid, REAPED_WITHIN).await,
            "retired runner {pid} left behind"
        );
    }

    let dir = TempDir::new("prewarm");
    let file = dir.join("runner.pids");
    let pool = PooledExecutor::new(
        counted_runner(&file),
        PoolOptions {
            size: 2,
            ..PoolOptions::default()
        },
    )
    .unwrap();
    assert!(pool.wait_idle(2, Duration::from_secs(10)).await);
    // The connections exist; give `sh` the moment it needs to record its pid.
    eventually(Duration::from_secs(5), || read_pids(&file).len() >= 2).await;
    assert_eq!(
        read_pids(&file).len(),
        2,
        "prewarm starts the runners before any execution"
    );
    assert_eq!(run(&pool, "'warm'").await.value(), Some(json!("warm")));
    assert_eq!(
        read_pids(&file).len(),
        2,
        "a warm runner served the execution"
    );
}

#[tokio::test]
async fn pool_replaces_a_runner_after_a_failed_execution() {
    let dir = TempDir::new("failure");
    let file = dir.join("runner.pids");
    let pool = PooledExecutor::new(
        counted_runner(&file),
        PoolOptions {
            size: 1,
            prewarm: false,
            ..PoolOptions::default()
        },
    )
    .unwrap();
    assert!(run(&pool, "throw new Error('x')").await.error().is_some());
    assert!(run(&pool, "1").await.is_ok());
    let spawned = read_pids(&file);
    assert_eq!(
        spawned.len(),
        2,
        "the failed execution's runner was not reused"
    );
    assert!(wait_gone(spawned[0], REAPED_WITHIN).await);
}

#[tokio::test]
async fn pool_replaces_a_runner_that_crashed_while_idle() {
    let dir = TempDir::new("crash");
    let file = dir.join("runner.pids");
    let pool = PooledExecutor::new(
        counted_runner(&file),
        PoolOptions {
            size: 1,
            ..PoolOptions::default()
        },
    )
    .unwrap();
    assert!(pool.wait_idle(1, Duration::from_secs(10)).await);
    // The wrapper records its pid as it starts; on a loaded machine that may lag the pool.
    let victim = wait_for_pid(&file, Duration::from_secs(10)).await;
    signal(victim, libc::SIGKILL).expect("kill the idle runner");
    assert!(wait_gone(victim, REAPED_WITHIN).await);
    let result = run(&pool, "'after crash'").await;
    assert_eq!(result.value(), Some(json!("after crash")), "{result:?}");
}

#[tokio::test]
async fn runner_killed_mid_execution_is_internal_error_and_leaves_no_zombie() {
    let dir = TempDir::new("killed");
    let file = dir.join("runner.pids");
    let executor = ProcessExecutor::new(counted_runner(&file)).unwrap();
    let killer = tokio::spawn({
        let file = file.clone();
        async move {
            let pid = wait_for_pid(&file, Duration::from_millis(2500)).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            signal(pid, libc::SIGKILL).expect("kill the runner");
            pid
        }
    });
    let result = executor
        .execute(
            ExecuteRequest::new("while (true) {}")
                .tools(&tools())
                .options(options(30_000)),
        )
        .await;
    let pid = killer.await.unwrap();
    let error = result.error().expect("failed");
    assert_eq!(error.code, ErrorCode::InternalError, "{error:?}");
    assert!(error.message.contains("signal"), "{}", error.message);
    assert!(wait_gone(pid, REAPED_WITHIN).await, "zombie runner {pid}");
}

#[tokio::test]
async fn runner_printing_garbage_is_internal_error_and_is_killed() {
    let dir = TempDir::new("garbage");
    let file = dir.join("runner.pids");
    let script = format!(
        "echo $$ >> '{}'; read line; echo 'this is not json'; sleep 30",
        file.display()
    );
    let executor = ProcessExecutor::new(fake_runner(&script)).unwrap();
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
    assert!(wait_gone(read_pids(&file)[0], REAPED_WITHIN).await);
}

#[tokio::test]
async fn runner_exiting_at_once_is_internal_error_with_its_status() {
    let executor = ProcessExecutor::new(fake_runner("echo 'boom' >&2; exit 3")).unwrap();
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
    let dir = TempDir::new("silent");
    let file = dir.join("runner.pids");
    let script = format!("echo $$ >> '{}'; exec cat > /dev/null", file.display());
    let executor = ProcessExecutor::new(fake_runner(&script)).unwrap();
    let result = executor
        .execute(
            ExecuteRequest::new("1")
                .tools(&tools())
                .options(options(100)),
        )
        .await;
    assert_eq!(result.error().unwrap().code, ErrorCode::Timeout);
    assert!(wait_gone(read_pids(&file)[0], REAPED_WITHIN).await);
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
    let executor = ProcessExecutor::new(runner()).unwrap();
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        trigger.cancel();
    });
    let result = executor
        .execute(
            ExecuteRequest::new("await t.hang({})")
                .tools(&tools)
                .options(options(30_000))
                .cancel_on(cancel),
        )
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
    let executor = ProcessExecutor::new(runner()).unwrap();
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        trigger.cancel();
    });
    let started = Instant::now();
    let result = executor
        .execute(
            ExecuteRequest::new("while (true) {}")
                .tools(&tools())
                .options(options(30_000))
                .cancel_on(cancel),
        )
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
    let executor = ProcessExecutor::new(runner()).unwrap();
    let result = executor
        .execute(
            ExecuteRequest::new("await Promise.all([t.meet(1), t.meet(2)])")
                .tools(&tools)
                .options(options(5000)),
        )
        .await;
    assert_eq!(result.value(), Some(json!([1, 2])), "{result:?}");
}

#[tokio::test]
async fn websocket_executor_runs_against_a_listening_runner() {
    let mut runner = ListeningRunner::start(&[], &[]);
    let executor = WsExecutor::new(runner.url.as_str()).unwrap();
    let result = run(&executor, "(await t.echo([1, 2])).length").await;
    assert_eq!(result.value(), Some(json!(2)), "{result:?}");
    let result = executor
        .execute(
            ExecuteRequest::new("while (true) {}")
                .tools(&tools())
                .options(options(100)),
        )
        .await;
    assert_eq!(result.error().unwrap().code, ErrorCode::Timeout);
    runner.stop();
    let refused = WsExecutor::new("ws://127.0.0.1:1").unwrap();
    assert_eq!(
        run(&refused, "1").await.error().unwrap().code,
        ErrorCode::InternalError
    );
}

#[tokio::test]
async fn websocket_executor_sends_its_token_to_a_protected_runner() {
    let runner = ListeningRunner::start(&[], &[("EXECBOX_TOKEN", "s3cret")]);
    let url = runner.url.as_str();
    let with_token = WsExecutor::new(url).unwrap().with_token("s3cret");
    let result = run(&with_token, "(await t.echo([1, 2])).length").await;
    assert_eq!(result.value(), Some(json!(2)), "{result:?}");
    for refused in [
        WsExecutor::new(url).unwrap(),
        WsExecutor::new(url).unwrap().with_token("wrong"),
    ] {
        let error = run(&refused, "1").await.error().unwrap().clone();
        assert_eq!(error.code, ErrorCode::InternalError);
        assert!(error.message.contains("401"), "{}", error.message);
    }
    assert!(!format!("{with_token:?}").contains("s3cret"));
}

/// Tools with `slow`, which answers after `ms` milliseconds.
fn slow_tools(ms: u64) -> ToolSet {
    let slow = Tool::new("slow", move |_input: Value, _ctx| async move {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        Ok(json!("slow"))
    });
    ToolSet::new(vec![Provider::new("t").tool(slow)]).unwrap()
}

#[tokio::test]
async fn websocket_executor_retries_a_session_a_full_runner_turned_away() {
    let runner = ListeningRunner::start(&["--max-sessions", "1"], &[]);
    let url = &runner.url;
    let tools = slow_tools(600);
    let patient = WsExecutor::new(url.as_str())
        .unwrap()
        .with_retry(RetryPolicy {
            attempts: 20,
            first_backoff: Duration::from_millis(20),
            max_backoff: Duration::from_millis(100),
        });
    let hasty = WsExecutor::new(url.as_str())
        .unwrap()
        .with_retry(RetryPolicy {
            attempts: 2,
            first_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(10),
        });
    let holder = WsExecutor::new(url.as_str()).unwrap();
    let holding = holder.execute(
        ExecuteRequest::new("await t.slow()")
            .tools(&tools)
            .options(options(5000)),
    );
    let others = async {
        // Let the holder take the only session first.
        tokio::time::sleep(Duration::from_millis(150)).await;
        let turned_away = hasty
            .execute(
                ExecuteRequest::new("1")
                    .tools(&tools)
                    .options(options(5000)),
            )
            .await;
        let served = patient
            .execute(
                ExecuteRequest::new("6 * 7")
                    .tools(&tools)
                    .options(options(5000)),
            )
            .await;
        (turned_away, served)
    };
    let (held, (turned_away, served)) = tokio::join!(holding, others);
    assert_eq!(held.value(), Some(json!("slow")), "{held:?}");
    // Two tries while the runner is full: both turned away with 1013, reported as such.
    let error = turned_away.error().expect("turned away").clone();
    assert_eq!(error.code, ErrorCode::InternalError);
    assert!(
        error.message.contains("after 2 attempts") && error.message.contains("1013"),
        "{}",
        error.message
    );
    // Retried until the holder's session ended.
    assert_eq!(served.value(), Some(json!(42)), "{served:?}");
}

#[tokio::test]
async fn websocket_executor_reports_a_draining_runner_after_its_attempts() {
    let runner = ListeningRunner::start(&["--drain-timeout", "5s"], &[]);
    let url = &runner.url;
    let tools = slow_tools(1500);
    let holder = WsExecutor::new(url.as_str()).unwrap();
    let holding = holder.execute(
        ExecuteRequest::new("await t.slow()")
            .tools(&tools)
            .options(options(5000)),
    );
    let pid = runner.pid();
    let late = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        // SIGTERM: the runner drains, and turns new sessions away with 503.
        signal(pid, libc::SIGTERM).expect("SIGTERM the runner");
        tokio::time::sleep(Duration::from_millis(100)).await;
        WsExecutor::new(url.as_str())
            .unwrap()
            .with_retry(RetryPolicy {
                attempts: 3,
                first_backoff: Duration::from_millis(20),
                max_backoff: Duration::from_millis(40),
            })
            .execute(
                ExecuteRequest::new("1")
                    .tools(&tools)
                    .options(options(5000)),
            )
            .await
    };
    let (held, late) = tokio::join!(holding, late);
    // The running execution still finishes during the drain.
    assert_eq!(held.value(), Some(json!("slow")), "{held:?}");
    let error = late.error().expect("refused while draining").clone();
    assert!(
        error.message.contains("after 3 attempts") && error.message.contains("503"),
        "{}",
        error.message
    );
}

/// A TLS terminator on 127.0.0.1 in front of `upstream` (`127.0.0.1:PORT`), with a fresh
/// self-signed certificate for 127.0.0.1: its `wss://` URL and the certificate's PEM.
async fn tls_proxy(upstream: String) -> (String, String) {
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let pem = cert.cert.pem();
    let key =
        tokio_rustls::rustls::pki_types::PrivateKeyDer::try_from(cert.key_pair.serialize_der())
            .unwrap();
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, upstream) = (acceptor.clone(), upstream.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut plain) = tokio::net::TcpStream::connect(upstream).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    (format!("wss://127.0.0.1:{port}"), pem)
}

#[tokio::test]
async fn websocket_executor_speaks_tls_to_a_wss_url() {
    let runner = ListeningRunner::start(&[], &[]);
    let url = &runner.url;
    let upstream = url.trim_start_matches("ws://").to_owned();
    let (wss, pem) = tls_proxy(upstream).await;
    let trusting = WsExecutor::new(wss.as_str())
        .unwrap()
        .with_tls_roots_pem(pem.as_bytes())
        .unwrap();
    let result = run(&trusting, "(await t.echo([1, 2, 3])).length").await;
    assert_eq!(result.value(), Some(json!(3)), "{result:?}");
    // Without the CA, the self-signed certificate is refused, and that is not retried.
    let error = run(&WsExecutor::new(wss.as_str()).unwrap(), "1")
        .await
        .error()
        .unwrap()
        .clone();
    assert_eq!(error.code, ErrorCode::InternalError);
    assert!(
        error.message.contains("cannot connect to runner at wss://")
            && error.message.to_lowercase().contains("certificate"),
        "{}",
        error.message
    );
    assert!(WsExecutor::new(wss.as_str())
        .unwrap()
        .with_tls_roots_pem(b"not a certificate")
        .is_err());
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
            ExecuteRequest::new("while (true) {}")
                .tools(&tools())
                .options(options(50)),
        )
        .await;
    assert_eq!(result.error().unwrap().code, ErrorCode::Timeout);
    let cancel = CancellationToken::new();
    cancel.cancel();
    let result = executor
        .execute(
            ExecuteRequest::new("1")
                .tools(&tools())
                .options(options(5000))
                .cancel_on(cancel),
        )
        .await;
    assert_eq!(result.error().unwrap().code, ErrorCode::Timeout);
    assert_eq!(
        run(&executor, "'still fine'").await.value(),
        Some(json!("still fine"))
    );
}

/// A command tool (`/bin/sh -c`, so no script file is written while processes start) that
/// records the nanoseconds it was alive between reading its request and answering as
/// `<start> <end>` in `dir/<pid>`, and answers `{"pid": <pid>}`.
fn lifetime_tool(name: &str, dir: &Path, sleep: &str) -> Tool {
    let script = format!(
        "cat > /dev/null; s=$(date +%s%N); sleep {sleep}; e=$(date +%s%N); \
         echo \"$s $e\" > \"$1/$$\"; echo \"{{\\\"pid\\\": $$}}\""
    );
    let command = CommandTool::new("t", name, "/bin/sh").args([
        std::ffi::OsString::from("-c"),
        script.into(),
        name.into(),
        dir.as_os_str().to_owned(),
    ]);
    Tool::from_handler(name, command)
}

/// The `[start, end]` intervals recorded by [`lifetime_tool`].
fn lifetimes(dir: &Path) -> Vec<(u128, u128)> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|entry| std::fs::read_to_string(entry.unwrap().path()).ok())
        .filter_map(|text| {
            let mut parts = text.split_whitespace().map(|n| n.parse::<u128>().ok());
            Some((parts.next()??, parts.next()??))
        })
        .collect()
}

/// The largest number of intervals that overlap at one instant.
fn peak_overlap(intervals: &[(u128, u128)]) -> usize {
    let mut events: Vec<(u128, i32)> = intervals
        .iter()
        .flat_map(|&(start, end)| [(start, 1), (end, -1)])
        .collect();
    // At equal times, ends come first: touching intervals do not overlap.
    events.sort();
    let (mut now, mut peak) = (0i32, 0i32);
    for (_, delta) in events {
        now += delta;
        peak = peak.max(now);
    }
    peak as usize
}

/// Fires `n` calls of the lifetime tool at once and returns the peak concurrency observed.
async fn peak_concurrency(executor: &dyn Executor, dir: &Path, n: usize) -> usize {
    let tools = ToolSet::new(vec![
        Provider::new("t").tool(lifetime_tool("slow", dir, "0.05"))
    ])
    .unwrap();
    let code = format!(
        "const r = await Promise.all(Array.from({{ length: {n} }}, () => t.slow({{}}))); r.map(x => x.pid)"
    );
    let result = executor
        .execute(
            ExecuteRequest::new(&code)
                .tools(&tools)
                .options(options(120_000)),
        )
        .await;
    let pids: Vec<u64> = serde_json::from_value(result.value().expect("a value")).unwrap();
    let distinct: std::collections::HashSet<_> = pids.iter().collect();
    assert_eq!(
        (pids.len(), distinct.len()),
        (n, n),
        "every call ran once and answered"
    );
    let intervals = lifetimes(dir);
    assert_eq!(intervals.len(), n);
    peak_overlap(&intervals)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_of_one_execution_never_run_more_than_the_cap_at_once() {
    // 200 concurrent calls of a command tool: the default cap holds, all results arrive.
    let dir = TempDir::new("cap-default");
    let peak = peak_concurrency(&ProcessExecutor::new(runner()).unwrap(), dir.path(), 200).await;
    assert!(
        (2..=DEFAULT_MAX_CONCURRENT_TOOL_CALLS).contains(&peak),
        "{peak} tool processes alive at once (cap {DEFAULT_MAX_CONCURRENT_TOOL_CALLS})"
    );

    // A configured cap, through a pool.
    let dir = TempDir::new("cap-three");
    let pool = PooledExecutor::new(
        runner(),
        PoolOptions {
            size: 1,
            prewarm: false,
            timings: SessionTimings {
                max_concurrent_tool_calls: 3,
                ..SessionTimings::default()
            },
            ..PoolOptions::default()
        },
    )
    .unwrap();
    let peak = peak_concurrency(&pool, dir.path(), 40).await;
    assert!(
        (1..=3).contains(&peak),
        "{peak} tool processes alive at once (cap 3)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_execution_never_starts_its_queued_tool_calls() {
    // Cap 2, 20 calls of a tool that would run for a minute: two start, 18 wait; the
    // cancel kills the two and the 18 never start.
    let dir = TempDir::new("cancel-queued");
    let started = dir.join("started");
    std::fs::create_dir_all(&started).unwrap();
    let hang = CommandTool::new("t", "hang", "/bin/sh").args([
        "-c".to_owned(),
        "echo $$ > \"$1/$$\"; cat > /dev/null; sleep 60".to_owned(),
        "hang".to_owned(),
        started.display().to_string(),
    ]);
    let tools = ToolSet::new(vec![
        Provider::new("t").tool(Tool::from_handler("hang", hang))
    ])
    .unwrap();
    let executor = ProcessExecutor::new(runner())
        .unwrap()
        .with_timings(SessionTimings {
            max_concurrent_tool_calls: 2,
            ..SessionTimings::default()
        });
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    let watched = started.clone();
    tokio::spawn(async move {
        for _ in 0..1000 {
            if std::fs::read_dir(&watched).unwrap().count() >= 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        trigger.cancel();
    });
    let result = executor
        .execute(
            ExecuteRequest::new("await Promise.all(Array.from({ length: 20 }, () => t.hang({})))")
                .tools(&tools)
                .options(options(60_000))
                .cancel_on(cancel),
        )
        .await;
    assert_eq!(result.error().unwrap().code, ErrorCode::Timeout);
    let pids: Vec<u32> = std::fs::read_dir(&started)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().parse().unwrap())
        .collect();
    for pid in &pids {
        assert!(
            wait_gone(*pid, REAPED_WITHIN).await,
            "tool process {pid} survived the cancel"
        );
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        std::fs::read_dir(&started).unwrap().count(),
        2,
        "only the two running calls ever started"
    );
}

/// Execution A fires a slow call without awaiting it and returns; B, on the same pooled
/// runner, awaits a fast call. Returns the folder (`slow.pid`, `slow.done`), A's result and
/// the lines the host sent the runner, after checking that B got its own answer on A's runner.
async fn unawaited_then_awaited(
    name: &str,
    unawaited: Unawaited,
) -> (TempDir, execbox_host::ExecuteResult, String) {
    let dir = TempDir::new(name);
    let (pids_file, log) = (dir.join("runner.pids"), dir.join("host-to-runner.ndjson"));
    let slow = CommandTool::new("tools", "slow", "/bin/sh").args([
        "-c".to_owned(),
        "cat > /dev/null; echo $$ > \"$1/slow.pid\"; sleep 1; touch \"$1/slow.done\"; \
         echo '{\"user\": \"alice\"}'"
            .to_owned(),
        "slow".to_owned(),
        dir.path().display().to_string(),
    ]);
    let get = Tool::new("get", |input: Value, _ctx| async move { Ok(input) });
    let tools = ToolSet::new(vec![Provider::new("tools")
        .tool(Tool::from_handler("slow", slow))
        .tool(get)])
    .unwrap();
    let pool = PooledExecutor::new(
        tapped_runner(&pids_file, &log),
        PoolOptions {
            size: 1,
            prewarm: false,
            ..PoolOptions::default()
        },
    )
    .unwrap();
    // A keeps running for a moment after firing, so that the slow process surely starts.
    let a = pool
        .execute(ExecuteRequest::new("tools.slow({ user: 'alice' }); const t0 = Date.now(); while (Date.now() - t0 < 300) {} 'a'").tools(&tools).options(options(5000)).unawaited(unawaited))
        .await;
    assert_eq!(a.value(), Some(json!("a")), "{a:?}");
    let b = pool
        .execute(
            ExecuteRequest::new("await tools.get({ user: 'bob' })")
                .tools(&tools)
                .options(options(5000)),
        )
        .await;
    assert_eq!(b.value(), Some(json!({"user": "bob"})), "{b:?}");
    assert_eq!(read_pids(&pids_file).len(), 1, "B ran on A's runner");
    // `tee` hands each line to the runner before it writes it to the log, so B's result can
    // reach the runner, and B end, a moment before the log shows it. Anything the host sent A
    // went down the same pipe earlier, so once B's result is logged, all of A's is too.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let sent = std::fs::read_to_string(&log).unwrap();
        let bs_result_logged = sent
            .lines()
            .any(|line| line.contains(r#""type":"tool_result""#) && line.contains("bob"));
        if bs_result_logged || Instant::now() > deadline {
            return (dir, a, sent);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The `tool_result` lines the host sent, which must be B's alone.
fn only_bs_result_was_sent(sent: &str) {
    let results: Vec<&str> = sent
        .lines()
        .filter(|line| line.contains(r#""type":"tool_result""#))
        .collect();
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results[0].contains("bob"), "{results:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_left_running_by_a_finished_execution_finish_first_and_are_never_answered() {
    let (dir, a, sent) = unawaited_then_awaited("stale-finish", Unawaited::Finish).await;
    // A returned only once its call had finished, and said so; its result never reached the
    // runner.
    assert!(
        dir.join("slow.done").exists(),
        "the slow call did not finish"
    );
    assert_eq!(
        a.logs.last().map(String::as_str),
        Some("[execbox] 1 tool call was not awaited: tools.slow; it finished after the program returned — await it")
    );
    only_bs_result_was_sent(&sent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_left_running_are_killed_with_unawaited_cancel_and_never_answered() {
    let (dir, a, sent) = unawaited_then_awaited("stale-cancel", Unawaited::Cancel).await;
    assert_eq!(
        a.logs.last().map(String::as_str),
        Some("[execbox] 1 tool call was not awaited: tools.slow; it was cancelled when the program returned — await it")
    );
    let slow_pid = read_pid(&dir.join("slow.pid")).expect("the slow call started");
    assert!(
        wait_gone(slow_pid, REAPED_WITHIN).await,
        "the slow call's process survived"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !dir.join("slow.done").exists(),
        "the slow call ran to completion"
    );
    only_bs_result_was_sent(&sent);
}

/// The runner's side of a [`Connection`] whose runner the test plays.
struct ScriptedRunner {
    events: tokio::sync::mpsc::UnboundedSender<RunnerEvent>,
    host: tokio::sync::mpsc::UnboundedReceiver<Message>,
}

fn scripted_connection(timings: SessionTimings) -> (Connection, ScriptedRunner) {
    let (host_tx, host_rx) = tokio::sync::mpsc::unbounded_channel();
    let (event_tx, event_rx) = tokio::sync::mpsc::unbounded_channel();
    let connection = Connection::new(host_tx, event_rx, Box::new(|| Box::pin(async {})), timings);
    (
        connection,
        ScriptedRunner {
            events: event_tx,
            host: host_rx,
        },
    )
}

impl ScriptedRunner {
    async fn recv(&mut self) -> Message {
        tokio::time::timeout(Duration::from_secs(10), self.host.recv())
            .await
            .expect("the host answers")
            .expect("the host is connected")
    }

    /// Waits for `execute`, answers `started`, returns the execution id.
    async fn accept(&mut self) -> String {
        match self.recv().await {
            Message::Execute(execute) => {
                self.send(Message::Started(Started {
                    id: execute.id.clone(),
                }));
                execute.id
            }
            other => panic!("expected execute, got {other:?}"),
        }
    }

    fn send(&self, message: Message) {
        self.events.send(RunnerEvent::Message(message)).unwrap();
    }

    fn call(&self, call_id: &str, tool: &str) {
        self.send(Message::ToolCall(ToolCall {
            call_id: call_id.into(),
            provider_name: "t".into(),
            safe_tool_name: tool.into(),
            input: Some(RawValue::from_string("{}".into()).unwrap()),
        }));
    }

    fn done(&self, id: &str) {
        self.send(Message::Done(execbox_protocol::Done {
            id: id.into(),
            duration_ms: 0,
            logs: Vec::new(),
            logs_truncated: None,
            clock: None,
            clock_overflow: false,
            outcome: Ok(None),
        }));
    }

    /// The callId of the next `tool_result`, and whether it failed (with its message).
    async fn result(&mut self) -> (String, Result<(), String>) {
        match self.recv().await {
            Message::ToolResult(result) => (
                result.call_id,
                result.outcome.map(|_| ()).map_err(|e| e.message),
            ),
            other => panic!("expected tool_result, got {other:?}"),
        }
    }
}

/// A tool that counts its starts and then waits for its cancellation.
fn parked_tool(starts: Arc<std::sync::atomic::AtomicUsize>) -> Tool {
    Tool::new(
        "park",
        move |_input: Value, ctx: execbox_host::ToolContext| {
            starts.fetch_add(1, Ordering::SeqCst);
            async move {
                ctx.cancel.cancelled().await;
                Err(ToolError::cancelled())
            }
        },
    )
}

#[tokio::test]
async fn a_runner_flooding_tool_calls_gets_the_excess_refused_and_no_result_after_done() {
    // A hostile runner sends cap + queue bound + 5 calls at once. The host runs `cap`, queues
    // the bound and refuses the last 5 at once; after `done` (unawaited calls cancelled)
    // nothing more reaches the runner and the queued calls never start.
    let starts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let tools = ToolSet::new(vec![Provider::new("t").tool(parked_tool(starts.clone()))]).unwrap();
    let cap = 4;
    let (mut connection, mut runner) = scripted_connection(SessionTimings {
        max_concurrent_tool_calls: cap,
        ..SessionTimings::default()
    });
    let never = CancellationToken::new();
    let script = async {
        let id = runner.accept().await;
        let total = cap + MAX_QUEUED_TOOL_CALLS + 5;
        for n in 0..total {
            runner.call(&format!("flood-{n}"), "park");
        }
        for n in total - 5..total {
            let (call_id, outcome) = runner.result().await;
            assert_eq!(call_id, format!("flood-{n}"));
            let message = outcome.unwrap_err();
            assert!(message.starts_with("Too many tool calls"), "{message}");
        }
        runner.done(&id);
        runner
    };
    let request = ExecuteRequest::new("x")
        .tools(&tools)
        .options(options(5000))
        .unawaited(Unawaited::Cancel)
        .cancel_on(never.clone());
    let (result, mut runner) = tokio::join!(connection.execute(&request), script);
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(starts.load(Ordering::SeqCst), cap, "queued calls started");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        runner.host.try_recv().is_err(),
        "the host answered a call of a finished execution"
    );
    assert!(!connection.is_broken());
}

#[tokio::test]
async fn a_repeated_call_id_is_never_run_twice_on_a_connection() {
    let starts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = starts.clone();
    let count = Tool::new("count", move |_input: Value, _ctx| {
        counted.fetch_add(1, Ordering::SeqCst);
        async { Ok(json!("ran")) }
    });
    let tools = ToolSet::new(vec![Provider::new("t").tool(count)]).unwrap();
    let (mut connection, mut runner) = scripted_connection(SessionTimings::default());

    let never = CancellationToken::new();
    // Execution 1: `c-1`, then `c-1` again (ignored), then `c-2`.
    let script = async {
        let id = runner.accept().await;
        runner.call("c-1", "count");
        runner.call("c-1", "count");
        runner.call("c-2", "count");
        let mut answered = vec![runner.result().await.0, runner.result().await.0];
        answered.sort();
        assert_eq!(answered, ["c-1", "c-2"]);
        runner.done(&id);
    };
    let request = ExecuteRequest::new("1")
        .tools(&tools)
        .options(options(5000))
        .cancel_on(never.clone());
    let (result, ()) = tokio::join!(connection.execute(&request), script);
    assert!(result.is_ok());
    // Execution 2 on the same connection: a fresh id runs; `c-1` of execution 1 does not.
    let script = async {
        let id = runner.accept().await;
        runner.call("c-3", "count");
        runner.call("c-1", "count");
        assert_eq!(runner.result().await.0, "c-3");
        runner.done(&id);
    };
    let request = ExecuteRequest::new("2")
        .tools(&tools)
        .options(options(5000))
        .cancel_on(never.clone());
    let (result, ()) = tokio::join!(connection.execute(&request), script);
    assert!(result.is_ok());
    assert_eq!(starts.load(Ordering::SeqCst), 3, "a callId ran twice");
    assert!(runner.host.try_recv().is_err());
}
