//! `execbox serve` replicas sharing a real PostgreSQL that the test starts: each sees and
//! stops the other's executions, a SIGKILLed one has its executions failed by the other, and
//! the database restarted under load is survived.

use std::time::{Duration, Instant};

use execbox_pg::testing::TestServer;
use reqwest::StatusCode;
use serde_json::{json, Value};

use super::support::capabilities::{gone_within, read_pid, Roots, Server};
use super::{client, json_of, project, wait_running};

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

async fn start(client: &reqwest::Client, server: &Server, body: Value) -> String {
    let (status, body) = json_of(
        client
            .post(server.at("/v1/executions"))
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    body["executionId"].as_str().unwrap().to_string()
}

async fn record(client: &reqwest::Client, server: &Server, id: &str) -> Value {
    let (status, body) = json_of(
        client
            .get(server.at(&format!("/v1/executions/{id}")))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_see_and_stop_each_others_executions_and_fail_a_killed_ones() {
    let Some(pg) = TestServer::start_or_skip() else {
        return;
    };
    let db = pg.database("replicas");
    // Two folders sharing nothing but the database.
    let (roots_a, roots_b) = (project("replica-a"), project("replica-b"));
    let mut a = replica(&roots_a, &db, "a");
    let b = replica(&roots_b, &db, "b");
    let client = client();
    let mut events_b = client.get(b.at("/v1/events")).send().await.unwrap();

    // Started on A: B waits for it (woken by a notification), reads it, lists it, hears it.
    let id = start(
        &client,
        &a,
        json!({"capability": "add", "params": {"a": 2, "b": 3}}),
    )
    .await;
    let (status, outcome) = json_of(
        client
            .get(b.at(&format!("/v1/executions/{id}/wait?timeoutMs=10000")))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{outcome}");
    assert_eq!(outcome["result"], json!({"sum": 5}));
    let seen = record(&client, &b, &id).await;
    assert_eq!(seen["status"], "completed");
    assert_eq!(seen["replica"], "a");
    let history: Vec<&str> = seen["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["status"].as_str().unwrap())
        .collect();
    assert_eq!(history, ["starting", "running", "completed"]);
    let (_, listed) = json_of(client.get(b.at("/v1/executions")).send().await.unwrap()).await;
    assert!(listed["executions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["executionId"] == id.as_str()));
    let mut heard = String::new();
    while !heard.contains("event: completed") {
        let chunk = tokio::time::timeout(Duration::from_secs(10), events_b.chunk())
            .await
            .expect("B hears A's events")
            .unwrap()
            .unwrap();
        heard.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(
        heard.contains(&format!("\"executionId\":\"{id}\"")),
        "{heard}"
    );

    // Running on A, stopped through B: A stops it (and its executor's processes) promptly.
    let sleeping = start(&client, &a, json!({"capability": "sleep"})).await;
    wait_running(&client, &a, &sleeping).await;
    let sleeper = read_pid(&roots_a.temp.join("pid"));
    let asked = Instant::now();
    let (status, stopped) = json_of(
        client
            .post(b.at(&format!("/v1/executions/{sleeping}/stop")))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{stopped}");
    assert_eq!(stopped["status"], "stopped", "{stopped}");
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "{:?}",
        asked.elapsed()
    );
    assert!(gone_within(sleeper, Duration::from_secs(2)));

    // The other way round: started on B, stopped through A.
    let sleeping = start(
        &client,
        &b,
        json!({"capability": "sleep", "parentId": "agent-9"}),
    )
    .await;
    wait_running(&client, &b, &sleeping).await;
    let (status, body) = json_of(
        client
            .post(a.at("/v1/executions/stop?parentId=agent-9"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["stopped"][0]["status"], "stopped", "{body}");

    // A dies (SIGKILL) mid-execution: B marks its execution failed within the default
    // replica timeout (30 s), and kills what it left running on this machine.
    let orphaned = start(&client, &a, json!({"capability": "sleep"})).await;
    wait_running(&client, &a, &orphaned).await;
    let sleeper = read_pid(&roots_a.temp.join("pid"));
    a.kill();
    let killed = Instant::now();
    let failed = loop {
        let seen = record(&client, &b, &orphaned).await;
        if seen["status"] == "failed" {
            break seen;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "still {} after 30 s",
            seen["status"]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        failed["error"]["message"], "interrupted: replica a stopped",
        "{failed}"
    );
    assert!(gone_within(sleeper, Duration::from_secs(5)));

    // The records are readable from the command line too, without joining as a replica.
    let output = std::process::Command::new(super::support::runners::EXECBOX)
        .args(["executions", "show", &orphaned, "--db", &db])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let shown: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(shown["status"], "failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_survives_the_database_restarting_under_load() {
    let Some(mut pg) = TestServer::start_or_skip() else {
        return;
    };
    let db = pg.database("restart");
    let roots = project("replica-restart");
    let server = replica(&roots, &db, "only");
    let client = client();
    let id = start(
        &client,
        &server,
        json!({"capability": "add", "params": {"a": 1, "b": 1}}),
    )
    .await;
    let (status, _) = json_of(
        client
            .get(server.at(&format!("/v1/executions/{id}/wait?timeoutMs=10000")))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);

    // Load while the database is killed: every request gets an answer (an error naming the
    // database while it is away), none hangs.
    let load = {
        let (client, url) = (client.clone(), server.url.clone());
        tokio::spawn(async move {
            let mut errors = Vec::new();
            let until = Instant::now() + Duration::from_secs(4);
            while Instant::now() < until {
                let response = tokio::time::timeout(
                    Duration::from_secs(15),
                    client
                        .post(format!("{url}/v1/executions"))
                        .json(&json!({"capability": "add", "params": {"a": 1, "b": 2}}))
                        .send(),
                )
                .await
                .expect("an answer, not a hang")
                .unwrap();
                if !response.status().is_success() {
                    errors.push(response.text().await.unwrap());
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            errors
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    tokio::task::block_in_place(|| pg.kill());
    tokio::time::sleep(Duration::from_secs(1)).await;
    tokio::task::block_in_place(|| pg.resume()).unwrap();
    let errors = load.await.unwrap();
    assert!(
        !errors.is_empty(),
        "no request failed while the database was down"
    );
    for e in &errors {
        assert!(e.contains("unavailable") || e.contains("database"), "{e}");
        assert!(!e.contains("Error {") && !e.contains("PgError"), "{e}");
    }

    // Back: executions start, run and are waited for again, without a restart.
    let mut started = None;
    for _ in 0..50 {
        let response = client
            .post(server.at("/v1/executions"))
            .json(&json!({"capability": "add", "params": {"a": 20, "b": 22}}))
            .send()
            .await
            .unwrap();
        if response.status() == StatusCode::ACCEPTED {
            let body: Value = response.json().await.unwrap();
            started = Some(body["executionId"].as_str().unwrap().to_string());
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let id = started.expect("starts again once the database is back");
    let (status, outcome) = json_of(
        client
            .get(server.at(&format!("/v1/executions/{id}/wait?timeoutMs=10000")))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{outcome}");
    assert_eq!(outcome["result"], json!({"sum": 42}));
}

/// deploy/k8s/serve/serve.yaml as Kubernetes would run it, on this machine: its container
/// args (with `$(VAR)`s filled in as the kubelet would, and the mounts' paths moved into a
/// temporary folder) start a replica that answers the token of its policy, runs the
/// capability of its ConfigMap, and records it in the database as the pod's replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubernetes_manifest_starts_a_replica_that_serves() {
    let Some(pg) = TestServer::start_or_skip() else {
        return;
    };
    let db = pg.database("manifest");
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/k8s/serve/serve.yaml"
    );
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&std::fs::read_to_string(path).unwrap()).unwrap();
    let of_kind = |kind: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} in {path}"))
    };
    let data = &of_kind("ConfigMap")["data"];
    let container = &of_kind("Deployment")["spec"]["template"]["spec"]["containers"][0];
    let roots = Roots::new("replica-manifest");
    let token = "manifest-token";
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let digest: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    let policy = roots.temp.join("policy.yaml");
    std::fs::write(
        &policy,
        data["policy.yaml"]
            .as_str()
            .unwrap()
            .replace(&"0".repeat(64), &digest),
    )
    .unwrap();
    let project = roots.temp.join("srv");
    let hello = project.join(".execbox/capabilities/hello");
    std::fs::create_dir_all(&hello).unwrap();
    std::fs::write(
        hello.join("capability.yaml"),
        data["hello.capability.yaml"].as_str().unwrap(),
    )
    .unwrap();
    std::fs::write(
        hello.join("index.js"),
        data["hello.index.js"].as_str().unwrap(),
    )
    .unwrap();

    let args: Vec<String> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            a.as_str()
                .unwrap()
                .replace("$(EXECBOX_DB_URL)", &db)
                .replace("$(POD_NAME)", "execbox-serve-0")
                .replace("/etc/execbox/policy.yaml", policy.to_str().unwrap())
                .replace("/srv/execbox", project.to_str().unwrap())
        })
        .collect();
    assert_eq!(args[0], "serve");
    // `Server::start` gives its own --listen (loopback, a free port) and --pool.
    let mut kept = Vec::new();
    let mut rest = args[1..].iter();
    while let Some(arg) = rest.next() {
        if arg == "--listen" || arg == "--pool" {
            rest.next();
        } else {
            kept.push(arg.as_str());
        }
    }
    let server = Server::start(roots.temp.path(), &roots.global.0, &kept);
    let client = client();
    let (status, _) = json_of(
        client
            .post(server.at("/v1/executions"))
            .json(&json!({"capability": "hello", "params": {"name": "k8s"}}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, body) = json_of(
        client
            .post(server.at("/v1/executions"))
            .bearer_auth(token)
            .json(&json!({"capability": "hello", "params": {"name": "k8s"}}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let id = body["executionId"].as_str().unwrap();
    let (status, outcome) = json_of(
        client
            .get(server.at(&format!("/v1/executions/{id}/wait?timeoutMs=10000")))
            .bearer_auth(token)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{outcome}");
    assert_eq!(outcome["result"], json!({"greeting": "hello, k8s"}));
    let (_, seen) = json_of(
        client
            .get(server.at(&format!("/v1/executions/{id}")))
            .bearer_auth(token)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(seen["replica"], "execbox-serve-0");
}

/// `execbox serve` with its stderr in `log`, as [`replica`] starts it.
fn replica_logged(roots: &Roots, db: &str, name: &str, log: &std::path::Path) -> Server {
    use std::io::BufRead;
    let project = roots.project_dir();
    let mut child = std::process::Command::new(super::support::runners::EXECBOX)
        .args(["serve", "--listen", "127.0.0.1:0", "--pool", "2"])
        .args(["--project", project.to_str().unwrap(), "--db", db])
        .args(["--replica-name", name])
        .current_dir(roots.temp.path())
        .env("EXECBOX_HOME", &roots.global.0)
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .expect("start execbox serve");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(
        line.starts_with("http://127.0.0.1:"),
        "first line: {line:?}"
    );
    Server {
        child,
        url: line.trim().to_owned(),
    }
}

/// Waits (up to `within`) for a line of `log` holding every one of `parts`.
async fn logged(log: &std::path::Path, parts: &[&str], within: Duration) -> String {
    let asked = Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| parts.iter().all(|p| l.contains(p))) {
            return line.to_string();
        }
        assert!(
            asked.elapsed() < within,
            "no line with {parts:?} in {} after {within:?}:\n{text}",
            log.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A checkpoint, then [`TestServer::kill`]: the test server syncs nothing (fsync and
/// synchronous_commit are off), so its crash would lose the last commits.
fn checkpoint_and_kill(pg: &mut TestServer) {
    pg.pg()
        .block(|c| async move { c.batch_execute("CHECKPOINT").await })
        .unwrap();
    pg.kill();
}

/// The password of [`with_password`]: base64-like, with `/` and `?` (the URL's masking used
/// to stop at the first of them).
const SECRET: &str = "Zq9/Xk?Wv+Yj==";

/// `url` with [`SECRET`] as its password (the test server trusts any).
fn with_password(url: &str) -> String {
    url.replacen(
        "postgres://postgres@",
        &format!("postgres://postgres:{SECRET}@"),
        1,
    )
}

fn shows_secret(text: &str) -> bool {
    ["Zq9", "Xk?Wv", "Yj=="]
        .iter()
        .any(|part| text.contains(part))
}

/// A stalled database (SIGSTOP: connections open, nothing answers, its own
/// `statement_timeout` cannot fire) makes a request answer 503 within the store's call
/// deadline (5 s), saying in plain words that the state database is unavailable, naming no
/// database; the password of the URL (with `/` and `?`) shows neither there, nor in the
/// server's log, nor in the CLI's errors once the database is down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_database_is_a_prompt_503_naming_no_database_and_the_password_never_shows() {
    let Some(mut pg) = TestServer::start_or_skip() else {
        return;
    };
    let db = with_password(&pg.database("stalled_serve"));
    let roots = project("replica-stalled");
    let log = roots.temp.join("serve.log");
    let server = replica_logged(&roots, &db, "only", &log);
    let client = client();
    let id = start(
        &client,
        &server,
        json!({"capability": "add", "params": {"a": 1, "b": 1}}),
    )
    .await;
    let (status, _) = json_of(
        client
            .get(server.at(&format!("/v1/executions/{id}/wait?timeoutMs=10000")))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);

    {
        let _stalled = pg.stall();
        for path in [format!("/v1/executions/{id}"), "/v1/executions".to_string()] {
            let asked = Instant::now();
            let response =
                tokio::time::timeout(Duration::from_secs(30), client.get(server.at(&path)).send())
                    .await
                    .expect("an answer, not a hang")
                    .unwrap();
            let took = asked.elapsed();
            let status = response.status();
            let body = response.text().await.unwrap();
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{path}: {body}");
            // The 5 s deadline, with room for a loaded machine.
            assert!(took < Duration::from_secs(12), "{path}: {took:?}");
            assert!(body.contains("the state database is unavailable"), "{body}");
            assert!(
                !body.contains("postgres") && !body.contains("127.0.0.1"),
                "{body}"
            );
            assert!(!shows_secret(&body), "{body}");
        }
    }
    // Back without a restart.
    let back = Instant::now();
    loop {
        let response = client
            .get(server.at(&format!("/v1/executions/{id}")))
            .send()
            .await
            .unwrap();
        if response.status() == StatusCode::OK {
            break;
        }
        assert!(back.elapsed() < Duration::from_secs(20), "not back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The CLI's error, the database down.
    tokio::task::block_in_place(|| checkpoint_and_kill(&mut pg));
    let output = std::process::Command::new(super::support::runners::EXECBOX)
        .args(["executions", "list", "--db", &db])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("postgres://postgres:***@127.0.0.1:"),
        "{stderr}"
    );
    assert!(!shows_secret(&stderr), "{stderr}");
    drop(server);
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.contains("postgres://postgres:***@127.0.0.1:"), "{log}");
    assert!(!shows_secret(&log), "{log}");
}

/// An execution whose program ends while the database is down is not left `running`: once
/// the database is back it is `completed`, with its result, on both replicas within a bound,
/// and `/wait` answers it on both (its replica kept the end and wrote it again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execution_that_ends_while_the_database_is_down_completes_once_it_is_back() {
    let Some(mut pg) = TestServer::start_or_skip() else {
        return;
    };
    let db = pg.database("ends_down");
    let (roots_a, roots_b) = (project("ends-down-a"), project("ends-down-b"));
    let gate = roots_a.temp.join("gate");
    roots_a.project.sh_executor(
        "gated",
        &["gated"],
        &format!(
            "cat >/dev/null\nwhile [ ! -e '{}' ]; do sleep 0.02; done\necho '{{\"sum\": 7}}'\n",
            gate.display()
        ),
    );
    roots_a.project.capability(
        "gated",
        "name: gated\ntype: gated\ntimeout_ms: 600000\n",
        &[],
    );
    let log_a = roots_a.temp.join("a.log");
    let a = replica_logged(&roots_a, &db, "a", &log_a);
    let b = replica(&roots_b, &db, "b");
    let client = client();
    let id = start(&client, &a, json!({"capability": "gated"})).await;
    wait_running(&client, &a, &id).await;

    tokio::task::block_in_place(|| checkpoint_and_kill(&mut pg));
    // The program ends with the database down: A cannot record its end now.
    std::fs::write(&gate, "").unwrap();
    logged(
        &log_a,
        &[&id, "cannot record the end of the execution"],
        Duration::from_secs(20),
    )
    .await;
    tokio::task::block_in_place(|| pg.resume()).unwrap();

    let back = Instant::now();
    for server in [&a, &b] {
        loop {
            let response = client
                .get(server.at(&format!("/v1/executions/{id}")))
                .send()
                .await
                .unwrap();
            if response.status() == StatusCode::OK {
                let seen: Value = response.json().await.unwrap();
                if seen["status"] != "running" {
                    assert_eq!(seen["status"], "completed", "{seen}");
                    assert_eq!(seen["result"], json!({"sum": 7}), "{seen}");
                    break;
                }
            }
            assert!(
                back.elapsed() < Duration::from_secs(30),
                "{id} still running 30 s after the database came back"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    for server in [&a, &b] {
        let (status, outcome) = json_of(
            client
                .get(server.at(&format!("/v1/executions/{id}/wait?timeoutMs=10000")))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{outcome}");
        assert_eq!(outcome["result"], json!({"sum": 7}), "{outcome}");
    }
}
