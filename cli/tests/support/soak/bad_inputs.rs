//! Phase 4: malformed, oversized, deep, stale and flooding input, each followed by a probe.
//!
//! One table of bad inputs ([`table`]) and one driver ([`bad_inputs`]) that sends each over
//! the transports its row names, stdio and WebSocket. Where a transport needs other sizes or
//! ends differently, the row's plan says so, and its name gives both.

use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use super::{
    case, compact, execute_line, ok, probe, run_case, tool_result_line, ws_open, Case, Expect,
    Failure, Fault, Host, In, Out, Peer, Ran, Report, Rng, Scale, StdioRunner, WsRunner, GRACE,
    THIS_CALL,
};

const PHASE: &str = "bad-input probes";

const MIB: usize = 1 << 20;

/// `--max-message-bytes` of every runner here but the one for deep inputs.
const LIMIT: usize = 65_536;

/// How a bad input travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    Stdio,
    WebSocket,
}

impl Transport {
    fn name(self) -> &'static str {
        match self {
            Transport::Stdio => "stdio",
            Transport::WebSocket => "WebSocket",
        }
    }
}

/// The runner a bad input is sent to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum To {
    /// The stdio runner with `--max-message-bytes` [`LIMIT`].
    Stdio,
    /// The stdio runner with the default limit (16 MiB): the deep inputs are over [`LIMIT`],
    /// and must be read to test their depth.
    StdioLarge,
    /// A session of the listening runner with `--max-message-bytes` [`LIMIT`]; a frame over
    /// the limit + 4 KiB cannot be read, and ends the session.
    WebSocket,
}

impl To {
    fn transport(self) -> Transport {
        match self {
            To::Stdio | To::StdioLarge => Transport::Stdio,
            To::WebSocket => Transport::WebSocket,
        }
    }
}

const STDIO: &[To] = &[To::Stdio];
const STDIO_LARGE: &[To] = &[To::StdioLarge];
const BOTH: &[To] = &[To::Stdio, To::WebSocket];

/// What one bad input sends, and what must follow it.
enum Plan {
    /// These items; nothing may come back.
    Ignored(Vec<Out>),
    /// These items, holding the execute `id`, which must be rejected with this code (a
    /// `done` without `started`).
    Rejected(Vec<Out>, &'static str),
    /// These items; the runner must end the session.
    Closes(Vec<Out>),
    /// These bytes, holding the execute `id` of `20 + 22`, written one per write on stdio
    /// and as one binary frame on WebSocket: `started`, then `done` with 42.
    Answers42(Vec<u8>),
    /// `t.echo(5)`, with these items sent when its tool call arrives ([`THIS_CALL`] standing
    /// for its callId); the call is then answered if `answer`. It must end `ok` with 5, or
    /// with `code`.
    AtToolCall {
        items: Vec<Out>,
        answer: bool,
        code: Option<&'static str>,
    },
    /// `t.hang({})` with this line sent when its tool call arrives ([`THIS_CALL`] standing for
    /// its callId): the runner must end the session.
    ClosesAtToolCall(String),
}

/// One bad input.
struct BadInput {
    name: &'static str,
    /// The runners it is sent to, at most one per transport.
    to: &'static [To],
    /// What it sends over a transport and what must follow; `id` is the id of any execute
    /// it holds.
    plan: fn(Transport, &str, &mut Rng) -> Plan,
}

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

/// A row of the table.
fn row(
    name: &'static str,
    to: &'static [To],
    plan: fn(Transport, &str, &mut Rng) -> Plan,
) -> BadInput {
    BadInput { name, to, plan }
}

/// Every bad input, in the order they are sent.
fn table() -> Vec<BadInput> {
    vec![
        row("truncated execute line", BOTH, |_, id, _| {
            let line = execute_line(id, "1 + 1", &json!({}));
            Plan::Ignored(vec![Out::Line(line[..line.len() / 2].to_owned())])
        }),
        row("truncated tool_result while waiting", STDIO, |_, _, _| {
            Plan::AtToolCall {
                items: vec![Out::Line(format!(
                    "{{\"type\":\"tool_result\",\"callId\":\"{THIS_CALL}\",\"ok\":tr"
                ))],
                answer: true,
                code: None,
            }
        }),
        row(
            "oversized execute line (1 MiB)",
            BOTH,
            |transport, id, _| {
                let items = vec![Out::Line(execute_line(
                    id,
                    &format!("'{}'", "x".repeat(MIB)),
                    &json!({}),
                ))];
                match transport {
                    Transport::Stdio => Plan::Rejected(items, "validation_error"),
                    // Past the frame cap: the runner cannot read it and ends the session.
                    Transport::WebSocket => Plan::Closes(items),
                }
            },
        ),
        row(
            "oversized execute line (limit + 1 KiB)",
            &[To::WebSocket],
            |_, id, _| {
                let code = format!("'{}'", "x".repeat(LIMIT + 1024));
                Plan::Rejected(
                    vec![Out::Line(execute_line(id, &code, &json!({})))],
                    "validation_error",
                )
            },
        ),
        row("oversized garbage line (1 MiB)", STDIO, |_, _, _| {
            Plan::Ignored(vec![Out::Line("x".repeat(MIB))])
        }),
        row(
            "oversized tool_result while waiting (1 MiB)",
            BOTH,
            |transport, _, _| {
                let big = tool_result_line(THIS_CALL, Some(&json!("y".repeat(MIB))));
                match transport {
                    Transport::Stdio => Plan::AtToolCall {
                        items: vec![Out::Line(big)],
                        answer: false,
                        code: Some("serialization_error"),
                    },
                    Transport::WebSocket => Plan::ClosesAtToolCall(big),
                }
            },
        ),
        row(
            "oversized line ending in a valid message",
            STDIO,
            |_, _, _| {
                let mut bytes = "z".repeat(MIB).into_bytes();
                bytes.extend_from_slice(execute_line("ignored", "1", &json!({})).as_bytes());
                bytes.push(b'\n');
                Plan::Ignored(vec![Out::Bytes(bytes)])
            },
        ),
        row("invalid UTF-8 line", STDIO, |_, _, _| {
            Plan::Ignored(vec![Out::Bytes(
                b"\xff\xfe\xfd not utf-8 \xc3\x28\n".to_vec(),
            )])
        }),
        // Today: a line that is not UTF-8 is ignored whole, even if it was meant as an
        // execute, so no `done` comes back (its id cannot be read as text).
        row("invalid UTF-8 inside an execute", STDIO, |_, id, _| {
            let line = execute_line(id, "'@@'", &json!({}));
            let at = line.find("@@").expect("placeholder");
            let mut bytes = line.into_bytes();
            bytes[at..at + 2].copy_from_slice(&[0xff, 0xfe]);
            bytes.push(b'\n');
            Plan::Ignored(vec![Out::Bytes(bytes)])
        }),
        row(
            "100k-deep JSON array line (30k-deep over WebSocket)",
            &[To::StdioLarge, To::WebSocket],
            |transport, _, _| {
                // A frame must stay under the frame cap to be read at all.
                let depth = match transport {
                    Transport::Stdio => 100_000,
                    Transport::WebSocket => 30_000,
                };
                Plan::Ignored(vec![Out::Line(deep_array(depth))])
            },
        ),
        row("100k-deep JSON object line", STDIO_LARGE, |_, _, _| {
            Plan::Ignored(vec![Out::Line(deep_object(100_000))])
        }),
        row("100k-deep execute options", STDIO_LARGE, |_, id, _| {
            let line = execute_line(id, "1", &json!({})).replace(
                "\"options\":{}",
                &format!("\"options\":{{\"x\":{}}}", deep_array(100_000)),
            );
            Plan::Rejected(vec![Out::Line(line)], "validation_error")
        }),
        row(
            "100k-deep tool_result while waiting",
            STDIO_LARGE,
            |_, _, _| {
                let deep = format!(
                    "{{\"type\":\"tool_result\",\"callId\":\"{THIS_CALL}\",\"ok\":true,\"result\":{}}}",
                    deep_array(100_000)
                );
                Plan::AtToolCall {
                    items: vec![Out::Line(deep)],
                    answer: false,
                    code: Some("serialization_error"),
                }
            },
        ),
        row("tool_result for a stale callId (idle)", STDIO, |_, _, _| {
            Plan::Ignored(vec![Out::Line(tool_result_line(
                "call-1",
                Some(&json!("stale")),
            ))])
        }),
        // Ids of calls an earlier execution made, which this one has not (yet) made.
        row(
            "tool_results for stale callIds while waiting",
            STDIO,
            |_, _, _| Plan::AtToolCall {
                items: (2..50)
                    .map(|n| {
                        Out::Line(tool_result_line(
                            &format!("call-{n}"),
                            Some(&json!("stale")),
                        ))
                    })
                    .collect(),
                answer: true,
                code: None,
            },
        ),
        row(
            "flood of 5000 tool_results for unknown callIds (2000 over WebSocket)",
            BOTH,
            |transport, _, _| {
                let n = match transport {
                    Transport::Stdio => 5000,
                    Transport::WebSocket => 2000,
                };
                Plan::AtToolCall {
                    items: (0..n)
                        .map(|n| {
                            Out::Line(tool_result_line(&format!("unknown-{n}"), Some(&json!(n))))
                        })
                        .collect(),
                    answer: true,
                    code: None,
                }
            },
        ),
        row("duplicate tool_result", STDIO, |_, _, _| Plan::AtToolCall {
            items: vec![
                Out::Line(tool_result_line(THIS_CALL, Some(&json!(5)))),
                Out::Line(tool_result_line(THIS_CALL, Some(&json!("duplicate")))),
            ],
            answer: false,
            code: None,
        }),
        row(
            "binary garbage (64 KiB; one 4 KiB binary frame over WebSocket)",
            BOTH,
            |transport, _, rng| {
                let n = match transport {
                    Transport::Stdio => 64 * 1024,
                    Transport::WebSocket => 4096,
                };
                Plan::Ignored(vec![Out::Bytes(garbage(rng, n))])
            },
        ),
        row(
            "binary garbage while waiting (16 KiB; a 1 KiB binary frame over WebSocket)",
            BOTH,
            |transport, _, rng| {
                let n = match transport {
                    Transport::Stdio => 16 * 1024,
                    Transport::WebSocket => 1024,
                };
                Plan::AtToolCall {
                    items: vec![Out::Bytes(garbage(rng, n))],
                    answer: true,
                    code: None,
                }
            },
        ),
        row("NUL bytes and blank lines", STDIO, |_, _, _| {
            Plan::Ignored(vec![Out::Bytes(
                b"\0\0\0\n\n\r\n   \n\0{\"type\":\"cancel\"}\0\n".to_vec(),
            )])
        }),
        row(
            "runner-only messages sent to the runner",
            STDIO,
            |_, id, _| {
                let done =
                    json!({"type": "done", "id": id, "ok": true, "durationMs": 0, "logs": []});
                let call = json!({"type": "tool_call", "callId": "call-1", "providerName": "t",
                                  "safeToolName": "echo"});
                let started = json!({"type": "started", "id": id});
                Plan::Ignored(
                    [started, done, call]
                        .iter()
                        .map(|m| Out::Line(m.to_string()))
                        .collect(),
                )
            },
        ),
        // Today: a binary frame holding UTF-8 is read as a message, like a text frame.
        row(
            "execute written one byte at a time (one binary frame over WebSocket)",
            BOTH,
            |_, id, _| {
                let mut bytes = execute_line(id, "20 + 22", &json!({})).into_bytes();
                bytes.push(b'\n');
                Plan::Answers42(bytes)
            },
        ),
    ]
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

/// Expects the session to have ended.
fn expect_closed(item: Option<In>) -> Result<bool, String> {
    match item {
        Some(In::Closed { .. }) => Ok(true),
        other => Err(format!(
            "expected the runner to end the session, got {other:?}"
        )),
    }
}

/// Expects a message of type `kind`, and returns it.
async fn expect_kind(peer: &mut Peer, kind: &str) -> Result<serde_json::Value, String> {
    match peer.recv(Instant::now() + GRACE).await {
        Some(In::Msg(m)) if m["type"] == kind => Ok(m),
        other => Err(format!("expected {kind}, got {other:?}")),
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
                report.outcome(PHASE, class);
            }
            Ok(())
        }
        Ok(Ran::Disconnected) => Err("disconnected".into()),
        Err(Failure::Refused) => Err("session refused".into()),
        Err(Failure::Lost(why)) => Err(why),
    }
}

/// Sends `plan` on `peer` and checks what follows; returns whether the runner ended the
/// session (as the plan expects).
async fn apply(plan: Plan, peer: &mut Peer, id: &str, report: &mut Report) -> Result<bool, String> {
    let quiet = Duration::from_millis(100);
    match plan {
        Plan::Ignored(items) => {
            peer.send_all(items);
            peer.expect_silence(quiet).await.map(|()| false)
        }
        Plan::Rejected(items, code) => {
            peer.send_all(items);
            expect_rejection(peer, id, code).await.map(|()| false)
        }
        Plan::Closes(items) => {
            peer.send_all(items);
            expect_closed(peer.recv(Instant::now() + GRACE).await)
        }
        Plan::Answers42(bytes) => {
            peer.drip(bytes);
            let started = expect_kind(peer, "started").await?;
            if started["id"] != id {
                return Err(format!(
                    "expected started for {id}, got {}",
                    compact(&started)
                ));
            }
            match peer.recv(Instant::now() + GRACE).await {
                Some(In::Msg(m)) if m["type"] == "done" && m["result"] == 42 => Ok(false),
                other => Err(format!("expected done 42, got {other:?}")),
            }
        }
        Plan::AtToolCall {
            items,
            answer,
            code,
        } => {
            let mut echo = case("echo once", "await t.echo(5)", ok(json!(5))).calls(1);
            if let Some(code) = code {
                echo.expect = Expect::Code(code);
            }
            expect_run(peer, id, &echo, Fault::Inject { items, answer }, report)
                .await
                .map(|()| false)
        }
        Plan::ClosesAtToolCall(line) => {
            let hang = execute_line(id, "await t.hang({})", &json!({ "timeoutMs": 60_000 }));
            peer.send(hang);
            expect_kind(peer, "started").await?;
            let call = expect_kind(peer, "tool_call").await?;
            peer.send(line.replace(THIS_CALL, call["callId"].as_str().unwrap_or_default()));
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
    }
}

/// The runners one transport's bad inputs go to.
// One value at a time, for a whole phase: its size does not matter.
#[allow(clippy::large_enum_variant)]
enum Runners {
    /// One stdio runner per limit; each is its own session.
    Stdio {
        small: StdioRunner,
        large: StdioRunner,
    },
    /// A listening runner and the session in use (none once reconnecting failed).
    WebSocket {
        server: WsRunner,
        session: Option<Peer>,
    },
}

impl Runners {
    async fn start(transport: Transport, report: &mut Report) -> Runners {
        let limit = LIMIT.to_string();
        match transport {
            Transport::Stdio => {
                let small = StdioRunner::spawn(&["--max-message-bytes", &limit]);
                let large = StdioRunner::spawn(&[]);
                report.pids.extend([small.pid, large.pid]);
                Runners::Stdio { small, large }
            }
            Transport::WebSocket => {
                let server = WsRunner::spawn(&["--max-message-bytes", &limit]).await;
                report.pids.push(server.pid);
                let session = ws_open(&server.url, report).await.ok();
                Runners::WebSocket { server, session }
            }
        }
    }

    /// The session to `to`, if there is one.
    fn peer(&mut self, to: To) -> Option<&mut Peer> {
        match self {
            Runners::Stdio { large, .. } if to == To::StdioLarge => Some(&mut large.peer),
            Runners::Stdio { small, .. } => Some(&mut small.peer),
            Runners::WebSocket { session, .. } => session.as_mut(),
        }
    }

    /// How the runner behind `to` is doing, for a failure message.
    fn diagnose(&mut self, to: To) -> String {
        match self {
            Runners::Stdio { large, .. } if to == To::StdioLarge => large.diagnose(),
            Runners::Stdio { small, .. } => small.diagnose(),
            Runners::WebSocket { server, .. } => server.diagnose(),
        }
    }

    /// Drops the WebSocket session and opens a new one (a stdio runner has only one).
    async fn reconnect(&mut self, report: &mut Report) {
        if let Runners::WebSocket { server, session } = self {
            if let Some(old) = session.as_mut() {
                old.abort();
            }
            *session = ws_open(&server.url, report).await.ok();
        }
    }

    /// Ends the sessions; each runner must still have been serving.
    async fn finish(self, report: &mut Report) {
        let ended = match self {
            Runners::Stdio { small, large } => {
                let small = small.finish().await;
                [small, large.finish().await]
            }
            Runners::WebSocket { server, session } => {
                if let Some(session) = session {
                    session.close();
                }
                [server.stop().await, Ok(())]
            }
        };
        for e in ended.into_iter().filter_map(Result::err) {
            report.violation(format!("{PHASE}: {e}"));
        }
    }
}

/// Every bad input `scale.bad_input_rounds` times over each transport it is for, each
/// followed by a probe that must succeed.
pub(crate) async fn bad_inputs(scale: &Scale) -> Report {
    let began = std::time::Instant::now();
    let mut report = Report::default();
    let mut rng = Rng::new(scale.seed ^ 0xBAD);
    let table = table();
    let mut n = 0u64;
    for transport in [Transport::Stdio, Transport::WebSocket] {
        let mut runners = Runners::start(transport, &mut report).await;
        'rounds: for _ in 0..scale.bad_input_rounds {
            for input in &table {
                let Some(to) = input
                    .to
                    .iter()
                    .copied()
                    .find(|to| to.transport() == transport)
                else {
                    continue;
                };
                n += 1;
                let name = format!("{}: {}", transport.name(), input.name);
                let id = format!("bad-{n}");
                let plan = (input.plan)(transport, &id, &mut rng);
                let Some(peer) = runners.peer(to) else {
                    break 'rounds;
                };
                let applied = apply(plan, peer, &id, &mut report).await;
                if let Err(e) = &applied {
                    let diagnosis = runners.diagnose(to);
                    report.violation(format!("{name}: {e}; {diagnosis}"));
                }
                if applied != Ok(false) {
                    runners.reconnect(&mut report).await;
                }
                let survived = match runners.peer(to) {
                    Some(peer) => probe(peer, &format!("probe-{n}"), PHASE, &mut report).await,
                    None => false,
                };
                report.bad_input(&name, applied.is_ok() && survived);
                if !survived {
                    let diagnosis = runners.diagnose(to);
                    report.violation(format!(
                        "after {name}: the runner no longer answers; {diagnosis}"
                    ));
                    break 'rounds;
                }
            }
        }
        runners.finish(&mut report).await;
    }
    report.measure("bad inputs: wall time", format!("{:.1?}", began.elapsed()));
    report.check_orphans().await;
    report
}
