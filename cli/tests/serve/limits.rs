//! `execbox serve` under load from one caller: the bounds on executions running at once (per
//! principal, per tree of nested executions), the cap on `timeoutMs`, time spent waiting for
//! a pooled runner counted against the time limit, and nested scripts sharing the pool rather
//! than starting a runner process each. A real server, real runners, a real HTTP client.

use super::{client, json_of, script_yaml, serve, sha256_hex, wait_running};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::capabilities::{Roots, Server};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// The pool size `Server::start` gives every server.
const POOL: usize = 2;

/// A project with `hold` (a script that never settles: it holds its runner until its time
/// limit) and `add`.
fn project(name: &str) -> Roots {
    let roots = Roots::new(name);
    roots.project.capability(
        "hold",
        &script_yaml("hold", "timeout_ms: 60000\n"),
        &[("index.js", "await new Promise(() => {})")],
    );
    roots.project.capability(
        "add",
        &script_yaml("add", ""),
        &[("index.js", "({ sum: params.a + params.b })")],
    );
    roots
}

/// `POST /v1/executions` with `body`, as the holder of `token` if any.
async fn start(
    client: &reqwest::Client,
    server: &Server,
    token: Option<&str>,
    body: Value,
) -> (StatusCode, Value) {
    let mut request = client.post(server.at("/v1/executions")).json(&body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    json_of(request.send().await.unwrap()).await
}

/// Waits (up to 60 s) for an execution to end and returns its outcome.
async fn outcome(client: &reqwest::Client, server: &Server, id: &str) -> Value {
    let (status, outcome) = json_of(
        client
            .get(server.at(&format!("/v1/executions/{id}/wait?timeoutMs=60000")))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{id} did not end: {outcome}");
    outcome
}

/// The live `execbox runner` processes the server started.
fn runners_of(server: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| crate::support::process::parent(pid) == Some(server))
        .filter(|&pid| !crate::support::process::is_dead(pid))
        .filter(|&pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|&b| b == 0).any(|arg| arg == b"runner"))
        })
        .collect()
}

/// Watches the server's runner processes in a thread until dropped: the most alive at once,
/// and every one seen.
struct RunnerWatch {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<(usize, BTreeSet<u32>)>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RunnerWatch {
    fn new(server: u32) -> RunnerWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new((0, BTreeSet::new())));
        let thread = std::thread::spawn({
            let (stop, seen) = (stop.clone(), seen.clone());
            move || {
                while !stop.load(Ordering::Relaxed) {
                    let now = runners_of(server);
                    let mut seen = seen.lock().unwrap();
                    seen.0 = seen.0.max(now.len());
                    seen.1.extend(now);
                    drop(seen);
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
        });
        RunnerWatch {
            stop,
            seen,
            thread: Some(thread),
        }
    }

    /// (the most alive at once, how many distinct ones) so far, after a last look.
    fn finish(mut self) -> (usize, usize) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().unwrap();
        }
        let seen = self.seen.lock().unwrap();
        (seen.0, seen.1.len())
    }
}

/// M1: the executions of one principal are bounded well below the server's bound, so when
/// alice runs all hers, bob and an admin still start theirs; her next start gets a 429 that
/// names the bound, her count and the flag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_principal_at_its_bound_cannot_starve_another_or_an_admin() {
    let roots = project("limits-principal");
    let policy = roots.temp.join("policy.yaml");
    std::fs::write(
        &policy,
        format!(
            "version: 1\nprincipals:\n  alice: {{ token_sha256: [{}] }}\n  bob: {{ token_sha256: [{}] }}\n  root: {{ permissions: ['executions:admin'], token_sha256: [{}] }}\n",
            sha256_hex("alice-token"),
            sha256_hex("bob-token"),
            sha256_hex("root-token"),
        ),
    )
    .unwrap();
    let audit = roots.temp.join("audit.jsonl");
    let server = serve(
        &roots,
        &[
            "--policy",
            policy.to_str().unwrap(),
            "--audit-log",
            audit.to_str().unwrap(),
            "--max-live-per-principal",
            "3",
        ],
    );
    let client = client();
    let hold = json!({"capability": "hold", "timeoutMs": 60000});
    for _ in 0..3 {
        let (status, body) = start(&client, &server, Some("alice-token"), hold.clone()).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    }
    let (status, body) = start(&client, &server, Some("alice-token"), hold.clone()).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["error"]["code"], "TOO_MANY_EXECUTIONS");
    let message = body["error"]["message"].as_str().unwrap();
    for part in [
        "principal `alice`",
        "3 executions",
        "--max-live-per-principal",
        "stop",
    ] {
        assert!(message.contains(part), "{part:?} not in {message:?}");
    }
    // Audited as a refusal, not as a start.
    let refusals: Vec<Value> = std::fs::read_to_string(&audit)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .filter(|e: &Value| e["event"] == "capability_started" && !e["outcome"].is_null())
        .collect();
    assert_eq!(refusals.len(), 1, "{refusals:?}");
    assert_eq!(refusals[0]["outcome"], "rate_limited");
    assert_eq!(refusals[0]["principal"], "alice");
    for token in ["bob-token", "root-token"] {
        let (status, body) = start(&client, &server, Some(token), hold.clone()).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{token}: {body}");
    }
    // Once one of alice's ends, she may start again.
    let (_, list) = json_of(
        client
            .get(server.at("/v1/executions?status=running"))
            .bearer_auth("alice-token")
            .send()
            .await
            .unwrap(),
    )
    .await;
    let hers = list["executions"][0]["executionId"].as_str().unwrap();
    let (status, _) = json_of(
        client
            .post(server.at(&format!("/v1/executions/{hers}/stop")))
            .bearer_auth("alice-token")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = start(&client, &server, Some("alice-token"), hold).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
}

/// M1: a time limit above the server's cap (`--max-timeout`, 15 minutes by default) is
/// refused with a 400 naming the field, the value and the cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_time_limit_above_the_server_s_cap_is_refused() {
    let roots = project("limits-timeout");
    let server = serve(&roots, &[]);
    let client = client();
    let day = json!({"capability": "add", "params": {"a": 1, "b": 2}, "timeoutMs": 86_400_000});
    let (status, body) = start(&client, &server, None, day).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["code"], "INVALID_REQUEST");
    let message = body["error"]["message"].as_str().unwrap();
    for part in ["timeoutMs", "86400000", "900000", "--max-timeout"] {
        assert!(message.contains(part), "{part:?} not in {message:?}");
    }
    let within = json!({"capability": "add", "params": {"a": 1, "b": 2}, "timeoutMs": 900_000});
    let (status, body) = start(&client, &server, None, within).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let id = body["executionId"].as_str().unwrap();
    assert_eq!(
        outcome(&client, &server, id).await["result"],
        json!({"sum": 3})
    );

    let roots = project("limits-timeout-flag");
    let server = serve(&roots, &["--max-timeout", "5s"]);
    let (status, body) = start(
        &client,
        &server,
        None,
        json!({"capability": "add", "params": {"a": 1, "b": 2}, "timeoutMs": 5001}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("5000"));
}

/// M1: the time limit runs from when the execution was accepted, including the wait for a
/// pooled runner: with both runners held by alice, bob's 2 s execution ends `timeout` after
/// about 2 s, saying it waited for a runner, rather than running whenever a runner frees up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_a_pooled_runner_counts_against_the_time_limit() {
    let roots = project("limits-queue");
    let server = serve(&roots, &[]);
    let client = client();
    for _ in 0..POOL {
        let (status, body) = start(
            &client,
            &server,
            None,
            json!({"capability": "hold", "timeoutMs": 60000}),
        )
        .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        wait_running(&client, &server, body["executionId"].as_str().unwrap()).await;
    }
    // Running, and so (a moment later) holding a runner each.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let asked = Instant::now();
    let (status, body) = start(
        &client,
        &server,
        None,
        json!({"capability": "add", "params": {"a": 1, "b": 2}, "timeoutMs": 2000}),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let id = body["executionId"].as_str().unwrap().to_string();
    let (status, outcome) = json_of(
        client
            .get(server.at(&format!("/v1/executions/{id}/wait?timeoutMs=15000")))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let took = asked.elapsed();
    assert_eq!(status, StatusCode::OK, "still {outcome} after {took:?}");
    assert!(
        took < Duration::from_secs(6),
        "ended {took:?} after its start"
    );
    assert_eq!(outcome["status"], "timeout", "{outcome}");
    assert_eq!(outcome["error"]["code"], "EXECUTION_TIMEOUT");
    let message = outcome["error"]["message"].as_str().unwrap();
    for part in ["waited", "2000 ms", "runner", "never ran"] {
        assert!(message.contains(part), "{part:?} not in {message:?}");
    }
}

/// M1 and M5: one request fanning out `capabilities.run` gets at most `--max-live-per-tree`
/// executions in its tree (the rest are refused, each with a clear error), and so no more
/// runner processes than the pool plus that bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fan_out_of_nested_capabilities_stops_at_the_tree_bound_and_its_runners() {
    const TREE: usize = 4;
    let roots = project("limits-tree");
    roots.project.capability(
        "fan",
        &script_yaml("fan", ""),
        &[(
            "index.js",
            "const runs = [];\n\
             for (let i = 0; i < 12; i++) {\n\
               runs.push(capabilities.run({ name: 'hold', timeoutMs: 4000 }).then(() => 'ok', (e) => String((e && e.message) || e)));\n\
             }\n\
             return await Promise.all(runs);",
        )],
    );
    let server = serve(&roots, &["--max-live-per-tree", &TREE.to_string()]);
    let client = client();
    let watch = RunnerWatch::new(server.child.id());
    let (status, body) = start(
        &client,
        &server,
        None,
        json!({"capability": "fan", "timeoutMs": 30000}),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let id = body["executionId"].as_str().unwrap().to_string();
    let outcome = outcome(&client, &server, &id).await;
    let (most, _) = watch.finish();
    assert_eq!(outcome["status"], "completed", "{outcome}");
    let results: Vec<&str> = outcome["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    let refused: Vec<&&str> = results
        .iter()
        .filter(|r| r.contains("TOO_MANY_EXECUTIONS"))
        .collect();
    // The fan-out itself is one of the tree's executions.
    assert_eq!(refused.len(), 12 - (TREE - 1), "{results:#?}");
    let tree = format!("the tree of execution {id}");
    for part in [
        tree.as_str(),
        "--max-live-per-tree",
        "wait for a nested capability to end",
    ] {
        assert!(refused[0].contains(part), "{part:?} not in {}", refused[0]);
    }
    assert!(
        most <= POOL + TREE,
        "{most} runner processes at once, more than the pool ({POOL}) and the tree bound ({TREE})"
    );
}

/// M5: nested scripts run on the pool's runners: nested capabilities run one after another
/// (each a moment long, so that a runner process of their own would be seen) start no runner
/// process of their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_capabilities_reuse_the_pooled_runners() {
    let roots = project("limits-reuse");
    let nap = roots.project.capability(
        "nap",
        &script_yaml("nap", "tools: tools.yaml\n"),
        &[("index.js", "await t.nap({})")],
    );
    crate::support::scripts::inline_tool(&nap, "nap", "cat >/dev/null; sleep 0.2; echo 1", "");
    roots.project.capability(
        "chain",
        &script_yaml("chain", ""),
        &[(
            "index.js",
            "let n = 0;\nfor (let i = 0; i < 10; i++) n += await capabilities.run({ name: 'nap' });\nn",
        )],
    );
    let server = serve(&roots, &[]);
    let client = client();
    // The pool's runners, once started.
    let ready = Instant::now();
    while runners_of(server.child.id()).len() < POOL && ready.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let watch = RunnerWatch::new(server.child.id());
    let (status, body) = start(&client, &server, None, json!({"capability": "chain"})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let outcome = outcome(&client, &server, body["executionId"].as_str().unwrap()).await;
    let (_, distinct) = watch.finish();
    assert_eq!(outcome["result"], 10, "{outcome}");
    assert!(
        distinct <= POOL + 1,
        "{distinct} runner processes ran for one execution and its 10 nested ones, on a pool of {POOL}"
    );
}
