//! How promptly hostile executions end: timeout and cancel overshoot, memory bombs; prints a
//! Markdown table.
//!
//! `cargo bench -p execbox-runner --bench stops` (`BENCH_QUICK=1` for a short run). Each case
//! runs against the real binary over stdio; a case that ends its runner (the watchdog exits
//! the process after a long native call) gets a fresh runner for the next round.

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::Runner;

/// How a case is stopped, and what is measured.
#[derive(Clone, Copy)]
enum Stop {
    /// By its `timeoutMs`: the overshoot past it.
    Timeout(u64),
    /// By a `cancel` sent this long after `started`: from the cancel to `done`.
    Cancel(u64),
    /// By its own doing (a memory bomb): from `execute` to `done`.
    Itself,
}

struct Case {
    name: &'static str,
    code: &'static str,
    stop: Stop,
    expect: &'static str,
}

const CASES: &[Case] = &[
    Case {
        name: "CPU loop `for (;;) {}`",
        code: "for (;;) {}",
        stop: Stop::Timeout(200),
        expect: "timeout",
    },
    Case {
        name: "microtask loop",
        code: "(function loop() { queueMicrotask(loop) })(); await new Promise(() => {})",
        stop: Stop::Timeout(200),
        expect: "timeout",
    },
    Case {
        name: "catch and finally around the interrupt",
        code: "for (;;) { try { for (;;) {} } catch (e) {} finally { for (;;) {} } }",
        stop: Stop::Timeout(200),
        expect: "timeout",
    },
    Case {
        name: "loop around a long native call (`indexOf`), watchdog",
        code: "const a = new Array(1e6).fill(0); for (;;) a.indexOf(1)",
        stop: Stop::Timeout(200),
        expect: "timeout",
    },
    Case {
        name: "one native call that never ticks (`reverse` of 2^53-1), watchdog",
        code: "Array.prototype.reverse.call({length: 2**53-1})",
        stop: Stop::Timeout(200),
        expect: "timeout",
    },
    Case {
        name: "cancel during a CPU loop",
        code: "for (;;) {}",
        stop: Stop::Cancel(50),
        expect: "timeout",
    },
    Case {
        name: "cancel while awaiting a tool",
        code: "await t.hang()",
        stop: Stop::Cancel(50),
        expect: "timeout",
    },
    Case {
        name: "memory bomb in a catch loop (32 MiB)",
        code: "for (;;) { try { const a = []; for (;;) a.push(new Array(1e5).fill(1)) } catch (e) {} }",
        stop: Stop::Itself,
        expect: "memory_limit",
    },
    Case {
        name: "`ArrayBuffer` bomb in a catch loop (32 MiB)",
        code: "for (;;) { try { const a = []; for (;;) a.push(new ArrayBuffer(1e6)) } catch (e) {} }",
        stop: Stop::Itself,
        expect: "memory_limit",
    },
];

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    let rounds = if std::env::var_os("BENCH_QUICK").is_some() {
        3
    } else {
        10
    };
    println!("| hostile execution | stopped by | measured | p50 | max | outcome |");
    println!("|---|---|---|---:|---:|---|");
    let mut runner = Runner::spawn(true);
    for case in CASES {
        let mut samples = Vec::with_capacity(rounds);
        let mut outcomes = Vec::new();
        for round in 0..rounds {
            if !runner.alive() {
                runner = Runner::spawn(true);
            }
            let timeout_ms = match case.stop {
                Stop::Timeout(ms) => ms,
                _ => 5_000,
            };
            let id = format!("r{round}");
            let execute = json!({
                "type": "execute", "id": id, "code": case.code,
                "options": {"timeoutMs": timeout_ms, "memoryLimitBytes": 32 << 20},
                "providers": [{"name": "t", "tools": {"hang": {"safeName": "hang"}}}]
            });
            let sent = Instant::now();
            runner.send(&execute);
            runner.recv_type("started");
            let from = match case.stop {
                Stop::Timeout(ms) => sent + Duration::from_millis(ms),
                Stop::Cancel(after) => {
                    std::thread::sleep(Duration::from_millis(after));
                    let cancelled = Instant::now();
                    runner.send(&json!({"type": "cancel", "id": id}));
                    cancelled
                }
                Stop::Itself => sent,
            };
            let done = runner.recv_type("done");
            let took = Instant::now().saturating_duration_since(from);
            samples.push(took);
            if took > Duration::from_millis(100) {
                // The watchdog answered: the runner is on its way out; let it go.
                let until = Instant::now() + Duration::from_secs(1);
                while runner.alive() && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            let code = done
                .as_ref()
                .map(|d| d["error"]["code"].as_str().unwrap_or("ok").to_owned())
                .unwrap_or_else(|| "no done".into());
            if !outcomes.contains(&code) {
                outcomes.push(code);
            }
        }
        samples.sort();
        let exited = if runner.alive() {
            ""
        } else {
            ", runner exits (status 3)"
        };
        let (by, measured) = match case.stop {
            Stop::Timeout(ms) => (format!("`timeoutMs` {ms}"), "overshoot past the deadline"),
            Stop::Cancel(_) => ("`cancel`".to_owned(), "cancel to `done`"),
            Stop::Itself => ("the memory limit".to_owned(), "execute to `done`"),
        };
        let outcome = outcomes.join(", ");
        assert_eq!(outcome, case.expect, "{}", case.name);
        println!(
            "| {} | {by} | {measured} | {} | {} | `{outcome}`{exited} |",
            case.name,
            ms(samples[samples.len() / 2]),
            ms(samples[samples.len() - 1]),
        );
    }
}
