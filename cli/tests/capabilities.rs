//! Capabilities end to end through the library: discovery and priority over real folders,
//! type routing, every status with real executor processes and real runners, nested trees,
//! input validation, permissions and audit, all recorded in a real SQLite file.

mod support;

#[path = "capabilities/logs.rs"]
mod logs;

use std::time::Duration;

use execbox_capabilities::{
    CapabilityErrorCode, ExecutionEventKind, ExecutionFilter, ExecutionStatus, ManagerOptions,
    Registry, Source, StartRequest,
};
use execbox_policy::{AuditLog, Enforcement, Policy};
use serde_json::{json, Value};
use support::capabilities::{alive, gone_within, read_pid, Roots};

/// A script capability: `entry` with `input_schema` and optional tools.
fn script_yaml(name: &str, extra: &str) -> String {
    format!(
        "name: {name}\ntype: script\nversion: 1.0.0\ndescription: {name}\nentry: index.js\n{extra}"
    )
}

fn typed_yaml(name: &str, kind: &str, extra: &str) -> String {
    format!("name: {name}\ntype: {kind}\ndescription: {name}\n{extra}")
}

/// An executor that reads its request, then runs `body` (with `$req` the request).
fn reading(body: &str) -> String {
    format!("req=$(cat)\n{body}\n")
}

fn statuses(history: &[execbox_capabilities::StatusChange]) -> Vec<ExecutionStatus> {
    history.iter().map(|c| c.status).collect()
}

#[test]
fn discovery_prefers_project_over_global_over_builtin_for_the_same_name() {
    let roots = Roots::new("priority");
    // The same capability name in the project and global roots, and the same executor name
    // (`script`) in all three: the built-in one, and external ones in global and project.
    roots.global.capability(
        "hello",
        &typed_yaml("hello", "script", "entry: index.js\n"),
        &[("index.js", "'global'")],
    );
    roots.project.capability(
        "hello",
        &typed_yaml("hello", "script", "entry: index.js\n"),
        &[("index.js", "'project'")],
    );
    roots
        .global
        .capability("only-global", &typed_yaml("only-global", "report", ""), &[]);
    let registry = Registry::load(roots.roots());
    let hello = registry.capability("hello").unwrap();
    assert_eq!(hello.source, Source::Project);
    assert!(hello.path.starts_with(&roots.project.0));
    assert_eq!(
        registry.capability("only-global").unwrap().source,
        Source::Global
    );
    let script = registry
        .executors()
        .into_iter()
        .find(|e| e.name == "script")
        .unwrap();
    assert_eq!(script.source, Source::Builtin);
    assert_eq!(script.command, None);

    roots.global.sh_executor(
        "script",
        &["script"],
        "cat >/dev/null; echo '\"global executor\"'",
    );
    let registry = Registry::load(roots.roots());
    let script = registry
        .executors()
        .into_iter()
        .find(|e| e.name == "script")
        .unwrap();
    assert_eq!(script.source, Source::Global);

    roots.project.sh_executor(
        "script",
        &["script"],
        "cat >/dev/null; echo '\"project executor\"'",
    );
    let registry = Registry::load(roots.roots());
    let script = registry
        .executors()
        .into_iter()
        .find(|e| e.name == "script")
        .unwrap();
    assert_eq!(script.source, Source::Project);
    assert_eq!(registry.executor_for_type("script"), Some("script"));

    // Without the project root, the global one wins.
    let mut only_global = roots.roots();
    only_global.project = None;
    let registry = Registry::load(only_global);
    assert_eq!(registry.capability("hello").unwrap().source, Source::Global);
    assert!(registry.issues().is_empty(), "{:?}", registry.issues());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn types_route_to_the_executor_of_the_highest_root() {
    let roots = Roots::new("routing");
    roots.global.sh_executor(
        "report-global",
        &["report"],
        &reading("echo '\"from global\"'"),
    );
    roots
        .global
        .sh_executor("audit-exec", &["audit"], &reading("echo '\"from audit\"'"));
    roots.project.sh_executor(
        "report-project",
        &["report"],
        &reading("echo '\"from project\"'"),
    );
    roots
        .project
        .capability("weekly", &typed_yaml("weekly", "report", ""), &[]);
    roots
        .project
        .capability("check", &typed_yaml("check", "audit", ""), &[]);
    roots.project.capability(
        "js",
        &script_yaml("js", ""),
        &[("index.js", "'from script'")],
    );
    let manager = roots.manager(ManagerOptions::default());
    assert_eq!(
        manager.registry().executor_for_type("report"),
        Some("report-project")
    );
    for (name, expected) in [
        ("weekly", "from project"),
        ("check", "from audit"),
        ("js", "from script"),
    ] {
        let id = manager
            .start(StartRequest::new(name, Value::Null), None)
            .await
            .unwrap();
        let outcome = manager.wait(&id, None).await.unwrap().unwrap();
        assert!(outcome.success, "{name}: {outcome:?}");
        assert_eq!(outcome.result, Some(json!(expected)));
    }
    // A type no executor supports, and a type that does not match.
    roots
        .project
        .capability("orphan", &typed_yaml("orphan", "nobody", ""), &[]);
    manager.reload(roots.roots());
    let e = manager
        .start(StartRequest::new("orphan", Value::Null), None)
        .await
        .unwrap_err();
    assert_eq!(e.code, CapabilityErrorCode::ExecutorNotFound);
    assert!(e.message.contains("nobody"), "{e}");
    let e = manager
        .start(
            StartRequest::new("weekly", Value::Null).capability_type("script"),
            None,
        )
        .await
        .unwrap_err();
    assert_eq!(e.code, CapabilityErrorCode::CapabilityNotFound);
    let e = manager
        .start(StartRequest::new("nope", Value::Null), None)
        .await
        .unwrap_err();
    assert_eq!(e.code, CapabilityErrorCode::CapabilityNotFound);
}

#[test]
fn invalid_configs_are_skipped_and_reported_with_their_codes() {
    let roots = Roots::new("invalid");
    roots.project.capability(
        "typo",
        "name: typo\ntype: script\nentry: index.js\ninputSchema: {}\n",
        &[("index.js", "1")],
    );
    roots
        .project
        .capability("misnamed", "name: other\ntype: report\n", &[]);
    roots
        .project
        .capability("good", &typed_yaml("good", "report", ""), &[]);
    roots
        .project
        .executor_yaml("notypes", "name: notypes\ncommand: /bin/true\n");
    roots
        .project
        .executor_yaml("nocommand", "name: nocommand\nsupportedTypes: [x]\n");
    // An entry that is a symbolic link to a file outside its folder.
    let secret = roots.temp.join("secret.txt");
    std::fs::write(&secret, "not for the sandbox").unwrap();
    let linked = roots
        .project
        .capability("linked", &script_yaml("linked", ""), &[]);
    std::os::unix::fs::symlink(&secret, linked.join("index.js")).unwrap();
    let registry = Registry::load(roots.roots());
    assert!(registry.capability("good").is_some());
    assert!(registry.capability("typo").is_none());
    assert!(registry.capability("linked").is_none());
    let issues = registry.issues();
    assert_eq!(issues.len(), 5, "{issues:?}");
    let linked = issues.iter().find(|i| i.path.ends_with("linked")).unwrap();
    assert!(
        linked
            .message
            .contains("leads outside the capability's folder"),
        "{}",
        linked.message
    );
    let typo = issues.iter().find(|i| i.path.ends_with("typo")).unwrap();
    assert_eq!(typo.code, CapabilityErrorCode::InvalidCapabilityConfig);
    assert!(
        typo.message.contains("capability.yaml:4:1"),
        "{}",
        typo.message
    );
    assert!(
        typo.message.contains("did you mean `input_schema`"),
        "{}",
        typo.message
    );
    let misnamed = issues
        .iter()
        .find(|i| i.path.ends_with("misnamed"))
        .unwrap();
    assert!(
        misnamed.message.contains("differs from its folder"),
        "{}",
        misnamed.message
    );
    for name in ["notypes", "nocommand"] {
        let issue = issues.iter().find(|i| i.path.ends_with(name)).unwrap();
        assert_eq!(
            issue.code,
            CapabilityErrorCode::InvalidExecutorConfig,
            "{issue:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_capability_calls_its_tools_with_params_and_its_execution_id() {
    let roots = Roots::new("script");
    let dir = roots.project.capability(
        "greet",
        &script_yaml(
            "greet",
            "tools: tools.yaml\ninput_schema: { type: object, required: [who], properties: { who: { type: string } } }\noutput_schema: { type: object, required: [text] }\n",
        ),
        &[
            ("index.js", "const r = await t.shout({ text: `hello ${params.who}` });\nreturn { result: { text: r.text }, additionalContext: { execution: r.execution } };\n"),
        ],
    );
    support::scripts::inline_tool(
        &dir,
        "shout",
        "input=$(cat); printf '{\"text\": \"%s\", \"execution\": \"%s\"}' \"$(echo \"$input\" | sed 's/.*\"text\":\"\\([^\"]*\\)\".*/\\1/' | tr a-z A-Z)\" \"$EXECBOX_EXECUTION_ID\"",
        "",
    );
    let manager = roots.manager(ManagerOptions::default());
    let mut events = manager.subscribe();
    let id = manager
        .start(StartRequest::new("greet", json!({"who": "ada"})), None)
        .await
        .unwrap();
    assert!(
        id.starts_with("cap_") && id.len() == "cap_".len() + 13 + 1 + 8,
        "{id}"
    );
    let outcome = manager.wait(&id, None).await.unwrap().unwrap();
    assert!(outcome.success, "{outcome:?}");
    assert_eq!(outcome.result, Some(json!({"text": "HELLO ADA"})));
    assert_eq!(outcome.additional_context, Some(json!({"execution": id})));
    assert_eq!(outcome.capability_path, dir.display().to_string());
    let history = manager.history(&id).await.unwrap();
    assert_eq!(
        statuses(&history),
        [
            ExecutionStatus::Starting,
            ExecutionStatus::Running,
            ExecutionStatus::Completed
        ]
    );
    let record = manager.get(&id).await.unwrap();
    assert_eq!(record.status, ExecutionStatus::Completed);
    assert_eq!(record.params, json!({"who": "ada"}));
    let first = events.recv().await.unwrap();
    assert_eq!(
        (first.event, first.execution_id.as_str()),
        (ExecutionEventKind::Started, id.as_str())
    );
    assert_eq!(
        events.recv().await.unwrap().event,
        ExecutionEventKind::Completed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn params_failing_the_input_schema_are_refused_before_anything_runs() {
    let roots = Roots::new("schema");
    roots.project.capability(
        "strict",
        &script_yaml("strict", "input_schema: { type: object, required: [repo], properties: { repo: { type: string } } }\n"),
        &[("index.js", "params.repo")],
    );
    let manager = roots.manager(ManagerOptions::default());
    let e = manager
        .start(StartRequest::new("strict", json!({"repo": 7})), None)
        .await
        .unwrap_err();
    assert_eq!(e.code, CapabilityErrorCode::InvalidRequest);
    assert!(
        e.message.contains("params.repo must be a string; got 7"),
        "{e}"
    );
    let e = manager
        .start(StartRequest::new("strict", Value::Null), None)
        .await
        .unwrap_err();
    assert!(e.message.contains("params.repo is required"), "{e}");
    assert!(manager
        .list(&ExecutionFilter::default())
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_failing_the_output_schema_fails_the_execution() {
    let roots = Roots::new("output");
    roots.project.capability(
        "liar",
        &script_yaml("liar", "output_schema: { type: object }\n"),
        &[("index.js", "42")],
    );
    let manager = roots.manager(ManagerOptions::default());
    let id = manager
        .start(StartRequest::new("liar", Value::Null), None)
        .await
        .unwrap();
    let outcome = manager.wait(&id, None).await.unwrap().unwrap();
    assert_eq!(outcome.status, ExecutionStatus::Failed);
    let error = outcome.error.unwrap();
    assert_eq!(error.code, CapabilityErrorCode::ExecutionFailed);
    assert!(error.message.contains("output_schema"), "{error:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_executor_gets_the_envelope_and_its_result_is_taken_apart() {
    let roots = Roots::new("external");
    let out = roots.temp.join("request.json");
    roots.project.sh_executor(
        "reports",
        &["report"],
        &format!("cat > '{}'\necho '{{\"result\": {{\"pages\": 3}}, \"additionalContext\": {{\"by\": \"sh\"}}}}'\n", out.display()),
    );
    let dir = roots.project.capability(
        "weekly",
        &typed_yaml("weekly", "report", "config: { depth: 2 }\n"),
        &[],
    );
    let manager = roots.manager(ManagerOptions::default());
    let id = manager
        .start(
            StartRequest::new("weekly", json!({"week": 12}))
                .parent_id("agent-7")
                .timeout_ms(5000),
            None,
        )
        .await
        .unwrap();
    let outcome = manager.wait(&id, None).await.unwrap().unwrap();
    assert!(outcome.success, "{outcome:?}");
    assert_eq!(outcome.result, Some(json!({"pages": 3})));
    assert_eq!(outcome.additional_context, Some(json!({"by": "sh"})));
    let request: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(request["schemaVersion"], 1);
    assert_eq!(request["capability"]["name"], "weekly");
    assert_eq!(request["capability"]["type"], "report");
    assert_eq!(request["capability"]["path"], dir.display().to_string());
    assert_eq!(
        request["capability"]["config"]["config"],
        json!({"depth": 2})
    );
    assert_eq!(request["input"], json!({"week": 12}));
    assert_eq!(
        request["execution"],
        json!({"id": id, "parentId": "agent-7", "timeoutMs": 5000})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_executor_with_empty_stdout_completes_without_a_result() {
    let roots = Roots::new("empty");
    roots
        .project
        .sh_executor("quiet", &["q"], "cat >/dev/null\n");
    roots
        .project
        .capability("q", &typed_yaml("q", "q", ""), &[]);
    let manager = roots.manager(ManagerOptions::default());
    let id = manager
        .start(StartRequest::new("q", Value::Null), None)
        .await
        .unwrap();
    let outcome = manager.wait(&id, None).await.unwrap().unwrap();
    assert!(outcome.success);
    assert_eq!(outcome.result, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_executor_exiting_non_zero_fails_with_its_trimmed_stderr() {
    let roots = Roots::new("failing");
    roots.project.sh_executor(
        "broken",
        &["b"],
        &reading("echo '  no such repo: a/b  ' >&2\nexit 3"),
    );
    roots
        .project
        .capability("b", &typed_yaml("b", "b", ""), &[]);
    let manager = roots.manager(ManagerOptions::default());
    let id = manager
        .start(StartRequest::new("b", Value::Null), None)
        .await
        .unwrap();
    let outcome = manager.wait(&id, None).await.unwrap().unwrap();
    assert_eq!(outcome.status, ExecutionStatus::Failed);
    let error = outcome.error.unwrap();
    assert_eq!(error.code, CapabilityErrorCode::ExecutionFailed);
    assert_eq!(error.message, "no such repo: a/b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_executor_that_does_not_drain_stdin_fails_even_when_it_exits_0() {
    let roots = Roots::new("undrained");
    roots
        .project
        .sh_executor("lazy", &["l"], "echo '\"done\"'\nexit 0\n");
    roots
        .project
        .capability("l", &typed_yaml("l", "l", ""), &[]);
    let manager = roots.manager(ManagerOptions::default());
    let id = manager
        .start(
            StartRequest::new("l", json!({"big": "x".repeat(200_000)})),
            None,
        )
        .await
        .unwrap();
    let outcome = manager.wait(&id, None).await.unwrap().unwrap();
    assert_eq!(outcome.status, ExecutionStatus::Failed);
    assert!(outcome
        .error
        .unwrap()
        .message
        .contains("without reading its whole request"));
    // A small request fits in the pipe: still not read, still failed.
    let id = manager
        .start(StartRequest::new("l", Value::Null), None)
        .await
        .unwrap();
    let outcome = manager.wait(&id, None).await.unwrap().unwrap();
    assert_eq!(outcome.status, ExecutionStatus::Failed, "{outcome:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_external_executor_times_out_and_its_process_group_is_killed() {
    let roots = Roots::new("hanging");
    let pids = roots.temp.join("pid");
    roots.project.sh_executor(
        "hang",
        &["h"],
        &reading(&format!("sleep 60 & echo $! > '{}'\nwait", pids.display())),
    );
    roots
        .project
        .capability("h", &typed_yaml("h", "h", "timeout_ms: 300\n"), &[]);
    let manager = roots.manager(ManagerOptions::default());
    let id = manager
        .start(StartRequest::new("h", Value::Null), None)
        .await
        .unwrap();
    let outcome = manager.wait(&id, None).await.unwrap().unwrap();
    assert_eq!(outcome.status, ExecutionStatus::Timeout);
    let error = outcome.error.unwrap();
    assert_eq!(error.code, CapabilityErrorCode::ExecutionTimeout);
    assert!(error.message.contains("300 ms"), "{error:?}");
    // The grandchild of the executor was in its group.
    assert!(gone_within(read_pid(&pids), Duration::from_secs(1)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_a_running_external_executor_goes_stopping_then_stopped_and_its_group_is_gone() {
    let roots = Roots::new("stop");
    let pids = roots.temp.join("pid");
    roots.project.sh_executor(
        "sleepy",
        &["s"],
        &reading(&format!("sleep 60 & echo $! > '{}'\nwait", pids.display())),
    );
    roots
        .project
        .capability("s", &typed_yaml("s", "s", ""), &[]);
    let manager = roots.manager(ManagerOptions::default());
    let id = manager
        .start(StartRequest::new("s", Value::Null), None)
        .await
        .unwrap();
    let sleeper = read_pid(&pids);
    assert_eq!(
        manager.get(&id).await.unwrap().status,
        ExecutionStatus::Running
    );
    let record = manager.stop(&id).await.unwrap();
    assert_eq!(record.status, ExecutionStatus::Stopped);
    assert_eq!(
        record.error.unwrap().code,
        CapabilityErrorCode::ExecutionStopped
    );
    assert!(gone_within(sleeper, Duration::from_secs(1)));
    let history = manager.history(&id).await.unwrap();
    assert_eq!(
        statuses(&history),
        [
            ExecutionStatus::Starting,
            ExecutionStatus::Running,
            ExecutionStatus::Stopping,
            ExecutionStatus::Stopped
        ]
    );
    // Stopping it again changes nothing.
    assert_eq!(
        manager.stop(&id).await.unwrap().status,
        ExecutionStatus::Stopped
    );
    let e = manager.stop("cap_0_00000000").await.unwrap_err();
    assert_eq!(e.code, CapabilityErrorCode::ExecutionNotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_an_external_executor_also_kills_a_setsid_grandchild() {
    let roots = Roots::new("stop-setsid");
    let pids = roots.temp.join("pid");
    // The grandchild starts a session of its own: it is no longer in the executor's group.
    roots.project.sh_executor(
        "daemonising",
        &["s"],
        &reading(&format!(
            "setsid sh -c 'echo $$ > \"{}\"; exec sleep 60' &\nsleep 60 & wait",
            pids.display()
        )),
    );
    roots
        .project
        .capability("s", &typed_yaml("s", "s", ""), &[]);
    let manager = roots.manager(ManagerOptions::default());
    let id = manager
        .start(StartRequest::new("s", Value::Null), None)
        .await
        .unwrap();
    let grandchild = read_pid(&pids);
    assert!(alive(grandchild));
    let group_of = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit_once(')').map(|(_, r)| r.to_owned()))
            .and_then(|r| r.split_whitespace().nth(2).map(str::to_owned))
    };
    assert_eq!(
        group_of(grandchild),
        Some(grandchild.to_string()),
        "the grandchild leads a group of its own"
    );
    let record = manager.stop(&id).await.unwrap();
    assert_eq!(record.status, ExecutionStatus::Stopped);
    assert!(
        gone_within(grandchild, Duration::from_secs(2)),
        "the setsid grandchild {grandchild} outlived the stop"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_all_for_parent_stops_a_nested_tree() {
    let roots = Roots::new("tree");
    let pids = roots.temp.join("pid");
    roots.project.sh_executor(
        "sleepy",
        &["s"],
        &reading(&format!("sleep 60 & echo $! > '{}'\nwait", pids.display())),
    );
    roots
        .project
        .capability("leaf", &typed_yaml("leaf", "s", ""), &[]);
    roots.project.capability(
        "middle",
        &script_yaml("middle", "timeout_ms: 60000\n"),
        &[("index.js", "await capabilities.run({ name: 'leaf' })")],
    );
    roots.project.capability(
        "outer",
        &script_yaml("outer", "timeout_ms: 60000\n"),
        &[(
            "index.js",
            "await capabilities.run({ name: 'middle', type: 'script' })",
        )],
    );
    let manager = roots.manager(ManagerOptions::default());
    let outer = manager
        .start(
            StartRequest::new("outer", Value::Null).parent_id("agent-1"),
            None,
        )
        .await
        .unwrap();
    let sleeper = read_pid(&pids);
    let middle = manager
        .list(&ExecutionFilter {
            parent_id: Some(outer.clone()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(middle.len(), 1);
    assert_eq!(middle[0].capability, "middle");
    let leaf = manager
        .list(&ExecutionFilter {
            parent_id: Some(middle[0].execution_id.clone()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(leaf.len(), 1);
    assert_eq!(leaf[0].status, ExecutionStatus::Running);

    let stopped = manager.stop_all_for_parent("agent-1").await.unwrap();
    assert_eq!(stopped.len(), 1);
    assert_eq!(stopped[0].execution_id, outer);
    for id in [&outer, &middle[0].execution_id, &leaf[0].execution_id] {
        assert_eq!(
            manager.get(id).await.unwrap().status,
            ExecutionStatus::Stopped,
            "{id}"
        );
    }
    assert!(gone_within(sleeper, Duration::from_secs(1)));
    assert_eq!(manager.running(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nesting_deeper_than_the_bound_fails_with_a_clear_error() {
    let roots = Roots::new("depth");
    roots.project.capability(
        "recurse",
        &script_yaml("recurse", "timeout_ms: 60000\n"),
        &[(
            "index.js",
            "1 + await capabilities.run({ name: 'recurse' })",
        )],
    );
    let manager = roots.manager(ManagerOptions {
        max_depth: 3,
        ..Default::default()
    });
    let id = manager
        .start(StartRequest::new("recurse", Value::Null), None)
        .await
        .unwrap();
    let outcome = manager.wait(&id, None).await.unwrap().unwrap();
    assert_eq!(outcome.status, ExecutionStatus::Failed);
    let message = outcome.error.unwrap().message;
    assert!(message.contains("would run 4 levels deep"), "{message}");
    assert!(message.contains("at most 3 levels deep"), "{message}");
    assert_eq!(
        manager
            .list(&ExecutionFilter {
                capability: Some("recurse".into()),
                ..Default::default()
            })
            .await
            .unwrap()
            .len(),
        3
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starting_needs_the_capability_s_permissions_and_is_audited() {
    let roots = Roots::new("permissions");
    roots.project.capability(
        "deploy",
        &script_yaml("deploy", "permissions: [deploy:run]\n"),
        &[("index.js", "'deployed'")],
    );
    let policy = Policy::builder()
        .principal("ops", [] as [&str; 0], ["deploy:*"])
        .principal("guest", [] as [&str; 0], [] as [&str; 0])
        .build()
        .unwrap();
    let audit_path = roots.temp.join("audit.jsonl");
    let audit = std::sync::Arc::new(AuditLog::open(&audit_path, false).unwrap());
    let manager = roots.manager(ManagerOptions {
        enforcement: Enforcement::unrestricted()
            .with_policy(policy.clone())
            .with_audit(audit),
        ..Default::default()
    });
    let e = manager
        .start(
            StartRequest::new("deploy", Value::Null),
            Some(policy.principal(Some("guest")).unwrap()),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code, CapabilityErrorCode::PermissionDenied);
    assert!(
        e.message.contains("deploy:run") && e.message.contains("guest"),
        "{e}"
    );
    let e = manager
        .start(StartRequest::new("deploy", Value::Null), None)
        .await
        .unwrap_err();
    assert_eq!(e.code, CapabilityErrorCode::PermissionDenied);
    let id = manager
        .start(
            StartRequest::new("deploy", Value::Null),
            Some(policy.principal(Some("ops")).unwrap()),
        )
        .await
        .unwrap();
    assert!(manager.wait(&id, None).await.unwrap().unwrap().success);
    assert_eq!(
        manager.get(&id).await.unwrap().principal.as_deref(),
        Some("ops")
    );
    let lines: Vec<Value> = std::fs::read_to_string(&audit_path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let events: Vec<(&str, &str)> = lines
        .iter()
        .filter(|l| l["capability"] == "deploy")
        .map(|l| {
            (
                l["event"].as_str().unwrap(),
                l.get("outcome").and_then(Value::as_str).unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        events,
        [
            ("capability_started", "denied"),
            ("capability_started", "denied"),
            ("capability_started", ""),
            ("capability_finished", "completed")
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_failure_and_timeout_have_their_statuses() {
    let roots = Roots::new("script-ends");
    roots.project.capability(
        "throws",
        &script_yaml("throws", ""),
        &[("index.js", "throw new Error('bad input')")],
    );
    roots.project.capability(
        "loops",
        &script_yaml("loops", "timeout_ms: 200\n"),
        &[("index.js", "while (true) {}")],
    );
    let manager = roots.manager(ManagerOptions::default());
    let id = manager
        .start(StartRequest::new("throws", Value::Null), None)
        .await
        .unwrap();
    let outcome = manager.wait(&id, None).await.unwrap().unwrap();
    assert_eq!(outcome.status, ExecutionStatus::Failed);
    assert!(outcome.error.unwrap().message.contains("bad input"));
    let id = manager
        .start(StartRequest::new("loops", Value::Null), None)
        .await
        .unwrap();
    // A wait shorter than the execution comes back empty.
    assert_eq!(
        manager
            .wait(&id, Some(Duration::from_millis(1)))
            .await
            .unwrap(),
        None
    );
    let outcome = manager.wait(&id, None).await.unwrap().unwrap();
    assert_eq!(outcome.status, ExecutionStatus::Timeout);
    assert_eq!(
        outcome.error.unwrap().code,
        CapabilityErrorCode::ExecutionTimeout
    );
    assert_eq!(
        manager
            .list(&ExecutionFilter {
                status: Some(ExecutionStatus::Timeout),
                ..Default::default()
            })
            .await
            .unwrap()
            .len(),
        1
    );
}

/// `execbox ARGS...` in `cwd`, with `EXECBOX_HOME` set to `home`.
fn cli(cwd: &std::path::Path, home: &std::path::Path, args: &[&str]) -> std::process::Output {
    support::cli::command(args)
        .current_dir(cwd)
        .env("EXECBOX_HOME", home)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run execbox")
}

#[test]
fn the_cli_lists_checks_shows_and_runs_capabilities_and_reads_executions() {
    use support::cli::text;
    let roots = Roots::new("cli");
    roots.project.capability(
        "echo",
        &script_yaml("echo", "input_schema: { type: object, required: [x] }\n"),
        &[("index.js", "({ got: params.x })")],
    );
    roots.global.capability(
        "echo",
        &script_yaml("echo", ""),
        &[("index.js", "'global'")],
    );
    roots.global.sh_executor(
        "fail-exec",
        &["fails"],
        &reading("echo 'it broke' >&2; exit 1"),
    );
    roots
        .global
        .capability("broken", &typed_yaml("broken", "fails", ""), &[]);
    roots.project.capability(
        "bad",
        "name: bad\ntype: script\nentry: index.js\ntimeout: 5\n",
        &[("index.js", "1")],
    );
    // Run from a folder inside the project: the project root is found walking up.
    let cwd = roots.project_dir().join("src/deep");
    std::fs::create_dir_all(&cwd).unwrap();
    let home = &roots.global.0;

    let list = cli(&cwd, home, &["capabilities", "list"]);
    assert!(list.status.success(), "{}", text(&list.stderr));
    let stdout = text(&list.stdout);
    assert!(stdout.contains("echo\tscript\tproject\tscript"), "{stdout}");
    assert!(
        stdout.contains("broken\tfails\tglobal\tfail-exec"),
        "{stdout}"
    );
    assert!(
        stdout.contains("script\tscript\tbuiltin\t(built in)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("1 invalid configuration skipped"),
        "{stdout}"
    );
    let list = cli(&cwd, home, &["capabilities", "list", "--json"]);
    let json: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(json["capabilities"].as_array().unwrap().len(), 2);
    assert!(json["executors"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["source"] == "builtin"));

    let check = cli(&cwd, home, &["capabilities", "check", "--json"]);
    assert_eq!(check.status.code(), Some(2));
    let json: Value = serde_json::from_slice(&check.stdout).unwrap();
    assert_eq!(json["ok"], false);
    assert_eq!(json["issues"][0]["code"], "INVALID_CAPABILITY_CONFIG");
    assert!(
        json["issues"][0]["message"]
            .as_str()
            .unwrap()
            .contains("capability.yaml:4:1: unknown field `timeout`"),
        "{json}"
    );

    let show = cli(&cwd, home, &["capabilities", "show", "echo"]);
    let json: Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(json["source"], "project");
    assert_eq!(json["inputSchema"]["required"], json!(["x"]));
    let missing = cli(&cwd, home, &["capabilities", "show", "nope"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(text(&missing.stderr).contains("CAPABILITY_NOT_FOUND"));

    let run = cli(
        &cwd,
        home,
        &["capabilities", "run", "echo", "--params", r#"{"x": 5}"#],
    );
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert_eq!(
        serde_json::from_slice::<Value>(&run.stdout).unwrap(),
        json!({"got": 5})
    );
    let refused = cli(
        &cwd,
        home,
        &["capabilities", "run", "echo", "--params", "{}"],
    );
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        text(&refused.stderr).contains("INVALID_REQUEST: capability `echo`: params.x is required"),
        "{}",
        text(&refused.stderr)
    );
    let failed = cli(&cwd, home, &["capabilities", "run", "broken", "--json"]);
    assert_eq!(failed.status.code(), Some(1));
    let outcome: Value = serde_json::from_slice(&failed.stdout).unwrap();
    assert_eq!(outcome["success"], false);
    assert_eq!(outcome["status"], "failed");
    assert_eq!(
        outcome["error"],
        json!({"code": "EXECUTION_FAILED", "message": "it broke"})
    );

    // Both runs are in the project's database.
    assert!(roots.project.0.join("state.db").is_file());
    let list = cli(&cwd, home, &["executions", "list", "--json"]);
    let records: Vec<Value> = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(records.len(), 2);
    let failed_id = outcome["executionId"].as_str().unwrap();
    let list = cli(&cwd, home, &["executions", "list", "--status", "failed"]);
    let stdout = text(&list.stdout);
    assert!(
        stdout.contains(&format!("{failed_id}\tfailed\tbroken")),
        "{stdout}"
    );
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    let show = cli(&cwd, home, &["executions", "show", failed_id]);
    let json: Value = serde_json::from_slice(&show.stdout).unwrap();
    let history: Vec<&str> = json["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["status"].as_str().unwrap())
        .collect();
    assert_eq!(history, ["starting", "running", "failed"]);
    let bad = cli(&cwd, home, &["executions", "list", "--status", "sleeping"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        text(&bad.stderr).contains("unknown status `sleeping`"),
        "{}",
        text(&bad.stderr)
    );
}

#[test]
fn the_examples_run_through_the_cli() {
    let temp = support::temp::TempDir::new("examples");
    let db = temp.join("state.db");
    let run = |name: &str, params: &str| {
        support::cli::command(&[
            "capabilities",
            "run",
            name,
            "--params",
            params,
            "--project",
            "examples/capabilities",
            "--db",
            db.to_str().unwrap(),
        ])
        .env("EXECBOX_HOME", temp.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
    };
    let out = run("word-stats", r#"{"text": "the cat saw the dog"}"#);
    assert!(out.status.success(), "{}", support::cli::text(&out.stderr));
    assert_eq!(
        serde_json::from_slice::<Value>(&out.stdout).unwrap(),
        json!({"words": 5, "top": "the", "topCount": 2})
    );
    let out = run("digest", r#"{"text": "ship it, ship it now"}"#);
    assert!(out.status.success(), "{}", support::cli::text(&out.stderr));
    assert_eq!(
        serde_json::from_slice::<Value>(&out.stdout).unwrap(),
        json!("# Digest\n\n- 5 words\n- most frequent: ship")
    );
    let out = run("weekly-report", r#"{"title": "Week 12", "items": []}"#);
    assert_eq!(out.status.code(), Some(1));
    assert!(support::cli::text(&out.stderr)
        .contains("EXECUTION_FAILED: a report needs at least one item"));
}

#[test]
fn a_paused_run_is_reported_waiting_with_the_command_that_decides_it() {
    let roots = Roots::new("paused-cli");
    let dir = roots.project.capability(
        "notify",
        &script_yaml("notify", "tools: tools.yaml\n"),
        &[(
            "index.js",
            "console.log('before'); await mail.send({ to: 'bob' })",
        )],
    );
    std::fs::write(
        dir.join("tools.yaml"),
        "version: 1\nproviders:\n  mail:\n    tools:\n      send:\n        command: /bin/sh\n        args: [\"-c\", \"cat >/dev/null; echo '{\\\"sent\\\": 7}'\"]\n        requires_approval: true\n",
    )
    .unwrap();
    let project = roots.project_dir();
    let run = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--project", project.to_str().unwrap()]);
        support::cli::command(&all)
            .env("EXECBOX_HOME", &roots.global.0)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    let out = run(&["capabilities", "run", "notify"]);
    let stderr = support::cli::text(&out.stderr);
    // Waiting is not failing: its own exit status, 3.
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("awaiting_approval: call 1 (mail.send) needs approval, and has not run")
            && !stderr.contains("failed")
            && !stderr.contains("EXECUTION_FAILED"),
        "{stderr}"
    );
    // The command it prints decides it, as printed, without a terminal.
    let command = stderr
        .split('`')
        .find(|part| part.starts_with("execbox executions approve "))
        .unwrap_or_else(|| panic!("no approve command in {stderr}"));
    let args: Vec<&str> = command.split(' ').skip(1).collect();
    let out = run(&args);
    assert!(out.status.success(), "{}", support::cli::text(&out.stderr));
    assert_eq!(
        serde_json::from_slice::<Value>(&out.stdout).unwrap(),
        json!({"sent": 7})
    );
}

#[test]
fn a_policy_rule_on_the_amount_runs_a_small_payment_and_pauses_a_large_one() {
    let roots = Roots::new("rules-cli");
    let dir = roots.project.capability(
        "pay",
        &script_yaml("pay", "tools: tools.yaml\n"),
        &[(
            "index.js",
            "const small = await pay.send({ amount: params.small });\n\
             const large = await pay.send({ amount: params.large });\n\
             return [small, large];",
        )],
    );
    std::fs::write(
        dir.join("tools.yaml"),
        "version: 1\nproviders:\n  pay:\n    tools:\n      send:\n        command: /bin/sh\n        args: [\"-c\", \"cat >/dev/null; echo '{\\\"sent\\\": true}'\"]\n",
    )
    .unwrap();
    let policy = roots.temp.join("policy.yaml");
    std::fs::write(
        &policy,
        "version: 1\nrules:\n  - { tool: pay.send, when: \"input.amount > 100\", action: approve, reason: \"payments over 100\" }\n",
    )
    .unwrap();
    let project = roots.project_dir();
    let run = |params: &str| {
        support::cli::command(&[
            "capabilities",
            "run",
            "pay",
            "--params",
            params,
            "--policy",
            policy.to_str().unwrap(),
            "--project",
            project.to_str().unwrap(),
        ])
        .env("EXECBOX_HOME", &roots.global.0)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
    };
    let out = run(r#"{"small": 1, "large": 2}"#);
    assert!(out.status.success(), "{}", support::cli::text(&out.stderr));
    let out = run(r#"{"small": 1, "large": 500}"#);
    let stderr = support::cli::text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("awaiting_approval: call 2 (pay.send) needs approval, and has not run"),
        "{stderr}"
    );
}

/// `git ARGS` in `dir`, which must succeed; its stdout.
fn git(dir: &std::path::Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        support::cli::text(&out.stderr)
    );
    support::cli::text(&out.stdout)
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

#[test]
fn the_readme_capability_run_leaves_a_git_checkout_clean() {
    let temp = support::temp::TempDir::new("git-clean");
    let repo = temp.join("repo");
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/capabilities");
    copy_dir(
        std::path::Path::new(example),
        &repo.join("examples/capabilities"),
    );
    std::fs::create_dir_all(repo.join("empty")).unwrap();
    std::fs::write(repo.join("empty/README"), "a project without .execbox/\n").unwrap();
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "."]);
    git(
        &repo,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@e",
            "commit",
            "-q",
            "-m",
            "x",
        ],
    );
    // The README's command, from the top of the repository (the state in the project).
    let out = support::cli::command(&[
        "capabilities",
        "run",
        "word-stats",
        "--params",
        r#"{"text": "the cat saw the dog"}"#,
        "--project",
        "examples/capabilities",
    ])
    .current_dir(&repo)
    .env("EXECBOX_HOME", temp.join("home"))
    .stdin(std::process::Stdio::null())
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", support::cli::text(&out.stderr));
    assert!(repo
        .join("examples/capabilities/.execbox/state.db")
        .exists());
    // A project whose .execbox/ execbox creates for its state: all of it is ignored.
    let out = support::cli::command(&["executions", "list", "--project", "empty"])
        .current_dir(&repo)
        .env("EXECBOX_HOME", temp.join("home"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", support::cli::text(&out.stderr));
    assert!(repo.join("empty/.execbox/state.db").exists());
    assert_eq!(
        git(&repo, &["status", "--porcelain", "--untracked-files=all"]),
        ""
    );
    // The capabilities beside the state are not ignored.
    std::fs::write(
        repo.join("examples/capabilities/.execbox/capabilities/word-stats/new.js"),
        "1",
    )
    .unwrap();
    assert_eq!(
        git(&repo, &["status", "--porcelain"]),
        "?? examples/capabilities/.execbox/capabilities/word-stats/new.js\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn params_cannot_reach_the_program_past_the_input_schema_through_proto() {
    let roots = Roots::new("proto");
    roots.project.capability(
        "roles",
        &script_yaml(
            "roles",
            "input_schema: { type: object, properties: { role: { enum: [user] } } }\n",
        ),
        &[(
            "index.js",
            "({ own: Object.keys(params), role: params.role ?? null, plain: Object.getPrototypeOf(params) === Object.prototype })",
        )],
    );
    let manager = roots.manager(ManagerOptions::default());
    let id = manager
        .start(
            StartRequest::new("roles", json!({"__proto__": {"role": "admin"}})),
            None,
        )
        .await
        .unwrap();
    let outcome = manager.wait(&id, None).await.unwrap().unwrap();
    assert!(outcome.success, "{outcome:?}");
    assert_eq!(
        outcome.result,
        Some(json!({"own": ["__proto__"], "role": null, "plain": true}))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_that_ends_leaves_no_child_running() {
    let roots = Roots::new("orphans");
    let pids = roots.temp.join("pid");
    roots.project.sh_executor(
        "sleepy",
        &["s"],
        &reading(&format!("sleep 60 & echo $! > '{}'\nwait", pids.display())),
    );
    roots
        .project
        .capability("leaf", &typed_yaml("leaf", "s", ""), &[]);
    // The parent starts a child it never waits for, then runs out of time.
    roots.project.capability(
        "careless",
        &script_yaml("careless", "timeout_ms: 3000\n"),
        &[(
            "index.js",
            "capabilities.run({ name: 'leaf' }).catch(() => {}); await new Promise(() => {});",
        )],
    );
    let manager = roots.manager(ManagerOptions::default());
    let parent = manager
        .start(StartRequest::new("careless", Value::Null), None)
        .await
        .unwrap();
    let sleeper = read_pid(&pids);
    let outcome = manager.wait(&parent, None).await.unwrap().unwrap();
    assert_eq!(outcome.status, ExecutionStatus::Timeout);
    // By the time the parent's end is reported, its child has ended too.
    let children = manager
        .list(&ExecutionFilter {
            parent_id: Some(parent.clone()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(children.len(), 1);
    assert!(children[0].status.is_terminal(), "{:?}", children[0].status);
    assert!(gone_within(sleeper, Duration::from_secs(1)));
    assert_eq!(manager.running(), 0);
}

#[test]
fn recovery_kills_only_the_process_groups_that_run_the_execution() {
    use std::os::unix::process::CommandExt as _;
    let roots = Roots::new("recovery");
    let db = roots.temp.join("state.db");
    drop(execbox_capabilities::ExecutionStore::open(&db).unwrap());
    // An unrelated process group, and one that runs execution `cap_1_marked`.
    let mut unrelated = std::process::Command::new("sleep")
        .arg("300")
        .process_group(0)
        .spawn()
        .unwrap();
    let mut marked = std::process::Command::new("sleep")
        .arg("300")
        .env("EXECBOX_EXECUTION_ID", "cap_1_marked")
        .process_group(0)
        .spawn()
        .unwrap();
    let conn = rusqlite::Connection::open(&db).unwrap();
    for (id, pgid) in [
        ("cap_1_planted", unrelated.id()),
        ("cap_1_marked", marked.id()),
    ] {
        conn.execute(
            "INSERT INTO executions (id, capability, type, executor, capability_path, status, params, created_ms, updated_ms, owner_pid, pgid)
             VALUES (?1, 'c', 's', 'e', '/c', 'running', '{}', 1, 1, 999999999, ?2)",
            rusqlite::params![id, pgid],
        )
        .unwrap();
    }
    drop(conn);
    let store = execbox_capabilities::ExecutionStore::open(&db).unwrap();
    let mut recovered = store.recovered().to_vec();
    recovered.sort();
    assert_eq!(recovered, ["cap_1_marked", "cap_1_planted"]);
    for id in &recovered {
        let record = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(store.get(id))
            .unwrap()
            .unwrap();
        assert_eq!(record.status, ExecutionStatus::Failed);
        assert_eq!(
            record.error.unwrap().message,
            "interrupted: the server stopped"
        );
    }
    // The marked group is killed; the group the file merely named is not.
    assert!(marked.wait().is_ok());
    assert!(
        unrelated.try_wait().unwrap().is_none(),
        "an unrelated process group was killed"
    );
    let _ = unrelated.kill();
    let _ = unrelated.wait();
}

#[test]
fn sigterm_stops_a_cli_run_and_its_executor_before_exiting() {
    let roots = Roots::new("cli-sigterm");
    let pids = roots.temp.join("pid");
    roots.project.sh_executor(
        "sleepy",
        &["s"],
        &reading(&format!("sleep 60 & echo $! > '{}'\nwait", pids.display())),
    );
    roots
        .project
        .capability("leaf", &typed_yaml("leaf", "s", ""), &[]);
    let mut child = support::cli::command(&["capabilities", "run", "leaf"])
        .current_dir(roots.project_dir())
        .env("EXECBOX_HOME", &roots.global.0)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run execbox");
    let sleeper = read_pid(&pids);
    support::process::signal(child.id(), libc::SIGTERM).unwrap();
    let status = child.wait().expect("wait for execbox");
    assert_eq!(status.code(), Some(143));
    assert!(gone_within(sleeper, Duration::from_secs(1)));
    let store =
        execbox_capabilities::ExecutionStore::open(roots.project_dir().join(".execbox/state.db"))
            .unwrap();
    let records = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(store.list(&ExecutionFilter::default()))
        .unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].status, ExecutionStatus::Stopped);
}

#[test]
fn a_script_capability_calls_an_openapi_provider_of_its_tools_file() {
    let server = support::openapi::EchoServer::start();
    let roots = Roots::new("openapi-cli");
    let dir = roots.project.capability(
        "whoami",
        &script_yaml("whoami", "tools: tools.yaml\n"),
        &[(
            "index.js",
            "const echoed = await api.echo();\nreturn { auth: echoed.authorization, agent: echoed['user-agent'].split('/')[0] };",
        )],
    );
    std::fs::write(
        dir.join("echo.json"),
        r#"{"openapi": "3.0.3", "info": {"title": "Echo", "version": "1"},
            "paths": {"/echo": {"get": {"operationId": "echo", "responses": {"200": {"description": "the headers"}}}}}}"#,
    )
    .unwrap();
    std::fs::write(dir.join("token"), "PLANTED-capability-token\n").unwrap();
    std::fs::write(
        dir.join("tools.yaml"),
        format!(
            "version: 1\nproviders:\n  api:\n    openapi: ./echo.json\n    base_url: {}\n    auth:\n      bearer: {{ file: ./token }}\n",
            server.url
        ),
    )
    .unwrap();
    let project = roots.project_dir();
    let out = support::cli::command(&[
        "capabilities",
        "run",
        "whoami",
        "--project",
        project.to_str().unwrap(),
    ])
    .env("EXECBOX_HOME", &roots.global.0)
    .stdin(std::process::Stdio::null())
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", support::cli::text(&out.stderr));
    assert_eq!(
        serde_json::from_slice::<Value>(&out.stdout).unwrap(),
        json!({"auth": "Bearer [redacted]", "agent": "execbox"})
    );
    let seen = server.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].headers.contains(&(
        "authorization".into(),
        "Bearer PLANTED-capability-token".into()
    )));
}
