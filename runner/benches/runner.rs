//! End-to-end benchmark of a warm stdio runner; prints a Markdown table.
//!
//! `cargo bench -p execbox-runner --bench runner` (set `BENCH_QUICK=1` for a short run,
//! `RUNNER_ARGS="--insecure-no-sandbox"` to measure without the OS lockdown,
//! `EXECBOX_RUNNER=PATH` to measure another build of the runner).
//! Measures what a host sees through the real binary and real pipes: trivial execution round
//! trip, tool-call round trip, spawn to first `done`, executions per second, idle RSS.

mod support;

use std::time::{Duration, Instant};

use support::Runner;

fn execute(id: usize, code: &str) -> String {
    serde_json::json!({
        "type": "execute", "id": format!("b{id}"), "code": code,
        "options": {"timeoutMs": 10000},
        "providers": [{"name": "t", "tools": {"echo": {"safeName": "echo"}}}]
    })
    .to_string()
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let i = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[i]
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn main() {
    let quick = std::env::var_os("BENCH_QUICK").is_some();
    let n = if quick { 500 } else { 5000 };
    let calls = if quick { 500 } else { 5000 };
    let spawns = if quick { 10 } else { 50 };

    // Trivial execution round trip (execute -> started -> done), warm runner.
    let mut runner = Runner::spawn(false);
    for i in 0..200 {
        runner.send_line(&execute(i, "1 + 1"));
        runner.recv_type("done").expect("done");
    }
    let mut samples = Vec::with_capacity(n);
    let wall = Instant::now();
    for i in 0..n {
        let t = Instant::now();
        runner.send_line(&execute(i, "1 + 1"));
        let done = runner.recv_type("done").expect("done");
        samples.push(t.elapsed());
        assert_eq!(done["result"], 2);
    }
    let per_sec = n as f64 / wall.elapsed().as_secs_f64();
    let exec_p50 = percentile(&mut samples, 0.5);
    let exec_p99 = percentile(&mut samples, 0.99);
    std::thread::sleep(Duration::from_millis(200));
    let idle_rss = runner.rss_kib();

    // Tool-call round trip: time from sending a tool_result to receiving the next tool_call.
    let code = format!("let s = 0; for (let i = 0; i < {calls}; i++) s += await t.echo(i); s");
    runner.send_line(&execute(0, &code));
    runner.recv_type("started").expect("started");
    let mut call = runner.recv_type("tool_call").expect("tool_call");
    let mut rtts = Vec::with_capacity(calls);
    for _ in 0..calls {
        let reply = serde_json::json!({"type": "tool_result", "callId": call["callId"], "ok": true, "result": call["input"]});
        let t = Instant::now();
        runner.send(&reply);
        let next = runner.recv().expect("a message");
        rtts.push(t.elapsed());
        if next["type"] == "done" {
            break;
        }
        call = next;
    }
    let call_p50 = percentile(&mut rtts, 0.5);
    let call_p99 = percentile(&mut rtts, 0.99);
    drop(runner);

    // Spawn to first done.
    let mut starts = Vec::with_capacity(spawns);
    for i in 0..spawns {
        let t = Instant::now();
        let mut r = Runner::spawn(false);
        r.send_line(&execute(i, "1 + 1"));
        r.recv_type("done").expect("done");
        starts.push(t.elapsed());
    }
    let spawn_p50 = percentile(&mut starts, 0.5);
    let spawn_p99 = percentile(&mut starts, 0.99);

    println!("| measure (warm stdio runner) | p50 | p99 | target |");
    println!("|---|---|---|---|");
    println!(
        "| trivial execution round trip | {} | {} | ≤ 500 µs p50 (stretch ≤ 150 µs) |",
        us(exec_p50),
        us(exec_p99)
    );
    println!(
        "| tool call round trip | {} | {} | ≤ 50 µs p50 |",
        us(call_p50),
        us(call_p99)
    );
    println!(
        "| spawn to first done | {} | {} | ≤ 5 ms |",
        us(spawn_p50),
        us(spawn_p99)
    );
    println!("| executions per second (one runner, sequential) | {per_sec:.0}/s | | ≥ 2,000/s |");
    println!(
        "| idle RSS | {:.1} MiB | | ≤ 8 MiB |",
        idle_rss as f64 / 1024.0
    );
}
