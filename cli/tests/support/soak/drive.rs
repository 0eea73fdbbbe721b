//! The host side of one execution: send it, answer its tool calls, inject its fault, check its one `done`.

use std::sync::LazyLock;
use std::time::Duration;

use execbox_protocol::ErrorCode;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::{case, compact, ok, Case, Expect, Fault, In, Out, Peer, Point, Report, GRACE};

static PROVIDERS: LazyLock<Value> = LazyLock::new(|| {
    let tool = |name: &str| json!({ "safeName": name, "originalName": name });
    json!([{ "name": "t", "tools": { "echo": tool("echo"), "fail": tool("fail"), "hang": tool("hang") } }])
});

/// An `execute` of `code` against the suite's provider `t` (`echo`, `fail`, `hang`).
pub(crate) fn execute_line(id: &str, code: &str, options: &Value) -> String {
    json!({ "type": "execute", "id": id, "code": code, "options": options, "providers": &*PROVIDERS })
        .to_string()
}

/// A `cancel` of `id`.
pub(crate) fn cancel_line(id: &str) -> String {
    json!({ "type": "cancel", "id": id }).to_string()
}

/// A successful `tool_result`; `None` leaves `result` out (`undefined`).
pub(crate) fn tool_result_line(call_id: &str, result: Option<&Value>) -> String {
    match result {
        Some(result) => {
            json!({ "type": "tool_result", "callId": call_id, "ok": true, "result": result })
        }
        None => json!({ "type": "tool_result", "callId": call_id, "ok": true }),
    }
    .to_string()
}

/// State the suite keeps as host across executions of one session.
#[derive(Default)]
pub(crate) struct Host {
    /// callIds left unanswered (`t.hang`); answered late, once the runner is idle.
    pub(crate) stale: Vec<String>,
}

impl Host {
    /// Answers every stale call now that the runner is idle; each must be ignored.
    pub(crate) fn flush_stale(&mut self, peer: &Peer, report: &mut Report) {
        if self.stale.is_empty() {
            return;
        }
        let items: Vec<Out> = self
            .stale
            .drain(..)
            .map(|call_id| Out::Line(tool_result_line(&call_id, Some(&json!("late")))))
            .collect();
        report.fault("stale tool_result after done", items.len() as u64, 0);
        peer.send_all(items);
    }
}

/// How an execution ended.
pub(crate) enum Ran {
    /// Its `done` arrived: the outcome classes (two for a refused concurrent execute).
    Done(Vec<String>),
    /// The suite dropped the connection, as the fault asked.
    Disconnected,
}

/// Why an execution could not be completed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// No `done` within the bound, or the session ended first.
    Lost(String),
    /// The runner refused the session at `--max-sessions`.
    Refused,
}

fn class_of(done: &Value) -> Result<String, String> {
    match done["ok"].as_bool() {
        Some(true) => Ok("ok".to_owned()),
        Some(false) => done["error"]["code"]
            .as_str()
            .filter(|c| ErrorCode::parse(c).is_some())
            .map(str::to_owned)
            .ok_or_else(|| format!("done without a valid error code: {}", compact(done))),
        None => Err(format!("done without ok: {}", compact(done))),
    }
}

fn matches_expect(expect: &Expect, class: &str, done: &Value) -> bool {
    match expect {
        Expect::Ok(value) => class == "ok" && done.get("result") == Some(value),
        Expect::Code(code) => class == *code,
    }
}

/// Runs one execution of `case` with `fault` on `peer`, playing the host: answers tool
/// calls (`echo` echoes, `fail` fails with `tool_error`, `hang` is never answered), injects
/// the fault, and checks the one `done`. Broken promises that do not lose the execution go
/// to `violations`; the execution is then still driven to its `done`.
pub(crate) async fn run_case(
    peer: &mut Peer,
    id: &str,
    case: &Case,
    fault: &Fault,
    host: &mut Host,
    violations: &mut Vec<String>,
) -> Result<Ran, Failure> {
    let exec = execute_line(id, &case.code, &case.options);
    let busy_id = format!("{id}-busy");
    let mut cancel_at: Option<Point> = None;
    let mut disconnect_at: Option<Point> = None;
    let mut cancelled = false;
    match fault {
        Fault::Cancel(Point::Queued) => {
            peer.send_all(vec![Out::Line(exec), Out::Line(cancel_line(id))]);
            cancelled = true;
        }
        Fault::Cancel(Point::Immediately) => {
            peer.send(exec);
            peer.send(cancel_line(id));
            cancelled = true;
        }
        Fault::Cancel(point) => {
            peer.send(exec);
            cancel_at = Some(*point);
        }
        Fault::Disconnect(Point::Queued | Point::Immediately) => {
            peer.send(exec);
            peer.abort();
            return Ok(Ran::Disconnected);
        }
        Fault::Disconnect(point) => {
            peer.send(exec);
            disconnect_at = Some(*point);
        }
        Fault::Concurrent => peer.send_all(vec![
            Out::Line(exec),
            Out::Line(execute_line(&busy_id, "'second'", &json!({}))),
        ]),
        Fault::None | Fault::Inject { .. } => peer.send(exec),
    }
    let timeout_ms = case.options["timeoutMs"].as_u64().unwrap_or(5_000);
    let mut deadline = Instant::now()
        + if cancelled {
            GRACE
        } else {
            Duration::from_millis(timeout_ms) + GRACE
        };
    let mut timer: Option<Instant> = None;
    let mut started = false;
    let mut calls = 0u64;
    let mut busy_class: Option<String> = None;
    let mut injected = false;
    let fire = |at: Option<Point>, started: bool, calls: u64| match at {
        Some(Point::OnStarted) => started && calls == 0,
        Some(Point::OnToolCall(n)) => calls == n,
        _ => false,
    };

    loop {
        let wake = timer.map_or(deadline, |t| t.min(deadline));
        let Some(item) = peer.recv(wake).await else {
            if timer.is_some_and(|t| Instant::now() >= t) {
                timer = None;
                if disconnect_at.is_some() {
                    peer.abort();
                    return Ok(Ran::Disconnected);
                }
                peer.send(cancel_line(id));
                cancelled = true;
                deadline = deadline.min(Instant::now() + GRACE);
                continue;
            }
            return Err(Failure::Lost(format!(
                "{id} ({}, {fault:?}): no done within {}; started: {started}, tool calls: {calls}",
                case.name,
                if cancelled {
                    format!("{GRACE:?} of the cancel")
                } else {
                    format!("timeoutMs {timeout_ms} + {GRACE:?}")
                }
            )));
        };
        let msg = match item {
            In::Msg(msg) => msg,
            In::Garbage(text) => {
                violations.push(format!("runner sent invalid output: {text}"));
                continue;
            }
            In::Closed { again: true, .. } => return Err(Failure::Refused),
            In::Closed { reason, .. } => {
                return Err(Failure::Lost(format!(
                    "{id} ({}, {fault:?}): session ended before done: {reason}",
                    case.name
                )))
            }
        };
        let kind = msg["type"].as_str().unwrap_or_default();
        let msg_id = msg["id"].as_str().unwrap_or_default();
        match kind {
            "started" if msg_id == id => {
                if started {
                    violations.push(format!("second started for {id}"));
                }
                if !case.started {
                    violations.push(format!("started for a rejected execute {id}"));
                }
                started = true;
                if let Some(Point::AfterMs(ms)) = cancel_at.or(disconnect_at) {
                    timer = Some(Instant::now() + Duration::from_millis(ms));
                }
                if fire(disconnect_at, started, calls) {
                    peer.abort();
                    return Ok(Ran::Disconnected);
                }
                if fire(cancel_at, started, calls) {
                    peer.send(cancel_line(id));
                    cancelled = true;
                    deadline = deadline.min(Instant::now() + GRACE);
                }
            }
            "tool_call" => {
                if !started {
                    violations.push(format!("tool_call before started: {}", compact(&msg)));
                }
                calls += 1;
                let call_id = msg["callId"].as_str().unwrap_or_default().to_owned();
                if fire(disconnect_at, started, calls) {
                    peer.abort();
                    return Ok(Ran::Disconnected);
                }
                if fire(cancel_at, started, calls) {
                    // Before the answer, so the runner must see the cancel first: `timeout`.
                    peer.send(cancel_line(id));
                    cancelled = true;
                    deadline = deadline.min(Instant::now() + GRACE);
                }
                let mut answer = true;
                if let Fault::Inject {
                    items,
                    answer: answer_after,
                } = fault
                {
                    if !injected {
                        injected = true;
                        peer.send_all(for_this_call(items, &call_id));
                        answer = *answer_after;
                    }
                }
                match msg["safeToolName"].as_str() {
                    Some("echo") if answer => {
                        peer.send(tool_result_line(&call_id, msg.get("input")));
                    }
                    Some("fail") if answer => peer.send(
                        json!({ "type": "tool_result", "callId": call_id, "ok": false,
                                "error": { "code": "tool_error", "message": "upstream said no" } })
                        .to_string(),
                    ),
                    Some("echo" | "fail") => {}
                    Some("hang") => host.stale.push(call_id),
                    _ => {
                        violations.push(format!("tool_call for an unknown tool: {}", compact(&msg)))
                    }
                }
            }
            "done" if msg_id == busy_id => {
                if busy_class.is_some() {
                    violations.push(format!("second done for {busy_id}"));
                }
                let class = class_of(&msg).unwrap_or_else(|e| {
                    violations.push(e);
                    "invalid".into()
                });
                if class != "internal_error" {
                    violations.push(format!(
                        "a second execute while {id} was active ended {class}, not internal_error: {}",
                        compact(&msg)
                    ));
                }
                busy_class = Some(class);
                peer.send(cancel_line(id));
                cancelled = true;
                deadline = deadline.min(Instant::now() + GRACE);
            }
            "done" if msg_id == id => {
                if case.started && !started {
                    violations.push(format!("done without started for {id}"));
                }
                let class = class_of(&msg).unwrap_or_else(|e| {
                    violations.push(e);
                    "invalid".into()
                });
                let must_time_out = case.endless
                    || matches!(
                        fault,
                        Fault::Cancel(Point::OnToolCall(_)) | Fault::Concurrent
                    );
                let expected = match fault {
                    Fault::Cancel(_) | Fault::Concurrent if must_time_out => class == "timeout",
                    Fault::Cancel(_) => {
                        class == "timeout" || matches_expect(&case.expect, &class, &msg)
                    }
                    _ => matches_expect(&case.expect, &class, &msg),
                };
                if !expected {
                    violations.push(format!(
                        "{} ended {class}, expected {:?}{}: {}",
                        case.name,
                        if must_time_out && !matches!(fault, Fault::None) {
                            Expect::Code("timeout")
                        } else {
                            case.expect.clone()
                        },
                        if matches!(fault, Fault::None) {
                            String::new()
                        } else {
                            format!(" under {fault:?}")
                        },
                        compact(&msg)
                    ));
                } else if class != "timeout" || matches!(fault, Fault::None) {
                    if let Some(check) = case.check {
                        if let Err(e) = check(&msg) {
                            violations.push(format!("{}: {e}", case.name));
                        }
                    }
                }
                let mut classes = vec![class];
                if matches!(fault, Fault::Concurrent) {
                    match busy_class {
                        Some(busy) => classes.push(busy),
                        None => violations.push(format!(
                            "no done for the second execute {busy_id} before {id} ended"
                        )),
                    }
                }
                return Ok(Ran::Done(classes));
            }
            _ => violations.push(format!(
                "unexpected message while running {id}: {} (a duplicate or stray message)",
                compact(&msg)
            )),
        }
    }
}

/// The probe run after every bad input: a tool call and a result.
pub(crate) fn probe_case() -> Case {
    case("probe", "(await t.echo({ n: 41 })).n + 1", ok(json!(42))).calls(1)
}

/// Runs the probe; Ok when it ended `ok` with 42 and nothing else arrived.
pub(crate) async fn probe(peer: &mut Peer, id: &str, phase: &str, report: &mut Report) -> bool {
    let mut violations = Vec::new();
    let result = run_case(
        peer,
        id,
        &probe_case(),
        &Fault::None,
        &mut Host::default(),
        &mut violations,
    )
    .await;
    let clean = violations.is_empty();
    for v in violations {
        report.violation(format!("{phase} {id}: {v}"));
    }
    match result {
        Ok(Ran::Done(classes)) => {
            for class in &classes {
                report.outcome(phase, class);
            }
            clean && classes == ["ok"]
        }
        Ok(Ran::Disconnected) => false,
        Err(Failure::Refused) => {
            report.violation(format!("{phase} {id}: session refused"));
            false
        }
        Err(Failure::Lost(why)) => {
            report.lose(format!("{phase}: {why}"));
            false
        }
    }
}

/// In injected lines, stands for the callId of the tool call the injection answers (callIds
/// are unique per runner process, so a case cannot know it in advance).
pub const THIS_CALL: &str = "@THIS_CALL@";

/// The injected items with [`THIS_CALL`] replaced by `call_id`; a line that answers `call_id`
/// without naming it through [`THIS_CALL`] (a "stale" id that happens to be this call's) is
/// left out, so stale answers never settle the live call.
fn for_this_call(items: &[Out], call_id: &str) -> Vec<Out> {
    let live = format!("\"callId\":\"{call_id}\"");
    items
        .iter()
        .filter_map(|item| match item {
            Out::Line(line) if line.contains(THIS_CALL) => {
                Some(Out::Line(line.replace(THIS_CALL, call_id)))
            }
            Out::Line(line) if line.contains(&live) => None,
            other => Some(other.clone()),
        })
        .collect()
}
