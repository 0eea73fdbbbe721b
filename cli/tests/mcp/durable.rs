//! `execute_code` for a client that can be asked nothing (no elicitation, not 2026-07-28): a
//! program reaching a call that needs approval pauses durably in the state database, the
//! model is told it waits (not a failure), and an operator decides it later with
//! `execbox executions approve|deny`, after `execbox mcp` was SIGKILLed. The upstream counts
//! its own calls in the marks file.

use super::*;

/// A clock reading and a random number go into the first call: a resumed run that did not
/// replay them would make another call and diverge.
const PROGRAM: &str = "const stamp = Date.now() + ':' + Math.random();\n\
const echoed = await alpha.echo({ text: stamp });\n\
console.log('before the sum');\n\
const sum = (await alpha.add({ a: 2, b: 3 })).sum;\n\
return { stamp, echoed, sum }";

/// `execbox ARGS` to its end: status, stdout, stderr.
async fn execbox(h: &Harness, args: &[&str]) -> Result<(Option<i32>, Value, String), String> {
    let output = Command::new(EXECBOX)
        .args(args)
        .current_dir(&h.dir)
        .env("EXECBOX_HOME", h.dir.join("home"))
        .env_remove("RUST_LOG")
        .output()
        .await
        .map_err(|e| e.to_string())?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let json = serde_json::from_str(&stdout).unwrap_or(Value::String(stdout));
    Ok((output.status.code(), json, stderr))
}

fn calls(h: &Harness, tool: &str) -> usize {
    h.marks().matches(&format!("called {tool}\n")).count()
}

/// Pauses `PROGRAM` through a fresh `execbox mcp` with `flags`; its answer, then the server
/// is SIGKILLed.
async fn pause_and_kill(h: &Harness, flags: &[&str]) -> Result<Answer, String> {
    let mut mcp = h.start_approving(flags, None).await?;
    let paused = mcp.exec(PROGRAM).await?;
    mcp.child.start_kill().map_err(|e| e.to_string())?;
    let _ = mcp.child.wait().await;
    Ok(paused)
}

pub(crate) async fn a_program_nobody_can_approve_now_waits_for_an_operator(
    h: Harness,
) -> Result<(), String> {
    let mut alpha = h.upstream("alpha");
    alpha["requireApproval"] = json!(["add"]);
    let config = h.config(json!({ "alpha": alpha }));
    let db = h.dir.join("state.db");
    let db = db.to_str().unwrap();
    let flags = ["--config", config.to_str().unwrap(), "--db", db];

    // Paused: not an error, what it waits on, what to tell the user; add did not run.
    let paused = pause_and_kill(&h, &flags).await?;
    check!(!paused.is_error, "{}", paused.text);
    let s = &paused.structured;
    check!(
        s["ok"] == json!(false) && s["status"] == json!("awaiting_approval"),
        "{s}"
    );
    check!(
        s["waitingFor"] == json!({"tool": "alpha.add", "input": {"a": 2, "b": 3}}),
        "{s}"
    );
    let id = s["executionId"]
        .as_str()
        .ok_or("no executionId")?
        .to_owned();
    let message = s["message"].as_str().unwrap_or_default();
    let config_path = config.to_str().unwrap();
    check!(
        message.contains(&format!(
            "execbox executions approve {id} --db {db} --mcp-config {config_path}"
        )) && message.contains("You cannot approve it"),
        "{message}"
    );
    check!(s["logs"] == json!(["before the sum"]), "{s}");
    check!(
        calls(&h, "echo") == 1 && calls(&h, "add") == 0,
        "{}",
        h.marks()
    );

    // The server is gone; the execution waits in the database.
    let (status, listed, stderr) = execbox(
        &h,
        &[
            "executions",
            "list",
            "--status",
            "awaiting_approval",
            "--db",
            db,
            "--json",
        ],
    )
    .await?;
    check!(status == Some(0), "{stderr}");
    check!(
        listed[0]["executionId"] == json!(id)
            && listed[0]["capability"] == json!("execute_code")
            && listed[0]["type"] == json!("program")
            && listed[0]["pendingApproval"]["tool"] == json!("alpha.add"),
        "{listed}"
    );

    // Approving starts the servers of the recorded config: only when the approver names it,
    // and only as it was; a refusal leaves the execution waiting.
    let (status, _, stderr) = execbox(
        &h,
        &["executions", "approve", &id, "--call", "2", "--db", db],
    )
    .await?;
    // A usage error naming the flag and the file, not a failure: it still waits.
    check!(
        status == Some(2)
            && stderr.contains(&format!(
                "needs `execbox executions approve {id} --mcp-config {config_path}`"
            ))
            && stderr.contains("confirm with --mcp-config")
            && stderr.contains("still waiting for approval")
            && !stderr.contains("EXECUTION_FAILED")
            && !stderr.contains("failed"),
        "{stderr}"
    );
    let (status, shown, stderr) = execbox(&h, &["executions", "show", &id, "--db", db]).await?;
    check!(
        status == Some(0) && shown["status"] == json!("awaiting_approval"),
        "{shown}\n{stderr}"
    );
    let other = h.write("other.json", "{\"mcpServers\": {}}");
    let other = other.to_str().unwrap();
    let (status, _, stderr) = execbox(
        &h,
        &[
            "executions",
            "approve",
            &id,
            "--call",
            "2",
            "--db",
            db,
            "--mcp-config",
            other,
        ],
    )
    .await?;
    check!(
        status == Some(2) && stderr.contains(&format!("not {other}")),
        "{stderr}"
    );
    check!(calls(&h, "add") == 0, "{}", h.marks());

    // Approved from a shell: it runs to its end here, each upstream call made once, the
    // clock and Math.random() replayed (the echo's input matched the record).
    let approve = [
        "executions",
        "approve",
        &id,
        "--call",
        "2",
        "--db",
        db,
        "--mcp-config",
        config_path,
    ];
    let (status, done, stderr) = execbox(&h, &[&approve[..], &["--json"]].concat()).await?;
    check!(status == Some(0), "{done}\n{stderr}");
    check!(
        done["success"] == json!(true) && done["result"]["sum"] == json!(5),
        "{done}"
    );
    check!(
        done["result"]["echoed"] == done["result"]["stamp"],
        "{done}"
    );
    check!(
        calls(&h, "echo") == 1 && calls(&h, "add") == 1,
        "{}",
        h.marks()
    );

    // Approving again (a retry of the decision taken) answers with the execution as it is,
    // and runs nothing again; a denial of the call approved is refused.
    let (status, _, stderr) = execbox(&h, &[&approve[..], &["--json"]].concat()).await?;
    check!(status == Some(0), "{stderr}");
    let deny = ["executions", "deny", &id, "--call", "2", "--db", db];
    let (status, _, stderr) = execbox(&h, &deny).await?;
    check!(
        status == Some(1) && stderr.contains("DECISION_MISMATCH"),
        "{stderr}"
    );
    check!(calls(&h, "add") == 1, "{}", h.marks());

    // A config edited while it waits is not what it ran with: not started, still waiting.
    let paused = pause_and_kill(&h, &flags).await?;
    let edited = paused.structured["executionId"]
        .as_str()
        .ok_or("no executionId")?
        .to_owned();
    let original = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("{original}\n")).unwrap();
    let (status, _, stderr) = execbox(
        &h,
        &[
            "executions",
            "approve",
            &edited,
            "--call",
            "2",
            "--db",
            db,
            "--mcp-config",
            config_path,
        ],
    )
    .await?;
    check!(
        status == Some(2)
            && stderr.contains("changed since it was served")
            && !stderr.contains("EXECUTION_FAILED"),
        "{stderr}"
    );
    std::fs::write(&config, original).unwrap();
    check!(calls(&h, "add") == 1, "{}", h.marks());

    // Tools that cannot be started (here: an origin the record no longer reads) leave it
    // paused, and say so: nothing failed.
    let paused = pause_and_kill(&h, &flags).await?;
    let unstartable = paused.structured["executionId"]
        .as_str()
        .ok_or("no executionId")?
        .to_owned();
    {
        let conn = rusqlite::Connection::open(db).map_err(|e| e.to_string())?;
        conn.execute(
            "UPDATE executions SET params = json_set(params, '$.origin.startupTimeoutSecs', 'soon') WHERE id = ?1",
            [&unstartable],
        )
        .map_err(|e| e.to_string())?;
    }
    let (status, _, stderr) = execbox(
        &h,
        &[
            "executions",
            "approve",
            &unstartable,
            "--call",
            "2",
            "--db",
            db,
            "--mcp-config",
            config_path,
        ],
    )
    .await?;
    check!(
        status == Some(1)
            && stderr.contains("stays paused, awaiting approval")
            && !stderr.contains("EXECUTION_FAILED"),
        "{stderr}"
    );
    let (_, shown, _) = execbox(&h, &["executions", "show", &unstartable, "--db", db]).await?;
    check!(shown["status"] == json!("awaiting_approval"), "{shown}");
    check!(calls(&h, "add") == 1, "{}", h.marks());

    // Denied: it fails naming the denial, and add never runs.
    let paused = pause_and_kill(&h, &flags).await?;
    let id = paused.structured["executionId"]
        .as_str()
        .ok_or("no executionId")?
        .to_owned();
    let (status, denied, stderr) = execbox(
        &h,
        &[
            "executions",
            "deny",
            &id,
            "--call",
            "2",
            "--db",
            db,
            "--reason",
            "not today",
        ],
    )
    .await?;
    check!(status == Some(0), "{stderr}");
    check!(
        denied["status"] == json!("failed")
            && denied["error"]["code"] == json!("APPROVAL_DENIED")
            && denied["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("alpha.add") && m.contains("not today")),
        "{denied}"
    );
    check!(
        calls(&h, "echo") == 4 && calls(&h, "add") == 1,
        "{}",
        h.marks()
    );

    // --no-pause keeps the refusal of a call nobody can approve.
    let mcp = h
        .start_approving(&["--config", config.to_str().unwrap(), "--no-pause"], None)
        .await?;
    let refused = mcp.exec(PROGRAM).await?;
    check!(
        refused.is_error && refused.text.contains("alpha.add: approval required"),
        "{}",
        refused.text
    );
    mcp.stop().await?;
    Ok(())
}

/// `execution_result {id}`'s answer, through `mcp`.
async fn execution_result(mcp: &Mcp, id: &str) -> Result<Answer, String> {
    Ok(answer(
        mcp.call("execution_result", json!({ "id": id })).await?,
    ))
}

pub(crate) async fn execution_result_gives_an_approved_program_its_answer_for_its_principal_only(
    h: Harness,
) -> Result<(), String> {
    let mut alpha = h.upstream("alpha");
    alpha["requireApproval"] = json!(["add"]);
    let config = h.config(json!({ "alpha": alpha }));
    let config = config.to_str().unwrap();
    let policy = h.write(
        "policy.yaml",
        "version: 1\nprincipals:\n  alice: { permissions: [\"alpha:*\"] }\n  \
         bob: { permissions: [\"alpha:*\"] }\n  ops: { permissions: [\"executions:approve\"] }\n",
    );
    let policy = policy.to_str().unwrap();
    let db = h.dir.join("state.db");
    let db = db.to_str().unwrap();
    let as_principal = |who: &'static str| {
        [
            "--config",
            config,
            "--db",
            db,
            "--policy",
            policy,
            "--principal",
            who,
        ]
    };
    let alice = h.start_approving(&as_principal("alice"), None).await?;

    // Listed, read-only, beside the other two.
    let tools = alice
        .client
        .list_all_tools()
        .await
        .map_err(|e| e.to_string())?;
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    check!(
        names == ["execute_code", "search_tools", "execution_result"],
        "{names:?}"
    );
    let read_only = tools
        .iter()
        .find(|t| t.name == "execution_result")
        .and_then(|t| t.annotations.as_ref())
        .and_then(|a| a.read_only_hint);
    check!(read_only == Some(true), "{tools:?}");

    // The paused answer names the execution and the tool to call later.
    let paused = alice.exec(PROGRAM).await?;
    let id = paused.structured["executionId"]
        .as_str()
        .ok_or("no executionId")?
        .to_owned();
    let message = paused.structured["message"].as_str().unwrap_or_default();
    check!(
        message.contains(&format!("execution_result {{\"id\": \"{id}\"}}")),
        "{message}"
    );

    // Before approval: it waits, which is no error.
    let waiting = execution_result(&alice, &id).await?;
    check!(!waiting.is_error, "{}", waiting.text);
    check!(
        waiting.structured["status"] == json!("awaiting_approval")
            && waiting.structured["executionId"] == json!(id)
            && waiting.structured["waitingFor"]["tool"] == json!("alpha.add"),
        "{}",
        waiting.structured
    );

    // Another principal, and an id nobody has, get one refusal: ids cannot be probed.
    let bob = h.start_approving(&as_principal("bob"), None).await?;
    let theirs = execution_result(&bob, &id).await?;
    let unknown = execution_result(&alice, "cap_0_00000000").await?;
    check!(
        theirs.is_error && unknown.is_error,
        "{theirs:?} {unknown:?}"
    );
    check!(
        theirs
            .text
            .starts_with(&format!("no execution {id} for you"))
            && theirs.text.replace(&id, "ID") == unknown.text.replace("cap_0_00000000", "ID"),
        "{}\n{}",
        theirs.text,
        unknown.text
    );
    bob.stop().await?;

    // Approved out of band: the model gets the program's answer, as execute_code gives one.
    let (status, done, stderr) = execbox(
        &h,
        &[
            "executions",
            "approve",
            &id,
            "--call",
            "2",
            "--db",
            db,
            "--mcp-config",
            config,
            "--policy",
            policy,
            "--principal",
            "ops",
            "--json",
        ],
    )
    .await?;
    check!(status == Some(0), "{done}\n{stderr}");
    let result = execution_result(&alice, &id).await?;
    let expected = json!({"ok": true, "result": done["result"], "logs": ["before the sum"]});
    check!(!result.is_error, "{}", result.text);
    check!(result.structured == expected, "{}", result.structured);
    check!(
        result.text == serde_json::to_string(&expected).unwrap(),
        "{}",
        result.text
    );
    check!(
        result.structured["result"]["sum"] == json!(5),
        "{}",
        result.text
    );

    // A program that fails after its approved call: the failure, in execute_code's shape.
    let failing = alice
        .exec("await alpha.add({ a: 1, b: 1 });\nnull.boom")
        .await?;
    let failing_id = failing.structured["executionId"]
        .as_str()
        .ok_or("no executionId")?
        .to_owned();
    let (status, _, stderr) = execbox(
        &h,
        &[
            "executions",
            "approve",
            &failing_id,
            "--call",
            "1",
            "--db",
            db,
            "--mcp-config",
            config,
            "--policy",
            policy,
            "--principal",
            "ops",
        ],
    )
    .await?;
    check!(status == Some(1), "{stderr}");
    let failed = execution_result(&alice, &failing_id).await?;
    let direct = alice.exec("null.boom").await?;
    check!(failed.is_error, "{}", failed.text);
    check!(
        failed.structured["error"]["code"] == json!("runtime_error")
            && failed.structured["error"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("TypeError") && m.contains("'boom' of null")),
        "{}",
        failed.text
    );
    check!(
        failed
            .structured
            .as_object()
            .map(|o| o.keys().collect::<Vec<_>>())
            == direct
                .structured
                .as_object()
                .map(|o| o.keys().collect::<Vec<_>>()),
        "{}\n{}",
        failed.text,
        direct.text
    );
    alice.stop().await?;

    // With --no-pause there is nothing to read: the tool is not listed.
    let plain = h
        .start_approving(&["--config", config, "--no-pause"], None)
        .await?;
    let tools = plain
        .client
        .list_all_tools()
        .await
        .map_err(|e| e.to_string())?;
    check!(
        !tools.iter().any(|t| t.name == "execution_result"),
        "{tools:?}"
    );
    plain.stop().await?;
    Ok(())
}
