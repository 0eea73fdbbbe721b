//! `execbox-runner --listen` as a fleet member, seen from outside: `/livez`, `/readyz` and
//! `/metrics` on the WebSocket port (no token needed, the upgrade still needs one), the SIGTERM
//! drain (running executions finish, new upgrades get 503, the drain timeout cancels), and the
//! per-session log line in `--log-format json`. Every test spawns the real binary on 127.0.0.1.
#![cfg(target_os = "linux")]

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{children_of, execute, is_dead, next, recv, send, Listener, Ws, PATIENCE};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Error as WsError;

const TOKEN: &str = "fleet-test-token";
/// A guest that keeps its CPU busy for one second.
const ONE_SECOND: &str = "const t = Date.now(); while (Date.now() - t < 1000) {} 'finished'";

/// A listening runner requiring [`TOKEN`].
fn listener(args: &[&str]) -> Listener {
    Listener::with_token(TOKEN, args)
}

/// A plain HTTP/1.1 GET: the status and the body.
fn get(addr: &str, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {response:?}"));
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// The value of one sample line of `/metrics` (`name{labels} value`), 0 when absent.
fn sample(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0.0)
}

/// Runs `code` on `ws` and returns its `done`, answering tool calls with `{echoed: input}`.
async fn run(ws: &mut Ws, id: &str, code: &str) -> Value {
    send(ws, execute(id, code, json!({"timeoutMs": 5000}))).await;
    loop {
        let message = recv(ws).await;
        match message["type"].as_str() {
            Some("started") => {}
            Some("tool_call") => {
                let result = json!({"type": "tool_result", "callId": message["callId"],
                                    "ok": true, "result": {"echoed": message["input"]}});
                send(ws, result).await;
            }
            Some("done") => return message,
            _ => panic!("unexpected {message}"),
        }
    }
}

#[tokio::test]
async fn health_answers_without_a_token_and_readyz_is_503_at_full_slots() {
    let listener = listener(&["--max-sessions", "1"]);
    let addr = listener.addr();
    assert_eq!(get(&addr, "/livez"), (200, "ok\n".into()));
    assert_eq!(get(&addr, "/readyz").0, 200);
    assert_eq!(get(&addr, "/readyz?verbose=1").0, 200);
    assert_eq!(get(&addr, "/nothing-here").0, 404);
    assert_eq!(get(&addr, "/").0, 404);

    // The upgrade still needs the token.
    match tokio_tungstenite::connect_async(&listener.url).await {
        Err(WsError::Http(response)) => assert_eq!(response.status(), 401),
        other => panic!("expected 401, got {other:?}"),
    }

    let mut ws = listener.connect().await;
    let done = run(&mut ws, "a", "1 + 1").await;
    assert_eq!(done["result"], 2, "{done}");
    // The one slot is taken: not ready, still live.
    assert_eq!(get(&addr, "/readyz"), (503, "full\n".into()));
    assert_eq!(get(&addr, "/livez").0, 200);
    let (status, metrics) = get(&addr, "/metrics");
    assert_eq!(status, 200);
    assert_eq!(
        sample(&metrics, "execbox_sessions_active"),
        1.0,
        "{metrics}"
    );
    assert_eq!(
        sample(
            &metrics,
            "execbox_session_rejections_total{reason=\"unauthorized\"}"
        ),
        1.0,
        "{metrics}"
    );
    assert!(!metrics.contains(TOKEN));

    // The slot comes back once the session's process is reaped.
    ws.close(None).await.unwrap();
    let until = Instant::now() + PATIENCE;
    while get(&addr, "/readyz").0 != 200 {
        assert!(Instant::now() < until, "never ready again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn metrics_count_executions_by_outcome_durations_and_tool_calls() {
    let listener = listener(&[]);
    let addr = listener.addr();
    let before = get(&addr, "/metrics").1;
    assert_eq!(sample(&before, "execbox_sessions_total"), 0.0, "{before}");
    assert!(
        sample(&before, "execbox_resident_memory_bytes") > 1e6,
        "{before}"
    );

    let mut ws = listener.connect().await;
    assert_eq!(run(&mut ws, "a", "6 * 7").await["ok"], true);
    let calls = "const a = await tools.echo({n: 1}); const b = await tools.echo({n: 2}); a.echoed.n + b.echoed.n";
    let done = run(&mut ws, "b", calls).await;
    assert_eq!(done["result"], 3, "{done}");
    let done = run(&mut ws, "c", "throw new Error('no')").await;
    assert_eq!(done["error"]["code"], "runtime_error", "{done}");
    send(
        &mut ws,
        execute("d", "for (;;) {}", json!({"timeoutMs": 100})),
    )
    .await;
    let done = loop {
        let m = recv(&mut ws).await;
        if m["type"] == "done" {
            break m;
        }
    };
    assert_eq!(done["error"]["code"], "timeout", "{done}");

    let metrics = get(&addr, "/metrics").1;
    let ok = "execbox_executions_total{outcome=\"ok\"}";
    assert_eq!(sample(&metrics, ok), 2.0, "{metrics}");
    let runtime = "execbox_executions_total{outcome=\"runtime_error\"}";
    assert_eq!(sample(&metrics, runtime), 1.0, "{metrics}");
    let timeout = "execbox_executions_total{outcome=\"timeout\"}";
    assert_eq!(sample(&metrics, timeout), 1.0, "{metrics}");
    assert_eq!(sample(&metrics, "execbox_tool_calls_total"), 2.0);
    assert_eq!(
        sample(&metrics, "execbox_execution_duration_seconds_count"),
        4.0
    );
    // The timeout ran for at least its 100 ms.
    assert!(sample(&metrics, "execbox_execution_duration_seconds_sum") >= 0.1);
    assert_eq!(sample(&metrics, "execbox_sessions_total"), 1.0);
    assert_eq!(sample(&metrics, "execbox_sessions_active"), 1.0);
}

#[tokio::test]
async fn sigterm_lets_a_running_execution_finish_refuses_new_upgrades_and_exits_0() {
    let mut listener = listener(&[]);
    let addr = listener.addr();
    let mut ws = listener.connect().await;
    send(
        &mut ws,
        execute("long", ONE_SECOND, json!({"timeoutMs": 5000})),
    )
    .await;
    assert_eq!(recv(&mut ws).await["type"], "started");
    listener.sigterm();

    // Draining: not ready at once, still live, upgrades refused with 503.
    let until = Instant::now() + PATIENCE;
    while get(&addr, "/readyz").0 != 503 {
        assert!(Instant::now() < until, "readyz never turned 503");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(get(&addr, "/readyz").1, "draining\n");
    assert_eq!(get(&addr, "/livez").0, 200);
    match tokio_tungstenite::connect_async(listener.request()).await {
        Err(WsError::Http(response)) => assert_eq!(response.status(), 503),
        other => panic!("expected 503 while draining, got {other:?}"),
    }

    let done = recv(&mut ws).await;
    assert_eq!(done["type"], "done", "{done}");
    assert_eq!(done["ok"], true, "{done}");
    assert_eq!(done["result"], "finished");
    // Nothing in flight: the session is closed as going away.
    let closed = next(&mut ws).await.expect_err("the session closes");
    assert_eq!(closed.map(|c| c.0), Some(CloseCode::Away));
    let status = listener.exit_status();
    assert_eq!(status.code(), Some(0), "stderr: {}", listener.stderr());
    listener.wait_stderr("SIGTERM: draining").await;
}

#[tokio::test]
async fn drain_timeout_cancels_an_execution_that_outlives_it_and_exits_0() {
    let mut listener = listener(&["--drain-timeout", "300ms"]);
    let mut ws = listener.connect().await;
    let forever = "for (;;) {}";
    send(
        &mut ws,
        execute("spin", forever, json!({"timeoutMs": 30000})),
    )
    .await;
    assert_eq!(recv(&mut ws).await["type"], "started");
    let signalled = Instant::now();
    listener.sigterm();
    let done = recv(&mut ws).await;
    assert_eq!(done["type"], "done", "{done}");
    assert_eq!(done["id"], "spin");
    assert_eq!(done["error"]["code"], "timeout", "{done}");
    // Not before the drain timeout (its own 30 s deadline is far away).
    assert!(signalled.elapsed() >= Duration::from_millis(300));
    let closed = next(&mut ws).await.expect_err("the session closes");
    assert_eq!(closed.map(|c| c.0), Some(CloseCode::Away));
    let status = listener.exit_status();
    assert_eq!(status.code(), Some(0), "stderr: {}", listener.stderr());
}

#[tokio::test]
async fn each_session_ends_with_one_json_log_line() {
    let mut listener = listener(&["--log-format", "json"]);
    let mut ws = listener.connect().await;
    run(&mut ws, "a", "1").await;
    run(&mut ws, "b", "2").await;
    ws.close(None).await.unwrap();
    let until = Instant::now() + PATIENCE;
    let line = loop {
        let stderr = listener.stderr();
        if let Some(line) = stderr.lines().find(|l| l.contains("session ended")) {
            break line.to_owned();
        }
        assert!(Instant::now() < until, "no session line: {stderr}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let event: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(event["level"], "INFO", "{event}");
    assert_eq!(event["fields"]["message"], "session ended");
    assert_eq!(event["fields"]["executions"], 2, "{event}");
    assert_eq!(event["fields"]["ended"], "client closed", "{event}");
    assert!(event["fields"]["peer"]
        .as_str()
        .unwrap()
        .starts_with("127.0.0.1:"));
    assert!(event["fields"]["duration_ms"].is_u64());
    // stdout carried the URL line only; SIGTERM with no session exits 0 at once.
    listener.sigterm();
    assert_eq!(listener.exit_status().code(), Some(0));
}

#[tokio::test]
async fn a_second_sigterm_while_draining_ends_at_once_and_kills_the_session_processes() {
    let mut listener = listener(&["--drain-timeout", "60s"]);
    let mut ws = listener.connect().await;
    send(
        &mut ws,
        execute("spin", "for (;;) {}", json!({"timeoutMs": 60000})),
    )
    .await;
    assert_eq!(recv(&mut ws).await["type"], "started");
    let children = children_of(listener.child.id());
    assert!(
        children.len() >= 2,
        "a session process and warm ones: {children:?}"
    );
    listener.sigterm();
    let until = Instant::now() + PATIENCE;
    while get(&listener.addr(), "/readyz").0 != 503 {
        assert!(Instant::now() < until, "readyz never turned 503");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    listener.sigterm();
    let status = listener.exit_status();
    assert_eq!(status.code(), Some(1), "stderr: {}", listener.stderr());
    listener.wait_stderr("while draining: stopping now").await;
    let until = Instant::now() + PATIENCE;
    while !children.iter().all(|&c| is_dead(c)) {
        assert!(
            Instant::now() < until,
            "runner processes outlived the supervisor"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
