//! The guest programs of the mix, their expected outcomes, and the faults injected into them.

use serde_json::{json, Value};

use super::{Out, Rng};

/// What a `done` must say.
#[derive(Debug, Clone)]
pub(crate) enum Expect {
    /// `ok: true` with this `result`.
    Ok(Value),
    /// `ok: false` with this error code.
    Code(&'static str),
}

/// Which fault a case is meant for; its point is chosen at random each time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FaultKind {
    /// Runs undisturbed.
    None,
    /// A `cancel` at a random point.
    Cancel,
    /// An abrupt disconnect at a random point (WebSocket only).
    Disconnect,
    /// A second `execute` while this one is active, then a cancel.
    Concurrent,
}

/// An extra check of a `done`.
type Check = fn(&Value) -> Result<(), String>;

/// One guest program with its options and expected outcome.
pub(crate) struct Case {
    pub(crate) name: &'static str,
    pub(crate) code: String,
    pub(crate) options: Value,
    pub(crate) expect: Expect,
    /// `started` precedes `done` (false for executes the runner rejects).
    pub(crate) started: bool,
    /// Never ends by itself within its `timeoutMs` (so a cancel must yield `timeout`).
    pub(crate) endless: bool,
    /// Tool calls it makes (for cancel and disconnect points).
    pub(crate) calls: u64,
    pub(crate) fault: FaultKind,
    /// Relative frequency in the random mix.
    pub(crate) weight: u64,
    /// Extra checks on the `done`, run when the outcome is the expected one.
    pub(crate) check: Option<Check>,
}

/// A case that runs undisturbed with default options, weight 10, no tool calls.
pub(crate) fn case(name: &'static str, code: &str, expect: Expect) -> Case {
    Case {
        name,
        code: code.to_owned(),
        options: json!({}),
        expect,
        started: true,
        endless: false,
        calls: 0,
        fault: FaultKind::None,
        weight: 10,
        check: None,
    }
}

impl Case {
    /// Sets `execute.options`.
    pub(crate) fn options(mut self, options: Value) -> Case {
        self.options = options;
        self
    }
    fn weight(mut self, weight: u64) -> Case {
        self.weight = weight;
        self
    }
    /// Declares how many tool calls the program makes.
    pub(crate) fn calls(mut self, calls: u64) -> Case {
        self.calls = calls;
        self
    }
    /// Marks a program that never ends by itself, and gives it a 60 s `timeoutMs`.
    pub(crate) fn endless(mut self) -> Case {
        self.endless = true;
        self.options = json!({ "timeoutMs": 60_000 });
        self
    }
    /// Sets the fault the case is for.
    pub(crate) fn fault(mut self, fault: FaultKind) -> Case {
        self.fault = fault;
        self
    }
    /// Adds an extra check of the `done`.
    pub(crate) fn check(mut self, check: Check) -> Case {
        self.check = Some(check);
        self
    }
    /// Marks an execute the runner rejects: its `done` comes without `started`.
    pub(crate) fn rejected(mut self) -> Case {
        self.started = false;
        self
    }
}

/// `ok: true` with `value` as the result.
pub(crate) fn ok(value: Value) -> Expect {
    Expect::Ok(value)
}

fn logs_of(done: &Value) -> Vec<&str> {
    done["logs"]
        .as_array()
        .map(|l| l.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn check_logs_within_limits(done: &Value) -> Result<(), String> {
    let logs = logs_of(done);
    let chars: usize = logs.iter().map(|l| l.encode_utf16().count()).sum();
    if logs.len() > 100 || chars > 64_000 {
        return Err(format!(
            "logs past the default limits: {} lines, {chars} chars",
            logs.len()
        ));
    }
    Ok(())
}

/// The mix. Weights are per mille of the random choice, tuned so the expensive cases (CPU
/// timeouts, memory bombs) stay a few percent and 100,000 executions take minutes, not hours.
pub(crate) fn catalog() -> Vec<Case> {
    use Expect::Code;
    use FaultKind::{Cancel, Concurrent, Disconnect};
    vec![
        case("plain expression", "const r = 6 * 7; r", ok(json!(42))).weight(140),
        case(
            "structured result",
            "({ a: [1, 'two', null, true], b: { c: 1.5 } })",
            ok(json!({"a": [1, "two", null, true], "b": {"c": 1.5}})),
        )
        .weight(40),
        case(
            "tool calls in a loop",
            "let s = 0;\nfor (let i = 0; i < 5; i++) s += (await t.echo({ n: i })).n;\ns",
            ok(json!(10)),
        )
        .calls(5)
        .weight(140),
        case(
            "parallel tool calls",
            "(await Promise.all([t.echo(1), t.echo(2), t.echo(3)])).reduce((a, b) => a + b)",
            ok(json!(6)),
        )
        .calls(3)
        .weight(70),
        case(
            "uncaught tool error",
            "await t.fail({ why: 'x' })",
            Code("tool_error"),
        )
        .calls(1)
        .weight(40),
        case(
            "caught tool error",
            "try { await t.fail({}); return 'no'; } catch (e) { return [e.code, e.message]; }",
            ok(json!(["tool_error", "upstream said no"])),
        )
        .calls(1)
        .weight(40),
        case(
            "console logs",
            "console.log('a', 1); console.error({ b: 2 }); 'logged'",
            ok(json!("logged")),
        )
        .weight(40)
        .check(|done| match logs_of(done).as_slice() {
            ["a 1", "{\"b\":2}"] => Ok(()),
            other => Err(format!("logs {other:?}")),
        }),
        case(
            "log line flood",
            "for (let i = 0; i < 5000; i++) console.log('line', i);\n'flooded'",
            ok(json!("flooded")),
        )
        .weight(25)
        .check(|done| {
            let logs = logs_of(done);
            if logs.len() == 100 && logs[0] == "line 0" && logs[99] == "line 99" {
                Ok(())
            } else {
                Err(format!("{} lines kept, not the first 100", logs.len()))
            }
        }),
        case(
            "log character flood",
            "for (let i = 0; i < 50; i++) console.log('x'.repeat(10000));\n'big'",
            ok(json!("big")),
        )
        .weight(25)
        .check(|done| {
            let chars: usize = logs_of(done).iter().map(|l| l.len()).sum();
            if chars == 64_000 {
                Ok(())
            } else {
                Err(format!("{chars} log characters kept, not 64000"))
            }
        }),
        case(
            "log flood until timeout",
            "for (;;) console.log('x'.repeat(999));",
            Code("timeout"),
        )
        .options(json!({ "timeoutMs": 30 }))
        .weight(5)
        .check(check_logs_within_limits),
        case(
            "thrown error",
            "throw new Error('boom')",
            Code("runtime_error"),
        )
        .weight(40),
        case("thrown string", "throw 'nope'", Code("runtime_error")).weight(20),
        case("syntax error", "let let = ;", Code("runtime_error")).weight(20),
        case(
            "deep recursion",
            "function f(n) { return f(n + 1) + 1; }\nf(0)",
            Code("runtime_error"),
        )
        .weight(15),
        case("invalid options", "1", Code("validation_error"))
            .options(json!({ "timeoutMs": "soon" }))
            .rejected()
            .weight(20),
        case(
            "cyclic result",
            "const o = { a: 1 };\no.self = o;\no",
            Code("serialization_error"),
        )
        .weight(20),
        case("bigint result", "10n ** 20n", Code("serialization_error")).weight(15),
        case(
            "cyclic tool input",
            "const o = {};\no.o = o;\nawait t.echo(o)",
            Code("serialization_error"),
        )
        .weight(15),
        case(
            "result 100k deep",
            "let v = 0;\nfor (let i = 0; i < 100000; i++) v = [v];\nv",
            Code("serialization_error"),
        )
        .weight(8),
        case(
            "array memory bomb",
            "const keep = [];\nwhile (true) keep.push(new Array(100000).fill(1.5));",
            Code("memory_limit"),
        )
        .options(json!({ "memoryLimitBytes": 8 << 20 }))
        .weight(8),
        case(
            "string memory bomb",
            "const parts = [];\nwhile (true) parts.push('x'.repeat(1 << 20) + parts.length);",
            Code("memory_limit"),
        )
        .options(json!({ "memoryLimitBytes": 8 << 20 }))
        .weight(8),
        case(
            "swallowed memory bomb",
            "try { const k = []; for (;;) k.push({ a: [1, 2, 3] }); } catch (e) { 'swallowed' }",
            Code("memory_limit"),
        )
        .options(json!({ "memoryLimitBytes": 4 << 20 }))
        .weight(8),
        case("CPU loop timeout", "while (true) {}", Code("timeout"))
            .options(json!({ "timeoutMs": 20 }))
            .weight(15),
        case(
            "microtask loop timeout",
            "for (;;) await null;",
            Code("timeout"),
        )
        .options(json!({ "timeoutMs": 20 }))
        .weight(5),
        case("silent tool timeout", "await t.hang({})", Code("timeout"))
            .options(json!({ "timeoutMs": 20 }))
            .calls(1)
            .weight(10),
        case("cancelled CPU loop", "while (true) {}", Code("timeout"))
            .endless()
            .fault(Cancel)
            .weight(40),
        case(
            "cancelled microtask loop",
            "for (;;) await null;",
            Code("timeout"),
        )
        .endless()
        .fault(Cancel)
        .weight(10),
        case("cancelled tool wait", "await t.hang({})", Code("timeout"))
            .endless()
            .calls(1)
            .fault(Cancel)
            .weight(30),
        case(
            "cancelled tool loop",
            "let s = 0;\nfor (let i = 0; i < 5; i++) s += (await t.echo({ n: i })).n;\ns",
            ok(json!(10)),
        )
        .calls(5)
        .fault(Cancel)
        .weight(40),
        case(
            "second execute while active",
            "while (true) {}",
            Code("timeout"),
        )
        .endless()
        .fault(Concurrent)
        .weight(10),
        case("disconnected CPU loop", "while (true) {}", Code("timeout"))
            .endless()
            .fault(Disconnect)
            .weight(15),
        case(
            "disconnected tool wait",
            "await t.hang({})",
            Code("timeout"),
        )
        .endless()
        .calls(1)
        .fault(Disconnect)
        .weight(10),
        case(
            "disconnected tool loop",
            "let s = 0;\nfor (let i = 0; i < 5; i++) s += (await t.echo({ n: i })).n;\ns",
            ok(json!(10)),
        )
        .calls(5)
        .fault(Disconnect)
        .weight(15),
    ]
}

/// A case drawn by weight.
pub(crate) fn pick<'a>(cases: &'a [Case], rng: &mut Rng) -> &'a Case {
    let total: u64 = cases.iter().map(|c| c.weight).sum();
    let mut at = rng.below(total);
    for case in cases {
        if at < case.weight {
            return case;
        }
        at -= case.weight;
    }
    &cases[cases.len() - 1]
}

/// Where in an execution a fault strikes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Point {
    /// In the same write as the `execute` (the runner reads it before starting).
    Queued,
    /// Right after the `execute`, in its own write.
    Immediately,
    /// When `started` arrives.
    OnStarted,
    /// This many milliseconds after `started`.
    AfterMs(u64),
    /// When the n-th `tool_call` arrives, before it is answered.
    OnToolCall(u64),
}

/// A fault to inject into one execution.
#[derive(Clone)]
pub(crate) enum Fault {
    /// None.
    None,
    /// Send `cancel` at the point.
    Cancel(Point),
    /// Drop the connection at the point.
    Disconnect(Point),
    /// Send a second `execute` with the first, then cancel the first once it is refused.
    Concurrent,
    /// Send these items when the first `tool_call` arrives; answer it afterwards if `answer`.
    Inject {
        /// What to send.
        items: Vec<Out>,
        /// Whether the host still answers the call.
        answer: bool,
    },
}

impl std::fmt::Debug for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::None => write!(f, "no fault"),
            Fault::Cancel(point) => write!(f, "cancel {point:?}"),
            Fault::Disconnect(point) => write!(f, "disconnect {point:?}"),
            Fault::Concurrent => write!(f, "a second execute"),
            Fault::Inject { items, answer } => {
                write!(f, "{} items injected at the first tool call", items.len())?;
                if !answer {
                    write!(f, ", left unanswered")?;
                }
                Ok(())
            }
        }
    }
}

/// The fault for one run of `case`: its kind, at a random point.
pub(crate) fn choose_fault(case: &Case, rng: &mut Rng) -> Fault {
    let mut points = vec![Point::Immediately, Point::OnStarted];
    points.push(Point::AfterMs(1 + rng.below(5)));
    if case.calls > 0 {
        points.push(Point::OnToolCall(1 + rng.below(case.calls)));
    }
    match case.fault {
        FaultKind::None => Fault::None,
        FaultKind::Concurrent => Fault::Concurrent,
        FaultKind::Cancel => {
            points.push(Point::Queued);
            Fault::Cancel(points[rng.below(points.len() as u64) as usize])
        }
        FaultKind::Disconnect => Fault::Disconnect(points[rng.below(points.len() as u64) as usize]),
    }
}
