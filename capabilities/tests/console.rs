//! The approval console of `capabilities_router` behind its real front door and serving loop
//! on loopback: sign-in with a bad token refused, the session cookie's flags, decisions
//! refused without the cookie, from a foreign Origin or without the CSRF header, a second
//! decision of the same call refused, and the page's Content-Security-Policy. The paused
//! execution is a kept program (`pause_program`), so no runner is needed.

use std::net::SocketAddr;
use std::sync::Arc;

use execbox_capabilities::{
    capabilities_router, serve_door, CapabilityManager, ExecutionStore, KeptProgram,
    ManagerOptions, Registry, RegistryRoots, CONTENT_SECURITY_POLICY,
};
use execbox_host::{
    ApprovalAsk, Executor, Ledger, LedgerCall, PausedCall, PausedProgram, ProcessExecutor,
    RunnerCommand,
};
use execbox_policy::{Enforcement, Policy};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_util::sync::CancellationToken;

fn sha256_hex(text: &str) -> String {
    ring::digest::digest(&ring::digest::SHA256, text.as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A fresh folder for one test.
fn folder(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("execbox-console-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

struct Console {
    addr: SocketAddr,
    manager: CapabilityManager,
    stop: CancellationToken,
}

impl Drop for Console {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// `execbox serve`'s router over a manager with a policy: `alice` starts programs, `ops` and
/// `ops2` approve; tokens `<name>-token`.
async fn console(name: &str) -> Console {
    let dir = folder(name);
    let policy = Policy::builder()
        .principal("alice", Vec::<String>::new(), Vec::<String>::new())
        .token_sha256("alice", sha256_hex("alice-token"))
        .principal("ops", Vec::<String>::new(), ["executions:approve"])
        .token_sha256("ops", sha256_hex("ops-token"))
        .principal("ops2", Vec::<String>::new(), ["executions:approve"])
        .token_sha256("ops2", sha256_hex("ops2-token"))
        .role("finance", ["executions:approve"])
        .principal("fin", ["finance"], Vec::<String>::new())
        .token_sha256("fin", sha256_hex("fin-token"))
        .build()
        .unwrap();
    let executor: Arc<dyn Executor> =
        Arc::new(ProcessExecutor::new(RunnerCommand::new("/bin/false")).unwrap());
    let manager = CapabilityManager::new(
        Registry::load(RegistryRoots::default()),
        ExecutionStore::open(dir.join("state.db")).unwrap(),
        executor,
        ManagerOptions {
            enforcement: Enforcement::unrestricted().with_policy(policy.clone()),
            ..Default::default()
        },
    );
    let router = capabilities_router(manager.clone(), serve_door(Some(&policy)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    tokio::spawn(execbox_http::serve(
        listener,
        router,
        execbox_http::ServeOptions::default(),
        stop.clone(),
    ));
    Console {
        addr,
        manager,
        stop,
    }
}

/// Keeps a program of alice's paused at its second call (`mail.send`, the first having run):
/// its execution id.
async fn paused(console: &Console, to: &str) -> String {
    paused_asking(console, to, ApprovalAsk::default()).await
}

/// The same, the call asked as `asked` says (a policy rule, its reason, its approvers).
async fn paused_asking(console: &Console, to: &str, asked: ApprovalAsk) -> String {
    let mut ledger = Ledger::new();
    ledger.calls.push(
        serde_json::from_value::<LedgerCall>(json!({
            "tool": "notes.add", "input": {"text": "hello"}, "answer": {"result": {"noted": true}}
        }))
        .unwrap(),
    );
    let input = json!({"to": to, "amount": 250});
    ledger.calls.push(
        serde_json::from_value::<LedgerCall>(json!({"tool": "mail.send", "input": input.clone()}))
            .unwrap(),
    );
    let call = PausedCall::new(1, "mail.send", input).asked(asked);
    let program = KeptProgram {
        name: "execute_code".into(),
        front_end: "mcp".into(),
        code: "await notes.add({text: 'hello'});\nawait mail.send({to: '</script><b>x</b>', amount: 250});".into(),
        origin: json!({}),
        timeout_ms: 10_000,
        paused: PausedProgram::new("p1", Some("alice".into()), call, ledger, Vec::new()),
    };
    console
        .manager
        .pause_program(program)
        .await
        .unwrap()
        .execution_id
}

/// An answer: status, headers (lowercased names), body.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|_| panic!("not JSON: {}", self.body))
    }
}

/// One HTTP/1.1 request on its own connection.
async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> Answer {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !body.is_empty() {
        head.push_str("Content-Type: application/json\r\n");
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Answer {
        status,
        headers,
        body: body.to_owned(),
    }
}

/// A signed-in session: its cookie (`name=value`) and CSRF token.
struct SignedIn {
    cookie: String,
    csrf: String,
    set_cookie: String,
}

async fn sign_in(console: &Console, token: &str) -> SignedIn {
    let origin = format!("http://{}", console.addr);
    let answer = request(
        console.addr,
        "POST",
        "/console/sign-in",
        &[("Origin", &origin)],
        Some(&json!({"token": token})),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let set_cookie = answer.header("set-cookie").unwrap().to_owned();
    let cookie = set_cookie.split(';').next().unwrap().to_owned();
    SignedIn {
        cookie,
        csrf: answer.json()["csrf"].as_str().unwrap().to_owned(),
        set_cookie,
    }
}

async fn decide(
    console: &Console,
    id: &str,
    verb: &str,
    headers: &[(&str, &str)],
    body: Value,
) -> Answer {
    request(
        console.addr,
        "POST",
        &format!("/console/executions/{id}/{verb}"),
        headers,
        Some(&body),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_with_a_bad_token_is_refused_and_a_good_one_sets_a_strict_cookie() {
    let console = console("sign-in").await;
    let origin = format!("http://{}", console.addr);
    let bad = request(
        console.addr,
        "POST",
        "/console/sign-in",
        &[("Origin", &origin)],
        Some(&json!({"token": "nope"})),
    )
    .await;
    assert_eq!(bad.status, 401, "{}", bad.body);
    assert_eq!(bad.json()["error"]["code"], "UNAUTHORIZED");
    assert!(bad.header("set-cookie").is_none());

    // A sign-in from another site's page (login CSRF) is refused too.
    let foreign = request(
        console.addr,
        "POST",
        "/console/sign-in",
        &[("Origin", "http://evil.example")],
        Some(&json!({"token": "ops-token"})),
    )
    .await;
    assert_eq!(foreign.status, 403, "{}", foreign.body);

    let ops = sign_in(&console, "ops-token").await;
    // Loopback plain HTTP: no `Secure`, every other flag.
    for flag in [
        "HttpOnly",
        "SameSite=Strict",
        "Path=/console",
        "Max-Age=28800",
    ] {
        assert!(ops.set_cookie.contains(flag), "{}", ops.set_cookie);
    }
    assert!(!ops.set_cookie.contains("Secure"), "{}", ops.set_cookie);
    assert!(ops.cookie.starts_with("execbox_session=") && ops.cookie.len() == 16 + 64);
    let session = request(
        console.addr,
        "GET",
        "/console/session",
        &[("Cookie", &ops.cookie)],
        None,
    )
    .await;
    assert_eq!(session.status, 200, "{}", session.body);
    assert_eq!(session.json()["principal"], "ops");
    assert_eq!(session.json()["csrf"], ops.csrf.as_str());
    // The token is not kept in what the page is given.
    assert!(!session.body.contains("ops-token"));

    // Signed out, the cookie is nothing.
    let out = request(
        console.addr,
        "POST",
        "/console/sign-out",
        &[
            ("Cookie", &ops.cookie),
            ("Origin", &origin),
            ("x-execbox-csrf", &ops.csrf),
        ],
        Some(&json!({})),
    )
    .await;
    assert_eq!(out.status, 200, "{}", out.body);
    assert!(out.header("set-cookie").unwrap().contains("Max-Age=0"));
    let after = request(
        console.addr,
        "GET",
        "/console/session",
        &[("Cookie", &ops.cookie)],
        None,
    )
    .await;
    assert_eq!(after.status, 403, "{}", after.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_needs_the_cookie_the_own_origin_and_the_csrf_header_and_decides_once() {
    let console = console("decide").await;
    let id = paused(&console, "<img src=x onerror=alert(1)>").await;
    let origin = format!("http://{}", console.addr);
    let ops = sign_in(&console, "ops-token").await;
    let call = json!({"call": 2});

    // The list shows the pending call, the call that ran, the program, who started it.
    let listed = request(
        console.addr,
        "GET",
        "/console/pending",
        &[("Cookie", &ops.cookie)],
        None,
    )
    .await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    let entry = &listed.json()["entries"][0];
    assert_eq!(entry["executionId"], id.as_str());
    assert_eq!(entry["startedBy"], "alice");
    assert_eq!(entry["pending"]["call"], 2);
    assert_eq!(entry["pending"]["tool"], "mail.send");
    assert!(entry["pending"]["input"]
        .as_str()
        .unwrap()
        .contains("<img src=x onerror=alert(1)>"));
    assert_eq!(entry["ran"][0]["tool"], "notes.add");
    assert!(entry["ran"][0]["answer"]
        .as_str()
        .unwrap()
        .contains("noted"));
    assert_eq!(entry["source"]["from"], "program");
    assert!(entry["source"]["code"]
        .as_str()
        .unwrap()
        .contains("</script>"));
    // Alice, who started it, may not decide it: she sees nothing.
    let alice = sign_in(&console, "alice-token").await;
    let hers = request(
        console.addr,
        "GET",
        "/console/pending",
        &[("Cookie", &alice.cookie)],
        None,
    )
    .await;
    assert_eq!(hers.json()["entries"], json!([]));

    // No cookie: 403, even with a bearer token (the console's path takes cookies only).
    let no_cookie = decide(
        &console,
        &id,
        "approve",
        &[
            ("Origin", &origin),
            ("x-execbox-csrf", &ops.csrf),
            ("Authorization", "Bearer ops-token"),
        ],
        call.clone(),
    )
    .await;
    assert_eq!(no_cookie.status, 403, "{}", no_cookie.body);
    assert_eq!(no_cookie.json()["error"]["code"], "FORBIDDEN");
    assert!(no_cookie.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("sign in"));

    // A foreign Origin: 403.
    let foreign = decide(
        &console,
        &id,
        "approve",
        &[
            ("Cookie", &ops.cookie),
            ("Origin", "http://evil.example"),
            ("x-execbox-csrf", &ops.csrf),
        ],
        call.clone(),
    )
    .await;
    assert_eq!(foreign.status, 403, "{}", foreign.body);
    assert!(foreign.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("own page"));

    // No Origin at all: 403.
    let no_origin = decide(
        &console,
        &id,
        "approve",
        &[("Cookie", &ops.cookie), ("x-execbox-csrf", &ops.csrf)],
        call.clone(),
    )
    .await;
    assert_eq!(no_origin.status, 403, "{}", no_origin.body);

    // No CSRF header, or another session's: 403.
    let no_csrf = decide(
        &console,
        &id,
        "approve",
        &[("Cookie", &ops.cookie), ("Origin", &origin)],
        call.clone(),
    )
    .await;
    assert_eq!(no_csrf.status, 403, "{}", no_csrf.body);
    assert!(no_csrf.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("x-execbox-csrf"));
    let wrong_csrf = decide(
        &console,
        &id,
        "approve",
        &[
            ("Cookie", &ops.cookie),
            ("Origin", &origin),
            ("x-execbox-csrf", &alice.csrf),
        ],
        call.clone(),
    )
    .await;
    assert_eq!(wrong_csrf.status, 403, "{}", wrong_csrf.body);
    assert_eq!(
        console.manager.get(&id).await.unwrap().status.to_string(),
        "awaiting_approval"
    );

    // Everything right: denied, bound to the call shown.
    let digest = entry["pending"]["inputSha256"].as_str().unwrap();
    let denied = decide(
        &console,
        &id,
        "deny",
        &[
            ("Cookie", &ops.cookie),
            ("Origin", &origin),
            ("x-execbox-csrf", &ops.csrf),
        ],
        json!({"call": 2, "inputSha256": digest, "reason": "not to strangers"}),
    )
    .await;
    assert_eq!(denied.status, 200, "{}", denied.body);
    assert_eq!(denied.json()["status"], "failed");
    assert_eq!(denied.json()["decisions"][0]["by"], "ops");

    // The same approver approving the call it denied is refused, and changes nothing.
    let again = decide(
        &console,
        &id,
        "approve",
        &[
            ("Cookie", &ops.cookie),
            ("Origin", &origin),
            ("x-execbox-csrf", &ops.csrf),
        ],
        json!({"call": 2, "inputSha256": digest}),
    )
    .await;
    assert_eq!(again.status, 409, "{}", again.body);
    // Another approver, for whom it no longer waits, finds nothing to decide.
    let ops2 = sign_in(&console, "ops2-token").await;
    let second = decide(
        &console,
        &id,
        "approve",
        &[
            ("Cookie", &ops2.cookie),
            ("Origin", &origin),
            ("x-execbox-csrf", &ops2.csrf),
        ],
        json!({"call": 2, "inputSha256": digest}),
    )
    .await;
    assert_eq!(second.status, 404, "{}", second.body);
    let record = console.manager.get(&id).await.unwrap();
    assert_eq!(record.status.to_string(), "failed");
    assert_eq!(record.decisions.len(), 1);

    // The bearer-token API is as it was.
    let api = request(
        console.addr,
        "GET",
        &format!("/v1/executions/{id}"),
        &[("Authorization", "Bearer alice-token")],
        None,
    )
    .await;
    assert_eq!(api.status, 200, "{}", api.body);
    let no_token = request(
        console.addr,
        "GET",
        "/v1/executions",
        &[("Cookie", &ops.cookie)],
        None,
    )
    .await;
    assert_eq!(no_token.status, 401, "{}", no_token.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_has_a_strict_content_security_policy_and_no_inline_script() {
    let console = console("csp").await;
    let page = request(console.addr, "GET", "/console", &[], None).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let csp = page.header("content-security-policy").unwrap();
    assert_eq!(csp, CONTENT_SECURITY_POLICY);
    assert!(csp.starts_with("default-src 'self'"));
    assert!(!csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"));
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
    assert!(page
        .header("content-type")
        .unwrap()
        .starts_with("text/html"));
    // No inline script or style, nothing from elsewhere.
    assert!(!page.body.contains("<script>") && !page.body.contains("<style"));
    assert!(!page.body.contains("http://") && !page.body.contains("https://"));
    for testid in [
        "token",
        "sign-in",
        "pending-call",
        "pending-input",
        "approve",
        "deny",
        "deny-reason",
        "outcome",
    ] {
        assert!(
            page.body.contains(&format!("data-testid=\"{testid}\"")),
            "{testid}"
        );
    }
    let script = request(console.addr, "GET", "/console/console.js", &[], None).await;
    assert_eq!(script.status, 200);
    assert!(script
        .header("content-type")
        .unwrap()
        .starts_with("text/javascript"));
    assert!(!script.body.contains("innerHTML") && !script.body.contains("localStorage"));
    // Without a session, the data is not served.
    let pending = request(console.addr, "GET", "/console/pending", &[], None).await;
    assert_eq!(pending.status, 403, "{}", pending.body);
    let events = request(console.addr, "GET", "/console/events", &[], None).await;
    assert_eq!(events.status, 403, "{}", events.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_a_rule_asks_of_a_role_is_listed_for_that_role_only_with_the_rule() {
    let console = console("roles").await;
    let asked = ApprovalAsk::by_rule(
        "big-payments",
        Some("payments over 100 need finance".into()),
        vec!["finance".into()],
    );
    let id = paused_asking(&console, "bob@example.com", asked).await;
    let list = |cookie: String| {
        let addr = console.addr;
        async move {
            request(
                addr,
                "GET",
                "/console/pending",
                &[("Cookie", &cookie)],
                None,
            )
            .await
            .json()
        }
    };
    let ops = sign_in(&console, "ops-token").await;
    assert_eq!(list(ops.cookie).await["entries"], json!([]));
    let fin = sign_in(&console, "fin-token").await;
    let listed = list(fin.cookie).await;
    let pending = &listed["entries"][0]["pending"];
    assert_eq!(listed["entries"][0]["executionId"], id.as_str());
    assert_eq!(pending["rule"], "big-payments");
    assert_eq!(pending["reason"], "payments over 100 need finance");
    assert_eq!(pending["approvers"], json!(["finance"]));
}

/// The first `event: pending` of `/console/events` for `cookie`: its entries.
async fn first_pending_event(addr: SocketAddr, cookie: &str) -> Value {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "GET /console/events HTTP/1.1\r\nHost: {addr}\r\nCookie: {cookie}\r\nAccept: text/event-stream\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut seen = Vec::new();
    let read = async {
        let mut buffer = [0u8; 8192];
        loop {
            let n = stream.read(&mut buffer).await.unwrap();
            assert!(
                n > 0,
                "the stream ended: {}",
                String::from_utf8_lossy(&seen)
            );
            seen.extend_from_slice(&buffer[..n]);
            let text = String::from_utf8_lossy(&seen);
            if let Some(at) = text.find("event: pending\n") {
                let rest = &text[at..];
                if let Some(line) = rest.lines().find_map(|l| l.strip_prefix("data: ")) {
                    if rest.contains("\n\n") {
                        return serde_json::from_str::<Value>(line).unwrap();
                    }
                }
            }
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), read)
        .await
        .expect("an `event: pending` within 10 s")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_sends_each_principal_the_calls_it_may_decide() {
    let console = console("events").await;
    let id = paused(&console, "bob@example.com").await;
    let ops = sign_in(&console, "ops-token").await;
    let listed = first_pending_event(console.addr, &ops.cookie).await;
    assert_eq!(listed["entries"][0]["executionId"], id.as_str(), "{listed}");
    assert_eq!(listed["entries"][0]["pending"]["call"], 2);
    let alice = sign_in(&console, "alice-token").await;
    let hers = first_pending_event(console.addr, &alice.cookie).await;
    assert_eq!(hers["entries"], json!([]), "{hers}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_reserved_to_other_approvers_do_not_hide_ones_own() {
    let console = console("starvation").await;
    // Two calls ops may decide, then 55 newer ones only finance may.
    let mut mine = Vec::new();
    for i in 0..2 {
        mine.push(paused(&console, &format!("ops{i}@example.com")).await);
    }
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    for i in 0..55 {
        let asked = ApprovalAsk::by_rule("big", None, vec!["finance".into()]);
        paused_asking(&console, &format!("fin{i}@example.com"), asked).await;
    }
    let ops = sign_in(&console, "ops-token").await;
    let listed = request(
        console.addr,
        "GET",
        "/console/pending",
        &[("Cookie", &ops.cookie)],
        None,
    )
    .await
    .json();
    let mut ids: Vec<&str> = listed["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["executionId"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    mine.sort_unstable();
    assert_eq!(ids, mine, "{listed}");
    // And finance's approver sees the 50 newest of its own.
    let fin = sign_in(&console, "fin-token").await;
    let theirs = request(
        console.addr,
        "GET",
        "/console/pending",
        &[("Cookie", &fin.cookie)],
        None,
    )
    .await
    .json();
    assert_eq!(theirs["entries"].as_array().unwrap().len(), 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_signing_in_again_and_again_ends_only_its_own_sessions() {
    let console = console("per-principal").await;
    let fin = sign_in(&console, "fin-token").await;
    let first_ops = sign_in(&console, "ops-token").await;
    for _ in 0..20 {
        sign_in(&console, "ops-token").await;
    }
    let session = |cookie: String| {
        let addr = console.addr;
        async move {
            request(
                addr,
                "GET",
                "/console/session",
                &[("Cookie", &cookie)],
                None,
            )
            .await
            .status
        }
    };
    assert_eq!(session(fin.cookie).await, 200);
    assert_eq!(session(first_ops.cookie).await, 403);
}
