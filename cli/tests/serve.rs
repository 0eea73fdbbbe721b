//! `execbox serve` end to end: a real server process on loopback, a real HTTP client
//! (reqwest), real executor processes and a real SQLite file, including a server killed
//! with SIGKILL mid-execution and restarted.

mod support;

#[path = "serve/durable.rs"]
mod durable;
#[path = "serve/limits.rs"]
mod limits;
#[path = "serve/logs.rs"]
mod logs;
#[path = "serve/replica_stops.rs"]
mod replica_stops;
#[path = "serve/replicas.rs"]
mod replicas;
#[path = "serve/rules.rs"]
mod rules;

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};
use support::capabilities::{gone_within, read_pid, Roots, Server};

fn script_yaml(name: &str, extra: &str) -> String {
    format!("name: {name}\ntype: script\ndescription: {name}\nentry: index.js\n{extra}")
}

/// A project with a script capability `add`, an external `sleep` one (its sleeper's pid in
/// `pid`), and a global `hello`.
/// An HTTP client; reqwest's rustls (linked through the `mcp` feature) uses ring, installed
/// once per process.
fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

fn project(name: &str) -> Roots {
    let roots = Roots::new(name);
    roots.project.capability(
        "add",
        &script_yaml("add", "input_schema: { type: object, required: [a, b], properties: { a: { type: number }, b: { type: number } } }\n"),
        &[("index.js", "({ sum: params.a + params.b })")],
    );
    let pid = roots.temp.join("pid");
    roots.project.sh_executor(
        "sleeper",
        &["sleep"],
        &format!(
            "cat >/dev/null\nsleep 60 & echo $! > '{}'\nwait\n",
            pid.display()
        ),
    );
    roots.project.capability(
        "sleep",
        "name: sleep\ntype: sleep\ntimeout_ms: 600000\n",
        &[],
    );
    roots
        .global
        .capability("hello", &script_yaml("hello", ""), &[("index.js", "'hi'")]);
    roots
}

fn serve(roots: &Roots, args: &[&str]) -> Server {
    let project = roots.project_dir();
    let db = roots.temp.join("state.db");
    let mut all = vec![
        "--project",
        project.to_str().unwrap(),
        "--db",
        db.to_str().unwrap(),
    ];
    all.extend_from_slice(args);
    Server::start(roots.temp.path(), &roots.global.0, &all)
}

async fn json_of(response: reqwest::Response) -> (StatusCode, Value) {
    let status = response.status();
    let body = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&body).unwrap_or_else(|_| panic!("not JSON: {body}")),
    )
}

/// Waits (up to 10 s) until execution `id` is `running`.
async fn wait_running(client: &reqwest::Client, server: &Server, id: &str) {
    for _ in 0..1000 {
        let (_, record) = json_of(
            client
                .get(server.at(&format!("/v1/executions/{id}")))
                .send()
                .await
                .unwrap(),
        )
        .await;
        if record["status"] == "running" {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{id} never ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_api_end_to_end() {
    let roots = project("serve-api");
    let server = serve(&roots, &[]);
    let client = client();

    let (status, body) = json_of(
        client
            .get(server.at("/v1/capabilities"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let sources: Vec<(String, String)> = body["capabilities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().into(),
                c["source"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        sources,
        [
            ("add".into(), "project".into()),
            ("hello".into(), "global".into()),
            ("sleep".into(), "project".into())
        ]
    );
    let (_, body) = json_of(client.get(server.at("/v1/executors")).send().await.unwrap()).await;
    let executors = body["executors"].as_array().unwrap();
    assert!(executors
        .iter()
        .any(|e| e["name"] == "script" && e["source"] == "builtin"));
    assert!(executors
        .iter()
        .any(|e| e["name"] == "sleeper" && e["source"] == "project"));

    // Events, from before the execution starts.
    let mut events = client.get(server.at("/v1/events")).send().await.unwrap();
    assert_eq!(events.headers()["content-type"], "text/event-stream");

    let (status, body) = json_of(
        client
            .post(server.at("/v1/executions"))
            .json(&json!({"capability": "add", "params": {"a": 2, "b": 3}, "parentId": "agent-1"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(body["status"], "starting");
    let id = body["executionId"].as_str().unwrap().to_string();
    let (status, outcome) = json_of(
        client
            .get(server.at(&format!("/v1/executions/{id}/wait?timeoutMs=10000")))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(outcome["success"], true);
    assert_eq!(outcome["executionId"], id.as_str());
    assert_eq!(outcome["result"], json!({"sum": 5}));
    assert!(outcome["capabilityPath"]
        .as_str()
        .unwrap()
        .ends_with("capabilities/add"));
    let (_, record) = json_of(
        client
            .get(server.at(&format!("/v1/executions/{id}")))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(record["status"], "completed");
    assert_eq!(record["parentId"], "agent-1");
    let history: Vec<&str> = record["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["status"].as_str().unwrap())
        .collect();
    assert_eq!(history, ["starting", "running", "completed"]);

    let mut seen = String::new();
    while !(seen.contains("event: started") && seen.contains("event: completed")) {
        let chunk = tokio::time::timeout(Duration::from_secs(10), events.chunk())
            .await
            .expect("an event")
            .unwrap()
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(
        seen.contains(&format!("\"executionId\":\"{id}\"")),
        "{seen}"
    );

    // A running external executor: long poll, stop, and stop by parent.
    let (_, body) = json_of(
        client
            .post(server.at("/v1/executions"))
            .json(&json!({"capability": "sleep", "parentId": "agent-2"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let sleeping = body["executionId"].as_str().unwrap().to_string();
    wait_running(&client, &server, &sleeping).await;
    let sleeper = read_pid(&roots.temp.join("pid"));
    let (status, body) = json_of(
        client
            .get(server.at(&format!("/v1/executions/{sleeping}/wait?timeoutMs=50")))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(body, json!({"executionId": sleeping, "status": "running"}));
    let (_, body) = json_of(
        client
            .get(server.at("/v1/executions?status=running"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(body["executions"].as_array().unwrap().len(), 1);
    let (status, body) = json_of(
        client
            .post(server.at("/v1/executions/stop?parentId=agent-2"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["stopped"][0]["executionId"], sleeping.as_str());
    assert_eq!(body["stopped"][0]["status"], "stopped");
    assert!(gone_within(sleeper, Duration::from_secs(1)));
    let (_, body) = json_of(
        client
            .post(server.at(&format!("/v1/executions/{sleeping}/stop")))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(body["status"], "stopped");
    let (_, body) = json_of(
        client
            .get(server.at("/v1/executions?parentId=agent-1&capability=add"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(body["executions"].as_array().unwrap().len(), 1);

    // Errors: {error: {code, message}} with the seed's codes.
    for (request, status, code) in [
        (
            json!({"capability": "nope"}),
            StatusCode::NOT_FOUND,
            "CAPABILITY_NOT_FOUND",
        ),
        (
            json!({"capability": "add", "params": {"a": "x", "b": 1}}),
            StatusCode::BAD_REQUEST,
            "INVALID_REQUEST",
        ),
        (
            json!({"capability": "add", "type": "report"}),
            StatusCode::NOT_FOUND,
            "CAPABILITY_NOT_FOUND",
        ),
        (
            json!({"capabilty": "add"}),
            StatusCode::BAD_REQUEST,
            "INVALID_REQUEST",
        ),
    ] {
        let (got, body) = json_of(
            client
                .post(server.at("/v1/executions"))
                .json(&request)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(
            (got, body["error"]["code"].as_str().unwrap()),
            (status, code),
            "{request}: {body}"
        );
        assert!(!body["error"]["message"].as_str().unwrap().is_empty());
    }
    let (status, body) = json_of(
        client
            .get(server.at("/v1/executions/cap_1_deadbeef"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].as_str().unwrap()),
        (StatusCode::NOT_FOUND, "EXECUTION_NOT_FOUND")
    );
    let (status, body) = json_of(
        client
            .get(server.at("/v1/executions?status=sleeping"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].as_str().unwrap()),
        (StatusCode::BAD_REQUEST, "INVALID_REQUEST")
    );
    let big = json!({"capability": "add", "params": {"a": 1, "b": 2, "pad": "x".repeat(2 * 1024 * 1024)}});
    let (status, body) = json_of(
        client
            .post(server.at("/v1/executions"))
            .json(&big)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].as_str().unwrap()),
        (StatusCode::PAYLOAD_TOO_LARGE, "PAYLOAD_TOO_LARGE")
    );
}

fn sha256_hex(text: &str) -> String {
    ring::digest::digest(&ring::digest::SHA256, text.as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_is_the_principal_of_its_bearer_token() {
    let roots = project("serve-auth");
    roots.project.capability(
        "guarded",
        &script_yaml("guarded", "permissions: [admin:run]\n"),
        &[("index.js", "'ok'")],
    );
    let policy = roots.temp.join("policy.yaml");
    std::fs::write(
        &policy,
        format!(
            "version: 1\nprincipals:\n  ops: {{ permissions: ['*'], token_sha256: [{}] }}\n  bot: {{ token_sha256: [{}] }}\n",
            sha256_hex("ops-token"),
            sha256_hex("bot-token")
        ),
    )
    .unwrap();
    let server = serve(&roots, &["--policy", policy.to_str().unwrap()]);
    let client = client();
    let start = json!({"capability": "guarded"});
    let response = client
        .post(server.at("/v1/executions"))
        .json(&start)
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["www-authenticate"], "Bearer");
    let (status, body) = json_of(response).await;
    assert_eq!(
        (status, body["error"]["code"].as_str().unwrap()),
        (StatusCode::UNAUTHORIZED, "UNAUTHORIZED")
    );
    let (status, _) = json_of(
        client
            .get(server.at("/v1/capabilities"))
            .bearer_auth("wrong")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, body) = json_of(
        client
            .post(server.at("/v1/executions"))
            .bearer_auth("bot-token")
            .json(&start)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].as_str().unwrap()),
        (StatusCode::FORBIDDEN, "PERMISSION_DENIED")
    );
    // A header claiming another identity changes nothing: the token decides.
    let (status, body) = json_of(
        client
            .post(server.at("/v1/executions"))
            .bearer_auth("ops-token")
            .header("X-Principal", "bot")
            .json(&start)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let id = body["executionId"].as_str().unwrap();
    let (_, outcome) = json_of(
        client
            .get(server.at(&format!("/v1/executions/{id}/wait")))
            .bearer_auth("ops-token")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(outcome["result"], "ok");
    let (_, record) = json_of(
        client
            .get(server.at(&format!("/v1/executions/{id}")))
            .bearer_auth("ops-token")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(record["principal"], "ops");
    // Another principal cannot see, wait for, stop or list ops's execution, nor nest under it.
    for (method, path) in [
        ("GET", format!("/v1/executions/{id}")),
        ("GET", format!("/v1/executions/{id}/wait?timeoutMs=10")),
        ("POST", format!("/v1/executions/{id}/stop")),
    ] {
        let request = match method {
            "GET" => client.get(server.at(&path)),
            _ => client.post(server.at(&path)),
        };
        let (status, body) = json_of(request.bearer_auth("bot-token").send().await.unwrap()).await;
        assert_eq!(
            (status, body["error"]["code"].as_str().unwrap_or_default()),
            (StatusCode::NOT_FOUND, "EXECUTION_NOT_FOUND"),
            "{method} {path}: {body}"
        );
    }
    let (_, listed) = json_of(
        client
            .get(server.at("/v1/executions"))
            .bearer_auth("bot-token")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(listed["executions"], json!([]));
    let (status, body) = json_of(
        client
            .post(server.at("/v1/executions"))
            .bearer_auth("ops-token")
            .json(&json!({"capability": "guarded", "parentId": id}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let (status, body) = json_of(
        client
            .post(server.at("/v1/executions"))
            .bearer_auth("bot-token")
            .json(&json!({"capability": "hello", "parentId": id}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].as_str().unwrap_or_default()),
        (StatusCode::FORBIDDEN, "PERMISSION_DENIED"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_web_page_cannot_drive_the_api_through_a_browser() {
    let roots = project("serve-browser");
    let server = serve(&roots, &[]);
    let client = client();
    let start = json!({"capability": "hello"}).to_string();
    // A cross-site "simple" request: text/plain, from a page's origin.
    let (status, body) = json_of(
        client
            .post(server.at("/v1/executions"))
            .header("Content-Type", "text/plain")
            .body(start.clone())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{body}");
    let (status, body) = json_of(
        client
            .post(server.at("/v1/executions"))
            .header("Content-Type", "application/json")
            .header("Origin", "https://evil.example")
            .body(start.clone())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("evil.example"),
        "{body}"
    );
    // DNS rebinding: the page's name resolving to 127.0.0.1.
    let (status, _) = json_of(
        client
            .get(server.at("/v1/executions"))
            .header("Host", "evil.example")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, body) = json_of(
        client
            .post(server.at("/v1/executions"))
            .header("Content-Type", "application/json")
            .body(start)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
}

#[test]
fn serving_beyond_loopback_without_tokens_is_refused() {
    let roots = project("serve-refuse");
    let out = support::cli::command(&[
        "serve",
        "--listen",
        "0.0.0.0:0",
        "--project",
        roots.project_dir().to_str().unwrap(),
    ])
    .env("EXECBOX_HOME", &roots.global.0)
    .stdin(std::process::Stdio::null())
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = support::cli::text(&out.stderr);
    assert!(
        stderr.contains("not a loopback address") && stderr.contains("token_sha256"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_execution_marks_it_failed_interrupted_when_restarted() {
    let roots = project("serve-crash");
    let mut server = serve(&roots, &[]);
    let client = client();
    let (_, body) = json_of(
        client
            .post(server.at("/v1/executions"))
            .json(&json!({"capability": "sleep"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let id = body["executionId"].as_str().unwrap().to_string();
    wait_running(&client, &server, &id).await;
    let sleeper = read_pid(&roots.temp.join("pid"));
    server.kill();
    // The executor's process group outlived the server.
    assert!(support::capabilities::alive(sleeper));

    let server = serve(&roots, &[]);
    let (status, record) = json_of(
        client
            .get(server.at(&format!("/v1/executions/{id}")))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(record["status"], "failed");
    assert_eq!(
        record["error"],
        json!({"code": "EXECUTION_FAILED", "message": "interrupted: the server stopped"})
    );
    let history: Vec<&str> = record["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["status"].as_str().unwrap())
        .collect();
    assert_eq!(history, ["starting", "running", "failed"]);
    assert!(
        gone_within(sleeper, Duration::from_secs(1)),
        "the leftover executor was not killed"
    );
    let (status, outcome) = json_of(
        client
            .get(server.at(&format!("/v1/executions/{id}/wait")))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(outcome["success"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_the_running_executions_then_exits_0() {
    let roots = project("serve-term");
    let mut server = serve(&roots, &[]);
    let client = client();
    let (_, body) = json_of(
        client
            .post(server.at("/v1/executions"))
            .json(&json!({"capability": "sleep"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let id = body["executionId"].as_str().unwrap().to_string();
    wait_running(&client, &server, &id).await;
    let sleeper = read_pid(&roots.temp.join("pid"));
    support::process::signal(server.child.id(), libc::SIGTERM).unwrap();
    let status = tokio::task::spawn_blocking(move || {
        let status = server.child.wait().unwrap();
        (status, server)
    })
    .await
    .unwrap()
    .0;
    assert_eq!(status.code(), Some(0));
    assert!(gone_within(sleeper, Duration::from_secs(1)));
    let store = execbox_capabilities::ExecutionStore::open(roots.temp.join("state.db")).unwrap();
    assert!(store.recovered().is_empty(), "nothing was left running");
    let record = store.get(&id).await.unwrap().unwrap();
    assert_eq!(
        record.status,
        execbox_capabilities::ExecutionStatus::Stopped
    );
}
