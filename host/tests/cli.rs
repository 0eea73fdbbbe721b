//! The `execbox` CLI end to end: the README's example, exit codes, `--json`, `types`, stdin.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn execbox(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_execbox"))
        .args(args)
        .env_remove("EXECBOX_TOKEN")
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).unwrap();
    }
    drop(input);
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn readme_example_prints_the_result_and_the_logs() {
    let out = execbox(
        &["run", "examples/hello.js", "--tools", "examples/tools.yaml"],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["counts"]["words"], 9);
    assert_eq!(result["shout"], "HELLO FROM THE SANDBOX");
    assert_eq!(result["capitals"][0], "France: Paris");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("lookup failed (tool_error): unknown country 'Atlantis'"),
        "{stderr}"
    );
}

#[test]
fn failed_execution_exits_1_with_the_code_on_stderr() {
    let out = execbox(
        &["run", "-", "--timeout-ms", "100"],
        Some("while (true) {}"),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("timeout: Execution timed out"));
    assert!(out.stdout.is_empty());
}

#[test]
fn json_flag_prints_the_whole_done_envelope() {
    let out = execbox(
        &["run", "-", "--json"],
        Some("console.log('hi'); throw new Error('nope')"),
    );
    assert_eq!(out.status.code(), Some(1));
    let done: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(done["type"], "done");
    assert_eq!(done["ok"], false);
    assert_eq!(done["error"]["code"], "runtime_error");
    assert_eq!(done["logs"][0], "hi");
}

#[test]
fn types_prints_typescript_declarations() {
    let out = execbox(&["types", "--tools", "examples/tools.yaml"], None);
    assert!(out.status.success());
    let ts = text(&out.stdout);
    assert!(ts.contains("declare namespace text {"), "{ts}");
    assert!(ts.contains("function word_count("), "{ts}");
}

#[test]
fn bad_configuration_exits_2_with_a_clear_message() {
    let out = execbox(&["run", "missing.js"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("cannot read script missing.js"));
    let out = execbox(&["run", "-", "--tools", "no/such/tools.yaml"], Some("1"));
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn zero_concurrent_tool_calls_is_refused_with_exit_2() {
    let out = execbox(&["run", "-", "--max-concurrent-tool-calls", "0"], Some("1"));
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("--max-concurrent-tool-calls") && stderr.contains("0 is not in 1.."),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn max_concurrent_tool_calls_caps_command_tools() {
    // 12 calls at once of a tool that counts the tools alive when it starts (lock files),
    // under `--max-concurrent-tool-calls 2`.
    let dir = std::env::temp_dir().join(format!("execbox-cli-cap-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("alive")).unwrap();
    let tools = dir.join("tools.yaml");
    let script = "cat > /dev/null; touch \"$1/alive/$$\"; sleep 0.1; \
                  n=$(ls \"$1/alive\" | wc -l); rm \"$1/alive/$$\"; echo \"{\\\"alive\\\": $n}\"";
    let yaml = serde_json::json!({
        "version": 1,
        "providers": {"t": {"tools": {"count": {
            "command": "/bin/sh",
            "args": ["-c", script, "count", dir.display().to_string()],
        }}}}
    });
    // JSON is YAML.
    std::fs::write(&tools, yaml.to_string()).unwrap();
    let out = execbox(
        &[
            "run",
            "-",
            "--tools",
            tools.to_str().unwrap(),
            "--max-concurrent-tool-calls",
            "2",
        ],
        Some("(await Promise.all(Array.from({ length: 12 }, () => t.count()))).map(r => r.alive)"),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let alive: Vec<u64> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(alive.len(), 12);
    assert!(alive.iter().all(|&n| (1..=2).contains(&n)), "{alive:?}");
}

#[test]
fn run_sends_the_token_file_to_a_protected_runner() {
    let dir = std::env::temp_dir().join(format!("execbox-cli-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token = dir.join("token");
    std::fs::write(&token, "s3cret\n").unwrap();
    let token = token.to_str().unwrap();
    let mut runner = Command::new(env!("CARGO_BIN_EXE_execbox"))
        .args(["runner", "--listen", "127.0.0.1:0", "--token-file", token])
        .env_remove("EXECBOX_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut url = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(runner.stdout.take().unwrap()),
        &mut url,
    )
    .unwrap();
    let url = url.trim();
    let out = execbox(
        &["run", "-", "--runner", url, "--token-file", token],
        Some("6 * 7"),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "42");
    let refused = execbox(&["run", "-", "--runner", url], Some("6 * 7"));
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        text(&refused.stderr).contains("401"),
        "{}",
        text(&refused.stderr)
    );
    let _ = runner.kill();
    let _ = runner.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
