//! Capabilities through `execbox serve`: `cargo bench -p execbox-cli --bench capabilities`.
//!
//! Starts `execbox serve --listen 127.0.0.1:0 --pool 2 --max-live 1000
//! --max-live-per-principal 1000 --max-long-requests-per-principal 1000` (warm runners; no 429
//! for the concurrent load) over a project with a trivial script capability (`1 + 1`), and
//! drives it over HTTP with reqwest, in three parts, one table each:
//! 1. on a SQLite file:
//!    - start → completed: `POST /v1/executions`, then `GET /v1/executions/{id}/wait`, one at a
//!      time, after a warm-up (target: p50 ≤ 2 ms);
//!    - 1,000 executions started at once (at most 256 requests in flight), each waited for;
//!      then every one is looked up in the database: it must be there, in a terminal status;
//!    - where the time of one goes: each of the two HTTP requests alone, the same start → wait
//!      in this process through a `CapabilityManager` over its own SQLite store (no HTTP), and
//!      the same `1 + 1` through a `PooledExecutor` alone (no manager, no store);
//! 2. the same start → completed and 1,000 at once with `--db postgres://…`, on a PostgreSQL
//!    server the bench starts in a temporary folder (`execbox_pg::testing::TestServer`),
//!    beside the SQLite figures;
//! 3. two replicas (`--replica-name a`, `b`) on one PostgreSQL database: executions started on
//!    each in turn, and waited for on the other replica every second pair, so half the waits
//!    hear the outcome from the other replica; one at a time (same-replica and cross-replica
//!    latency apart), then 1,000 at once (executions per second).
//!
//! Without PostgreSQL binaries (see `TestServer`), parts 2 and 3 say why they are missing.
//! `EXECBOX_BENCH_EXECBOX=PATH` serves with that `execbox` instead of this build's (the
//! in-process rows still use this build).

use std::time::{Duration, Instant};

use execbox_capabilities::{ExecutionFilter, ExecutionStore};
use execbox_policy::StoreLocation;
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

fn per_second(n: usize, wall: Duration) -> String {
    format!("{:.0} /s", n as f64 / wall.as_secs_f64())
}

/// An `execbox serve` process, killed on drop.
struct Serve {
    child: std::process::Child,
    url: String,
}

impl Serve {
    /// `execbox serve --listen 127.0.0.1:0 --pool 2 --project DIR --db DB ARGS…`, with the
    /// bounds on live executions and on long requests per principal raised to `CONCURRENT`
    /// (the default bounds per principal, 64 executions and 16 waits, would refuse part of the
    /// concurrent load with 429).
    fn start(project: &std::path::Path, db: &std::ffi::OsStr, args: &[&str]) -> Serve {
        let bound = CONCURRENT.to_string();
        // `EXECBOX_BENCH_EXECBOX=PATH` serves with another build (to compare two builds
        // under the same load); this bench's own `execbox` by default.
        let program = std::env::var_os("EXECBOX_BENCH_EXECBOX")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_execbox").into());
        let mut child = std::process::Command::new(program)
            .args(["serve", "--listen", "127.0.0.1:0", "--pool", "2"])
            .args(["--max-live", &bound, "--max-live-per-principal", &bound])
            .args(["--max-long-requests-per-principal", &bound])
            .arg("--project")
            .arg(project)
            .arg("--db")
            .arg(db)
            .args(args)
            .env("EXECBOX_HOME", project)
            .env_remove("RUST_LOG")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start execbox serve");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        assert!(
            line.starts_with("http://"),
            "execbox serve printed {line:?}"
        );
        Serve {
            child,
            url: line.trim().to_string(),
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A project folder `dir` with the capability `trivial` (`1 + 1`).
fn project(dir: &std::path::Path) {
    let _ = std::fs::remove_dir_all(dir);
    let cap = dir.join(".execbox/capabilities/trivial");
    std::fs::create_dir_all(&cap).unwrap();
    std::fs::write(
        cap.join("capability.yaml"),
        "name: trivial\ntype: script\nentry: index.js\ntimeout_ms: 60000\n",
    )
    .unwrap();
    std::fs::write(cap.join("index.js"), "1 + 1").unwrap();
}

/// Starts on `start`, waits on `wait`: (id, outcome, (start, wait)).
async fn timed_start_and_wait(
    client: &reqwest::Client,
    start: &str,
    wait: &str,
) -> (String, Value, (Duration, Duration)) {
    let t = Instant::now();
    let started: Value = client
        .post(format!("{start}/v1/executions"))
        .json(&json!({"capability": "trivial"}))
        .send()
        .await
        .expect("POST /v1/executions")
        .json()
        .await
        .expect("a JSON answer");
    let id = started["executionId"]
        .as_str()
        .unwrap_or_else(|| panic!("an execution id in {started}"))
        .to_string();
    let start = t.elapsed();
    let t = Instant::now();
    let outcome: Value = client
        .get(format!("{wait}/v1/executions/{id}/wait?timeoutMs=300000"))
        .send()
        .await
        .expect("GET wait")
        .json()
        .await
        .expect("a JSON answer");
    (id, outcome, (start, t.elapsed()))
}

/// Sequential start → completed, after `warm_up`: sorted (total, start, wait).
async fn sequential(
    client: &reqwest::Client,
    start: &str,
    wait: &str,
    warm_up: usize,
    rounds: usize,
) -> [Vec<Duration>; 3] {
    for _ in 0..warm_up {
        timed_start_and_wait(client, start, wait).await;
    }
    let mut times: [Vec<Duration>; 3] = Default::default();
    for _ in 0..rounds {
        let t = Instant::now();
        let (_, outcome, (start, wait)) = timed_start_and_wait(client, start, wait).await;
        times[0].push(t.elapsed());
        times[1].push(start);
        times[2].push(wait);
        assert_eq!(outcome["status"], "completed", "{outcome}");
    }
    for t in &mut times {
        t.sort();
    }
    times
}

/// `CONCURRENT` executions at once (`IN_FLIGHT` requests at most), the i-th started on
/// `pairs[i % len].0` and waited for on `.1`: (wall time, ids, how many completed).
async fn concurrent(client: &reqwest::Client, pairs: &[(String, String)]) -> Concurrent {
    let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let t = Instant::now();
    let tasks: Vec<_> = (0..CONCURRENT)
        .map(|i| {
            let client = client.clone();
            let (start, wait) = pairs[i % pairs.len()].clone();
            let gate = gate.clone();
            tokio::spawn(async move {
                let _permit = gate.acquire_owned().await.unwrap();
                let (id, outcome, _) = timed_start_and_wait(&client, &start, &wait).await;
                (id, outcome)
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
    Concurrent {
        wall: t.elapsed(),
        ids,
        completed,
        in_db: 0,
    }
}

struct Concurrent {
    wall: Duration,
    ids: Vec<String>,
    completed: usize,
    /// Of `ids`, how many the database holds in a terminal status.
    in_db: usize,
}

impl Concurrent {
    /// Counts `ids` in a terminal status in `store`.
    fn check(&mut self, runtime: &tokio::runtime::Runtime, store: &ExecutionStore) {
        let records = runtime
            .block_on(store.list(&ExecutionFilter {
                limit: Some(100_000),
                ..Default::default()
            }))
            .unwrap();
        let terminal: std::collections::HashSet<&str> = records
            .iter()
            .filter(|r| r.status.is_terminal())
            .map(|r| r.execution_id.as_str())
            .collect();
        self.in_db = self
            .ids
            .iter()
            .filter(|id| terminal.contains(id.as_str()))
            .count();
    }
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

/// Part 1's figures, also shown beside part 2's.
struct Sqlite {
    times: [Vec<Duration>; 3],
    load: Concurrent,
}

/// Part 1: on a SQLite file; prints its table.
fn sqlite(runtime: &tokio::runtime::Runtime, dir: &std::path::Path) -> Sqlite {
    let db = dir.join("state.db");
    let server = Serve::start(dir, db.as_os_str(), &[]);
    let (times, mut load) = runtime.block_on(async {
        let client = reqwest::Client::new();
        let times = sequential(&client, &server.url, &server.url, WARM_UP, ROUNDS).await;
        let pairs = [(server.url.clone(), server.url.clone())];
        (times, concurrent(&client, &pairs).await)
    });
    let (managed_p50, direct_p50) = runtime.block_on(in_process(dir));
    load.check(
        runtime,
        &ExecutionStore::open(&db).expect("open the database"),
    );
    drop(server);

    let [latencies, starts, waits] = &times;
    println!("On a SQLite file (`--db FILE`):\n");
    println!("| measure | value |");
    println!("|---|---:|");
    println!(
        "| start → completed, `1 + 1` script, p50 ({ROUNDS} sequential, warm runners) | {} |",
        ms(percentile(latencies, 0.5))
    );
    println!(
        "| start → completed, p90 | {} |",
        ms(percentile(latencies, 0.9))
    );
    println!(
        "| start → completed, p99 | {} |",
        ms(percentile(latencies, 0.99))
    );
    println!(
        "| … of which `POST /v1/executions` (the start), p50 | {} |",
        ms(percentile(starts, 0.5))
    );
    println!(
        "| … of which `GET …/wait` (until the outcome), p50 | {} |",
        ms(percentile(waits, 0.5))
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
        ms(load.wall)
    );
    println!(
        "| {CONCURRENT} concurrent executions: executions per second | {} |",
        per_second(CONCURRENT, load.wall)
    );
    println!(
        "| {CONCURRENT} concurrent executions: completed | {} / {CONCURRENT} |",
        load.completed
    );
    println!(
        "| {CONCURRENT} concurrent executions: in the database, terminal | {} / {CONCURRENT} |",
        load.in_db
    );
    println!();
    Sqlite { times, load }
}

/// Part 2: one replica on PostgreSQL, beside part 1; prints its table.
fn postgres(
    runtime: &tokio::runtime::Runtime,
    dir: &std::path::Path,
    url: &str,
    sqlite: &Sqlite,
) -> Concurrent {
    let server = Serve::start(dir, url.as_ref(), &["--replica-name", "only"]);
    let (times, mut load) = runtime.block_on(async {
        let client = reqwest::Client::new();
        let times = sequential(&client, &server.url, &server.url, WARM_UP, ROUNDS).await;
        let pairs = [(server.url.clone(), server.url.clone())];
        (times, concurrent(&client, &pairs).await)
    });
    load.check(runtime, &reader(url));
    drop(server);

    println!("On PostgreSQL (`--db postgres://…`, one replica), beside the SQLite file:\n");
    println!("| measure | SQLite | PostgreSQL |");
    println!("|---|---:|---:|");
    let row = |what: &str, i: usize, p: f64| {
        println!(
            "| {what} | {} | {} |",
            ms(percentile(&sqlite.times[i], p)),
            ms(percentile(&times[i], p))
        );
    };
    row(
        &format!("start → completed, p50 ({ROUNDS} sequential, warm runners)"),
        0,
        0.5,
    );
    row("start → completed, p90", 0, 0.9);
    row("start → completed, p99", 0, 0.99);
    row("… of which `POST /v1/executions` (the start), p50", 1, 0.5);
    row("… of which `GET …/wait` (until the outcome), p50", 2, 0.5);
    println!(
        "| {CONCURRENT} concurrent executions: wall time | {} | {} |",
        ms(sqlite.load.wall),
        ms(load.wall)
    );
    println!(
        "| {CONCURRENT} concurrent executions: executions per second | {} | {} |",
        per_second(CONCURRENT, sqlite.load.wall),
        per_second(CONCURRENT, load.wall)
    );
    println!(
        "| {CONCURRENT} concurrent executions: completed / in the database, terminal | {} / {} | {} / {} |",
        sqlite.load.completed, sqlite.load.in_db, load.completed, load.in_db
    );
    println!();
    load
}

/// Part 3: two replicas on one PostgreSQL database; prints its table.
fn two_replicas(
    runtime: &tokio::runtime::Runtime,
    dirs: [&std::path::Path; 2],
    url: &str,
) -> Concurrent {
    let a = Serve::start(dirs[0], url.as_ref(), &["--replica-name", "a"]);
    let b = Serve::start(dirs[1], url.as_ref(), &["--replica-name", "b"]);
    let (a_url, b_url) = (a.url.clone(), b.url.clone());
    let (same, cross, mut load) = runtime.block_on(async {
        let client = reqwest::Client::new();
        // Half the rounds each way, so both replicas start and wait alike.
        let half = ROUNDS / 2;
        let mut same = sequential(&client, &a_url, &a_url, WARM_UP / 2, half).await;
        let more = sequential(&client, &b_url, &b_url, WARM_UP / 2, half).await;
        let mut cross = sequential(&client, &a_url, &b_url, WARM_UP / 2, half).await;
        let others = sequential(&client, &b_url, &a_url, WARM_UP / 2, half).await;
        for (all, part) in same
            .iter_mut()
            .zip(more)
            .chain(cross.iter_mut().zip(others))
        {
            all.extend(part);
            all.sort();
        }
        // Started on a, b, a, b…; waited for on the same replica, then on the other, in pairs.
        let pairs = [
            (a_url.clone(), a_url.clone()),
            (b_url.clone(), b_url.clone()),
            (a_url.clone(), b_url.clone()),
            (b_url.clone(), a_url.clone()),
        ];
        (same, cross, concurrent(&client, &pairs).await)
    });
    load.check(runtime, &reader(url));
    drop((a, b));

    println!("Two replicas (`--replica-name a`, `b`) on one PostgreSQL database:\n");
    println!("| measure | waited for on the replica that started it | on the other replica |");
    println!("|---|---:|---:|");
    let row = |what: &str, i: usize, p: f64| {
        println!(
            "| {what} | {} | {} |",
            ms(percentile(&same[i], p)),
            ms(percentile(&cross[i], p))
        );
    };
    row(
        &format!("start → completed, p50 ({ROUNDS} sequential each, started on a and b alike)"),
        0,
        0.5,
    );
    row("start → completed, p90", 0, 0.9);
    row("start → completed, p99", 0, 0.99);
    row("… of which `POST /v1/executions` (the start), p50", 1, 0.5);
    row("… of which `GET …/wait` (until the outcome), p50", 2, 0.5);
    println!();
    println!("| {CONCURRENT} concurrent executions, started on a and b in turn, half waited for on the other replica | value |");
    println!("|---|---:|");
    println!("| wall time | {} |", ms(load.wall));
    println!(
        "| executions per second | {} |",
        per_second(CONCURRENT, load.wall)
    );
    println!("| completed | {} / {CONCURRENT} |", load.completed);
    println!(
        "| in the database, terminal | {} / {CONCURRENT} |",
        load.in_db
    );
    println!();
    load
}

/// The PostgreSQL store at `url`, to read (not as a replica).
fn reader(url: &str) -> ExecutionStore {
    let location = StoreLocation::parse(url).expect("a PostgreSQL URL");
    ExecutionStore::open_reader(&location).expect("open the database")
}

fn main() {
    // reqwest's rustls (linked through the `mcp` feature) needs a provider: ring.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir =
        std::env::temp_dir().join(format!("execbox-bench-capabilities-{}", std::process::id()));
    let dirs = [dir.join("sqlite"), dir.join("a"), dir.join("b")];
    for d in &dirs {
        project(d);
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let sqlite = sqlite(&runtime, &dirs[0]);
    let mut checked = vec![&sqlite.load];
    let pg = execbox_pg::testing::TestServer::start();
    let (one, two) = match &pg {
        Ok(pg) => (
            Some(postgres(&runtime, &dirs[1], &pg.database("one"), &sqlite)),
            Some(two_replicas(
                &runtime,
                [&dirs[1], &dirs[2]],
                &pg.database("two"),
            )),
        ),
        Err(e) => {
            println!("No PostgreSQL figures (one replica, two replicas): cannot start a PostgreSQL server here: {e}");
            (None, None)
        }
    };
    checked.extend(one.iter().chain(two.iter()));
    drop(pg);
    let _ = std::fs::remove_dir_all(&dir);
    for load in checked {
        assert_eq!(
            load.in_db, CONCURRENT,
            "every execution must be in the database in a terminal status"
        );
    }
}
