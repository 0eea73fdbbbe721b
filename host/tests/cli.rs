//! The `execbox` CLI end to end: the README's example, exit codes, `--json`, `types`, stdin,
//! and the messages of failing tool calls as the guest sees them.

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
        // A CLI that refuses its flags exits without reading stdin: the pipe may be closed.
        let _ = input.write_all(text.as_bytes());
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
        stderr.contains(
            "lookup failed (tool_error): data.lookup: exited with status 1; stderr: unknown country 'Atlantis'"
        ),
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
    // Without --prompt: the declarations alone, without error codes.
    assert!(
        ts.starts_with("/** Small text utilities. */\ndeclare namespace text {"),
        "{ts}"
    );
    assert!(!ts.contains("@throws") && !ts.contains("## "), "{ts}");
}

#[test]
fn types_prompt_prints_a_preamble_then_typed_declarations() {
    let dir = ToolsDir::new(
        "prompt",
        &[
            (
                "typed",
                "echo 1\n",
                "        timeout_seconds: 3\n\
                 \x20       input_schema: { type: object, properties: { q: { type: string } } }\n\
                 \x20       output_schema: { type: object, required: [hits], properties: { hits: { type: array, items: { type: string } } } }\n",
            ),
            ("untyped", "echo 1\n", ""),
        ],
    );
    let out = execbox(
        &[
            "types",
            "--tools",
            &dir.file(),
            "--prompt",
            "--timeout-ms",
            "2500",
            "--memory-limit-bytes",
            "33554432",
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let prompt = text(&out.stdout);
    let sections = [
        "## How the program runs",
        "## What is not there",
        "## Errors",
        "## Limits",
        "## Tools",
    ];
    let mut at = 0;
    for section in sections {
        let found = prompt[at..]
            .find(section)
            .unwrap_or_else(|| panic!("{section} missing or out of order:\n{prompt}"));
        at += found;
    }
    for needle in [
        "plain JavaScript or TypeScript with erasable type annotations",
        "body of an async function",
        "top-level `await`",
        "`return` a value, or end with an expression statement",
        "code fence",
        "No modules",
        "No timers",
        "No network, file or process access",
        "`\"tool_error\"`",
        "`\"validation_error\"`",
        "`\"timeout\"`",
        "- Time: 2.5 s",
        "- Memory: 32 MiB",
    ] {
        assert!(prompt.contains(needle), "{needle:?} missing:\n{prompt}");
    }
    let tools = &prompt[prompt.find("## Tools").unwrap()..];
    assert!(tools.contains("```ts\ndeclare namespace t {"), "{tools}");
    assert!(
        tools.contains("  }): Promise<{\n    hits: string[];\n  }>;"),
        "an output schema gives a typed return:\n{tools}"
    );
    assert!(
        tools.contains("function untyped(input?: unknown): Promise<unknown>;"),
        "{tools}"
    );
    assert!(
        tools.contains("@throws {Error} code \"timeout\": the tool ran longer than 3s"),
        "{tools}"
    );
    assert!(
        tools.contains(
            "@throws {Error} code \"validation_error\": the input does not match its type"
        ),
        "{tools}"
    );
    assert!(tools.trim_end().ends_with("```"), "{tools}");

    // The limit flags only make sense with --prompt.
    let out = execbox(
        &["types", "--tools", &dir.file(), "--timeout-ms", "1"],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
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

/// A temporary directory with a tools file of `sh` tools, removed on drop.
struct ToolsDir(std::path::PathBuf);

impl ToolsDir {
    /// `tools`: (name, script, extra YAML lines of the tool); one provider `t`.
    fn new(name: &str, tools: &[(&str, &str, &str)]) -> ToolsDir {
        let dir = std::env::temp_dir().join(format!("execbox-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut yaml = String::from("version: 1\nproviders:\n  t:\n    tools:\n");
        for (tool, script, extra) in tools {
            let path = dir.join(format!("{tool}.sh"));
            std::fs::write(&path, script).unwrap();
            yaml.push_str(&format!(
                "      {tool}:\n        command: /bin/sh\n        args: [{:?}]\n{extra}",
                path.display().to_string()
            ));
        }
        std::fs::write(dir.join("tools.yaml"), yaml).unwrap();
        ToolsDir(dir)
    }

    fn file(&self) -> String {
        self.0.join("tools.yaml").display().to_string()
    }
}

impl Drop for ToolsDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn failing_tool_calls_name_the_tool_and_what_to_fix_end_to_end() {
    let dir = ToolsDir::new(
        "errors",
        &[
            (
                "forecast",
                "cat > /dev/null; echo '{\"temp\": \"hot\"}'\n",
                "        input_schema: { type: object, required: [units], properties: { units: { enum: [metric, imperial] } } }\n\
                 \x20       output_schema: { type: object, properties: { temp: { type: number } } }\n",
            ),
            ("garbage", "cat > /dev/null; echo 'hello there'\n", ""),
            (
                "fails",
                "cat > /dev/null; echo 'quota exceeded' >&2; exit 2\n",
                "",
            ),
            ("fine", "cat > /dev/null; echo 1\n", ""),
        ],
    );
    let script = r#"
        const settled = await Promise.allSettled([
            t.forecast({ units: "kelvin" }),
            t.forecast({ units: "metric" }),
            t.garbage(),
            t.fails(),
        ]);
        return settled.map(s => `${s.reason.code}: ${s.reason.message}`);
    "#;
    let out = execbox(&["run", "-", "--tools", &dir.file()], Some(script));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let messages: Vec<String> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        messages,
        [
            r#"validation_error: t.forecast: input.units must be one of "metric", "imperial"; got "kelvin""#,
            "validation_error: t.forecast: the tool returned an output that does not match its output schema \
             (a fault of the tool, not of your program): output.temp must be a number; got \"hot\"",
            r#"tool_error: t.garbage: printed invalid JSON on stdout (expected value at line 1 column 1): "hello there\n"; a command tool must print one JSON value, its result (e.g. {"ok":true}), or nothing for null"#,
            "tool_error: t.fails: exited with status 2; stderr: quota exceeded",
        ]
    );
}

#[test]
fn a_tool_failing_inside_promise_all_is_named_in_the_failed_execution() {
    let dir = ToolsDir::new(
        "all",
        &[
            ("fine", "cat > /dev/null; echo 1\n", ""),
            (
                "fails",
                "cat > /dev/null; sleep 0.1; echo 'no such user' >&2; exit 1\n",
                "",
            ),
        ],
    );
    let out = execbox(
        &["run", "-", "--tools", &dir.file()],
        Some("await Promise.all([t.fine(), t.fails(), t.fine(), t.fine()])"),
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "execbox: execution failed: tool_error: t.fails: exited with status 1; stderr: no such user"
        ),
        "{stderr}"
    );
}
