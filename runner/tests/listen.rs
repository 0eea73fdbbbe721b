//! `execbox-runner --listen` seen from outside: each session's runner process, the slots and CPU
//! a stuck guest gives back, bounded buffering behind a slow reader, handshake and idle
//! timeouts, the accept loop under EMFILE, the bearer token and `Origin` checks, and the 1009
//! close. Every test spawns the real binary on 127.0.0.1 and talks to it over real sockets.
#![cfg(target_os = "linux")]

mod support;

#[path = "listen/ceilings.rs"]
mod ceilings;

use std::io::Read;
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::SinkExt;
use serde_json::json;
use support::{
    children_of, connect, cpu_seconds, execute, is_gone, next, recv, request, rss_kib, send,
    Listener, PATIENCE, RUNNER,
};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Error as WsError, Message as Frame};

/// Runs `1 + 1` on a new session, retrying while refused at --max-sessions until `until`.
async fn one_plus_one(url: &str, until: Instant) -> Result<(), String> {
    loop {
        let mut ws = connect(url).await;
        send(&mut ws, execute("probe", "1 + 1", json!({}))).await;
        match next(&mut ws).await {
            Ok(started) => {
                assert_eq!(started["type"], "started", "{started}");
                let done = recv(&mut ws).await;
                assert_eq!(done["result"], 2, "{done}");
                return Ok(());
            }
            Err(how) if Instant::now() < until => {
                let _ = how;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(how) => return Err(format!("still refused: {how:?}")),
        }
    }
}

#[tokio::test]
async fn guest_stuck_in_a_native_call_gives_back_its_slot_and_cpu_after_the_deadline() {
    let runner = Listener::spawn(&["--max-sessions", "1"]);
    let mut ws = connect(&runner.url).await;
    let stuck = "Array.prototype.reverse.call({length: 2**53-1})";
    send(&mut ws, execute("a", stuck, json!({"timeoutMs": 300}))).await;
    assert_eq!(recv(&mut ws).await["type"], "started");
    tokio::time::sleep(Duration::from_millis(150)).await;
    // The session's runner process is the one burning CPU.
    let busy = children_of(runner.pid())
        .into_iter()
        .max_by(|a, b| cpu_seconds(*a).total_cmp(&cpu_seconds(*b)))
        .expect("a runner process");
    let done = recv(&mut ws).await;
    let answered = Instant::now();
    assert_eq!(done["type"], "done", "{done}");
    assert_eq!(done["error"]["code"], "timeout", "{done}");
    match next(&mut ws).await {
        Err(Some((code, reason))) => {
            assert_eq!(code, CloseCode::Error, "{reason}");
            assert!(reason.contains("watchdog"), "{reason}");
        }
        other => panic!(
            "expected a close frame, got {}",
            match other {
                Ok(m) => m.to_string(),
                Err(none) => format!("{none:?}"),
            }
        ),
    }
    // With --max-sessions 1, a new session runs as soon as the stuck process is reaped.
    one_plus_one(&runner.url, answered + Duration::from_millis(1500))
        .await
        .expect("the slot came back within 1.5 s of the timeout");
    eprintln!(
        "a new session's `1 + 1` done {:?} after the `timeout` done",
        answered.elapsed()
    );
    assert!(
        is_gone(busy),
        "the stuck runner process {busy} is still there"
    );
}

#[tokio::test]
async fn client_that_never_reads_is_cut_off_with_bounded_memory() {
    let runner = Listener::spawn(&["--max-sessions", "1"]);
    let mut ws = connect(&runner.url).await;
    // 1 MiB tool calls, never awaited: the former server queued them all (400+ MiB in 5 s).
    let flood = "const s = 'x'.repeat(1 << 20); for (;;) tools.echo(s)";
    send(&mut ws, execute("a", flood, json!({"timeoutMs": 30000}))).await;
    // Read nothing for 5 s while the guest floods.
    let mut peak_kib = 0;
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        let total: u64 = std::iter::once(runner.pid())
            .chain(children_of(runner.pid()))
            .map(rss_kib)
            .sum();
        peak_kib = peak_kib.max(total);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        peak_kib < 300 * 1024,
        "supervisor + runners peaked at {} MiB",
        peak_kib / 1024
    );
    eprintln!("supervisor + runners RSS peak: {} MiB", peak_kib / 1024);
    // Now read: what was sent before the cut, then a 1008 close or the end of the connection.
    let until = Instant::now() + Duration::from_secs(30);
    let ended = loop {
        assert!(Instant::now() < until, "the session never ended");
        match next(&mut ws).await {
            Ok(m) => assert_ne!(m["type"], "done", "{m}"),
            Err(how) => break how,
        }
    };
    if let Some((code, reason)) = ended {
        assert_eq!(code, CloseCode::Policy, "{reason}");
    }
    one_plus_one(&runner.url, Instant::now() + PATIENCE)
        .await
        .expect("the slot came back");
    assert!(
        runner.stderr().contains("does not read"),
        "{}",
        runner.stderr()
    );
}

#[tokio::test]
async fn connection_that_never_upgrades_is_dropped_and_blocks_no_session() {
    let runner = Listener::spawn(&["--max-sessions", "1", "--handshake-timeout-ms", "300"]);
    let mut raw = TcpStream::connect(("127.0.0.1", runner.port())).unwrap();
    raw.set_read_timeout(Some(PATIENCE)).unwrap();
    one_plus_one(&runner.url, Instant::now() + PATIENCE)
        .await
        .expect("a real session runs beside a silent connection");
    // The silent connection is closed by the runner (EOF or reset), not left open.
    let mut byte = [0u8; 1];
    match raw.read(&mut byte) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("expected the runner to close the connection, got {other:?}"),
    }
}

#[tokio::test]
async fn idle_session_is_closed_but_one_waiting_on_a_tool_is_not() {
    let runner = Listener::spawn(&["--idle-timeout-ms", "400"]);
    let mut ws = connect(&runner.url).await;
    send(
        &mut ws,
        execute(
            "a",
            "(await tools.echo(1)) + 1",
            json!({"timeoutMs": 10000}),
        ),
    )
    .await;
    assert_eq!(recv(&mut ws).await["type"], "started");
    let call = recv(&mut ws).await;
    assert_eq!(call["type"], "tool_call", "{call}");
    // An execution is in flight: three idle timeouts pass without a close.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let result = json!({"type": "tool_result", "callId": call["callId"], "ok": true, "result": 41});
    send(&mut ws, result).await;
    let done = recv(&mut ws).await;
    assert_eq!(done["result"], 42, "{done}");
    // Then nothing in flight and nothing from the client: closed with 1001.
    let waited = Instant::now();
    match next(&mut ws).await {
        Err(Some((code, reason))) => {
            assert_eq!(code, CloseCode::Away, "{reason}");
            assert!(reason.contains("idle"), "{reason}");
        }
        Err(None) => panic!("closed without a close frame"),
        Ok(m) => panic!("unexpected {m}"),
    }
    assert!(waited.elapsed() < PATIENCE);
}

#[tokio::test]
async fn accept_errors_back_off_instead_of_spinning() {
    let script = format!("ulimit -n 32; exec '{RUNNER}' --listen 127.0.0.1:0 --max-sessions 8");
    let runner = Listener::spawn_with(Command::new("bash").args(["-c", &script]));
    // Far more connections than descriptors: accept fails with EMFILE until they time out.
    let raw: Vec<TcpStream> = (0..100)
        .map(|_| TcpStream::connect(("127.0.0.1", runner.port())).unwrap())
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = cpu_seconds(runner.pid());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let used = cpu_seconds(runner.pid()) - before;
    drop(raw);
    let stderr = runner.stderr();
    let warnings = stderr.matches("accept failed").count();
    eprintln!("under EMFILE: {used:.3} CPU-s in 2 s, {warnings} accept warnings");
    assert!(
        stderr.contains("accept failed"),
        "EMFILE never happened: {stderr}"
    );
    assert!(used < 0.3, "the accept loop used {used:.2} CPU-s in 2 s");
    assert!(
        warnings <= 5 && stderr.lines().count() < 40,
        "{warnings} accept warnings, {} lines: {stderr}",
        stderr.lines().count()
    );
}

/// The HTTP status a refused upgrade got (101 when it succeeded).
async fn upgrade_status(url: &str, headers: &[(&str, &str)]) -> u16 {
    match tokio_tungstenite::connect_async(request(url, headers)).await {
        Ok(_) => 101,
        Err(WsError::Http(response)) => {
            if response.status() == 401 {
                assert_eq!(response.headers()["www-authenticate"], "Bearer");
            }
            response.status().as_u16()
        }
        Err(e) => panic!("unexpected handshake error {e}"),
    }
}

#[tokio::test]
async fn bearer_token_is_required_once_configured() {
    // On loopback with no token configured, anyone local may connect.
    let open = Listener::spawn(&[]);
    assert_eq!(upgrade_status(&open.url, &[]).await, 101);

    // A token from --token-file (its trailing newline trimmed).
    let dir = std::env::temp_dir().join(format!("execbox-listen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token_file = dir.join("token");
    std::fs::write(&token_file, "s3cret\n").unwrap();
    let runner = Listener::spawn(&["--token-file", token_file.to_str().unwrap()]);
    let url = runner.url.as_str();
    assert_eq!(upgrade_status(url, &[]).await, 401);
    assert_eq!(
        upgrade_status(url, &[("authorization", "Bearer wrong")]).await,
        401
    );
    assert_eq!(
        upgrade_status(url, &[("authorization", "Bearer s3cret")]).await,
        101
    );
    // The subprotocol form, for browsers: the server selects `execbox`, never the token's.
    let protocols = [("sec-websocket-protocol", "execbox, execbox.bearer.s3cret")];
    let (mut ws, response) = tokio_tungstenite::connect_async(request(url, &protocols))
        .await
        .unwrap();
    assert_eq!(response.headers()["sec-websocket-protocol"], "execbox");
    send(&mut ws, execute("a", "6 * 7", json!({}))).await;
    assert_eq!(recv(&mut ws).await["type"], "started");
    assert_eq!(recv(&mut ws).await["result"], 42);
    // A page from another origin is refused even with the token.
    let evil = [
        ("authorization", "Bearer s3cret"),
        ("origin", "http://evil.example"),
    ];
    assert_eq!(upgrade_status(url, &evil).await, 403);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn token_from_the_environment_and_allowed_origins() {
    let mut command = Command::new(RUNNER);
    command.args([
        "--listen",
        "127.0.0.1:0",
        "--allow-origin",
        "http://app.example",
    ]);
    let runner = Listener::spawn_with(&mut command);
    // Without a token, only the Origin check applies.
    assert_eq!(
        upgrade_status(&runner.url, &[("origin", "http://evil.example")]).await,
        403
    );
    assert_eq!(
        upgrade_status(&runner.url, &[("origin", "http://app.example")]).await,
        101
    );
    drop(runner);

    // A token from EXECBOX_TOKEN (set by a shell: `spawn_with` clears the variable first).
    let script = format!("EXECBOX_TOKEN=s3cret exec '{RUNNER}' --listen 127.0.0.1:0");
    let runner = Listener::spawn_with(Command::new("sh").args(["-c", &script]));
    assert_eq!(upgrade_status(&runner.url, &[]).await, 401);
    assert_eq!(
        upgrade_status(&runner.url, &[("authorization", "Bearer s3cret")]).await,
        101
    );
}

#[test]
fn non_loopback_address_needs_a_token_or_the_insecure_flag() {
    let mut child = Command::new(RUNNER)
        .args(["--listen", "0.0.0.0:0"])
        .env_remove("EXECBOX_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + PATIENCE;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() >= until {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the runner is serving 0.0.0.0 without a token");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let refused = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(refused.stdout.is_empty(), "no address is printed");
    for hint in ["--token-file", "EXECBOX_TOKEN", "--insecure-no-auth"] {
        assert!(stderr.contains(hint), "{hint} not named: {stderr}");
    }
    let insecure = Listener::spawn_with(Command::new(RUNNER).args([
        "--listen",
        "0.0.0.0:0",
        "--insecure-no-auth",
    ]));
    assert!(
        insecure.url.starts_with("ws://0.0.0.0:"),
        "{}",
        insecure.url
    );
    let until = Instant::now() + PATIENCE;
    while !insecure.stderr().contains("WITHOUT authentication") {
        assert!(Instant::now() < until, "no warning: {}", insecure.stderr());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test]
async fn frame_far_over_the_limit_is_closed_with_1009() {
    let runner = Listener::spawn(&["--max-message-bytes", "1024"]);
    let mut ws = connect(&runner.url).await;
    // A little over the limit: the session's runner answers it.
    let padding = "x".repeat(2000);
    send(
        &mut ws,
        execute("a", &format!("'{padding}'.length"), json!({})),
    )
    .await;
    let done = recv(&mut ws).await;
    assert_eq!(done["error"]["code"], "validation_error", "{done}");
    // Over the limit + 4 KiB: closed with 1009 and a reason.
    let padding = "x".repeat(1024 + 4096 + 1);
    ws.send(Frame::text(format!(
        "{{\"type\":\"execute\",\"id\":\"b\",\"code\":\"{padding}\"}}"
    )))
    .await
    .unwrap();
    match next(&mut ws).await {
        Err(Some((code, reason))) => {
            assert_eq!(code, CloseCode::Size, "{reason}");
            assert!(reason.contains("limit"), "{reason}");
        }
        Err(None) => panic!("closed without a close frame"),
        Ok(m) => panic!("unexpected {m}"),
    }
}

#[tokio::test]
async fn frames_with_raw_newlines_and_binary_frames_are_one_message_each() {
    let runner = Listener::spawn(&[]);
    let mut ws = connect(&runner.url).await;
    // Pretty-printed JSON: its newlines (and CRs) are whitespace, not message boundaries.
    let pretty = serde_json::to_string_pretty(&execute("a", "6 * 7", json!({}))).unwrap();
    ws.send(Frame::text(pretty.replace('\n', "\r\n")))
        .await
        .unwrap();
    assert_eq!(recv(&mut ws).await["type"], "started");
    assert_eq!(recv(&mut ws).await["result"], 42);
    // A binary frame is read as text.
    let binary = execute("b", "'bin'", json!({})).to_string().into_bytes();
    ws.send(Frame::binary(binary)).await.unwrap();
    assert_eq!(recv(&mut ws).await["type"], "started");
    assert_eq!(recv(&mut ws).await["result"], "bin");
}

/// Review finding m4: the supervisor counted a frame as an execution in flight when its first
/// bytes looked like an `execute`, while the runner drops a line that does not decode (an
/// object followed by another, by U+0000, by any garbage): no `done` ever came, and the idle
/// timeout never closed the session. Both now classify a frame with the protocol's one rule.
#[tokio::test]
async fn execute_with_trailing_garbage_is_not_counted_in_flight_so_the_idle_timeout_closes_it() {
    let runner = Listener::spawn(&["--idle-timeout-ms", "400"]);
    let good = execute("g", "1 + 1", json!({})).to_string();
    for tail in [
        " {}",
        "\u{0}",
        " garbage",
        "}",
        "\u{0}{\"type\":\"cancel\"}",
    ] {
        let mut ws = connect(&runner.url).await;
        ws.send(Frame::text(format!("{good}{tail}"))).await.unwrap();
        // `next` panics after PATIENCE of silence: a session stuck with a phantom execution.
        match next(&mut ws).await {
            Err(Some((code, reason))) => {
                assert_eq!(code, CloseCode::Away, "{tail:?}: {reason}");
                assert!(reason.contains("idle"), "{tail:?}: {reason}");
            }
            other => panic!("{tail:?}: expected the idle close, got {other:?}"),
        }
    }
    // A well-formed execute on a fresh session still runs.
    one_plus_one(&runner.url, Instant::now() + PATIENCE)
        .await
        .unwrap();
}

/// Review finding m4, the other way round: an `execute` whose `type` comes after 4 KiB of
/// code was not counted in flight (the supervisor read only the first 4 KiB), so a session
/// waiting on a tool was closed as idle. The supervisor now decodes the frame as the runner does.
#[tokio::test]
async fn execute_whose_type_comes_late_is_in_flight_while_it_waits_on_a_tool() {
    let runner = Listener::spawn(&["--idle-timeout-ms", "400"]);
    let mut ws = connect(&runner.url).await;
    let code = format!("/*{}*/ (await tools.echo(1)) + 1", "x".repeat(6000));
    let frame = json!({
        "code": code,
        "options": {"timeoutMs": 10000},
        "providers": [{"name": "tools", "tools": {"echo": {"safeName": "echo"}}}],
        "id": "late",
        "type": "execute",
    });
    // Keys keep their order (`preserve_order`): `type` is last, past the first 4 KiB.
    let text = frame.to_string();
    assert!(text.find("\"type\"").unwrap() > 4096, "{}", &text[..100]);
    ws.send(Frame::text(text)).await.unwrap();
    assert_eq!(recv(&mut ws).await["type"], "started");
    let call = recv(&mut ws).await;
    assert_eq!(call["type"], "tool_call", "{call}");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let result = json!({"type": "tool_result", "callId": call["callId"], "ok": true, "result": 41});
    send(&mut ws, result).await;
    let done = recv(&mut ws).await;
    assert_eq!(done["result"], 42, "{done}");
}
