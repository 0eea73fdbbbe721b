//! The `execbox` CLI end to end: the README's example, exit codes, `--json`, `types`, stdin,
//! and the messages of failing tool calls as the guest sees them.

mod support;

#[path = "cli/openapi.rs"]
mod openapi;
#[path = "cli/otel.rs"]
mod otel;
#[path = "cli/unawaited.rs"]
mod unawaited;

use serde_json::Value;

use support::cli::{execbox, text};
use support::runners::ListeningRunner;
use support::scripts::{inline_tool, script_tools};
use support::temp::TempDir;

#[test]
fn readme_example_prints_the_result_and_the_logs() {
    let out = execbox(
        &["run", "examples/hello.js", "--tools", "examples/tools.yaml"],
        "",
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
    let out = execbox(&["run", "-", "--timeout-ms", "100"], "while (true) {}");
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("timeout: Execution timed out"));
    assert!(out.stdout.is_empty());
}

#[test]
fn json_flag_prints_the_whole_done_envelope() {
    let out = execbox(
        &["run", "-", "--json"],
        "console.log('hi'); throw new Error('nope')",
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
    let out = execbox(&["types", "--tools", "examples/tools.yaml"], "");
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
    let dir = TempDir::new("prompt");
    let file = script_tools(
        dir.path(),
        &[
            (
                "typed",
                "        timeout_seconds: 3\n\
                 \x20       input_schema: { type: object, properties: { q: { type: string } } }\n\
                 \x20       output_schema: { type: object, required: [hits], properties: { hits: { type: array, items: { type: string } } } }\n",
                "echo 1\n",
            ),
            ("untyped", "", "echo 1\n"),
        ],
    );
    let file = file.to_str().unwrap();
    let out = execbox(
        &[
            "types",
            "--tools",
            file,
            "--prompt",
            "--timeout-ms",
            "2500",
            "--memory-limit-bytes",
            "33554432",
        ],
        "",
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
    let out = execbox(&["types", "--tools", file, "--timeout-ms", "1"], "");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn bad_configuration_exits_2_with_a_clear_message() {
    let out = execbox(&["run", "missing.js"], "");
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("cannot read script missing.js"));
    let out = execbox(&["run", "-", "--tools", "no/such/tools.yaml"], "1");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn zero_concurrent_tool_calls_is_refused_with_exit_2() {
    let out = execbox(&["run", "-", "--max-concurrent-tool-calls", "0"], "1");
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
    let dir = TempDir::new("cap");
    std::fs::create_dir_all(dir.join("alive")).unwrap();
    let script = "cat > /dev/null; touch \"$1/alive/$$\"; sleep 0.1; \
                  n=$(ls \"$1/alive\" | wc -l); rm \"$1/alive/$$\"; echo \"{\\\"alive\\\": $n}\"";
    let tools = inline_tool(
        dir.path(),
        "count",
        script,
        &dir.path().display().to_string(),
    );
    let out = execbox(
        &[
            "run",
            "-",
            "--tools",
            tools.to_str().unwrap(),
            "--max-concurrent-tool-calls",
            "2",
        ],
        "(await Promise.all(Array.from({ length: 12 }, () => t.count()))).map(r => r.alive)",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let alive: Vec<u64> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(alive.len(), 12);
    assert!(alive.iter().all(|&n| (1..=2).contains(&n)), "{alive:?}");
}

#[test]
fn run_sends_the_token_file_to_a_protected_runner() {
    let dir = TempDir::new("token");
    let token = dir.join("token");
    std::fs::write(&token, "s3cret\n").unwrap();
    let token = token.to_str().unwrap();
    let runner = ListeningRunner::start(&["--token-file", token], &[]);
    let url = runner.url.as_str();
    let out = execbox(
        &["run", "-", "--runner", url, "--token-file", token],
        "6 * 7",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "42");
    let refused = execbox(&["run", "-", "--runner", url], "6 * 7");
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        text(&refused.stderr).contains("401"),
        "{}",
        text(&refused.stderr)
    );
}

#[test]
fn failing_tool_calls_name_the_tool_and_what_to_fix_end_to_end() {
    let dir = TempDir::new("errors");
    let file = script_tools(
        dir.path(),
        &[
            (
                "forecast",
                "        input_schema: { type: object, required: [units], properties: { units: { enum: [metric, imperial] } } }\n\
                 \x20       output_schema: { type: object, properties: { temp: { type: number } } }\n",
                "cat > /dev/null; echo '{\"temp\": \"hot\"}'\n",
            ),
            ("garbage", "", "cat > /dev/null; echo 'hello there'\n"),
            (
                "fails",
                "",
                "cat > /dev/null; echo 'quota exceeded' >&2; exit 2\n",
            ),
            ("fine", "", "cat > /dev/null; echo 1\n"),
        ],
    );
    let file = file.to_str().unwrap();
    let script = r#"
        const settled = await Promise.allSettled([
            t.forecast({ units: "kelvin" }),
            t.forecast({ units: "metric" }),
            t.garbage(),
            t.fails(),
        ]);
        return settled.map(s => `${s.reason.code}: ${s.reason.message}`);
    "#;
    let out = execbox(&["run", "-", "--tools", file], script);
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
    let dir = TempDir::new("all");
    let file = script_tools(
        dir.path(),
        &[
            ("fine", "", "cat > /dev/null; echo 1\n"),
            (
                "fails",
                "",
                "cat > /dev/null; sleep 0.1; echo 'no such user' >&2; exit 1\n",
            ),
        ],
    );
    let file = file.to_str().unwrap();
    let out = execbox(
        &["run", "-", "--tools", file],
        "await Promise.all([t.fine(), t.fails(), t.fine(), t.fine()])",
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
