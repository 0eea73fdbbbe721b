//! Integration tests of the real `execbox-runner` binary over stdio: behaviour at the edges
//! that transcripts cannot express (process exit, raw bytes, flags, stdout purity).

mod support;

#[path = "stdio/replay.rs"]
mod replay;

use std::io::{BufRead, BufReader};
use std::process::{ChildStdout, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use support::{execute, Runner};

#[test]
fn stdin_eof_during_cpu_loop_exits_promptly() {
    let mut runner = Runner::spawn(&[]);
    runner.send(execute("a", "while (true) {}", json!({"timeoutMs": 60000})));
    assert_eq!(runner.recv()["type"], "started");
    drop(runner.stdin.take());
    assert!(
        runner.wait_exit(Duration::from_secs(5)),
        "runner kept running after stdin closed"
    );
}

#[test]
fn stdin_eof_while_waiting_on_a_tool_exits_promptly() {
    let mut runner = Runner::spawn(&[]);
    runner.send(execute(
        "a",
        "await tools.hang({})",
        json!({"timeoutMs": 60000}),
    ));
    assert_eq!(runner.recv()["type"], "started");
    assert_eq!(runner.recv()["type"], "tool_call");
    drop(runner.stdin.take());
    assert!(runner.wait_exit(Duration::from_secs(5)));
    assert_eq!(runner.rest(), "", "an aborted execution sends no done");
}

#[test]
fn executes_already_read_still_run_after_eof() {
    let mut runner = Runner::spawn(&[]);
    runner.send_raw(b"{\"type\":\"execute\",\"id\":\"x\",\"code\":\"6 * 7\",\"providers\":[]}\n");
    drop(runner.stdin.take());
    assert_eq!(runner.recv()["type"], "started");
    let done = runner.recv();
    assert_eq!(done["result"], 42);
    assert!(runner.wait_exit(Duration::from_secs(5)));
}

#[test]
fn oversized_execute_is_refused_before_parsing_and_answered() {
    let mut runner = Runner::spawn(&["--max-message-bytes", "1000"]);
    let big = "x".repeat(5000);
    runner.send(execute("big", &format!("'{big}'"), json!({})));
    let done = runner.recv();
    assert_eq!(done["type"], "done");
    assert_eq!(done["id"], "big");
    assert_eq!(done["error"]["code"], "validation_error");
    assert!(done["error"]["message"]
        .as_str()
        .unwrap()
        .contains("exceeds the limit of 1000 bytes"));
    // The session goes on.
    runner.send(execute("small", "1", json!({})));
    assert_eq!(runner.recv()["type"], "started");
    assert_eq!(runner.recv()["result"], 1);
}

#[test]
fn oversized_tool_result_rejects_that_call_instead_of_hanging() {
    let mut runner = Runner::spawn(&["--max-message-bytes", "1000"]);
    let code =
        "try { await tools.hang({}) } catch (e) { return [e.code, e.message.includes('exceeds')] }";
    runner.send(execute("a", code, json!({})));
    assert_eq!(runner.recv()["type"], "started");
    let call = runner.recv();
    let result = json!({"type": "tool_result", "callId": call["callId"], "ok": true, "result": "y".repeat(5000)});
    runner.send(result);
    let done = runner.recv();
    assert_eq!(done["result"], json!(["serialization_error", true]));
}

#[test]
fn invalid_utf8_and_garbage_lines_are_ignored() {
    let mut runner = Runner::spawn(&[]);
    runner.send_raw(b"\xff\xfe\xfd\n");
    runner.send_raw(b"not json\n[1,2]\n{\"type\":\"nope\"}\n{}\n\n   \n");
    runner.send_raw(b"{\"type\":\"tool_result\",\"callId\":\"zzz\",\"ok\":true,\"result\":1}\n");
    runner.send(execute("a", "'still alive'", json!({})));
    assert_eq!(runner.recv()["type"], "started");
    assert_eq!(runner.recv()["result"], "still alive");
}

#[test]
fn stdout_carries_only_protocol_messages() {
    let mut runner = Runner::spawn(&[]);
    let codes = [
        "console.log('x'.repeat(100)); 1",
        "throw new Error('boom')",
        "while (true) {}",
        "let a = []; while (true) a.push('x'.repeat(1000))",
        "function f() { return f() } f()",
        "(() => 1)",
        "}{",
    ];
    for (i, code) in codes.iter().enumerate() {
        runner.send(execute(
            &i.to_string(),
            code,
            json!({"timeoutMs": 200, "memoryLimitBytes": 4_000_000}),
        ));
        let started = runner.recv();
        assert_eq!(started["type"], "started");
        let done = runner.recv();
        assert_eq!(done["type"], "done", "{code}");
        assert_eq!(done["id"], i.to_string());
    }
    drop(runner.stdin.take());
    assert_eq!(runner.rest(), "", "nothing but protocol lines on stdout");
}

#[test]
fn memory_limit_is_decided_from_the_runtime_even_when_the_guest_throws_null() {
    let mut runner = Runner::spawn(&[]);
    let code = "try { const a = []; while (true) a.push(new Array(1000).fill(1)) } catch (e) { throw null }";
    runner.send(execute("m", code, json!({"memoryLimitBytes": 8_000_000})));
    runner.recv();
    let done = runner.recv();
    assert_eq!(done["error"]["code"], "memory_limit", "{done}");
    runner.send(execute("next", "'fine'", json!({})));
    runner.recv();
    assert_eq!(runner.recv()["result"], "fine");
}

/// The documented guest surface (ARCHITECTURE.md, "The guest's whole surface"): if this list
/// changes, the document must change with it.
const DOCUMENTED_GLOBALS: &str = "AggregateError Array ArrayBuffer AsyncDisposableStack Atomics BigInt \
    BigInt64Array BigUint64Array Boolean DOMException DataView Date DisposableStack Error EvalError \
    FinalizationRegistry Float16Array Float32Array Float64Array Function Infinity Int16Array \
    Int32Array Int8Array InternalError Iterator JSON Map Math NaN Number Object Promise Proxy \
    RangeError ReferenceError Reflect RegExp Set SharedArrayBuffer String SuppressedError Symbol \
    SyntaxError TypeError URIError Uint16Array Uint32Array Uint8Array Uint8ClampedArray WeakMap \
    WeakRef WeakSet atob btoa console decodeURI decodeURIComponent encodeURI encodeURIComponent \
    escape eval globalThis isFinite isNaN parseFloat parseInt performance queueMicrotask tools \
    undefined unescape";

#[test]
fn guest_globals_are_exactly_the_documented_set() {
    let mut runner = Runner::spawn(&[]);
    let code = "Object.getOwnPropertyNames(globalThis).sort().join(' ')";
    runner.send(execute("g", code, json!({})));
    runner.recv();
    let done = runner.recv();
    let expected: Vec<&str> = DOCUMENTED_GLOBALS.split_whitespace().collect();
    assert_eq!(done["result"], expected.join(" "));
}

#[test]
fn tool_calls_beyond_max_pending_wait_in_the_sandbox_and_go_out_in_order() {
    let mut runner = Runner::spawn(&["--max-pending-tool-calls", "2"]);
    runner.send(execute(
        "cap",
        "const calls = []; for (let i = 0; i < 5; i++) calls.push(tools.echo(i)); \
         return await Promise.all(calls)",
        json!({}),
    ));
    // Read on a thread, so that silence can be checked with a timeout.
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    let mut stdout = std::mem::replace(&mut runner.stdout, BufReader::new(spare_stdout()));
    std::thread::spawn(move || loop {
        let mut line = String::new();
        if stdout.read_line(&mut line).unwrap_or(0) == 0
            || tx.send(serde_json::from_str(&line).unwrap()).is_err()
        {
            return;
        }
    });
    let recv = || rx.recv_timeout(Duration::from_secs(5)).expect("a message");
    let silent = || rx.recv_timeout(Duration::from_millis(200)).is_err();
    assert_eq!(recv()["type"], "started");
    let mut out = vec![recv(), recv()];
    assert!(silent(), "more than two calls were sent before any answer");
    let mut answered = 0;
    while let Some(call) = out.first().cloned() {
        out.remove(0);
        assert_eq!(call["type"], "tool_call", "{call}");
        assert_eq!(call["input"], answered, "calls go out in call order");
        runner.send(json!({"type": "tool_result", "callId": call["callId"], "ok": true, "result": call["input"]}));
        answered += 1;
        if answered <= 3 {
            // Each answer lets exactly one waiting call out.
            out.push(recv());
            assert!(silent(), "more than one call was let out by one answer");
        }
    }
    let done = recv();
    assert_eq!(done["type"], "done", "{done}");
    assert_eq!(done["result"], json!([0, 1, 2, 3, 4]), "{done}");
}

/// A stand-in stdout for a [`Runner`] whose real one moved to a reader thread.
fn spare_stdout() -> ChildStdout {
    Command::new("true")
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn true")
        .stdout
        .take()
        .unwrap()
}

#[test]
fn call_ids_never_repeat_across_executions() {
    let mut runner = Runner::spawn(&[]);
    let mut ids = std::collections::HashSet::new();
    for n in 0..3 {
        runner.send(execute(
            &format!("e{n}"),
            "tools.echo(1); return 0",
            json!({}),
        ));
        assert_eq!(runner.recv()["type"], "started");
        let call = runner.recv();
        assert!(
            ids.insert(call["callId"].to_string()),
            "callId {} reused",
            call["callId"]
        );
        assert_eq!(runner.recv()["type"], "done");
    }
}
