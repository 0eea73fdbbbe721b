//! Phase 4: malformed, oversized, deep, stale and flooding input, each followed by a probe.

use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use super::{
    case, compact, execute_line, ok, probe, run_case, tool_result_line, ws_open, Case, Expect,
    Failure, Fault, Host, In, Out, Peer, Ran, Report, Rng, Scale, StdioRunner, WsRunner, GRACE,
    THIS_CALL,
};

fn deep_array(depth: usize) -> String {
    let mut s = "[".repeat(depth);
    s.push_str(&"]".repeat(depth));
    s
}

fn deep_object(depth: usize) -> String {
    let mut s = "{\"a\":".repeat(depth);
    s.push('1');
    s.push_str(&"}".repeat(depth));
    s
}

/// Bytes with no newline... except the ones random bytes happen to hold.
fn garbage(rng: &mut Rng, n: usize) -> Vec<u8> {
    let mut bytes = rng.bytes(n);
    bytes.push(b'\n');
    bytes
}

/// Expects exactly one `done` rejecting `id` with `code`, and no `started`.
async fn expect_rejection(peer: &mut Peer, id: &str, code: &str) -> Result<(), String> {
    match peer.recv(Instant::now() + GRACE).await {
        Some(In::Msg(m)) if m["type"] == "done" && m["id"] == id => {
            if m["error"]["code"] == code {
                Ok(())
            } else {
                Err(format!("expected a {code} done, got {}", compact(&m)))
            }
        }
        Some(other) => Err(format!("expected a {code} done for {id}, got {other:?}")),
        None => Err(format!("no done for {id} within {GRACE:?}")),
    }
}

/// Runs `case` with `fault` and expects the given outcome class.
async fn expect_run(
    peer: &mut Peer,
    id: &str,
    case: &Case,
    fault: Fault,
    report: &mut Report,
) -> Result<(), String> {
    let mut violations = Vec::new();
    let result = run_case(
        peer,
        id,
        case,
        &fault,
        &mut Host::default(),
        &mut violations,
    )
    .await;
    if !violations.is_empty() {
        return Err(violations.join("; "));
    }
    match result {
        Ok(Ran::Done(classes)) => {
            for class in &classes {
                report.outcome("bad-input probes", class);
            }
            Ok(())
        }
        Ok(Ran::Disconnected) => Err("disconnected".into()),
        Err(Failure::Refused) => Err("session refused".into()),
        Err(Failure::Lost(why)) => Err(why),
    }
}

/// The stdio bad inputs: `(name, targets the 64 KiB-limit runner)`.
const STDIO_BAD: [(&str, bool); 21] = [
    ("truncated execute line", true),
    ("truncated tool_result while waiting", true),
    ("oversized execute line (1 MiB)", true),
    ("oversized garbage line (1 MiB)", true),
    ("oversized tool_result while waiting (1 MiB)", true),
    ("oversized line ending in a valid message", true),
    ("invalid UTF-8 line", true),
    ("invalid UTF-8 inside an execute", true),
    ("100k-deep JSON array line", false),
    ("100k-deep JSON object line", false),
    ("100k-deep execute options", false),
    ("100k-deep tool_result while waiting", false),
    ("tool_result for a stale callId (idle)", true),
    ("tool_results for stale callIds while waiting", true),
    ("flood of 5000 tool_results for unknown callIds", true),
    ("duplicate tool_result", true),
    ("binary garbage (64 KiB)", true),
    ("binary garbage while waiting", true),
    ("NUL bytes and blank lines", true),
    ("runner-only messages sent to the runner", true),
    ("execute written one byte at a time", true),
];

async fn stdio_bad_input(
    name: &str,
    runner: &mut StdioRunner,
    id: &str,
    rng: &mut Rng,
    report: &mut Report,
) -> Result<(), String> {
    const MIB: usize = 1 << 20;
    let peer = &mut runner.peer;
    let echo = || case("echo once", "await t.echo(5)", ok(json!(5))).calls(1);
    let quiet = Duration::from_millis(100);
    match name {
        "truncated execute line" => {
            let line = execute_line(id, "1 + 1", &json!({}));
            peer.send(line[..line.len() / 2].to_owned());
            peer.expect_silence(quiet).await
        }
        "truncated tool_result while waiting" => {
            let items = vec![Out::Line(format!(
                "{{\"type\":\"tool_result\",\"callId\":\"{THIS_CALL}\",\"ok\":tr"
            ))];
            expect_run(
                peer,
                id,
                &echo(),
                Fault::Inject {
                    items,
                    answer: true,
                },
                report,
            )
            .await
        }
        "oversized execute line (1 MiB)" => {
            peer.send(execute_line(
                id,
                &format!("'{}'", "x".repeat(MIB)),
                &json!({}),
            ));
            expect_rejection(peer, id, "validation_error").await
        }
        "oversized garbage line (1 MiB)" => {
            peer.send("x".repeat(MIB));
            peer.expect_silence(quiet).await
        }
        "oversized tool_result while waiting (1 MiB)" => {
            let big = tool_result_line(THIS_CALL, Some(&json!("y".repeat(MIB))));
            let mut waiting = echo();
            waiting.expect = Expect::Code("serialization_error");
            let items = vec![Out::Line(big)];
            expect_run(
                peer,
                id,
                &waiting,
                Fault::Inject {
                    items,
                    answer: false,
                },
                report,
            )
            .await
        }
        "oversized line ending in a valid message" => {
            let mut bytes = "z".repeat(MIB).into_bytes();
            bytes.extend_from_slice(execute_line("ignored", "1", &json!({})).as_bytes());
            bytes.push(b'\n');
            peer.send_all(vec![Out::Bytes(bytes)]);
            peer.expect_silence(quiet).await
        }
        "invalid UTF-8 line" => {
            peer.send_all(vec![Out::Bytes(
                b"\xff\xfe\xfd not utf-8 \xc3\x28\n".to_vec(),
            )]);
            peer.expect_silence(quiet).await
        }
        "invalid UTF-8 inside an execute" => {
            // Today: a line that is not UTF-8 is ignored whole, even if it was meant as an
            // execute, so no `done` comes back (its id cannot be read as text).
            let line = execute_line(id, "'@@'", &json!({}));
            let at = line.find("@@").expect("placeholder");
            let mut bytes = line.into_bytes();
            bytes[at..at + 2].copy_from_slice(&[0xff, 0xfe]);
            bytes.push(b'\n');
            peer.send_all(vec![Out::Bytes(bytes)]);
            peer.expect_silence(quiet).await
        }
        "100k-deep JSON array line" => {
            peer.send(deep_array(100_000));
            peer.expect_silence(quiet).await
        }
        "100k-deep JSON object line" => {
            peer.send(deep_object(100_000));
            peer.expect_silence(quiet).await
        }
        "100k-deep execute options" => {
            let line = execute_line(id, "1", &json!({})).replace(
                "\"options\":{}",
                &format!("\"options\":{{\"x\":{}}}", deep_array(100_000)),
            );
            peer.send(line);
            expect_rejection(peer, id, "validation_error").await
        }
        "100k-deep tool_result while waiting" => {
            let deep = format!(
                "{{\"type\":\"tool_result\",\"callId\":\"{THIS_CALL}\",\"ok\":true,\"result\":{}}}",
                deep_array(100_000)
            );
            let mut waiting = echo();
            waiting.expect = Expect::Code("serialization_error");
            let items = vec![Out::Line(deep)];
            expect_run(
                peer,
                id,
                &waiting,
                Fault::Inject {
                    items,
                    answer: false,
                },
                report,
            )
            .await
        }
        "tool_result for a stale callId (idle)" => {
            peer.send(tool_result_line("call-1", Some(&json!("stale"))));
            peer.expect_silence(quiet).await
        }
        "tool_results for stale callIds while waiting" => {
            // Ids of calls an earlier execution made, which this one has not (yet) made.
            let items = (2..50)
                .map(|n| {
                    Out::Line(tool_result_line(
                        &format!("call-{n}"),
                        Some(&json!("stale")),
                    ))
                })
                .collect();
            expect_run(
                peer,
                id,
                &echo(),
                Fault::Inject {
                    items,
                    answer: true,
                },
                report,
            )
            .await
        }
        "flood of 5000 tool_results for unknown callIds" => {
            let items = (0..5000)
                .map(|n| Out::Line(tool_result_line(&format!("unknown-{n}"), Some(&json!(n)))))
                .collect();
            expect_run(
                peer,
                id,
                &echo(),
                Fault::Inject {
                    items,
                    answer: true,
                },
                report,
            )
            .await
        }
        "duplicate tool_result" => {
            let items = vec![
                Out::Line(tool_result_line(THIS_CALL, Some(&json!(5)))),
                Out::Line(tool_result_line(THIS_CALL, Some(&json!("duplicate")))),
            ];
            expect_run(
                peer,
                id,
                &echo(),
                Fault::Inject {
                    items,
                    answer: false,
                },
                report,
            )
            .await
        }
        "binary garbage (64 KiB)" => {
            peer.send_all(vec![Out::Bytes(garbage(rng, 64 * 1024))]);
            peer.expect_silence(quiet).await
        }
        "binary garbage while waiting" => {
            let items = vec![Out::Bytes(garbage(rng, 16 * 1024))];
            expect_run(
                peer,
                id,
                &echo(),
                Fault::Inject {
                    items,
                    answer: true,
                },
                report,
            )
            .await
        }
        "NUL bytes and blank lines" => {
            peer.send_all(vec![Out::Bytes(
                b"\0\0\0\n\n\r\n   \n\0{\"type\":\"cancel\"}\0\n".to_vec(),
            )]);
            peer.expect_silence(quiet).await
        }
        "runner-only messages sent to the runner" => {
            peer.send_all(vec![
                Out::Line(json!({"type": "started", "id": id}).to_string()),
                Out::Line(json!({"type": "done", "id": id, "ok": true, "durationMs": 0, "logs": []}).to_string()),
                Out::Line(json!({"type": "tool_call", "callId": "call-1", "providerName": "t", "safeToolName": "echo"}).to_string()),
            ]);
            peer.expect_silence(quiet).await
        }
        "execute written one byte at a time" => {
            let mut bytes = execute_line(id, "20 + 22", &json!({})).into_bytes();
            bytes.push(b'\n');
            peer.drip(bytes);
            match peer.recv(Instant::now() + GRACE).await {
                Some(In::Msg(m)) if m["type"] == "started" && m["id"] == id => {}
                other => return Err(format!("expected started, got {other:?}")),
            }
            match peer.recv(Instant::now() + GRACE).await {
                Some(In::Msg(m)) if m["type"] == "done" && m["result"] == 42 => Ok(()),
                other => Err(format!("expected done 42, got {other:?}")),
            }
        }
        other => Err(format!("unknown bad input {other}")),
    }
}

/// The WebSocket bad inputs.
const WS_BAD: [&str; 9] = [
    "WebSocket binary frame of garbage",
    "WebSocket binary frame holding an execute",
    "WebSocket truncated text frame",
    "WebSocket oversized execute frame (limit + 1 KiB)",
    "WebSocket oversized text frame (1 MiB)",
    "WebSocket oversized frame while waiting on a tool (1 MiB)",
    "WebSocket binary frame while waiting on a tool",
    "WebSocket flood of 2000 tool_results for unknown callIds",
    "WebSocket 30k-deep JSON frame",
];

/// Returns whether the runner is expected to have closed the session.
async fn ws_bad_input(
    name: &str,
    peer: &mut Peer,
    id: &str,
    rng: &mut Rng,
    report: &mut Report,
) -> Result<bool, String> {
    const MIB: usize = 1 << 20;
    let quiet = Duration::from_millis(100);
    let echo = || case("echo once", "await t.echo(5)", ok(json!(5))).calls(1);
    let expect_closed = |item: Option<In>| match item {
        Some(In::Closed { .. }) => Ok(true),
        other => Err(format!(
            "expected the runner to end the session, got {other:?}"
        )),
    };
    match name {
        "WebSocket binary frame of garbage" => {
            peer.send_all(vec![Out::Bytes(rng.bytes(4096))]);
            peer.expect_silence(quiet).await.map(|()| false)
        }
        "WebSocket binary frame holding an execute" => {
            // Today: a binary frame holding UTF-8 is read as a message, like a text frame.
            peer.send_all(vec![Out::Bytes(
                execute_line(id, "20 + 22", &json!({})).into_bytes(),
            )]);
            match peer.recv(Instant::now() + GRACE).await {
                Some(In::Msg(m)) if m["type"] == "started" => {}
                other => return Err(format!("expected started, got {other:?}")),
            }
            match peer.recv(Instant::now() + GRACE).await {
                Some(In::Msg(m)) if m["type"] == "done" && m["result"] == 42 => Ok(false),
                other => Err(format!("expected done 42, got {other:?}")),
            }
        }
        "WebSocket truncated text frame" => {
            let line = execute_line(id, "1", &json!({}));
            peer.send(line[..line.len() / 2].to_owned());
            peer.expect_silence(quiet).await.map(|()| false)
        }
        "WebSocket oversized execute frame (limit + 1 KiB)" => {
            peer.send(execute_line(
                id,
                &format!("'{}'", "x".repeat(65_536 + 1024)),
                &json!({}),
            ));
            expect_rejection(peer, id, "validation_error")
                .await
                .map(|()| false)
        }
        "WebSocket oversized text frame (1 MiB)" => {
            // Past the frame cap (limit + 4 KiB): the runner cannot read it and ends the session.
            peer.send(execute_line(
                id,
                &format!("'{}'", "x".repeat(MIB)),
                &json!({}),
            ));
            expect_closed(peer.recv(Instant::now() + GRACE).await)
        }
        "WebSocket oversized frame while waiting on a tool (1 MiB)" => {
            peer.send(execute_line(
                id,
                "await t.hang({})",
                &json!({ "timeoutMs": 60_000 }),
            ));
            for kind in ["started", "tool_call"] {
                match peer.recv(Instant::now() + GRACE).await {
                    Some(In::Msg(m)) if m["type"] == kind => {}
                    other => return Err(format!("expected {kind}, got {other:?}")),
                }
            }
            peer.send(tool_result_line("call-1", Some(&json!("y".repeat(MIB)))));
            // The session ends with the execution. Today a `done` (timeout) may come first:
            // the close sets the interrupt flag a cancel sets, and when the engine sees the
            // flag before it waits for the next host event, it reports a cancel, not a close.
            match peer.recv(Instant::now() + GRACE).await {
                Some(In::Msg(m)) if m["type"] == "done" && m["id"] == id => {
                    if m["error"]["code"] != "timeout" {
                        return Err(format!(
                            "expected no done or a timeout, got {}",
                            compact(&m)
                        ));
                    }
                    report.count(
                        "transport closed mid-execution: runner sent `done: timeout` first (a close taken for a cancel)",
                    );
                    expect_closed(peer.recv(Instant::now() + GRACE).await)
                }
                other => {
                    report.count(
                        "transport closed mid-execution: runner ended the session without a `done`",
                    );
                    expect_closed(other)
                }
            }
        }
        "WebSocket binary frame while waiting on a tool" => {
            let items = vec![Out::Bytes(rng.bytes(1024))];
            expect_run(
                peer,
                id,
                &echo(),
                Fault::Inject {
                    items,
                    answer: true,
                },
                report,
            )
            .await
            .map(|()| false)
        }
        "WebSocket flood of 2000 tool_results for unknown callIds" => {
            let items = (0..2000)
                .map(|n| Out::Line(tool_result_line(&format!("unknown-{n}"), Some(&json!(n)))))
                .collect();
            expect_run(
                peer,
                id,
                &echo(),
                Fault::Inject {
                    items,
                    answer: true,
                },
                report,
            )
            .await
            .map(|()| false)
        }
        "WebSocket 30k-deep JSON frame" => {
            peer.send(deep_array(30_000));
            peer.expect_silence(quiet).await.map(|()| false)
        }
        other => Err(format!("unknown bad input {other}")),
    }
}

/// Every bad input `scale.bad_input_rounds` times, each followed by a probe that must succeed.
pub(crate) async fn bad_inputs(scale: &Scale) -> Report {
    const PHASE: &str = "bad-input probes";
    let began = std::time::Instant::now();
    let mut report = Report::default();
    let mut rng = Rng::new(scale.seed ^ 0xBAD);
    let mut small = StdioRunner::spawn(&["--max-message-bytes", "65536"]);
    let mut large = StdioRunner::spawn(&[]);
    report.pids.extend([small.pid, large.pid]);
    let mut n = 0u64;
    'rounds: for _ in 0..scale.bad_input_rounds {
        for (name, limited) in STDIO_BAD {
            n += 1;
            let runner = if limited { &mut small } else { &mut large };
            let id = format!("bad-{n}");
            let applied = stdio_bad_input(name, runner, &id, &mut rng, &mut report).await;
            if let Err(e) = &applied {
                let diagnosis = runner.diagnose();
                report.violation(format!("{name}: {e}; {diagnosis}"));
            }
            let survived = probe(&mut runner.peer, &format!("probe-{n}"), PHASE, &mut report).await;
            report.bad_input(name, applied.is_ok() && survived);
            if !survived {
                let diagnosis = runner.diagnose();
                report.violation(format!(
                    "after {name}: the runner no longer answers; {diagnosis}"
                ));
                break 'rounds;
            }
        }
    }
    for runner in [small, large] {
        if let Err(e) = runner.finish().await {
            report.violation(format!("{PHASE}: {e}"));
        }
    }

    let server = WsRunner::spawn(&["--max-message-bytes", "65536"]).await;
    report.pids.push(server.pid);
    let mut peer = ws_open(&server.url, &mut report).await.ok();
    'ws: for _ in 0..scale.bad_input_rounds {
        for name in WS_BAD {
            n += 1;
            let Some(session) = peer.as_mut() else {
                break 'ws;
            };
            let id = format!("bad-{n}");
            let closed = match ws_bad_input(name, session, &id, &mut rng, &mut report).await {
                Ok(closed) => Ok(closed),
                Err(e) => {
                    report.violation(format!("{name}: {e}"));
                    Err(())
                }
            };
            if closed != Ok(false) {
                session.abort();
                peer = ws_open(&server.url, &mut report).await.ok();
            }
            let survived = match peer.as_mut() {
                Some(session) => probe(session, &format!("probe-{n}"), PHASE, &mut report).await,
                None => false,
            };
            report.bad_input(name, closed.is_ok() && survived);
            if !survived {
                report.violation(format!(
                    "after {name}: the listening runner no longer answers"
                ));
                break 'ws;
            }
        }
    }
    if let Some(session) = peer {
        session.close();
    }
    if let Err(e) = server.stop().await {
        report.violation(format!("{PHASE}: {e}"));
    }
    report.measure("bad inputs: wall time", format!("{:.1?}", began.elapsed()));
    report.check_orphans().await;
    report
}
