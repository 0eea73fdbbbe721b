//! The policy layer end to end, with the real CLI and real files: hidden tools, rate limits
//! within a run and across runs sharing a state file or a PostgreSQL database, approvals,
//! principals and the audit log.

mod support;

#[path = "policy/approval_and_audit.rs"]
mod approval_and_audit;
#[path = "policy/postgres.rs"]
mod postgres;
#[path = "policy/reasons.rs"]
mod reasons;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use execbox_host::{BoxFuture, ExecuteRequest, Executor, ProcessExecutor, Provider, Tool};
use execbox_policy::{Approval, ApprovalRequest, Approver, Enforcement, Policy};
use serde_json::{json, Value};
use support::cli::{execbox, text};
use support::temp::TempDir;

/// A tools file: `mail.send` (needs `email:send`), `mail.list` (needs `email:read`),
/// `weather.get` (3 per minute), `ops.wipe` (requires approval); each echoes its input.
fn tools(dir: &Path) -> PathBuf {
    let tools = dir.join("tools.yaml");
    let echo = |permissions: Value, extra: Value| {
        let mut tool = json!({
            "command": "python3",
            "args": ["-c", "import json, sys; print(json.dumps(json.load(sys.stdin)['input']))"],
            "permissions": permissions,
        });
        tool.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        tool
    };
    let yaml = json!({
        "version": 1,
        "providers": {
            "mail": {"tools": {
                "send": echo(json!(["email:send"]), json!({})),
                "list": echo(json!(["email:read"]), json!({})),
            }},
            "weather": {"tools": {
                "get": echo(json!([]), json!({"rate_limit": {"requests": 3, "window": "1m"}})),
            }},
            "ops": {"tools": {
                "wipe": echo(json!([]), json!({"requires_approval": true})),
            }},
        }
    });
    // JSON is YAML.
    std::fs::write(&tools, yaml.to_string()).unwrap();
    tools
}

fn policy(dir: &Path, audit: &Path, state: Option<&Path>) -> PathBuf {
    let path = dir.join("policy.yaml");
    let mut text = format!(
        "version: 1\n\
         roles:\n  reader: {{ permissions: [\"email:read\"] }}\n\
         principals:\n  alice: {{ roles: [reader] }}\n  ops: {{ roles: [reader], permissions: [\"email:*\"] }}\n\
         require_principal: true\n\
         audit: {{ file: {}, include_input: false }}\n",
        audit.display()
    );
    if let Some(state) = state {
        text.push_str(&format!("state: {}\n", state.display()));
    }
    std::fs::write(&path, text).unwrap();
    path
}

fn audit_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn run(args: &[&str], code: &str) -> (Option<i32>, String, String) {
    let out = execbox(args, code);
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

#[test]
fn a_tool_the_principal_may_not_call_does_not_exist_for_it() {
    let dir = TempDir::new("policy-hidden");
    let tools = tools(dir.path());
    let policy = policy(dir.path(), &dir.join("audit.jsonl"), None);
    let (t, p) = (tools.to_str().unwrap(), policy.to_str().unwrap());
    let code = "[typeof mail.send, typeof mail.list, (await mail.list({ n: 1 })).n]";
    let (status, out, err) = run(
        &[
            "run",
            "-",
            "--tools",
            t,
            "--policy",
            p,
            "--principal",
            "alice",
        ],
        code,
    );
    assert_eq!(status, Some(0), "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap(),
        json!(["undefined", "function", 1])
    );
    let (status, out, err) = run(
        &[
            "run",
            "-",
            "--tools",
            t,
            "--policy",
            p,
            "--principal",
            "ops",
        ],
        code,
    );
    assert_eq!(status, Some(0), "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap(),
        json!(["function", "function", 1])
    );

    let (status, out, err) = run(
        &["types", "--tools", t, "--policy", p, "--principal", "alice"],
        "",
    );
    assert_eq!(status, Some(0), "{err}");
    assert!(out.contains("list(") && !out.contains("send("), "{out}");
    let (_, out, _) = run(
        &["types", "--tools", t, "--policy", p, "--principal", "ops"],
        "",
    );
    assert!(out.contains("send("), "{out}");
}

#[test]
fn an_unknown_or_missing_principal_is_a_usage_error() {
    let dir = TempDir::new("policy-principal");
    let tools = tools(dir.path());
    let audit = dir.join("audit.jsonl");
    let policy = policy(dir.path(), &audit, None);
    let (t, p) = (tools.to_str().unwrap(), policy.to_str().unwrap());
    let (status, _, err) = run(
        &[
            "run",
            "-",
            "--tools",
            t,
            "--policy",
            p,
            "--principal",
            "alcie",
        ],
        "1",
    );
    assert_eq!(status, Some(2), "{err}");
    assert!(err.contains("alcie") && err.contains("alice"), "{err}");
    let (status, _, err) = run(&["run", "-", "--tools", t, "--policy", p], "1");
    assert_eq!(status, Some(2), "{err}");
    assert!(
        audit_lines(&audit).is_empty(),
        "nothing ran, nothing is audited"
    );
}

#[test]
fn the_fourth_call_of_a_3_per_minute_tool_is_refused_within_a_run() {
    let dir = TempDir::new("policy-rate-run");
    let tools = tools(dir.path());
    let code = "const out = []; for (let i = 0; i < 4; i++) { \
                try { await weather.get({ i }); out.push('ok'); } catch (e) { out.push(e.message); } } out";
    let (status, out, err) = run(&["run", "-", "--tools", tools.to_str().unwrap()], code);
    assert_eq!(status, Some(0), "{err}");
    let out: Vec<String> = serde_json::from_str(&out).unwrap();
    assert_eq!(out[..3], ["ok", "ok", "ok"]);
    assert!(
        out[3].starts_with("rate limit exceeded for weather.get: 3 per 1m; retry in "),
        "{out:?}"
    );
}

#[test]
fn runs_sharing_a_state_file_count_together() {
    let dir = TempDir::new("policy-rate-state");
    let tools = tools(dir.path());
    let state = dir.join("state.db");
    let args = [
        "run",
        "-",
        "--tools",
        tools.to_str().unwrap(),
        "--state",
        state.to_str().unwrap(),
    ];
    for _ in 0..3 {
        let (status, _, err) = run(&args, "await weather.get({})");
        assert_eq!(status, Some(0), "{err}");
    }
    let (status, _, err) = run(&args, "await weather.get({})");
    assert_eq!(status, Some(1), "{err}");
    assert!(
        err.contains("rate limit exceeded for weather.get: 3 per 1m"),
        "{err}"
    );
}

#[test]
fn approval_is_granted_by_flag_and_refused_without_a_terminal() {
    let dir = TempDir::new("policy-approval");
    let tools = tools(dir.path());
    let t = tools.to_str().unwrap();
    let (status, out, err) = run(
        &["run", "-", "--tools", t, "--approve-all"],
        "await ops.wipe({ all: true })",
    );
    assert_eq!(status, Some(0), "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap(),
        json!({"all": true})
    );
    // In a session of its own, execbox has no controlling terminal: nobody can be asked.
    let mut command = support::cli::command(&["run", "-", "--tools", t]);
    without_terminal(&mut command);
    let out = command
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(
                b"let r; try { await ops.wipe({}) } catch (e) { r = e.code + ': ' + e.message } r",
            )?;
            child.wait_with_output()
        })
        .unwrap();
    let result = text(&out.stdout);
    assert!(
        result.contains("tool_error") && result.contains("approval required"),
        "{result} {}",
        text(&out.stderr)
    );
}

/// Starts the command in a new session, without a controlling terminal.
#[allow(unsafe_code)]
fn without_terminal(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: setsid(2) is async-signal-safe and touches no memory of ours.
    unsafe {
        command.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
}

/// Refuses every call, as a person answering "no" would.
struct No;

impl Approver for No {
    fn approve(&self, _request: ApprovalRequest) -> BoxFuture<Approval> {
        Box::pin(async { Approval::Denied })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_approval_is_a_tool_error_and_the_tool_never_runs() {
    let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = ran.clone();
    let wipe = Tool::new("wipe", move |_input, _ctx| {
        seen.store(true, std::sync::atomic::Ordering::SeqCst);
        async { Ok(json!("wiped")) }
    })
    .requires_approval(true);
    let tools = execbox_host::ToolSet::new(vec![Provider::new("ops").tool(wipe)]).unwrap();
    let executor = ProcessExecutor::new(support::runners::runner()).unwrap();
    let result = executor
        .execute(
            ExecuteRequest::new("let r; try { await ops.wipe() } catch (e) { r = e.message } r")
                .tools(&tools)
                .guard(Arc::new(
                    Enforcement::unrestricted().with_approver(Arc::new(No)),
                )),
        )
        .await;
    assert_eq!(
        result.value(),
        Some(json!("ops.wipe: approval denied")),
        "{result:?}"
    );
    assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_with_a_rate_limit_or_an_approval_never_runs_without_a_guard() {
    let ran = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = |name: &str| {
        let ran = ran.clone();
        Tool::new(name, move |_input, _ctx| {
            ran.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async { Ok(json!("ran")) }
        })
    };
    let limit = execbox_host::RateLimit::new(100, std::time::Duration::from_secs(60)).unwrap();
    let tools = execbox_host::ToolSet::new(vec![Provider::new("ops")
        .tool(counted("wipe").requires_approval(true))
        .tool(counted("send").rate_limit(limit))
        .tool(counted("read").permissions(["ops:read"]))])
    .unwrap();
    let executor = ProcessExecutor::new(support::runners::runner()).unwrap();
    // A front end that forgot its guard: the core refuses what needs one, and says why.
    let code = "const out = []; \
                for (const t of ['wipe', 'send', 'read']) { \
                  try { out.push(await ops[t]({})) } catch (e) { out.push(e.code + ': ' + e.message) } \
                } out";
    let result = executor
        .execute(ExecuteRequest::new(code).tools(&tools))
        .await;
    let out = result.value().expect("the program ends");
    assert!(
        out[0].as_str().unwrap().starts_with(
            "tool_error: ops.wipe: this tool requires approval, and this execution has no policy \
             to enforce that, so the call was refused; attach a guard to the execution \
             (execbox-policy's Enforcement, as the execbox CLI does) to run it"
        ),
        "{out}"
    );
    assert!(
        out[1]
            .as_str()
            .unwrap()
            .starts_with("tool_error: ops.send: this tool has a rate limit"),
        "{out}"
    );
    // Permissions alone need no guard: without one there is no principal to hold them.
    assert_eq!(out[2], "ran", "{out}");
    assert_eq!(
        ran.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "only `read` ran"
    );
    // The same tools under a guard: the rate-limited one runs, approval is asked (and refused).
    let result = executor
        .execute(
            ExecuteRequest::new(code)
                .tools(&tools)
                .guard(Arc::new(Enforcement::unrestricted())),
        )
        .await;
    let out = result.value().expect("the program ends");
    assert_eq!(out[0], "tool_error: ops.wipe: approval required", "{out}");
    assert_eq!(out[1], "ran", "{out}");
}

#[test]
fn every_call_is_audited_with_its_outcome_and_a_hash_of_its_input() {
    let dir = TempDir::new("policy-audit");
    let tools = tools(dir.path());
    let audit = dir.join("audit.jsonl");
    let policy = policy(dir.path(), &audit, None);
    let code = "await mail.list({ secret: 'hunter2' }); \
                for (let i = 0; i < 4; i++) { try { await weather.get({}) } catch {} } \
                try { await ops.wipe({}) } catch {} 'done'";
    let (status, _, err) = run(
        &[
            "run",
            "-",
            "--tools",
            tools.to_str().unwrap(),
            "--policy",
            policy.to_str().unwrap(),
            "--principal",
            "alice",
        ],
        code,
    );
    assert_eq!(status, Some(0), "{err}");
    let lines = audit_lines(&audit);
    let events: Vec<(&str, &str, &str)> = lines
        .iter()
        .map(|l| {
            (
                l["event"].as_str().unwrap(),
                l["tool"].as_str().unwrap_or(""),
                l["outcome"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(events.first().unwrap().0, "execution_started");
    assert_eq!(*events.last().unwrap(), ("execution_finished", "", "ok"));
    let calls: Vec<(&str, &str)> = events
        .iter()
        .filter(|e| e.0 == "tool_call")
        .map(|e| (e.1, e.2))
        .collect();
    assert_eq!(
        calls,
        [
            ("mail.list", "ok"),
            ("weather.get", "ok"),
            ("weather.get", "ok"),
            ("weather.get", "ok"),
            ("weather.get", "rate_limited"),
            ("ops.wipe", "approval_denied"),
        ]
    );
    let raw = std::fs::read_to_string(&audit).unwrap();
    assert!(
        !raw.contains("hunter2"),
        "inputs are hashed, not written: {raw}"
    );
    for line in lines.iter().filter(|l| l["event"] == "tool_call") {
        assert_eq!(
            line["input_sha256"].as_str().map(str::len),
            Some(64),
            "{line}"
        );
        assert_eq!(line["principal"], "alice", "{line}");
        assert!(line["ts"].as_str().unwrap().ends_with('Z'), "{line}");
    }
}

#[test]
fn an_unwritable_audit_log_stops_the_run_before_anything_runs() {
    let dir = TempDir::new("policy-audit-full");
    let tools = tools(dir.path());
    let (status, _, err) = run(
        &[
            "run",
            "-",
            "--tools",
            tools.to_str().unwrap(),
            "--audit-log",
            "/dev/full",
        ],
        "await weather.get({})",
    );
    assert_ne!(status, Some(0), "{err}");
    assert!(err.contains("/dev/full"), "{err}");
}

#[test]
fn the_library_resolves_principals_before_anything_runs() {
    let policy = Policy::builder()
        .role("reader", ["email:read"])
        .principal("alice", ["reader"], Vec::<String>::new())
        .build()
        .unwrap();
    assert!(policy.principal(Some("alice")).is_ok());
    let error = policy.principal(Some("mallory")).unwrap_err().to_string();
    assert!(error.contains("mallory"), "{error}");
}

#[test]
fn hiding_a_tool_renames_no_other() {
    // `a-b` and `a_b` both sanitise to `a_b`: the second gets a suffix. Hiding the first must
    // not hand its name to the second, or a listing would describe one tool and a call reach
    // another.
    let tool = |name: &str, permission: &str| {
        execbox_host::Tool::new(name, |_input, _ctx| async move { Ok(json!(null)) })
            .description(format!("the tool {name}"))
            .permissions([permission])
    };
    let set = execbox_host::ToolSet::new(vec![execbox_host::Provider::new("ns")
        .tool(tool("a-b", "ns:hidden"))
        .tool(tool("a_b", "ns:x"))
        .tool(tool("a_b__2", "ns:y"))])
    .unwrap();
    let policy = execbox_policy::Policy::builder()
        .principal("p", [] as [&str; 0], ["ns:x", "ns:y"])
        .build()
        .unwrap();
    let enforcement = execbox_policy::Enforcement::new(
        policy.principal(Some("p")).unwrap(),
        Arc::new(execbox_policy::RateLimits::in_memory()),
    );
    let view = set.visible_to(&enforcement);
    let full = set.tool_names("ns").unwrap();
    let seen = view.tool_names("ns").unwrap();
    assert_eq!(seen.len(), 2, "{seen:?}");
    for (safe, original) in &seen {
        assert!(
            full.contains(&(safe.clone(), original.clone())),
            "{original} is {safe} in the view but not in the full set {full:?}"
        );
    }
}
