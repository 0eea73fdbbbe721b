//! The cost of durable executions: a program making N tool calls run plainly, run durably
//! (recording its ledger), and resumed from that ledger (every call answered from it, the
//! last one run for real); prints a Markdown table with the replay cost per recorded call.
//! `cargo bench -p execbox-cli --bench replay` (`BENCH_QUICK=1` for a short run).

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use execbox_host::{
    ExecuteRequest, Executor, Ledger, PoolOptions, PooledExecutor, Provider, Tool, ToolSet,
};
use support::runners::runner;

fn tools() -> ToolSet {
    let echo = Tool::new(
        "echo",
        |input: serde_json::Value, _ctx| async move { Ok(input) },
    );
    ToolSet::new(vec![Provider::new("t").tool(echo)]).expect("tool set")
}

/// The median of `runs` timings of `make()`'s execution.
async fn median(
    executor: &PooledExecutor,
    runs: usize,
    make: impl Fn() -> ExecuteRequest,
) -> (Duration, Option<Ledger>) {
    let mut samples = Vec::with_capacity(runs);
    let mut ledger = None;
    for _ in 0..runs {
        let t = Instant::now();
        let result = executor.execute(make()).await;
        samples.push(t.elapsed());
        assert!(result.is_ok(), "{:?}", result.error());
        ledger = result.ledger;
    }
    samples.sort();
    (samples[samples.len() / 2], ledger)
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = std::env::var_os("BENCH_QUICK").is_some();
    let runs = if quick { 5 } else { 21 };
    let tools = tools();
    let executor = PooledExecutor::new(
        runner(),
        PoolOptions {
            size: 1,
            ..PoolOptions::default()
        },
    )
    .unwrap();
    executor.wait_idle(1, Duration::from_secs(10)).await;
    println!(
        "| recorded calls | plain run | durable run | resumed run | replay per recorded call |"
    );
    println!("|---|---|---|---|---|");
    for calls in [10usize, 100, 1000] {
        let code = format!(
            "let s = 0; for (let i = 0; i < {calls}; i++) s += (await t.echo({{ i, at: Date.now(), r: Math.random() }})).i; \
             await t.echo({{ last: true }}); s"
        );
        let request = || {
            ExecuteRequest::new(code.clone())
                .tools(&tools)
                .timeout(Duration::from_secs(60))
        };
        let (plain, _) = median(&executor, runs, request).await;
        let (durable, ledger) =
            median(&executor, runs, || request().durable(Ledger::new(), None)).await;
        let ledger = ledger.expect("a durable run returns its ledger");
        assert_eq!(ledger.answered(), calls + 1);
        // Resumed at the last call: the first `calls` answered from the ledger.
        let mut resumable = ledger.clone();
        resumable.calls.last_mut().unwrap().answer = None;
        let (resumed, _) = median(&executor, runs, || {
            request().durable(resumable.clone(), Some(calls as u32))
        })
        .await;
        let per_call = resumed.as_secs_f64() * 1e6 / calls as f64;
        println!(
            "| {calls} | {} | {} | {} | {per_call:.1} µs |",
            ms(plain),
            ms(durable),
            ms(resumed)
        );
    }
}
