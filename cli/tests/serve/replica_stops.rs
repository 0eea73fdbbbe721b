//! Stops across `execbox serve` replicas sharing a real PostgreSQL: an execution owned by
//! one replica and stopped through the other is `stopped` within 5 s, and its program did
//! not run to its end, whatever state it was in (just started, running, just resumed after
//! an approval, being resumed at that very moment), in both directions, with the CPU loaded,
//! and when the stop's notification is lost (the owner reads the table).
//!
//! The short version (10 stops) runs with the other tests; `EXECBOX_STRESS=1` runs 100
//! stops with two busy loops holding the cores (docs/benchmarks.md).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use execbox_pg::testing::TestServer;
use reqwest::StatusCode;
use serde_json::{json, Value};

use super::support::capabilities::{alive, Roots, Server};
use super::{client, json_of, script_yaml};

/// How long a stop of another replica's execution may take, from the request to the answer.
const STOP_BOUND: Duration = Duration::from_secs(5);

/// How long a stop whose notification was lost may take: the owner reads the table every
/// second (its heartbeat, every 5 s by default, is not what brings it).
const LOST_STOP_BOUND: Duration = Duration::from_secs(3);

/// How long the programs would run if nothing stopped them.
const NAP_SECS: u64 = 30;

/// A project with `nap` (an external executor sleeping [`NAP_SECS`]) and `gated` (a script
/// whose one tool call, sleeping as long, needs approval). Each writes
/// `marks/EXECUTION_ID.pid` when it starts sleeping and `marks/EXECUTION_ID.ended` if it
/// ever wakes up.
fn project(name: &str) -> (Roots, PathBuf) {
    let roots = Roots::new(name);
    let marks = roots.temp.join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let sleeper = format!(
        "cat >/dev/null\necho $$ > '{dir}/'\"$EXECBOX_EXECUTION_ID\".pid\nsleep {NAP_SECS}\ntouch '{dir}/'\"$EXECBOX_EXECUTION_ID\".ended\necho '{{}}'\n",
        dir = marks.display()
    );
    roots.project.sh_executor("napper", &["nap"], &sleeper);
    roots
        .project
        .capability("nap", "name: nap\ntype: nap\ntimeout_ms: 600000\n", &[]);
    let dir = roots.project.capability(
        "gated",
        &script_yaml("gated", "tools: tools.yaml\ntimeout_ms: 600000\n"),
        &[("index.js", "await slow.send({ to: 'bob' })")],
    );
    let tools = json!({
        "version": 1,
        "providers": {"slow": {"tools": {"send": {
            "command": "/bin/sh",
            "args": ["-c", sleeper.replace("echo '{}'", "echo '{\"sent\": true}'"), "send"],
            "requires_approval": true,
        }}}}
    });
    std::fs::write(dir.join("tools.yaml"), tools.to_string()).unwrap();
    (roots, marks)
}

fn replica(roots: &Roots, db: &str, name: &str) -> Server {
    let project = roots.project_dir();
    Server::start(
        roots.temp.path(),
        &roots.global.0,
        &[
            "--project",
            project.to_str().unwrap(),
            "--db",
            db,
            "--replica-name",
            name,
        ],
    )
}

/// Two busy loops holding the cores until dropped (at most `limit`).
struct Load(Arc<AtomicBool>);

impl Load {
    fn start(threads: usize, limit: Duration) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        for _ in 0..threads {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let until = Instant::now() + limit;
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) && Instant::now() < until {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            });
        }
        Load(stop)
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The state an execution is in when the other replica is asked to stop it.
#[derive(Clone, Copy, Debug)]
enum When {
    /// At once after its start was answered (`starting`, or just `running`).
    Started,
    /// Once its program sleeps.
    Running,
    /// At once after its approval was answered (resumed, `running` again).
    Resumed,
    /// While the owner is approving it: the stop and the approval race.
    Resuming,
}

const WHENS: [When; 4] = [When::Started, When::Running, When::Resumed, When::Resuming];

/// A POST with `body` (none when null), answered within 120 s.
async fn post(client: &reqwest::Client, url: String, body: Value) -> (StatusCode, Value) {
    let request = match body {
        Value::Null => client.post(url),
        body => client.post(url).json(&body),
    };
    let sent = tokio::time::timeout(Duration::from_secs(120), request.send())
        .await
        .expect("an answer within 120 s")
        .unwrap();
    json_of(sent).await
}

async fn start(client: &reqwest::Client, server: &Server, capability: &str) -> String {
    let (status, body) = post(
        client,
        server.at("/v1/executions"),
        json!({"capability": capability}),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    body["executionId"].as_str().unwrap().to_string()
}

/// The pid in `marks/ID.pid`, once its program wrote it (at most 20 s).
async fn pid_of(marks: &Path, id: &str) -> u32 {
    let file = marks.join(format!("{id}.pid"));
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(pid) = std::fs::read_to_string(&file)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            return pid;
        }
        assert!(Instant::now() < until, "{id} never slept");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Whether process `pid` is gone within 5 s.
async fn gone(pid: u32) -> bool {
    let until = Instant::now() + Duration::from_secs(5);
    while alive(pid) {
        if Instant::now() > until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}

/// Waits (at most 60 s) until `id` pauses for approval.
async fn paused(client: &reqwest::Client, server: &Server, id: &str) {
    let sent = client
        .get(server.at(&format!("/v1/executions/{id}/wait?timeoutMs=60000")))
        .send()
        .await
        .unwrap();
    let (status, outcome) = json_of(sent).await;
    assert_eq!(status, StatusCode::OK, "{outcome}");
    assert_eq!(outcome["status"], "awaiting_approval", "{outcome}");
}

/// The number of the call `id` waits on (`pendingApproval.call`), as `server` shows it.
async fn pending_call(client: &reqwest::Client, server: &Server, id: &str) -> Value {
    let sent = client
        .get(server.at(&format!("/v1/executions/{id}")))
        .send()
        .await
        .unwrap();
    let (_, record) = json_of(sent).await;
    let call = record["pendingApproval"]["call"].clone();
    assert!(call.is_u64(), "{id} waits on no call: {record}");
    call
}

/// Approves call `call` of `id` through `server`.
async fn approve(
    client: &reqwest::Client,
    server: &Server,
    id: &str,
    call: Value,
) -> (StatusCode, Value) {
    let url = server.at(&format!("/v1/executions/{id}/approve"));
    post(client, url, json!({ "call": call })).await
}

/// One execution started on `owner` in the state `when`, stopped through `other`: the stop
/// is answered within [`STOP_BOUND`] with `stopped`, and the program is gone and never woke.
/// Returns how long the stop took.
async fn stop_across(
    client: &reqwest::Client,
    (owner, owner_name): (&Server, &str),
    other: &Server,
    marks: &Path,
    when: When,
) -> Duration {
    let capability = match when {
        When::Started | When::Running => "nap",
        When::Resumed | When::Resuming => "gated",
    };
    let id = start(client, owner, capability).await;
    let stop_url = other.at(&format!("/v1/executions/{id}/stop"));
    let asked;
    let (status, stopped) = match when {
        When::Started => {
            asked = Instant::now();
            post(client, stop_url, Value::Null).await
        }
        When::Running => {
            pid_of(marks, &id).await;
            asked = Instant::now();
            post(client, stop_url, Value::Null).await
        }
        When::Resumed => {
            paused(client, owner, &id).await;
            let call = pending_call(client, owner, &id).await;
            let (status, body) = approve(client, owner, &id, call).await;
            assert_eq!(status, StatusCode::OK, "{body}");
            assert_eq!(body["status"], "running", "{body}");
            assert_eq!(body["replica"], owner_name, "{body}");
            asked = Instant::now();
            post(client, stop_url, Value::Null).await
        }
        When::Resuming => {
            paused(client, owner, &id).await;
            let call = pending_call(client, owner, &id).await;
            asked = Instant::now();
            let (approved, stopped) = tokio::join!(
                approve(client, owner, &id, call),
                post(client, stop_url, Value::Null)
            );
            // Either the approval came first (and the owner then stopped it) or the stop
            // did (and the approval found nothing awaiting it).
            assert!(
                approved.0 == StatusCode::OK || approved.0 == StatusCode::CONFLICT,
                "{approved:?}"
            );
            stopped
        }
    };
    let took = asked.elapsed();
    assert_eq!(status, StatusCode::OK, "{when:?} {id}: {stopped}");
    assert_eq!(
        stopped["status"], "stopped",
        "{when:?} {id} of {owner_name}, stop answered after {took:?}: {stopped}"
    );
    assert!(
        took < STOP_BOUND,
        "{when:?} {id} of {owner_name}: the stop took {took:?}"
    );
    // Its program (if it had started) is gone, and never woke up.
    if let Some(pid) = std::fs::read_to_string(marks.join(format!("{id}.pid")))
        .ok()
        .and_then(|t| t.trim().parse::<u32>().ok())
    {
        assert!(
            gone(pid).await,
            "{when:?} {id}: its program {pid} still runs 5 s after it was stopped"
        );
    }
    assert!(
        !marks.join(format!("{id}.ended")).exists(),
        "{when:?} {id}: its program ran to its end"
    );
    took
}

/// `stops` stops, half of A's executions through B and half of B's through A, in every
/// state of [`When`] in turn, two at a time (one each way).
async fn stops_across_replicas(name: &str, stops: usize) {
    let Some(pg) = TestServer::start_or_skip() else {
        return;
    };
    let db = pg.database(name);
    let (roots_a, marks_a) = project(&format!("{name}-a"));
    let (roots_b, marks_b) = project(&format!("{name}-b"));
    let a = replica(&roots_a, &db, "a");
    let b = replica(&roots_b, &db, "b");
    let client = client();
    let mut took = Vec::with_capacity(stops);
    for round in 0..stops.div_ceil(2) {
        let when = WHENS[round % WHENS.len()];
        // The other way round every other round, so each state is tried in both directions.
        let other_when = WHENS[(round + round / WHENS.len()) % WHENS.len()];
        let (ab, ba) = tokio::join!(
            stop_across(&client, (&a, "a"), &b, &marks_a, when),
            stop_across(&client, (&b, "b"), &a, &marks_b, other_when)
        );
        took.push(ab);
        took.push(ba);
    }
    took.sort();
    eprintln!(
        "{} stops across replicas: median {:?}, slowest {:?}",
        took.len(),
        took[took.len() / 2],
        took[took.len() - 1]
    );
    // Nothing woke up later either.
    for marks in [&marks_a, &marks_b] {
        let ended: Vec<_> = std::fs::read_dir(marks)
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().ends_with(".ended"))
            .collect();
        assert!(ended.is_empty(), "{ended:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_stops_across_replicas_each_way_in_every_state_are_applied_within_5_s() {
    stops_across_replicas("stops_short", 10).await;
}

/// `EXECBOX_STRESS=1`: 100 stops with two busy loops holding the cores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_stops_across_replicas_under_load_are_applied_within_5_s() {
    if std::env::var_os("EXECBOX_STRESS").is_none_or(|v| v != "1") {
        eprintln!("skipped: set EXECBOX_STRESS=1 to run 100 stops across replicas under load");
        return;
    }
    let _load = Load::start(2, Duration::from_secs(600));
    stops_across_replicas("stops_stress", 100).await;
}

/// `id`'s status as `server` reads it.
async fn status_of(client: &reqwest::Client, server: &Server, id: &str) -> String {
    let sent = client
        .get(server.at(&format!("/v1/executions/{id}")))
        .send()
        .await
        .unwrap();
    let (status, record) = json_of(sent).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    record["status"].as_str().unwrap().to_string()
}

/// Waits until `id` is `stopped` as `server` reads it: how long that took, at most `bound`.
async fn stopped_within(
    client: &reqwest::Client,
    server: &Server,
    id: &str,
    since: Instant,
    bound: Duration,
) -> Duration {
    loop {
        let status = status_of(client, server, id).await;
        if status == "stopped" {
            return since.elapsed();
        }
        assert!(
            since.elapsed() < bound,
            "{id} is still {status} {:?} after its stop was asked",
            since.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The table is the truth: a stop request recorded with no notification at all (as if it
/// was lost), and one whose notification the owner cannot hear (its listening connection
/// was just cut), are applied within 3 s and 5 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_whose_notification_is_lost_is_applied_from_the_table_within_5_s() {
    let Some(pg) = TestServer::start_or_skip() else {
        return;
    };
    let db = pg.database("stops_lost");
    let (roots_a, marks_a) = project("stops-lost-a");
    let (roots_b, _) = project("stops-lost-b");
    let a = replica(&roots_a, &db, "a");
    let b = replica(&roots_b, &db, "b");
    let client = client();
    let direct = execbox_pg::Pg::new(
        &execbox_pg::PgUrl::parse(&db).unwrap(),
        execbox_pg::PoolOptions {
            max_size: 1,
            ..Default::default()
        },
    )
    .unwrap();

    // Recorded, never notified: A finds it in the table. Three in a row, each asked right
    // after the one before was applied, so that none of them can count on a look at the
    // table that happened to be due.
    for _ in 0..3 {
        let id = start(&client, &a, "nap").await;
        let pid = pid_of(&marks_a, &id).await;
        let asked = Instant::now();
        let marked = {
            let id = id.clone();
            direct
                .run(move |c| async move {
                    c.execute(
                        "UPDATE executions SET stop_requested_ms = 1 WHERE id = $1",
                        &[&id],
                    )
                    .await
                })
                .await
                .unwrap()
        };
        assert_eq!(marked, 1);
        let took = stopped_within(&client, &b, &id, asked, LOST_STOP_BOUND).await;
        eprintln!("a stop recorded without a notification was applied in {took:?}");
        assert!(gone(pid).await, "{id}: its program {pid} still runs");
    }

    // Asked through B while A's listening connection is cut: its notification is lost,
    // and A reads the table when it listens again (or at its next look).
    let id = start(&client, &a, "nap").await;
    pid_of(&marks_a, &id).await;
    let cut = direct
        .run(|c| async move {
            c.query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN%' AND datname = current_database()",
                &[],
            )
            .await
        })
        .await
        .unwrap();
    assert!(!cut.is_empty(), "no listening connection to cut");
    let asked = Instant::now();
    let (status, stopped) = post(
        &client,
        b.at(&format!("/v1/executions/{id}/stop")),
        Value::Null,
    )
    .await;
    let took = asked.elapsed();
    assert_eq!(status, StatusCode::OK, "{stopped}");
    assert_eq!(stopped["status"], "stopped", "after {took:?}: {stopped}");
    assert!(took < STOP_BOUND, "the stop took {took:?}");
    assert!(!marks_a.join(format!("{id}.ended")).exists());
}
