//! End-to-end benchmark of a warm stdio runner; prints a Markdown table.
//!
//! `cargo bench -p execbox-runner --bench runner` (set `BENCH_QUICK=1` for a short run,
//! `RUNNER_ARGS="--insecure-no-sandbox"` to measure without the OS lockdown).
//! Measures what a host sees through the real binary and real pipes: trivial execution round
//! trip, tool-call round trip, spawn to first `done`, executions per second, idle RSS.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

struct Runner {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Runner {
    fn spawn() -> Runner {
        let args: Vec<String> = std::env::var("RUNNER_ARGS")
            .map(|a| a.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default();
        let mut child = Command::new(env!("CARGO_BIN_EXE_execbox-runner"))
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn runner");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Runner {
            child,
            stdin,
            stdout,
        }
    }

    fn send(&mut self, line: &str) {
        self.stdin.write_all(line.as_bytes()).unwrap();
        self.stdin.write_all(b"\n").unwrap();
        self.stdin.flush().unwrap();
    }

    fn recv(&mut self) -> Value {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).expect("runner line")
    }

    fn recv_type(&mut self, kind: &str) -> Value {
        loop {
            let v = self.recv();
            if v["type"] == kind {
                return v;
            }
        }
    }

    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

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
    let mut runner = Runner::spawn();
    for i in 0..200 {
        runner.send(&execute(i, "1 + 1"));
        runner.recv_type("done");
    }
    let mut samples = Vec::with_capacity(n);
    let wall = Instant::now();
    for i in 0..n {
        let t = Instant::now();
        runner.send(&execute(i, "1 + 1"));
        let done = runner.recv_type("done");
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
    runner.send(&execute(0, &code));
    runner.recv_type("started");
    let mut call = runner.recv_type("tool_call");
    let mut rtts = Vec::with_capacity(calls);
    for _ in 0..calls {
        let reply = serde_json::json!({"type": "tool_result", "callId": call["callId"], "ok": true, "result": call["input"]});
        let t = Instant::now();
        runner.send(&reply.to_string());
        let next = runner.recv();
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
        let mut r = Runner::spawn();
        r.send(&execute(i, "1 + 1"));
        r.recv_type("done");
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
