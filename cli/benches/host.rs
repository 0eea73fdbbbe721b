//! Host-observed `execute()` latency and throughput per executor and concurrency; prints a
//! Markdown table. `cargo bench -p execbox-cli --bench host` (`BENCH_QUICK=1` for a short run).

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use execbox_host::{
    ExecuteRequest, Executor, InProcessExecutor, PoolOptions, PooledExecutor, ProcessExecutor,
    Provider, Tool, ToolSet,
};
use execbox_protocol::RuntimeOptions;
use serde_json::json;

use support::runners::runner;

fn tools() -> ToolSet {
    let echo = Tool::new(
        "echo",
        |input: serde_json::Value, _ctx| async move { Ok(input) },
    );
    ToolSet::new(vec![Provider::new("t").tool(echo)]).expect("tool set")
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    samples[((samples.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

/// Runs `total` executions of `code` with `concurrency` callers; returns (samples, wall).
async fn measure(
    executor: Arc<dyn Executor>,
    tools: &ToolSet,
    code: &'static str,
    concurrency: usize,
    total: usize,
) -> (Vec<Duration>, Duration) {
    let wall = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let executor = executor.clone();
        let tools = tools.clone();
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            for _ in 0..total / concurrency {
                let t = Instant::now();
                let result = executor
                    .execute(
                        ExecuteRequest::new(code)
                            .tools(&tools)
                            .options(RuntimeOptions::default()),
                    )
                    .await;
                samples.push(t.elapsed());
                assert!(result.is_ok(), "{:?}", result.error());
            }
            samples
        }));
    }
    let mut samples = Vec::new();
    for task in tasks {
        samples.extend(task.await.expect("task"));
    }
    (samples, wall.elapsed())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = std::env::var_os("BENCH_QUICK").is_some();
    let total = if quick { 400 } else { 4000 };
    let fresh_total = if quick { 40 } else { 200 };
    let tools = tools();
    println!("| executor | concurrency | p50 | p99 | executions/s |");
    println!("|---|---|---|---|---|");
    for concurrency in [1, 2, 4, 8] {
        let options = PoolOptions {
            size: concurrency,
            ..PoolOptions::default()
        };
        let in_process = InProcessExecutor::new(options.clone());
        in_process
            .wait_idle(concurrency, Duration::from_secs(10))
            .await;
        let pooled = PooledExecutor::new(runner(), options).unwrap();
        pooled.wait_idle(concurrency, Duration::from_secs(10)).await;
        let fresh = ProcessExecutor::new(runner()).unwrap();
        let executors: [(&str, Arc<dyn Executor>, usize); 3] = [
            ("in-process", Arc::new(in_process), total),
            ("pooled process", Arc::new(pooled), total),
            ("fresh process", Arc::new(fresh), fresh_total),
        ];
        for (name, executor, n) in executors {
            measure(executor.clone(), &tools, "1 + 1", concurrency, n / 10).await; // warm-up
            let (mut samples, wall) = measure(executor, &tools, "1 + 1", concurrency, n).await;
            let rate = samples.len() as f64 / wall.as_secs_f64();
            let (p50, p99) = (
                percentile(&mut samples, 0.5),
                percentile(&mut samples, 0.99),
            );
            println!(
                "| {name} | {concurrency} | {} | {} | {rate:.0} |",
                ms(p50),
                ms(p99)
            );
        }
    }

    // Tool-call round trip through the host's dispatcher: a script making 1000 calls.
    let calls = if quick { 200 } else { 1000 };
    let code: &'static str = Box::leak(
        format!("let s = 0; for (let i = 0; i < {calls}; i++) s += await t.echo(i); s")
            .into_boxed_str(),
    );
    let baseline_code = "let s = 0; for (let i = 0; i < 1; i++) s += await t.echo(i); s";
    for (name, executor) in [
        (
            "in-process",
            Arc::new(InProcessExecutor::new(PoolOptions {
                size: 1,
                ..PoolOptions::default()
            })) as Arc<dyn Executor>,
        ),
        (
            "pooled process",
            Arc::new(
                PooledExecutor::new(
                    runner(),
                    PoolOptions {
                        size: 1,
                        ..PoolOptions::default()
                    },
                )
                .unwrap(),
            ),
        ),
    ] {
        measure(executor.clone(), &tools, baseline_code, 1, 20).await;
        let (mut base, _) = measure(executor.clone(), &tools, baseline_code, 1, 50).await;
        let (mut many, _) = measure(executor, &tools, code, 1, 10).await;
        let per_call =
            (percentile(&mut many, 0.5).saturating_sub(percentile(&mut base, 0.5))) / calls as u32;
        println!(
            "| tool call round trip via dispatcher ({name}) | 1 | {:.1} µs | | |",
            per_call.as_secs_f64() * 1e6
        );
    }
    let _ = json!(null);
}
