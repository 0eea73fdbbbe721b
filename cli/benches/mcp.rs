//! `cargo bench -p execbox-cli --bench mcp`: what one upstream MCP tool call costs from inside
//! `execute_code`, next to the same call made directly by an MCP client. Prints a table.
//!
//! Both paths use an `rmcp` client over stdio and the same upstream server (this binary,
//! serving `alpha` from `tests/support/mcp_upstream.rs`): directly, client → upstream; through
//! execbox, client → `execbox mcp` → a pooled runner → the host → upstream, and back.
//! `BENCH_ITERATIONS` sets the number of timed calls per row (default 500); `EXECBOX=PATH`
//! measures another `execbox` binary (an earlier build, say) with the same client and upstream.

#[path = "../tests/support/mcp_upstream.rs"]
mod mcp_upstream;

use std::process::Stdio;
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, JsonObject};
use rmcp::service::{RoleClient, RunningService};
use rmcp::ServiceExt as _;
use serde_json::{json, Value};
use tokio::process::{Child, Command};

use mcp_upstream::ROLE_ENV;

const WARMUP: usize = 50;

fn main() {
    if mcp_upstream::serve_if_asked() {
        return;
    }
    // `cargo bench` passes `--bench`; nothing else is understood.
    let iterations: usize = std::env::var("BENCH_ITERATIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(500);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run(iterations));
}

type Client = RunningService<RoleClient, ()>;

async fn connect(mut command: Command) -> (Client, Child) {
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let mut child = command.spawn().expect("spawn");
    let stdout = child.stdout.take().unwrap();
    let stdin = child.stdin.take().unwrap();
    let client = ().serve((stdout, stdin)).await.expect("initialize");
    (client, child)
}

fn params(tool: &str, arguments: Value) -> CallToolRequestParams {
    let Value::Object(arguments) = arguments else {
        unreachable!()
    };
    CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments as JsonObject)
}

/// Times `iterations` sequential calls after a warm-up; the sorted durations.
async fn time(client: &Client, call: &CallToolRequestParams, iterations: usize) -> Vec<Duration> {
    let mut times = Vec::with_capacity(iterations);
    for i in 0..WARMUP + iterations {
        let started = Instant::now();
        let result = client.call_tool(call.clone()).await.expect("call");
        let elapsed = started.elapsed();
        assert_ne!(result.is_error, Some(true), "{result:?}");
        if i >= WARMUP {
            times.push(elapsed);
        }
    }
    times.sort();
    times
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

fn us(d: Duration) -> String {
    let micros = d.as_secs_f64() * 1e6;
    if micros >= 1000.0 {
        format!("{:.2} ms", micros / 1000.0)
    } else {
        format!("{micros:.0} µs")
    }
}

async fn run(iterations: usize) {
    let exe = std::env::current_exe().expect("current exe");
    // Directly: the client speaks to the upstream itself.
    let mut upstream = Command::new(&exe);
    upstream.env(ROLE_ENV, "alpha");
    let (direct, _upstream) = connect(upstream).await;
    let add = params("add", json!({"a": 1, "b": 2}));
    let direct_times = time(&direct, &add, iterations).await;

    // Through execbox mcp.
    let dir = std::env::temp_dir().join(format!("execbox-bench-mcp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let config = dir.join("mcp.json");
    let servers = json!({"mcpServers": {"alpha": {"command": exe, "env": {ROLE_ENV: "alpha"}}}});
    std::fs::write(&config, servers.to_string()).expect("config");
    let binary = std::env::var_os("EXECBOX")
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_execbox").into());
    let mut execbox = Command::new(binary);
    execbox
        .args(["mcp", "--config"])
        .arg(&config)
        .env_remove("RUST_LOG");
    let (through, _execbox) = connect(execbox).await;
    let code = |code: &str| params("execute_code", json!({ "code": code }));
    let baseline = time(&through, &code("1 + 1"), iterations).await;
    let one = time(
        &through,
        &code("(await alpha.add({ a: 1, b: 2 })).sum"),
        iterations,
    )
    .await;
    let ten = time(
        &through,
        &code(
            "let s = 0; for (let i = 0; i < 10; i++) s += (await alpha.add({ a: i, b: 1 })).sum; s",
        ),
        iterations,
    )
    .await;
    let parallel = time(
        &through,
        &code("(await Promise.all(Array.from({ length: 10 }, (_, i) => alpha.add({ a: i, b: 1 })))).length"),
        iterations,
    )
    .await;
    let _ = std::fs::remove_dir_all(&dir);

    let p50 = |t: &[Duration]| percentile(t, 0.5);
    let p99 = |t: &[Duration]| percentile(t, 0.99);
    println!(
        "{iterations} timed calls per row after {WARMUP} warm-up; {}",
        machine()
    );
    println!();
    println!("| measure | p50 | p99 |");
    println!("|---|---|---|");
    let row = |name: &str, t: &[Duration]| {
        println!("| {name} | {} | {} |", us(p50(t)), us(p99(t)));
    };
    row(
        "direct `tools/call` of `alpha.add` (client → upstream)",
        &direct_times,
    );
    row("`execute_code` of `1 + 1` (no tool call)", &baseline);
    row("`execute_code` with one `alpha.add` call", &one);
    row("`execute_code` with 10 sequential `alpha.add` calls", &ten);
    row(
        "`execute_code` with 10 `alpha.add` calls in `Promise.all`",
        &parallel,
    );
    let overhead = p50(&one).saturating_sub(p50(&direct_times));
    let per_call = p50(&ten).saturating_sub(p50(&baseline)) / 10;
    println!();
    println!(
        "one upstream call inside execute_code costs {} more than calling it directly (p50); \
         each further sequential call adds {} (p50)",
        us(overhead),
        us(per_call)
    );
}

/// The CPU model and core count, for the README.
fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned())
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    format!("{cores} cores of {model}")
}
