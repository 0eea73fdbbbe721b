//! What the SDKs are measured against: `1 + 1`, and one tool call, through a warm
//! `PooledExecutor` of one runner, called from Rust. Prints a Markdown table.
//!
//! `cargo build --release -p execbox-runner && cargo bench -p execbox-host --bench sdk_baseline`
//! (`BENCH_QUICK=1` for a short run); `sdk/python/bench/bench.py` and `sdk/node/bench/bench.mjs`
//! measure the same two rows through their bindings.

use std::time::{Duration, Instant};

use execbox_host::{
    ExecuteRequest, Executor, PoolOptions, PooledExecutor, Provider, RunnerCommand, Tool, ToolSet,
};

fn main() {
    let quick = std::env::var_os("BENCH_QUICK").is_some();
    let iterations = if quick { 300 } else { 3000 };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async {
        let command = RunnerCommand::find().unwrap_or_else(|e| {
            eprintln!("{e}\n(build it first: cargo build --release -p execbox-runner)");
            std::process::exit(2)
        });
        let options = PoolOptions {
            size: 1,
            ..PoolOptions::default()
        };
        let pool = PooledExecutor::new(command, options).expect("a pool");
        let echo = Tool::new("echo", |input, _ctx| async move { Ok(input) });
        let tools = ToolSet::new(vec![Provider::new("t").tool(echo)]).expect("a tool set");
        println!("| Rust host, `PooledExecutor` (1 runner) | mean | p50 |");
        println!("|---|---|---|");
        for (row, code) in [
            ("`1 + 1`", "1 + 1"),
            ("one tool call", "await t.echo({ n: 1 })"),
        ] {
            let mut samples = Vec::with_capacity(iterations);
            for i in 0..iterations + iterations / 10 {
                let started = Instant::now();
                let result = pool.execute(ExecuteRequest::new(code).tools(&tools)).await;
                assert!(result.is_ok(), "{code}: {:?}", result.error());
                if i >= iterations / 10 {
                    samples.push(started.elapsed());
                }
            }
            println!(
                "| {row} | {} | {} |",
                us(mean(&samples)),
                us(p50(&mut samples))
            );
        }
    });
}

fn mean(samples: &[Duration]) -> Duration {
    samples.iter().sum::<Duration>() / samples.len() as u32
}

fn p50(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}
