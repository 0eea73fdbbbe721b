//! A script capability's logs (its console lines, then the host's `[execbox]` notes) reach
//! its outcome, its record in the SQLite file, its end event, and `execbox capabilities run`'s
//! stderr.

use execbox_capabilities::{ExecutionEventKind, ExecutionStore, ManagerOptions, StartRequest};
use serde_json::json;

use super::support::capabilities::Roots;
use super::support::cli::text;
use super::{cli, script_yaml};

/// A project with a capability `chatty` that logs a line and starts a tool call it does not
/// await (`t.touch`, which writes `touched` into the capability's folder after a moment).
fn chatty(name: &str) -> Roots {
    let roots = Roots::new(name);
    let dir = roots.project.capability(
        "chatty",
        &script_yaml("chatty", "tools: tools.yaml\n"),
        &[(
            "index.js",
            "console.log(`working on ${params.x}`);\nt.touch({});\nreturn 1;\n",
        )],
    );
    super::support::scripts::inline_tool(
        &dir,
        "touch",
        "cat > /dev/null; sleep 0.2; echo x > \"$1/touched\"; echo true",
        &dir.display().to_string(),
    );
    roots
}

const NOTE: &str = "[execbox] 1 tool call was not awaited: t.touch; it finished after the program returned — await it";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_capability_s_logs_reach_its_outcome_record_and_end_event() {
    let roots = chatty("logs-library");
    let manager = roots.manager(ManagerOptions::default());
    let mut events = manager.subscribe();
    let id = manager
        .start(StartRequest::new("chatty", json!({"x": 7})), None)
        .await
        .unwrap();
    let outcome = manager.wait(&id, None).await.unwrap().unwrap();
    assert!(outcome.success, "{outcome:?}");
    assert_eq!(outcome.logs, ["working on 7", NOTE]);
    // The call the program did not await finished before the outcome.
    assert!(std::path::Path::new(&outcome.capability_path)
        .join("touched")
        .exists());
    // Written to the file: another store on it reads them back.
    let store = ExecutionStore::open(manager.store().path().unwrap()).unwrap();
    let record = store.get(&id).await.unwrap().unwrap();
    assert_eq!(record.logs, ["working on 7", NOTE]);
    loop {
        let event = events.recv().await.unwrap();
        if event.event == ExecutionEventKind::Completed {
            assert_eq!(event.logs, ["working on 7", NOTE]);
            break;
        }
        assert!(event.logs.is_empty(), "{event:?}");
    }
}

#[test]
fn capabilities_run_prints_the_logs_on_stderr() {
    let roots = chatty("logs-cli");
    let out = cli(
        &roots.project_dir(),
        &roots.global.0,
        &["capabilities", "run", "chatty", "--params", r#"{"x": 5}"#],
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(text(&out.stdout).trim(), "1");
    assert!(
        stderr.contains(&format!("working on 5\n{NOTE}\n")),
        "{stderr}"
    );
}
