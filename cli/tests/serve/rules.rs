//! Rules on a call's arguments through `execbox serve`: a policy rule on `input.amount` lets a
//! small payment run and pauses a large one for the approvers it names, who alone see and
//! decide it; a rule that blocks refuses the call with reason `blocked`.

use super::{client, json_of, script_yaml, serve, sha256_hex};

use crate::support::capabilities::{Roots, Server};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// A small payment, a large one, and what each answered.
const PAY: &str = "const small = await pay.send({ to: 'bob', amount: 1 });\n\
const large = await pay.send({ to: 'mallory', amount: 500 });\n\
({ small, large })";

/// A huge payment, caught and answered with the error's reason and message.
const HUGE: &str = "try { await pay.send({ to: 'eve', amount: 2000000 }); return 'sent'; } \
catch (e) { return { reason: e.reason, message: e.message }; }";

/// A project with capabilities `pay` and `huge` over `pay.send` (which needs no approval of
/// its own) appending its input to `sent`.
fn project(name: &str) -> Roots {
    let roots = Roots::new(name);
    let sent = roots.temp.join("sent").display().to_string();
    let tools = json!({
        "version": 1,
        "providers": {
            "pay": {"tools": {"send": {
                "command": "/bin/sh",
                "args": ["-c", "cat >> \"$1\"; echo >> \"$1\"; echo '{\"ok\": true}'", "send", sent],
            }}},
        }
    });
    for (capability, code) in [("pay", PAY), ("huge", HUGE)] {
        let dir = roots.project.capability(
            capability,
            &script_yaml(capability, "tools: tools.yaml\ntimeout_ms: 20000\n"),
            &[("index.js", code)],
        );
        std::fs::write(dir.join("tools.yaml"), tools.to_string()).unwrap();
    }
    roots
}

/// bob pays; carol is in finance (which holds no approve permission); ops holds
/// `executions:approve` but is not in finance. Tokens `<name>-token`.
fn policy(roots: &Roots) -> String {
    let policy = roots.temp.join("policy.yaml");
    let text = format!(
        r#"version: 1
roles:
  finance: {{ permissions: ["pay:*"] }}
principals:
  bob: {{ token_sha256: [{bob}] }}
  carol: {{ roles: [finance], token_sha256: [{carol}] }}
  ops: {{ permissions: ["executions:approve"], token_sha256: [{ops}] }}
rules:
  - name: huge
    tool: "pay.send"
    when: "input.amount > 1000000"
    action: block
    reason: "payments over a million are made by hand"
  - tool: "pay.*"
    when: "input.amount > 100 || !(input.to in ['bob', 'carol'])"
    action: approve
    approvers: [finance]
    reason: "payments over 100 or to new payees"
"#,
        bob = sha256_hex("bob-token"),
        carol = sha256_hex("carol-token"),
        ops = sha256_hex("ops-token"),
    );
    std::fs::write(&policy, text).unwrap();
    policy.display().to_string()
}

fn sent(roots: &Roots) -> Vec<Value> {
    std::fs::read_to_string(roots.temp.join("sent"))
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["input"].clone())
        .collect()
}

async fn call(
    client: &reqwest::Client,
    server: &Server,
    token: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = client.request(method, server.at(path)).bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    json_of(request.send().await.unwrap()).await
}

/// Starts capability `name` as bob; its execution id.
async fn start(client: &reqwest::Client, server: &Server, name: &str) -> String {
    let (status, started) = call(
        client,
        server,
        "bob-token",
        reqwest::Method::POST,
        "/v1/executions",
        Some(json!({"capability": name})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{started}");
    started["executionId"].as_str().unwrap().to_string()
}

async fn settled(client: &reqwest::Client, server: &Server, id: &str) -> Value {
    let path = format!("/v1/executions/{id}/wait?timeoutMs=60000");
    let (status, outcome) = call(
        client,
        server,
        "bob-token",
        reqwest::Method::GET,
        &path,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{outcome}");
    outcome
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_on_the_amount_runs_small_payments_and_pauses_large_ones_for_its_approvers() {
    use reqwest::Method;
    let roots = project("rules-amount");
    let policy = policy(&roots);
    let server = serve(&roots, &["--policy", &policy]);
    let client = client();
    let id = start(&client, &server, "pay").await;
    let paused = settled(&client, &server, &id).await;
    assert_eq!(paused["status"], "awaiting_approval", "{paused}");
    // The small payment ran without asking anyone; the large one waits, naming its rule.
    assert_eq!(sent(&roots), [json!({"to": "bob", "amount": 1})]);
    let path = format!("/v1/executions/{id}");
    let (_, record) = call(&client, &server, "carol-token", Method::GET, &path, None).await;
    let pending = &record["pendingApproval"];
    assert_eq!(pending["call"], 2, "{record}");
    assert_eq!(pending["rule"], "rules[1]", "{record}");
    assert_eq!(pending["reason"], "payments over 100 or to new payees");
    assert_eq!(pending["approvers"], json!(["finance"]));

    // carol (finance) sees it in the list of what waits for her; ops (who holds the approve
    // permission but is not finance) neither sees nor decides it.
    let list = "/v1/executions?status=awaiting_approval";
    let (_, carol_list) = call(&client, &server, "carol-token", Method::GET, list, None).await;
    assert_eq!(
        carol_list["executions"].as_array().unwrap().len(),
        1,
        "{carol_list}"
    );
    let (_, ops_list) = call(&client, &server, "ops-token", Method::GET, list, None).await;
    assert_eq!(ops_list["executions"], json!([]), "{ops_list}");
    let approve = format!("/v1/executions/{id}/approve");
    let (status, refused) = call(
        &client,
        &server,
        "ops-token",
        Method::POST,
        &approve,
        Some(json!({"call": 2})),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{refused}");
    assert_eq!(sent(&roots).len(), 1);

    // From a shell: without the policy nothing could check who decides, so nobody may; with
    // it, ops is refused and only finance may.
    let project = roots.project_dir();
    let db = roots.temp.join("state.db");
    let cli = |extra: &[&str]| {
        let mut args = vec![
            "executions",
            "approve",
            id.as_str(),
            "--call",
            "2",
            "--project",
            project.to_str().unwrap(),
            "--db",
            db.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let out = crate::support::cli::command(&args)
            .env("EXECBOX_HOME", &roots.global.0)
            .output()
            .unwrap();
        (out.status.code(), crate::support::cli::text(&out.stderr))
    };
    let (code, stderr) = cli(&[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("paused under a policy (its call was held by policy rules[1])")
            && stderr.contains("--policy FILE"),
        "{stderr}"
    );
    let (code, stderr) = cli(&["--policy", &policy, "--principal", "ops"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("may be decided by `finance` only (policy rules[1])"),
        "{stderr}"
    );
    assert_eq!(sent(&roots).len(), 1);

    let (status, approved) = call(
        &client,
        &server,
        "carol-token",
        Method::POST,
        &approve,
        Some(json!({"call": 2, "inputSha256": pending["inputSha256"]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{approved}");
    let done = settled(&client, &server, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        sent(&roots),
        [
            json!({"to": "bob", "amount": 1}),
            json!({"to": "mallory", "amount": 500})
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_rule_refuses_the_call_with_reason_blocked() {
    let roots = project("rules-block");
    let policy = policy(&roots);
    let server = serve(&roots, &["--policy", &policy]);
    let client = client();
    let id = start(&client, &server, "huge").await;
    let done = settled(&client, &server, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["reason"], "blocked", "{done}");
    assert_eq!(
        done["result"]["message"],
        "pay.send: blocked by policy rules[0] (huge): payments over a million are made by hand"
    );
    assert!(sent(&roots).is_empty());
}
