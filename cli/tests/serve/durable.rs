//! Durable executions through `execbox serve`: a capability that notes something, then calls
//! an approval-gated `mail.send`, pauses as `awaiting_approval`, survives a SIGKILL of the
//! server, and completes once approved, each tool having run exactly once (the tools count
//! their own runs in files); denial, divergence, double approval, who may approve, the CLI's
//! `executions approve|deny`, and the replay of `Date.now()` and `Math.random()`.

use super::{client, json_of, script_yaml, serve, sha256_hex};
use std::time::Duration;

use crate::support::capabilities::{Roots, Server};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// The program: a note, a clock reading and a random number (logged, so the first run's
/// values can be compared with the resumed run's), then the call that needs approval.
const NOTIFY: &str = "const noted = await ledger.note({ text: 'hello' });\n\
const t = Date.now();\nconst r = Math.random();\nconst d = new Date().getTime();\n\
console.log(JSON.stringify({ t, r, d }));\n\
const sent = await mail.send({ to: 'bob@example.com', body: 'hi' });\n\
({ noted, sent, t, r, d })";

/// A project with `notify`: `ledger.note` and `mail.send` (which requires approval), each
/// appending a line to its own count file in `roots.temp`.
fn project(name: &str) -> Roots {
    let roots = Roots::new(name);
    let dir = roots.project.capability(
        "notify",
        &script_yaml("notify", "tools: tools.yaml\ntimeout_ms: 20000\n"),
        &[("index.js", NOTIFY)],
    );
    let counts = roots.temp.path().display().to_string();
    let tools = json!({
        "version": 1,
        "providers": {
            "ledger": {"tools": {"note": {
                "command": "/bin/sh",
                "args": ["-c", "cat >/dev/null; echo x >> \"$1/note.count\"; echo '{\"noted\": true}'", "note", counts],
            }}},
            "mail": {"tools": {"send": {
                "command": "/bin/sh",
                "args": ["-c", "cat >/dev/null; echo x >> \"$1/send.count\"; echo '{\"sent\": 7}'", "send", counts],
                "requires_approval": true,
            }}},
        }
    });
    std::fs::write(dir.join("tools.yaml"), tools.to_string()).unwrap();
    roots
}

/// A policy: alice and bob start executions, ops approves (and so could alice, but not her
/// own executions); tokens `<name>-token`.
fn policy(roots: &Roots, extra: &str) -> String {
    let policy = roots.temp.join("policy.yaml");
    std::fs::write(
        &policy,
        format!(
            "version: 1\nprincipals:\n  alice: {{ permissions: ['executions:approve'], token_sha256: [{}] }}\n  bob: {{ token_sha256: [{}] }}\n  ops: {{ permissions: ['executions:approve'], token_sha256: [{}] }}\n{extra}",
            sha256_hex("alice-token"),
            sha256_hex("bob-token"),
            sha256_hex("ops-token"),
        ),
    )
    .unwrap();
    policy.display().to_string()
}

/// How many times the tool counting in `file` ran.
fn runs(roots: &Roots, file: &str) -> usize {
    std::fs::read_to_string(roots.temp.join(file))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

async fn start(client: &reqwest::Client, server: &Server, token: &str) -> String {
    start_capability(client, server, token, "notify").await
}

/// Starts capability `name` as `token`'s principal; its execution id.
async fn start_capability(
    client: &reqwest::Client,
    server: &Server,
    token: &str,
    name: &str,
) -> String {
    let (status, body) = json_of(
        client
            .post(server.at("/v1/executions"))
            .bearer_auth(token)
            .json(&json!({"capability": name}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    body["executionId"].as_str().unwrap().to_string()
}

/// `/wait` until it ends or pauses.
async fn settled(client: &reqwest::Client, server: &Server, id: &str, token: &str) -> Value {
    let (status, outcome) = json_of(
        client
            .get(server.at(&format!("/v1/executions/{id}/wait?timeoutMs=60000")))
            .bearer_auth(token)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{outcome}");
    outcome
}

async fn decide(
    client: &reqwest::Client,
    server: &Server,
    id: &str,
    token: &str,
    body: Value,
) -> (StatusCode, Value) {
    json_of(
        client
            .post(server.at(&format!("/v1/executions/{id}/approve")))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await
}

async fn record(client: &reqwest::Client, server: &Server, id: &str, token: &str) -> Value {
    let (status, record) = json_of(
        client
            .get(server.at(&format!("/v1/executions/{id}")))
            .bearer_auth(token)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{record}");
    record
}

/// The values the first run logged before it paused.
fn logged(outcome: &Value) -> Value {
    let line = outcome["logs"]
        .as_array()
        .and_then(|l| l.first())
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no log line: {outcome}"));
    serde_json::from_str(line).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_execution_survives_sigkill_and_completes_once_approved_each_call_once() {
    let roots = project("durable-approve");
    let policy = policy(&roots, "");
    let mut server = serve(&roots, &["--policy", &policy]);
    let client = client();
    let id = start(&client, &server, "alice-token").await;

    let paused = settled(&client, &server, &id, "alice-token").await;
    assert_eq!(paused["status"], "awaiting_approval", "{paused}");
    assert_eq!(paused["success"], false);
    let first = logged(&paused);
    let pending = &record(&client, &server, &id, "alice-token").await["pendingApproval"];
    assert_eq!(pending["tool"], "mail.send", "{pending}");
    assert_eq!(
        pending["input"],
        json!({"to": "bob@example.com", "body": "hi"})
    );
    assert_eq!(pending["call"], 2);
    assert_eq!(pending["permission"], "executions:approve");
    assert_eq!(pending["selfApproval"], false);
    assert_eq!(
        (runs(&roots, "note.count"), runs(&roots, "send.count")),
        (1, 0)
    );

    // Nothing is lost with the server.
    server.kill();
    let server = serve(&roots, &["--policy", &policy]);
    let again = record(&client, &server, &id, "ops-token").await;
    assert_eq!(again["status"], "awaiting_approval", "{again}");

    // An approver sees it among the paused ones; bob, who may not approve, does not.
    let list = |token: &'static str| {
        client
            .get(server.at("/v1/executions?status=awaiting_approval"))
            .bearer_auth(token)
            .send()
    };
    let (_, listed) = json_of(list("ops-token").await.unwrap()).await;
    assert_eq!(listed["executions"][0]["executionId"], id.as_str());
    let (_, listed) = json_of(list("bob-token").await.unwrap()).await;
    assert_eq!(listed["executions"], json!([]));

    // Bob lacks the permission (and may not see it); alice holds it, but started it.
    let (status, body) = decide(&client, &server, &id, "bob-token", json!({"call": 2})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, body) = decide(&client, &server, &id, "alice-token", json!({"call": 2})).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["error"]["code"], "PERMISSION_DENIED");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("may not decide its own call") && message.contains("self_approval"),
        "{message}"
    );
    assert_eq!(runs(&roots, "send.count"), 0);

    // Approved twice at once (a retried request): resumed once, and both answered with the
    // execution as it is.
    let (a, b) = tokio::join!(
        decide(&client, &server, &id, "ops-token", json!({"call": 2})),
        decide(&client, &server, &id, "ops-token", json!({"call": 2})),
    );
    assert_eq!((a.0, b.0), (StatusCode::OK, StatusCode::OK), "{a:?} {b:?}");

    let done = settled(&client, &server, &id, "alice-token").await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["sent"], json!({"sent": 7}));
    assert_eq!(done["result"]["noted"], json!({"noted": true}));
    // The clock and Math.random() gave the resumed run what they gave the first.
    assert_eq!(done["result"]["t"], first["t"], "{done}");
    assert_eq!(done["result"]["r"], first["r"], "{done}");
    assert_eq!(done["result"]["d"], first["d"], "{done}");
    assert_eq!(
        (runs(&roots, "note.count"), runs(&roots, "send.count")),
        (1, 1)
    );

    let history: Vec<String> = record(&client, &server, &id, "alice-token").await["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["status"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        history,
        [
            "starting",
            "running",
            "awaiting_approval",
            "running",
            "completed"
        ]
    );
    // Decided once and for all: the same decision again is answered with the execution as
    // it is; another decision on that call is refused.
    let (status, body) = decide(&client, &server, &id, "ops-token", json!({"call": 2})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "completed", "{body}");
    assert_eq!(body["decisions"][0]["call"], 2, "{body}");
    assert_eq!(body["decisions"][0]["by"], "ops", "{body}");
    let (status, body) = decide(
        &client,
        &server,
        &id,
        "ops-token",
        json!({"call": 2, "approve": false}),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "DECISION_MISMATCH", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("call 2 (mail.send) was approved by ops already"),
        "{body}"
    );
    assert_eq!(runs(&roots, "send.count"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_call_never_runs_and_the_execution_fails_naming_the_denial() {
    let roots = project("durable-deny");
    let policy = policy(&roots, "");
    let server = serve(&roots, &["--policy", &policy]);
    let client = client();
    let id = start(&client, &server, "alice-token").await;
    assert_eq!(
        settled(&client, &server, &id, "alice-token").await["status"],
        "awaiting_approval"
    );
    for bad in [
        json!({"approve": "yes", "call": 2}),
        json!({"call": 2, "reason": "x"}),
        json!({"call": 2, "approve": false, "extra": 1}),
        json!({"approve": true}),
        json!({"call": 0}),
        json!({"call": 2, "inputSha256": "abc"}),
    ] {
        let (status, body) = decide(&client, &server, &id, "ops-token", bad.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }
    let (status, body) = decide(
        &client,
        &server,
        &id,
        "ops-token",
        json!({"call": 2, "approve": false, "reason": "not this customer"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "failed", "{body}");
    let done = settled(&client, &server, &id, "alice-token").await;
    assert_eq!(done["status"], "failed");
    assert_eq!(done["error"]["code"], "APPROVAL_DENIED", "{done}");
    let message = done["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("mail.send") && message.contains("denied by ops: not this customer"),
        "{message}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        (runs(&roots, "note.count"), runs(&roots, "send.count")),
        (1, 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_that_makes_other_calls_when_resumed_fails_with_the_divergence() {
    let roots = project("durable-diverge");
    let server = serve(&roots, &[]);
    let client = client();
    let (_, body) = json_of(
        client
            .post(server.at("/v1/executions"))
            .json(&json!({"capability": "notify"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let id = body["executionId"].as_str().unwrap().to_string();
    let (_, paused) = json_of(
        client
            .get(server.at(&format!("/v1/executions/{id}/wait?timeoutMs=60000")))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(paused["status"], "awaiting_approval", "{paused}");
    // The program changed while it waited.
    let entry = roots.project.0.join("capabilities/notify/index.js");
    std::fs::write(&entry, NOTIFY.replace("'hello'", "'changed'")).unwrap();
    let (status, body) = json_of(
        client
            .post(server.at(&format!("/v1/executions/{id}/approve")))
            .json(&json!({"call": 2}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, done) = json_of(
        client
            .get(server.at(&format!("/v1/executions/{id}/wait?timeoutMs=60000")))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], "REPLAY_DIVERGED", "{done}");
    let message = done["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(
            r#"replay diverged at call 1: recorded ledger.note({"text":"hello"}), now ledger.note({"text":"changed"})"#
        ),
        "{message}"
    );
    assert_eq!(
        (runs(&roots, "note.count"), runs(&roots, "send.count")),
        (1, 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_approves_with_no_server_running_and_denies() {
    let roots = project("durable-cli");
    let policy = policy(&roots, "approvals: { self_approval: true }\n");
    let mut server = serve(&roots, &["--policy", &policy]);
    let client = client();
    let first = start(&client, &server, "alice-token").await;
    let second = start(&client, &server, "alice-token").await;
    for id in [&first, &second] {
        assert_eq!(
            settled(&client, &server, id, "alice-token").await["status"],
            "awaiting_approval"
        );
    }
    server.kill();
    let project = roots.project_dir();
    let db = roots.temp.join("state.db");
    let common = [
        "--project",
        project.to_str().unwrap(),
        "--db",
        db.to_str().unwrap(),
        "--policy",
        policy.as_str(),
    ];
    let cli = |args: &[&str]| {
        let mut all: Vec<&str> = args.to_vec();
        all.extend_from_slice(&common);
        crate::support::cli::command(&all)
            .env("EXECBOX_HOME", &roots.global.0)
            .output()
            .unwrap()
    };
    // bob may not approve; alice may (the policy allows self-approval) only with the
    // permission, which she lacks; ops may.
    // Without a terminal, the call must be named.
    let out = cli(&["executions", "approve", &first, "--principal", "ops"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = crate::support::cli::text(&out.stderr);
    assert!(
        stderr.contains("waits on call 2 of mail.send")
            && stderr.contains("bob@example.com")
            && stderr.contains("--call 2"),
        "{stderr}"
    );
    let out = cli(&[
        "executions",
        "approve",
        &first,
        "--call",
        "1",
        "--principal",
        "ops",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = crate::support::cli::text(&out.stderr);
    assert!(stderr.contains("DECISION_MISMATCH"), "{stderr}");
    assert_eq!(runs(&roots, "send.count"), 0);
    let out = cli(&[
        "executions",
        "approve",
        &first,
        "--call",
        "2",
        "--principal",
        "bob",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = crate::support::cli::text(&out.stderr);
    assert!(
        stderr.contains("PERMISSION_DENIED") && stderr.contains("executions:approve"),
        "{stderr}"
    );
    let out = cli(&[
        "executions",
        "approve",
        &first,
        "--call",
        "2",
        "--principal",
        "ops",
        "--json",
    ]);
    let stdout = crate::support::cli::text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        crate::support::cli::text(&out.stderr)
    );
    let outcome: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(outcome["status"], "completed");
    assert_eq!(outcome["result"]["sent"], json!({"sent": 7}));

    let out = cli(&[
        "executions",
        "deny",
        &second,
        "--call",
        "2",
        "--principal",
        "ops",
        "--reason",
        "no",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        crate::support::cli::text(&out.stderr)
    );
    let denied: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(denied["status"], "failed");
    assert_eq!(denied["error"]["code"], "APPROVAL_DENIED");
    assert_eq!(
        (runs(&roots, "note.count"), runs(&roots, "send.count")),
        (2, 1)
    );
}

/// Two payments, each needing approval: one to bob, then one to mallory.
const PAY: &str = "const a = await pay.send({ to: 'bob', amount: 1 });\n\
const b = await pay.send({ to: 'mallory', amount: 1000000 });\n\
({ a, b })";

/// A project with `pay`: `pay.send` requires approval and appends the envelope it is given
/// (its input under `input`) to `sent` in `roots.temp`.
fn pay_project(name: &str) -> Roots {
    let roots = Roots::new(name);
    let dir = roots.project.capability(
        "pay",
        &script_yaml("pay", "tools: tools.yaml\ntimeout_ms: 20000\n"),
        &[("index.js", PAY)],
    );
    let sent = roots.temp.join("sent").display().to_string();
    let tools = json!({
        "version": 1,
        "providers": {
            "pay": {"tools": {"send": {
                "command": "/bin/sh",
                "args": ["-c", "cat >> \"$1\"; echo >> \"$1\"; echo '{\"ok\": true}'", "send", sent],
                "requires_approval": true,
            }}},
        }
    });
    std::fs::write(dir.join("tools.yaml"), tools.to_string()).unwrap();
    roots
}

/// What `pay.send` was called with, one input a line.
fn sent(roots: &Roots) -> Vec<Value> {
    std::fs::read_to_string(roots.temp.join("sent"))
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["input"].clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_releases_only_the_call_it_names_not_a_later_one() {
    let roots = pay_project("durable-bound");
    let policy = policy(&roots, "");
    let server = serve(&roots, &["--policy", &policy]);
    let client = client();
    let id = start_capability(&client, &server, "bob-token", "pay").await;
    assert_eq!(
        settled(&client, &server, &id, "bob-token").await["status"],
        "awaiting_approval"
    );
    // Both approvers are shown the payment to bob: call 1, with its input's digest.
    let shown = record(&client, &server, &id, "ops-token").await["pendingApproval"].clone();
    assert_eq!(shown["call"], 1, "{shown}");
    assert_eq!(shown["input"], json!({"to": "bob", "amount": 1}));
    let bob_sha = shown["inputSha256"].as_str().unwrap().to_string();
    assert_eq!(bob_sha.len(), 64, "{shown}");

    // A decision must name its call.
    let (status, body) = decide(&client, &server, &id, "ops-token", json!({"approve": true})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("\"call\": N"),
        "{body}"
    );
    // The first approver approves it; the program goes on and pauses at mallory's payment.
    let (status, body) = decide(
        &client,
        &server,
        &id,
        "ops-token",
        json!({"call": 1, "inputSha256": bob_sha}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let paused = settled(&client, &server, &id, "bob-token").await;
    assert_eq!(paused["status"], "awaiting_approval", "{paused}");
    assert_eq!(paused["pendingApproval"]["call"], 2, "{paused}");
    assert_eq!(sent(&roots), [json!({"to": "bob", "amount": 1})]);

    // The second approver's approval of the bob call it was shown, and a retried POST of the
    // first's: answered with the execution as it is, waiting on call 2; mallory is not paid.
    for (token, body) in [
        ("alice-token", json!({"call": 1})),
        ("ops-token", json!({"call": 1, "inputSha256": bob_sha})),
    ] {
        let (status, now) = decide(&client, &server, &id, token, body).await;
        assert_eq!(status, StatusCode::OK, "{now}");
        assert_eq!(now["status"], "awaiting_approval", "{now}");
        assert_eq!(now["pendingApproval"]["call"], 2, "{now}");
        assert_eq!(now["pendingApproval"]["input"]["to"], "mallory", "{now}");
    }
    // A decision for any call but the one waiting, or for its number with another input,
    // changes nothing.
    let mallory_sha = paused["pendingApproval"]["inputSha256"]
        .as_str()
        .unwrap()
        .to_string();
    for body in [
        json!({"call": 3}),
        json!({"call": 2, "inputSha256": bob_sha}),
        json!({"call": 1, "approve": false}),
    ] {
        let (status, refused) = decide(&client, &server, &id, "alice-token", body.clone()).await;
        assert_eq!(status, StatusCode::CONFLICT, "{body}: {refused}");
        assert_eq!(refused["error"]["code"], "DECISION_MISMATCH", "{refused}");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(sent(&roots).len(), 1);
    let still = record(&client, &server, &id, "bob-token").await;
    assert_eq!(still["status"], "awaiting_approval", "{still}");

    // Mallory's payment is denied by name; it never runs.
    let (status, denied) = json_of(
        client
            .post(server.at(&format!("/v1/executions/{id}/deny")))
            .bearer_auth("alice-token")
            .json(&json!({"call": 2, "inputSha256": mallory_sha, "reason": "unknown payee"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{denied}");
    assert_eq!(denied["status"], "failed", "{denied}");
    assert_eq!(denied["error"]["code"], "APPROVAL_DENIED", "{denied}");
    let decisions: Vec<(u64, bool)> = denied["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["call"].as_u64().unwrap(),
                d["approved"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(decisions, [(1, true), (2, false)]);
    assert_eq!(sent(&roots), [json!({"to": "bob", "amount": 1})]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approver_learns_nothing_of_executions_it_may_not_see() {
    let roots = project("durable-unseen");
    let policy = policy(&roots, "");
    let server = serve(&roots, &["--policy", &policy]);
    let client = client();
    // bob's execution, denied by alice: completed from ops' point of view is "not there".
    let id = start(&client, &server, "bob-token").await;
    assert_eq!(
        settled(&client, &server, &id, "bob-token").await["status"],
        "awaiting_approval"
    );
    let (status, body) = decide(
        &client,
        &server,
        &id,
        "alice-token",
        json!({"call": 2, "approve": false}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // ops holds the approve permission but neither started nor decided it: GET and every
    // decision answer 404, as for an execution that does not exist.
    let (status, _) = json_of(
        client
            .get(server.at(&format!("/v1/executions/{id}")))
            .bearer_auth("ops-token")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    for path in ["approve", "deny"] {
        for body in [json!({"call": 2}), json!({"call": 7})] {
            let (status, refused) = json_of(
                client
                    .post(server.at(&format!("/v1/executions/{id}/{path}")))
                    .bearer_auth("ops-token")
                    .json(&body)
                    .send()
                    .await
                    .unwrap(),
            )
            .await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{path} {body}: {refused}");
            assert_eq!(refused["error"]["code"], "EXECUTION_NOT_FOUND", "{refused}");
            let message = refused["error"]["message"].as_str().unwrap();
            assert!(!message.contains("failed"), "{message}");
        }
    }
    // alice, who decided it, is answered (a retry of her decision).
    let (status, body) = decide(
        &client,
        &server,
        &id,
        "alice-token",
        json!({"call": 2, "approve": false}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "failed");
}

/// `project` with a second capability, `slow`, whose one tool sleeps 30 s.
fn project_with_slow(name: &str) -> Roots {
    let roots = project(name);
    let dir = roots.project.capability(
        "slow",
        &script_yaml("slow", "tools: tools.yaml\ntimeout_ms: 60000\n"),
        &[("index.js", "await clock.wait({}); 1")],
    );
    let tools = json!({
        "version": 1,
        "providers": {"clock": {"tools": {"wait": {
            "command": "/bin/sh",
            "args": ["-c", "cat >/dev/null; sleep 30; echo '{}'"],
        }}}}
    });
    std::fs::write(dir.join("tools.yaml"), tools.to_string()).unwrap();
    roots
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_execution_resumes_only_within_the_bounds_a_start_has() {
    let roots = project_with_slow("durable-room");
    let policy = policy(&roots, "");
    let server = serve(
        &roots,
        &["--policy", &policy, "--max-live-per-principal", "1"],
    );
    let client = client();
    let id = start(&client, &server, "bob-token").await;
    assert_eq!(
        settled(&client, &server, &id, "bob-token").await["status"],
        "awaiting_approval"
    );
    // bob now runs as many as he may: the resume of his paused one would pass the bound.
    let slow = start_capability(&client, &server, "bob-token", "slow").await;
    let (status, body) = decide(&client, &server, &id, "ops-token", json!({"call": 2})).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["error"]["code"], "TOO_MANY_EXECUTIONS", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("stays paused") && message.contains("max-live-per-principal"),
        "{message}"
    );
    let still = record(&client, &server, &id, "bob-token").await;
    assert_eq!(still["status"], "awaiting_approval", "{still}");
    assert_eq!(runs(&roots, "send.count"), 0);
    // Once there is room, the same decision goes through.
    let (status, body) = json_of(
        client
            .post(server.at(&format!("/v1/executions/{slow}/stop")))
            .bearer_auth("bob-token")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = decide(&client, &server, &id, "ops-token", json!({"call": 2})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        settled(&client, &server, &id, "bob-token").await["status"],
        "completed"
    );
    assert_eq!(runs(&roots, "send.count"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_executions_are_bounded_per_principal_and_expire() {
    let roots = project("durable-bounds");
    let policy = policy(&roots, "");
    let server = serve(
        &roots,
        &[
            "--policy",
            &policy,
            "--max-paused-per-principal",
            "2",
            "--pause-expiry",
            "2s",
        ],
    );
    let client = client();
    let mut paused = Vec::new();
    for _ in 0..2 {
        let id = start(&client, &server, "bob-token").await;
        assert_eq!(
            settled(&client, &server, &id, "bob-token").await["status"],
            "awaiting_approval"
        );
        paused.push(id);
    }
    // A third of bob's cannot wait: it fails saying why; alice's still may.
    let third = start(&client, &server, "bob-token").await;
    let failed = settled(&client, &server, &third, "bob-token").await;
    assert_eq!(failed["status"], "failed", "{failed}");
    let message = failed["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("principal `bob` already has 2 executions waiting for approval"),
        "{message}"
    );
    let hers = start(&client, &server, "alice-token").await;
    assert_eq!(
        settled(&client, &server, &hers, "alice-token").await["status"],
        "awaiting_approval"
    );
    // Past --pause-expiry, each is denied with reason `expired`, by the sweep (every second
    // here) or when someone decides it, whichever comes first: a decision that comes first is
    // refused saying it expired; one that comes after the sweep finds nothing waiting, and an
    // approver who neither started nor decided it is answered as if it did not exist.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (status, body) = decide(
        &client,
        &server,
        &paused[0],
        "ops-token",
        json!({"call": 2}),
    )
    .await;
    match status {
        StatusCode::CONFLICT => assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("expired"),
            "{body}"
        ),
        StatusCode::NOT_FOUND => assert_eq!(body["error"]["code"], "EXECUTION_NOT_FOUND"),
        other => panic!("{other}: {body}"),
    }
    let owned = paused
        .iter()
        .map(|id| (id, "bob-token"))
        .chain([(&hers, "alice-token")]);
    for (id, token) in owned {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let ended = loop {
            let now = record(&client, &server, id, token).await;
            if now["status"] != "awaiting_approval" || std::time::Instant::now() > deadline {
                break now;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert_eq!(ended["status"], "failed", "{ended}");
        assert_eq!(ended["error"]["code"], "APPROVAL_DENIED", "{ended}");
        assert_eq!(ended["decisions"][0]["reason"], "expired", "{ended}");
        assert_eq!(ended["decisions"][0]["by"], "expiry", "{ended}");
    }
    assert_eq!(runs(&roots, "send.count"), 0);
}
