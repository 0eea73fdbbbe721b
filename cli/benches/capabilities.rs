//! Capabilities through `execbox serve`: `cargo bench -p execbox-cli --bench capabilities`.
//!
//! Starts `execbox serve --listen 127.0.0.1:0 --pool 2` (warm runners) over a project with a
//! trivial script capability (`1 + 1`), and drives it over HTTP with reqwest:
//! - start → completed: `POST /v1/executions`, then `GET /v1/executions/{id}/wait`, one at a
//!   time, after a warm-up (target: p50 ≤ 2 ms);
//! - 1,000 executions started at once (at most 256 requests in flight), each waited for;
//!   then every one is looked up in the database: it must be there, in a terminal status;
//! - where the time of one goes: each of the two HTTP requests alone, the same start → wait in
//!   this process through a `CapabilityManager` over its own SQLite store (no HTTP), and the
//!   same `1 + 1` through a `PooledExecutor` alone (no manager, no store).
//!
//! Prints a table.

use std::time::{Duration, Instant};

use execbox_capabilities::{ExecutionFilter, ExecutionStore};
use serde_json::{json, Value};

const WARM_UP: usize = 100;
const ROUNDS: usize = 1_000;
const CONCURRENT: usize = 1_000;
const IN_FLIGHT: usize = 256;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

async fn start_and_wait(client: &reqwest::Client, url: &str) -> (String, Value) {
    let (id, outcome, _) = timed_start_and_wait(client, url).await;
    (id, outcome)
}

/// The same, with the time of each request: (start, wait).
async fn timed_start_and_wait(
    client: &reqwest::Client,
    url: &str,
) -> (String, Value, (Duration, Duration)) {
    let t = Instant::now();
    let started: Value = client
        .post(format!("{url}/v1/executions"))
        .json(&json!({"capability": "trivial"}))
        .send()
        .await
        .expect("POST /v1/executions")
        .json()
        .await
        .expect("a JSON answer");
    let id = started["executionId"]
        .as_str()
        .expect("an execution id")
        .to_string();
    let start = t.elapsed();
    let t = Instant::now();
    let outcome: Value = client
        .get(format!("{url}/v1/executions/{id}/wait?timeoutMs=300000"))
        .send()
        .await
        .expect("GET wait")
        .json()
        .await
        .expect("a JSON answer");
    (id, outcome, (start, t.elapsed()))
}

/// p50 of start → wait through a manager in this process, and of the executor alone.
async fn in_process(project: &std::path::Path) -> (Duration, Duration) {
    use execbox_capabilities::{
        CapabilityManager, ManagerOptions, Registry, RegistryRoots, StartRequest,
    };
    use execbox_host::{ExecuteRequest, Executor, PoolOptions, PooledExecutor, RunnerCommand};
    let runner = RunnerCommand::new(env!("CARGO_BIN_EXE_execbox")).arg("runner");
    let pool = PoolOptions {
        size: 2,
        ..PoolOptions::default()
    };
    let executor = std::sync::Arc::new(PooledExecutor::new(runner, pool).unwrap());
    let store = ExecutionStore::open(project.join("in-process.db")).unwrap();
    let roots = RegistryRoots::discover(project, Some(project));
    let manager = CapabilityManager::new(
        Registry::load(roots),
        store,
        executor.clone(),
        ManagerOptions::default(),
    );
    let mut managed = Vec::with_capacity(ROUNDS);
    let mut direct = Vec::with_capacity(ROUNDS);
    for round in 0..WARM_UP + ROUNDS {
        let t = Instant::now();
        let id = manager
            .start(StartRequest::new("trivial", Value::Null), None)
            .await
            .unwrap();
        let outcome = manager.wait(&id, None).await.unwrap().unwrap();
        let elapsed = t.elapsed();
        assert!(outcome.success);
        let t = Instant::now();
        let result = executor.execute(ExecuteRequest::new("1 + 1")).await;
        let alone = t.elapsed();
        assert!(result.is_ok());
        if round >= WARM_UP {
            managed.push(elapsed);
            direct.push(alone);
        }
    }
    managed.sort();
    direct.sort();
    (percentile(&managed, 0.5), percentile(&direct, 0.5))
}

fn main() {
    // reqwest's rustls (linked through the `mcp` feature) needs a provider: ring.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir =
        std::env::temp_dir().join(format!("execbox-bench-capabilities-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cap = dir.join(".execbox/capabilities/trivial");
    std::fs::create_dir_all(&cap).unwrap();
    std::fs::write(
        cap.join("capability.yaml"),
        "name: trivial\ntype: script\nentry: index.js\ntimeout_ms: 60000\n",
    )
    .unwrap();
    std::fs::write(cap.join("index.js"), "1 + 1").unwrap();
    let db = dir.join("state.db");
    let mut server = std::process::Command::new(env!("CARGO_BIN_EXE_execbox"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--pool",
            "2",
            "--project",
        ])
        .arg(&dir)
        .arg("--db")
        .arg(&db)
        .env("EXECBOX_HOME", &dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start execbox serve");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(server.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let url = line.trim().to_string();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (latencies, concurrent) = runtime.block_on(async {
        let client = reqwest::Client::new();
        for _ in 0..WARM_UP {
            start_and_wait(&client, &url).await;
        }
        let mut latencies = Vec::with_capacity(ROUNDS);
        let (mut starts, mut waits) = (Vec::with_capacity(ROUNDS), Vec::with_capacity(ROUNDS));
        for _ in 0..ROUNDS {
            let t = Instant::now();
            let (_, outcome, (start, wait)) = timed_start_and_wait(&client, &url).await;
            latencies.push(t.elapsed());
            starts.push(start);
            waits.push(wait);
            assert_eq!(outcome["status"], "completed", "{outcome}");
        }
        latencies.sort();
        starts.sort();
        waits.sort();
        let split = (percentile(&starts, 0.5), percentile(&waits, 0.5));

        let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
        let t = Instant::now();
        let tasks: Vec<_> = (0..CONCURRENT)
            .map(|_| {
                let client = client.clone();
                let url = url.clone();
                let gate = gate.clone();
                tokio::spawn(async move {
                    let _permit = gate.acquire_owned().await.unwrap();
                    start_and_wait(&client, &url).await
                })
            })
            .collect();
        let mut ids = Vec::with_capacity(CONCURRENT);
        let mut completed = 0;
        for task in tasks {
            let (id, outcome) = task.await.unwrap();
            if outcome["status"] == "completed" {
                completed += 1;
            }
            ids.push(id);
        }
        (latencies, (t.elapsed(), ids, completed, split))
    });
    let (wall, ids, completed, (start_p50, wait_p50)) = concurrent;
    let (managed_p50, direct_p50) = runtime.block_on(in_process(&dir));

    // Every execution is in the database, in a terminal status.
    let store = ExecutionStore::open(&db).expect("open the database");
    let records = runtime
        .block_on(store.list(&ExecutionFilter {
            limit: Some(10_000),
            ..Default::default()
        }))
        .unwrap();
    let terminal: std::collections::HashSet<&str> = records
        .iter()
        .filter(|r| r.status.is_terminal())
        .map(|r| r.execution_id.as_str())
        .collect();
    let in_db = ids
        .iter()
        .filter(|id| terminal.contains(id.as_str()))
        .count();

    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&dir);

    println!("| measure | value |");
    println!("|---|---:|");
    println!(
        "| start → completed, `1 + 1` script, p50 ({ROUNDS} sequential, warm runners) | {} |",
        ms(percentile(&latencies, 0.5))
    );
    println!(
        "| start → completed, p90 | {} |",
        ms(percentile(&latencies, 0.9))
    );
    println!(
        "| start → completed, p99 | {} |",
        ms(percentile(&latencies, 0.99))
    );
    println!(
        "| … of which `POST /v1/executions` (the start), p50 | {} |",
        ms(start_p50)
    );
    println!(
        "| … of which `GET …/wait` (until the outcome), p50 | {} |",
        ms(wait_p50)
    );
    println!(
        "| the same start → wait in process (manager and SQLite store, no HTTP), p50 | {} |",
        ms(managed_p50)
    );
    println!(
        "| `1 + 1` on the pooled runners alone (no manager, no store), p50 | {} |",
        ms(direct_p50)
    );
    println!(
        "| {CONCURRENT} concurrent executions: wall time | {} |",
        ms(wall)
    );
    println!("| {CONCURRENT} concurrent executions: completed | {completed} / {CONCURRENT} |");
    println!("| {CONCURRENT} concurrent executions: in the database, terminal | {in_db} / {CONCURRENT} |");
    assert_eq!(
        in_db, CONCURRENT,
        "every execution must be in the database in a terminal status"
    );
}
