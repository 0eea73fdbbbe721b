//! Fuzz target: arbitrary message sequences against an in-process runner session.
//!
//! The input is a list of [`Op`]s drawn from small sets (ids, guest snippets, tool payloads,
//! raw lines). After the ops, the target waits for every expected `done`, sends `Closed`, and
//! asserts the session's invariants (see `execbox_fuzz::check_wire` and `Expected`).
//! Guest timeouts are at most 50 ms, so one input runs in well under a second.
#![no_main]

use std::time::Duration;

use arbitrary::Arbitrary;
use execbox_fuzz::{check_wire, limits, Expected, Session};
use execbox_protocol::{
    Cancel, ErrorBody, ErrorCode, Execute, Frame, LineFramer, Message, ProviderManifest, RawValue,
    RuntimeOptions, ToolManifest, ToolResult,
};
use execbox_runner::Inbound;
use libfuzzer_sys::fuzz_target;

/// Execution ids; "" is valid on the wire.
const IDS: [&str; 4] = ["a", "b", "c", ""];

/// Guest snippets; an execute joins up to three of them.
const SNIPPETS: &[&str] = &[
    "1 + 1",
    "return 42",
    "undefined",
    "await t.echo({a: 1})",
    "const r = await t.echo(1); r",
    "await Promise.all([t.echo(1), t.echo(2), t.echo(3)])",
    "t.echo('unawaited'); 'done'",
    "try { await t.echo(1) } catch (e) { e.code }",
    "await tools.hang()",
    "await tools.echo([1, 2, 3])",
    "for (;;) {}",
    "while (true) { try { for (;;) {} } catch (e) {} }",
    "await null; for (;;) {}",
    "await new Promise(() => {})",
    "Promise.resolve().then(function loop() { return Promise.resolve().then(loop) })",
    "throw new Error('boom')",
    "throw 1",
    "Promise.reject(new TypeError('x'))",
    "console.log('hi'); console.error({a: [1, 2]})",
    "for (let i = 0; i < 1000; i++) console.log(i)",
    "console.log('\\n{\"type\":\"done\",\"id\":\"a\",\"ok\":true}')",
    "'\\u2028\\n{\"type\":\"started\",\"id\":\"b\"}\\n'",
    "let s = 'x'; for (;;) s += s",
    "const a = []; for (;;) a.push({})",
    "function f() { return f() } f()",
    "({toJSON() { throw 1 }})",
    "({a: 1n})",
    "let o = {}; o.o = o; o",
    "new Function('return this')().process",
    "{",
    "Object.prototype.x = 1; await t.echo({})",
    "JSON.stringify = () => '{'; ({a: 1})",
    "for (let i = 0; i < 20; i++) await t.echo(i)",
    // Findings of the security review.
    "let te; Error.prepareStackTrace = (e, cs) => { for (const c of cs) { const f = c.getFunction(); if (f && f.name === 'trustedError') te = f } }; try { await t.echo(() => 1) } catch {} throw te('memory_limit', 'forged')",
    "for (;;) { try { const a = []; for (;;) a.push(new Array(1e5).fill(1)) } catch (e) {} }",
    "t.echo({user: 'alice'}); 'unawaited'",
    "await Promise.all(Array.from({length: 100}, (_, i) => t.echo(i)))",
    "console.log('a\\ud800'); await t.echo('\\udc00')",
    "({get x() { throw new Error('getter') }})",
    "'y'.repeat(2000)",
];

/// Tool result payloads: `None` is `undefined`.
const PAYLOADS: &[Option<&str>] = &[
    None,
    Some("1"),
    Some("null"),
    Some("\"s\""),
    Some("{\"a\":[1,2,{\"b\":null}]}"),
    Some("{\"__proto__\":{\"polluted\":true}}"),
    Some("{\"constructor\":{\"prototype\":{\"x\":1}}}"),
    Some("1e308"),
    Some("\"\\ud800\""),
];

/// One step of the host's side of the session.
#[derive(Arbitrary, Debug)]
enum Op {
    /// An execute; each field picks from a small set.
    Execute {
        id: u8,
        code: Vec<u8>,
        timeout: u8,
        memory: u8,
        logs: u8,
        providers: u8,
    },
    /// A tool result for the Nth `tool_call` of the session so far (of this execution or a
    /// finished one: a late answer), or for a callId never used.
    ToolResult {
        call: u8,
        ok: bool,
        payload: u8,
        code: u8,
    },
    /// A cancel.
    Cancel { id: u8 },
    /// Raw bytes, framed as the stdio transport frames them.
    Garbage(Vec<u8>),
    /// Sleeps up to 31 ms.
    Pause(u8),
    /// Waits up to 60 ms for the runner to send something new.
    AwaitOutput,
    /// Ends the session; nothing after it is sent.
    Close,
}

fn pick<T: Copy>(set: &[T], i: u8) -> T {
    set[usize::from(i) % set.len()]
}

fn providers(choice: u8) -> Vec<ProviderManifest> {
    let provider = |name: &str, tools: &[&str]| ProviderManifest {
        name: name.into(),
        tools: tools.iter().map(|&t| ToolManifest::named(t)).collect(),
        types: None,
        unavailable: None,
    };
    match choice % 4 {
        0 => vec![],
        1 => vec![provider("t", &["echo"])],
        2 => vec![
            provider("t", &["echo"]),
            provider("tools", &["echo", "hang"]),
            ProviderManifest {
                unavailable: Some("the upstream did not start".into()),
                ..provider("gone", &[])
            },
        ],
        _ => vec![
            provider("t", &["echo", "__proto__", "constructor", "then"]),
            provider("console", &["log"]),
        ],
    }
}

/// Whether any provider set above has this tool.
fn installed(provider: &str, tool: &str) -> bool {
    (0..4).any(|choice| {
        providers(choice)
            .iter()
            .any(|p| p.name == provider && p.tools.iter().any(|t| t.safe_name == tool))
    })
}

fn execute(id: u8, code: &[u8], timeout: u8, memory: u8, logs: u8, providers_: u8) -> Execute {
    let code: Vec<&str> = code.iter().take(3).map(|&i| pick(SNIPPETS, i)).collect();
    Execute {
        id: pick(&IDS, id).into(),
        code: code.join("\n;"),
        options: RuntimeOptions {
            timeout_ms: pick(&[0, 1, 5, 20, 50], timeout),
            memory_limit_bytes: pick(&[0, 64 << 10, 1 << 20, 8 << 20], memory),
            max_log_lines: pick(&[0, 1, 3, 100], logs),
            max_log_chars: pick(&[0, 5, 100, 64_000], logs / 4),
        },
        providers: providers(providers_),
        replay: None,
    }
}

fn tool_result(call_id: String, ok: bool, payload: u8, code: u8) -> ToolResult {
    let outcome = if ok {
        Ok(pick(PAYLOADS, payload)
            .map(|json| RawValue::from_string(json.into()).expect("valid payload")))
    } else {
        Err(ErrorBody::new(pick(&ErrorCode::ALL, code), "tool failed"))
    };
    ToolResult { call_id, outcome }
}

/// Keeps guest timeouts and memory tiny even for executes that came out of raw bytes.
fn tame(item: Inbound) -> Inbound {
    match item {
        Inbound::Message(Message::Execute(mut e)) => {
            e.options.timeout_ms = e.options.timeout_ms.min(50);
            e.options.memory_limit_bytes = e.options.memory_limit_bytes.min(8 << 20);
            Inbound::Message(Message::Execute(e))
        }
        other => other,
    }
}

fuzz_target!(|ops: Vec<Op>| {
    let session = Session::start(limits(), false);
    let mut expected = Expected::default();
    let mut feed = |item: Inbound| {
        expected.note(&item);
        session.feed(item);
    };
    for op in ops.into_iter().take(24) {
        match op {
            Op::Execute {
                id,
                code,
                timeout,
                memory,
                logs,
                providers,
            } => feed(Inbound::Message(Message::Execute(execute(
                id, &code, timeout, memory, logs, providers,
            )))),
            Op::ToolResult {
                call,
                ok,
                payload,
                code,
            } => {
                let ids = session.recorder.call_ids();
                let call_id = match ids.len() {
                    0 => "call-0".to_owned(),
                    n => ids
                        .get(usize::from(call) % (n + 1))
                        .cloned()
                        .unwrap_or_else(|| "call-0".to_owned()),
                };
                feed(Inbound::Message(Message::ToolResult(tool_result(
                    call_id, ok, payload, code,
                ))))
            }
            Op::Cancel { id } => feed(Inbound::Message(Message::Cancel(Cancel {
                id: pick(&IDS, id).into(),
            }))),
            Op::Garbage(bytes) => {
                let mut framer = LineFramer::new(limits().max_message_bytes);
                framer.push(&bytes);
                framer.push(b"\n");
                while let Some(frame) = framer.next_frame() {
                    let item = match frame {
                        Frame::Line(line) => tame(Inbound::from_text(&line)),
                        other => Inbound::from_frame(other),
                    };
                    feed(item);
                }
            }
            Op::Pause(ms) => std::thread::sleep(Duration::from_millis(u64::from(ms % 32))),
            Op::AwaitOutput => {
                let seen = session.recorder.len();
                session
                    .recorder
                    .wait_until(Duration::from_millis(60), |sent| sent.len() > seen);
            }
            Op::Close => break,
        }
    }
    expected.wait_for_dones(&session.recorder);
    let sent = session.close();
    check_wire(&sent, installed);
    expected.check(&sent);
});
