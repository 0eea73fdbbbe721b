//! What the SDKs are measured against: `1 + 1`, and one tool call, through a warm
//! `PooledExecutor` of one runner with one tool (`t.one`, returning 1), µs per execution, from
//! Rust. `sdk/python/bench/bench.py` and `sdk/node/bench/bench.mjs` run it beside their own.
//!
//! `cargo bench -p execbox-host --bench sdk_baseline` prints a line of JSON:
//! `{"iterations":N,"run":{"mean":µs,"p50":µs},"tool":{..},"handoff":{..}}`; `handoff` is the
//! floor of any binding: a trivial task handed from a thread outside the runtime (as the Node.js
//! main thread is) to the runtime and its answer handed back, with no execution at all.
//! The runner is found as every embedder finds it: `EXECBOX_RUNNER`, else beside the bench
//! (`cargo build --release -p execbox-runner` first), else on `PATH`.

use std::time::{Duration, Instant};

use execbox_host::{
    ExecuteRequest, Executor, PoolOptions, PooledExecutor, Provider, RunnerCommand, Tool, ToolSet,
};
use serde_json::json;

/// Executions measured per case (after as many warm-up ones); `EXECBOX_BENCH_ITERATIONS`.
const DEFAULT_ITERATIONS: usize = 2000;

/// Mean and median of `samples`, in µs.
fn stats(mut samples: Vec<Duration>) -> serde_json::Value {
    samples.sort();
    let mean = samples.iter().sum::<Duration>().as_secs_f64() / samples.len() as f64;
    let p50 = samples[samples.len() / 2].as_secs_f64();
    json!({ "mean": (mean * 1e7).round() / 10.0, "p50": (p50 * 1e7).round() / 10.0 })
}

async fn measure(pool: &PooledExecutor, code: &str, tools: &ToolSet, n: usize) -> Vec<Duration> {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        let result = pool.execute(ExecuteRequest::new(code).tools(tools)).await;
        samples.push(started.elapsed());
        assert!(result.is_ok(), "{code}: {:?}", result.error());
    }
    samples
}

fn main() {
    let n = std::env::var("EXECBOX_BENCH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_ITERATIONS);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a Tokio runtime");
    runtime.block_on(async {
        let options = PoolOptions {
            size: 1,
            ..PoolOptions::default()
        };
        let command = RunnerCommand::find().unwrap_or_else(|e| {
            eprintln!("{e}");
            std::process::exit(2)
        });
        let pool = PooledExecutor::new(command, options).expect("a pool of one runner");
        pool.wait_idle(1, Duration::from_secs(10)).await;
        let one = Tool::new("one", |_input, _ctx| async { Ok(json!(1)) });
        let tools = ToolSet::new(vec![Provider::new("t").tool(one)]).expect("a tool set");
        // Both cases with the same tool set, as an SDK's one Sandbox has.
        measure(&pool, "1 + 1", &tools, n).await;
        let run = measure(&pool, "1 + 1", &tools, n).await;
        measure(&pool, "await t.one()", &tools, n).await;
        let tool = measure(&pool, "await t.one()", &tools, n).await;
        let handle = tokio::runtime::Handle::current();
        let handoff = tokio::task::spawn_blocking(move || handoff(&handle, n))
            .await
            .expect("the hand-off thread");
        println!(
            "{}",
            json!({ "iterations": n, "run": stats(run), "tool": stats(tool), "handoff": stats(handoff) })
        );
    });
}

/// `n` round trips of a trivial task from this thread (outside the runtime) to the runtime and
/// back, after as many warm-up ones.
fn handoff(handle: &tokio::runtime::Handle, n: usize) -> Vec<Duration> {
    let mut samples = Vec::with_capacity(n);
    for i in 0..2 * n {
        let (sender, receiver) = std::sync::mpsc::channel();
        let started = Instant::now();
        handle.spawn(async move {
            let _ = sender.send(1 + 1);
        });
        receiver.recv().expect("the task's answer");
        if i >= n {
            samples.push(started.elapsed());
        }
    }
    samples
}
