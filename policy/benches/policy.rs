//! The policy's overhead per tool call: `cargo bench -p execbox-policy --bench policy`.
//!
//! Each row runs `Enforcement::admit_call` and `AuditedCall::finish` for one call, as dispatch will,
//! with more of the policy switched on row by row; the target is at most 5 µs per call with
//! permissions, a rate limit and audit to a file. Prints a table (mean, p50, p99 per call).
//! The PostgreSQL rows run against a server the bench starts (`execbox_pg::testing`); without
//! PostgreSQL binaries they are left out with a note.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use execbox_host::{GuardedCall, RateLimit, Tool, ToolRequirements};
use execbox_pg::testing::TestServer;
use execbox_policy::{AuditLog, Enforcement, Policy, RateLimits, StoreLocation};
use futures_util::FutureExt as _;
use serde_json::{json, Value};

const CALLS: usize = 200_000;
const WARM_UP: usize = 5_000;
/// Calls per PostgreSQL row: each is a round trip to the server.
const PG_CALLS: usize = 20_000;

struct Row {
    name: &'static str,
    mean: Duration,
    p50: Duration,
    p99: Duration,
}

fn tool_policy(permissions: bool, limit: bool) -> ToolRequirements {
    let mut tool = Tool::new("get", |_input: Value, _ctx| async move { Ok(Value::Null) });
    if permissions {
        tool = tool.permissions(["weather:read"]);
    }
    if limit {
        // High enough that every call of the run is admitted: the cost of a check, not of a
        // refusal.
        tool = tool.rate_limit(RateLimit::new(u32::MAX, Duration::from_secs(86_400)).unwrap());
    }
    tool.requirements().clone()
}

fn measure(
    name: &'static str,
    guard: &Enforcement,
    tool: &ToolRequirements,
    input: &Value,
    shared: bool,
) -> Row {
    measure_n(name, guard, tool, input, shared, CALLS)
}

fn measure_n(
    name: &'static str,
    guard: &Enforcement,
    tool: &ToolRequirements,
    input: &Value,
    shared: bool,
    calls: usize,
) -> Row {
    // In memory, admit never waits (no approval here): polled once, without a runtime. A
    // state file's check runs on a blocking thread, so that row needs one.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let call = || {
        let admit = guard.admit_call(GuardedCall::new("bench", "weather.get", tool, input));
        let admitted = if shared {
            runtime.block_on(admit)
        } else {
            admit
                .now_or_never()
                .expect("admit waits only for a state file")
        }
        .unwrap_or_else(|e| panic!("{e}"));
        admitted.finish(Ok(())).unwrap();
    };
    for _ in 0..WARM_UP.min(calls / 10) {
        call();
    }
    let mut samples = Vec::with_capacity(calls);
    let all = Instant::now();
    for _ in 0..calls {
        let t = Instant::now();
        call();
        samples.push(t.elapsed());
    }
    let mean = all.elapsed() / calls as u32;
    samples.sort();
    Row {
        name,
        mean,
        p50: samples[calls / 2],
        p99: samples[calls * 99 / 100],
    }
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "execbox-bench-policy-{}-{name}",
        std::process::id()
    ))
}

fn main() {
    let policy = Policy::builder()
        .role("reader", ["weather:read", "docs:*"])
        .principal("alice", ["reader"], ["email:send"])
        .build()
        .unwrap();
    let alice = || policy.principal(Some("alice")).unwrap();
    let input = json!({"city": "Paris", "units": "metric", "days": 3});
    let memory = Arc::new(RateLimits::in_memory());
    let audit_path = temp("audit.jsonl");
    let audit = Arc::new(AuditLog::open(&audit_path, false).unwrap());
    let audit_input_path = temp("audit-input.jsonl");
    let audit_input = Arc::new(AuditLog::open(&audit_input_path, true).unwrap());
    let state_path = temp("state.db");
    let sqlite = Arc::new(RateLimits::open(&state_path).unwrap());

    let mut rows = Vec::new();
    let plain = Enforcement::new(alice(), memory.clone());
    rows.push(measure(
        "no requirements, no audit",
        &plain,
        &ToolRequirements::default(),
        &input,
        false,
    ));
    rows.push(measure(
        "permissions",
        &plain,
        &tool_policy(true, false),
        &input,
        false,
    ));
    rows.push(measure(
        "permissions + rate limit (memory)",
        &plain,
        &tool_policy(true, true),
        &input,
        false,
    ));
    let audited = Enforcement::new(alice(), memory.clone()).with_audit(audit.clone());
    rows.push(measure(
        "permissions + rate limit + audit to a file",
        &audited,
        &tool_policy(true, true),
        &input,
        false,
    ));
    let with_input = Enforcement::new(alice(), memory.clone()).with_audit(audit_input.clone());
    rows.push(measure(
        "  ... with include_input",
        &with_input,
        &tool_policy(true, true),
        &input,
        false,
    ));
    let shared = Enforcement::new(alice(), sqlite.clone()).with_audit(audit.clone());
    rows.push(measure(
        "  ... rate limit in a SQLite state file",
        &shared,
        &tool_policy(true, true),
        &input,
        true,
    ));

    let server = TestServer::start_or_skip();
    match &server {
        Some(server) => {
            let url = StoreLocation::parse(&server.database("bench")).unwrap();
            let pg = Arc::new(RateLimits::open_at(&url).unwrap());
            let on_pg = Enforcement::new(alice(), pg.clone()).with_audit(audit.clone());
            rows.push(measure_n(
                "  ... rate limit in PostgreSQL",
                &on_pg,
                &tool_policy(true, true),
                &input,
                true,
                PG_CALLS,
            ));
            let pg_audit = Arc::new(AuditLog::open_at(&url, false).unwrap());
            let all_pg = Enforcement::new(alice(), pg).with_audit(pg_audit);
            rows.push(measure_n(
                "  ... and audit to PostgreSQL",
                &all_pg,
                &tool_policy(true, true),
                &input,
                true,
                PG_CALLS,
            ));
        }
        None => println!("(no PostgreSQL here: its rows are left out)\n"),
    }

    println!(
        "policy overhead per tool call ({CALLS} calls per row, {PG_CALLS} for PostgreSQL; one thread)\n"
    );
    println!(
        "| {:<44} | {:>9} | {:>9} | {:>9} |",
        "policy", "mean", "p50", "p99"
    );
    println!("|{:-<46}|{:->11}|{:->11}|{:->11}|", "", "", "", "");
    for r in &rows {
        println!(
            "| {:<44} | {:>9} | {:>9} | {:>9} |",
            r.name,
            micros(r.mean),
            micros(r.p50),
            micros(r.p99)
        );
    }
    let target = rows
        .iter()
        .find(|r| r.name == "permissions + rate limit + audit to a file")
        .unwrap();
    println!(
        "\ntarget ≤ 5 µs with permissions, a rate limit and audit to a file: {} ({} mean)",
        if target.mean <= Duration::from_micros(5) {
            "met"
        } else {
            "NOT met"
        },
        micros(target.mean)
    );
    for p in [&audit_path, &audit_input_path] {
        let _ = std::fs::remove_file(p);
    }
    remove_db(&state_path);
}

fn micros(d: Duration) -> String {
    format!("{:.2} µs", d.as_secs_f64() * 1e6)
}

fn remove_db(path: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(p);
    }
}
