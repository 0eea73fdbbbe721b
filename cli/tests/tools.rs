//! The tool layer from the outside: dispatching `tool_call`s to Rust tools and to real child processes.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use execbox_host::{Provider, Tool, ToolContext, ToolError, ToolSet, ToolSetError, ToolsFile};
use execbox_protocol::{ErrorCode, RawValue, ToolCall, ToolResult, MAX_NESTING_DEPTH};
use serde_json::{json, Value};

use support::process::{is_dead, read_pid, wait_dead, wait_for_pid};
use support::scripts::script_tools;
use support::temp::TempDir;

fn call(provider: &str, tool: &str, input: Option<&str>) -> ToolCall {
    ToolCall {
        call_id: "call-1".into(),
        provider_name: provider.into(),
        safe_tool_name: tool.into(),
        input: input.map(|s| RawValue::from_string(s.to_string()).unwrap()),
    }
}

fn ok(result: ToolResult) -> Value {
    assert_eq!(result.call_id, "call-1");
    match result.outcome {
        Ok(Some(raw)) => serde_json::from_str(raw.get()).unwrap(),
        other => panic!("expected a value, got {other:?}"),
    }
}

fn err(result: ToolResult) -> (ErrorCode, String) {
    assert_eq!(result.call_id, "call-1");
    match result.outcome {
        Err(e) => (e.code, e.message),
        Ok(v) => panic!("expected an error, got {v:?}"),
    }
}

fn echo(name: &str) -> Tool {
    Tool::new(name, |input: Value, _ctx| async move { Ok(input) })
}

fn ctx() -> ToolContext {
    ToolContext::new("exec-1")
}

fn set(tools: Vec<Tool>) -> ToolSet {
    let mut p = Provider::new("t");
    for tool in tools {
        p = p.tool(tool);
    }
    ToolSet::new(vec![p]).unwrap()
}

fn number_schema() -> Value {
    json!({"type": "object", "required": ["x"], "properties": {"x": {"type": "number"}}})
}

#[tokio::test]
async fn input_schema_failure_names_the_tool_the_path_the_expected_type_and_the_value() {
    let tools = set(vec![echo("e").input_schema(number_schema())]);
    let (code, message) = err(tools
        .dispatch(&call("t", "e", Some(r#"{"x":"a"}"#)), ctx())
        .await);
    assert_eq!(code, ErrorCode::ValidationError);
    assert_eq!(message, r#"t.e: input.x must be a number; got "a""#);
    assert_eq!(
        ok(tools
            .dispatch(&call("t", "e", Some(r#"{"x":1}"#)), ctx())
            .await),
        json!({"x": 1})
    );
}

#[tokio::test]
async fn missing_input_is_null_and_an_object_schema_says_it_is_missing() {
    let tools = set(vec![echo("e").input_schema(number_schema()), echo("any")]);
    let (code, message) = err(tools.dispatch(&call("t", "e", None), ctx()).await);
    assert_eq!(code, ErrorCode::ValidationError);
    assert_eq!(
        message,
        "t.e: called without an argument: input must be an object; got null"
    );
    assert_eq!(
        ok(tools.dispatch(&call("t", "any", None), ctx()).await),
        json!(null)
    );
}

#[tokio::test]
async fn input_schema_failures_are_listed_then_counted() {
    let schema = json!({
        "type": "object",
        "required": ["city", "units", "items"],
        "properties": {
            "units": {"enum": ["metric", "imperial"]},
            "items": {"type": "array", "items": {"type": "object", "properties": {"kind": {"type": "string"}}}}
        }
    });
    let tools = ToolSet::new(vec![
        Provider::new("weather").tool(echo("get-forecast").input_schema(schema))
    ])
    .unwrap();
    let input = r#"{"units":"kelvin","items":[{"kind":"a"},{"kind":1},{"kind":2},{"kind":3}]}"#;
    let (code, message) = err(tools
        .dispatch(&call("weather", "get_forecast", Some(input)), ctx())
        .await);
    assert_eq!(code, ErrorCode::ValidationError);
    assert_eq!(
        message,
        "weather.get_forecast: 5 errors: (1) input.city is required but missing \
         (2) input.units must be one of \"metric\", \"imperial\"; got \"kelvin\" \
         (3) input.items[1].kind must be a string; got 1 (and 2 more)"
    );
}

#[tokio::test]
async fn output_schema_failure_blames_the_tool_and_names_the_path() {
    let tools = set(vec![Tool::new("bad", |_: Value, _| async {
        Ok(json!({"x": "not a number"}))
    })
    .output_schema(number_schema())]);
    let (code, message) = err(tools.dispatch(&call("t", "bad", None), ctx()).await);
    assert_eq!(code, ErrorCode::ValidationError);
    assert_eq!(
        message,
        "t.bad: the tool returned an output that does not match its output schema \
         (a fault of the tool, not of your program): output.x must be a number; got \"not a number\""
    );
}

#[tokio::test]
async fn an_output_schema_that_only_describes_is_not_enforced_but_still_typed() {
    let tools = set(vec![Tool::new("loose", |_: Value, _| async {
        Ok(json!({"x": "not a number"}))
    })
    .output_schema(number_schema())
    .output_checked(false)]);
    let answer = ok(tools.dispatch(&call("t", "loose", None), ctx()).await);
    assert_eq!(answer, json!({"x": "not a number"}));
    let types = tools.declarations();
    assert!(types.contains("Promise<{"), "{types}");
    assert!(types.contains("x: number;"), "{types}");
    // Nor does the prompt say such an output could be refused.
    assert!(
        !tools
            .prompt_declarations()
            .contains("does not match its return type"),
        "{}",
        tools.prompt_declarations()
    );
}

#[tokio::test]
async fn unknown_provider_or_tool_is_a_tool_error_listing_what_exists() {
    let tools = set(vec![echo("e"), echo("f-g")]);
    assert_eq!(
        err(tools.dispatch(&call("t", "nope", None), ctx()).await),
        (
            ErrorCode::ToolError,
            "t.nope: no such tool; the tools of t are e, f_g".into()
        )
    );
    assert_eq!(
        err(tools.dispatch(&call("x", "e", None), ctx()).await),
        (
            ErrorCode::ToolError,
            "x.e: no such provider x; the providers are t".into()
        )
    );
}

#[tokio::test]
async fn names_are_sanitised_and_collisions_numbered_in_declaration_order() {
    let named =
        |name: &'static str| Tool::new(name, move |_: Value, _| async move { Ok(json!(name)) });
    let tools = set(vec![
        named("search-docs"),
        named("search_docs"),
        named("1tool"),
        named("default"),
    ]);
    assert_eq!(
        tools.tool_names("t").unwrap(),
        [
            ("search_docs", "search-docs"),
            ("search_docs__2", "search_docs"),
            ("_1tool", "1tool"),
            ("default_", "default"),
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()))
    );
    let manifest = &tools.manifests()[0];
    assert_eq!(manifest.tools[1].key, "search_docs");
    assert_eq!(manifest.tools[1].safe_name, "search_docs__2");
    assert_eq!(
        manifest.tools[1].original_name.as_deref(),
        Some("search_docs")
    );
    for (safe, original) in [
        ("search_docs", "search-docs"),
        ("search_docs__2", "search_docs"),
    ] {
        assert_eq!(
            ok(tools.dispatch(&call("t", safe, None), ctx()).await),
            json!(original)
        );
    }
    // Only safe names are callable.
    assert_eq!(
        err(tools.dispatch(&call("t", "search-docs", None), ctx()).await).0,
        ErrorCode::ToolError
    );
    assert!(tools.tool_names("nope").is_none());
}

#[test]
fn bad_provider_sets_are_refused_with_reasons() {
    let e = ToolSet::new(vec![Provider::new("my-tools")]).unwrap_err();
    assert!(matches!(e, ToolSetError::InvalidProviderName { .. }), "{e}");
    assert!(
        e.to_string()
            .starts_with("invalid provider name \"my-tools\""),
        "{e}"
    );
    let e = ToolSet::new(vec![Provider::new("a"), Provider::new("a")]).unwrap_err();
    assert!(matches!(e, ToolSetError::DuplicateProvider { .. }), "{e}");
    let e = ToolSet::new(vec![Provider::new("a").tool(echo("x")).tool(echo("x"))]).unwrap_err();
    assert!(matches!(e, ToolSetError::DuplicateTool { .. }), "{e}");
    let e = ToolSet::new(vec![
        Provider::new("a").tool(echo("x").output_schema(json!({"type": 5})))
    ])
    .unwrap_err();
    match &e {
        ToolSetError::InvalidSchema { tool, which, .. } => {
            assert_eq!((tool.as_str(), *which), ("x", "output"));
        }
        other => panic!("{other}"),
    }
    assert!(
        e.to_string()
            .starts_with("invalid output schema of tool a.x: "),
        "{e}"
    );
}

#[tokio::test]
async fn handler_errors_keep_code_and_message_named_once_and_panics_become_tool_errors() {
    let tools = set(vec![
        Tool::new("fails", |_: Value, _| async {
            Err(ToolError::tool("no such user"))
        }),
        Tool::new("limited", |_: Value, _| async {
            Err(ToolError::validation("t.limited refuses more than 3 ids"))
        }),
        Tool::new("panics", |_: Value, _| async { panic!("bug in tool") }),
    ]);
    assert_eq!(
        err(tools.dispatch(&call("t", "fails", None), ctx()).await),
        (ErrorCode::ToolError, "t.fails: no such user".into())
    );
    assert_eq!(
        err(tools.dispatch(&call("t", "limited", None), ctx()).await),
        (
            ErrorCode::ValidationError,
            "t.limited refuses more than 3 ids".into()
        )
    );
    assert_eq!(
        err(tools.dispatch(&call("t", "panics", None), ctx()).await),
        (
            ErrorCode::ToolError,
            "t.panics: the tool panicked (a bug in the tool, not in your program): bug in tool"
                .into()
        )
    );
}

#[tokio::test]
async fn cancellation_before_or_during_a_call_is_a_prompt_timeout() {
    let tools = set(vec![Tool::new("hangs", |_: Value, _| {
        std::future::pending()
    })]);
    let c = ctx();
    c.cancel.cancel();
    assert_eq!(
        err(tools.dispatch(&call("t", "hangs", None), c).await),
        (ErrorCode::Timeout, "t.hangs: Execution timed out".into())
    );
    let c = ctx();
    let cancel = c.cancel.clone();
    let pending = tokio::spawn({
        let tools = tools.clone();
        async move { tools.dispatch(&call("t", "hangs", None), c).await }
    });
    tokio::task::yield_now().await;
    cancel.cancel();
    let result = tokio::time::timeout(Duration::from_secs(5), pending)
        .await
        .expect("dispatch returns once cancelled")
        .unwrap();
    assert_eq!(
        err(result),
        (ErrorCode::Timeout, "t.hangs: Execution timed out".into())
    );
}

fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

fn deep_value(depth: usize) -> Value {
    let mut v = json!([]);
    for _ in 1..depth {
        v = Value::Array(vec![v]);
    }
    v
}

#[tokio::test]
async fn values_nest_up_to_the_transport_limit_and_no_further() {
    let recursive = json!({
        "$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}}},
        "$ref": "#/$defs/n"
    });
    let tools = set(vec![
        echo("e")
            .input_schema(recursive.clone())
            .output_schema(recursive),
        Tool::new("too_deep", |_: Value, _| async {
            Ok(deep_value(MAX_NESTING_DEPTH + 1))
        }),
    ]);
    let deepest = nested(MAX_NESTING_DEPTH);
    let result = tools.dispatch(&call("t", "e", Some(&deepest)), ctx()).await;
    assert_eq!(result.outcome.unwrap().unwrap().get(), deepest);
    let (code, message) = err(tools
        .dispatch(&call("t", "e", Some(&nested(MAX_NESTING_DEPTH + 1))), ctx())
        .await);
    assert_eq!(code, ErrorCode::SerializationError);
    assert!(message.contains("nests deeper than 1000"), "{message}");
    let (code, message) = err(tools.dispatch(&call("t", "too_deep", None), ctx()).await);
    assert_eq!(code, ErrorCode::SerializationError);
    assert_eq!(
        message,
        "t.too_deep: Host value is not JSON-serializable: value nests deeper than 1000 levels"
    );
}

#[test]
fn manifests_carry_typescript_and_declarations_join_providers() {
    let tools = ToolSet::new(vec![
        Provider::new("math").description("Arithmetic").tool(
            echo("add-two")
                .description("Adds two numbers")
                .input_schema(number_schema())
                .output_schema(json!({"type": "number"})),
        ),
        Provider::new("misc").tool(echo("ping")),
    ])
    .unwrap();
    let math = "/** Arithmetic */\ndeclare namespace math {\n  /** Adds two numbers */\n  function add_two(input: {\n    x: number;\n  }): Promise<number>;\n}";
    let misc = "declare namespace misc {\n  function ping(input?: unknown): Promise<unknown>;\n}";
    assert_eq!(tools.manifests()[0].types.as_deref(), Some(math));
    assert_eq!(tools.manifests()[1].types.as_deref(), Some(misc));
    assert_eq!(tools.declarations(), format!("{math}\n\n{misc}"));
    let wire = tools.manifests()[0].to_value();
    assert_eq!(
        wire["tools"]["add-two"],
        json!({"safeName": "add_two", "originalName": "add-two", "description": "Adds two numbers"})
    );
    assert_eq!(ToolSet::empty().declarations(), "");
    let prompt = tools.prompt_declarations();
    assert!(prompt.contains(
        "  /**\n   * Adds two numbers\n   * @throws {Error} code \"validation_error\": the input does not match its type, \
         or the tool returned an output that does not match its return type\n   \
         * @throws {Error} code \"tool_error\": the tool failed\n   */\n  function add_two("
    ), "{prompt}");
    assert!(prompt.contains(
        "  /** @throws {Error} code \"tool_error\": the tool failed */\n  function ping(input?: unknown): Promise<unknown>;"
    ), "{prompt}");
    assert!(ToolSet::empty().manifests().is_empty());
}

// ---- external command tools, with real child processes ----

/// Writes one script per tool and a tools file running them; loads it.
fn command_tools(dir: &TempDir, scripts: &[(&str, &str, &str)]) -> ToolSet {
    ToolSet::new(ToolsFile::load(script_tools(dir.path(), scripts)).unwrap()).unwrap()
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

#[tokio::test]
async fn the_example_tools_run_as_commands() {
    let tools = ToolSet::new(ToolsFile::load(examples().join("tools.yaml")).unwrap()).unwrap();
    let counts = ok(tools
        .dispatch(
            &call("text", "word_count", Some(r#"{"text":"a b c\nd"}"#)),
            ctx(),
        )
        .await);
    assert_eq!(counts, json!({"words": 4, "lines": 2, "chars": 7}));
    let found = ok(tools
        .dispatch(&call("data", "lookup", Some(r#"{"key":"Peru"}"#)), ctx())
        .await);
    assert_eq!(found, json!({"key": "Peru", "value": "Lima"}));
    let (code, message) = err(tools
        .dispatch(
            &call("data", "lookup", Some(r#"{"key":"Atlantis"}"#)),
            ctx(),
        )
        .await);
    assert_eq!(code, ErrorCode::ToolError);
    assert!(
        message
            .starts_with("data.lookup: exited with status 1; stderr: unknown country 'Atlantis'"),
        "{message}"
    );
    assert!(tools
        .declarations()
        .contains("function word_count(input: {"));
}

#[tokio::test]
async fn a_command_gets_the_request_envelope_and_environment() {
    let dir = TempDir::new("envelope");
    let tools = command_tools(
        &dir,
        &[(
            "echo-it",
            "        env: { EXTRA: 42 }\n",
            r#"printf '{"tool":"%s","execution":"%s","extra":"%s","request":' "$EXECBOX_TOOL" "$EXECBOX_EXECUTION_ID" "$EXTRA"
cat
printf '}'
"#,
        )],
    );
    let got = ok(tools
        .dispatch(&call("t", "echo_it", Some(r#"{"a":[1,"x"]}"#)), ctx())
        .await);
    assert_eq!(
        got,
        json!({
            "tool": "t.echo-it",
            "execution": "exec-1",
            "extra": "42",
            "request": {
                "schemaVersion": 1,
                "tool": {"provider": "t", "name": "echo-it"},
                "input": {"a": [1, "x"]},
                "executionId": "exec-1"
            }
        })
    );
}

#[tokio::test]
async fn non_zero_exit_is_a_tool_error_naming_the_tool_the_status_and_the_stderr() {
    let dir = TempDir::new("exit");
    let tools = command_tools(
        &dir,
        &[
            (
                "fails",
                "",
                "cat >/dev/null\necho '  quota exceeded for key 7  ' >&2\nexit 2\n",
            ),
            ("silent", "", "exit 3\n"),
            ("signal", "", "kill -9 $$\n"),
            (
                "traceback",
                "",
                "for i in 1 2 3 4 5 6 7 8 9 10 11; do echo \"line $i\" >&2; done\n\
                 printf 'ValueError: bad \\033[1mkey\\033[0m\\n' >&2\nexit 1\n",
            ),
        ],
    );
    assert_eq!(
        err(tools.dispatch(&call("t", "fails", None), ctx()).await),
        (
            ErrorCode::ToolError,
            "t.fails: exited with status 2; stderr: quota exceeded for key 7".into()
        )
    );
    assert_eq!(
        err(tools.dispatch(&call("t", "silent", None), ctx()).await),
        (
            ErrorCode::ToolError,
            "t.silent: exited with status 3 and printed nothing on stderr".into()
        )
    );
    assert_eq!(
        err(tools.dispatch(&call("t", "signal", None), ctx()).await),
        (
            ErrorCode::ToolError,
            "t.signal: was killed by signal 9 (SIGKILL)".into()
        )
    );
    // The last 10 lines of stderr, on one line, escape sequences escaped.
    assert_eq!(
        err(tools.dispatch(&call("t", "traceback", None), ctx()).await),
        (
            ErrorCode::ToolError,
            r"t.traceback: exited with status 1; stderr: …line 3\nline 4\nline 5\nline 6\nline 7\nline 8\nline 9\nline 10\nline 11\nValueError: bad \u001b[1mkey\u001b[0m".into()
        )
    );
}

#[tokio::test]
async fn a_hanging_command_times_out_and_is_killed_with_its_children() {
    let dir = TempDir::new("hang");
    let script = format!(
        "sleep 30 &\necho $! > {child}\necho $$ > {leader}\nwait\n",
        child = dir.join("child.pid").display(),
        leader = dir.join("leader.pid").display()
    );
    let tools = command_tools(&dir, &[("hang", "        timeout_seconds: 0.5\n", &script)]);
    assert_eq!(
        err(tools.dispatch(&call("t", "hang", None), ctx()).await),
        (
            ErrorCode::Timeout,
            "t.hang: timed out after 0.5s (its timeout_seconds) and was killed".into()
        )
    );
    let leader = read_pid(&dir.join("leader.pid")).unwrap();
    let child = read_pid(&dir.join("child.pid")).unwrap();
    assert!(
        is_dead(leader),
        "the command was reaped before dispatch returned"
    );
    assert!(
        wait_dead(child, Duration::from_secs(5)).await,
        "process {child} is still alive"
    );
}

#[tokio::test]
async fn cancelling_the_execution_kills_the_command_promptly() {
    let dir = TempDir::new("cancel");
    let script = format!(
        "echo $$ > {leader}\nexec sleep 30\n",
        leader = dir.join("leader.pid").display()
    );
    let tools = command_tools(&dir, &[("slow", "", &script)]);
    let c = ctx();
    let cancel = c.cancel.clone();
    let pending = tokio::spawn(async move { tools.dispatch(&call("t", "slow", None), c).await });
    let pid = wait_for_pid(&dir.join("leader.pid"), Duration::from_secs(5)).await;
    assert!(!is_dead(pid));
    cancel.cancel();
    let result = tokio::time::timeout(Duration::from_secs(5), pending)
        .await
        .expect("dispatch returns once cancelled")
        .unwrap();
    assert_eq!(
        err(result),
        (ErrorCode::Timeout, "t.slow: Execution timed out".into())
    );
    assert!(
        wait_dead(pid, Duration::from_secs(5)).await,
        "process {pid} is still alive"
    );
}

#[tokio::test]
async fn a_setsid_grandchild_of_a_command_tool_is_gone_when_the_call_ends() {
    let dir = TempDir::new("setsid");
    // One call daemonises a grandchild and answers at once; the other is cancelled while its
    // grandchild (in a session of its own, out of the call's process group) sleeps.
    let daemon = format!(
        "setsid sh -c 'echo $$ > {}; exec sleep 60' &\n\
         while [ ! -s {} ]; do sleep 0.01; done\necho '{{\"ok\": true}}'\n",
        dir.join("daemon.pid").display(),
        dir.join("daemon.pid").display()
    );
    let slow = format!(
        "setsid sh -c 'echo $$ > {}; exec sleep 60' &\nexec sleep 60\n",
        dir.join("slow.pid").display()
    );
    let tools = command_tools(&dir, &[("daemon", "", &daemon), ("slow", "", &slow)]);
    assert_eq!(
        ok(tools.dispatch(&call("t", "daemon", None), ctx()).await),
        json!({"ok": true})
    );
    let daemon_pid = read_pid(&dir.join("daemon.pid")).expect("the grandchild wrote its pid");
    assert!(
        wait_dead(daemon_pid, Duration::from_secs(5)).await,
        "the setsid grandchild {daemon_pid} outlived its call"
    );
    let c = ctx();
    let cancel = c.cancel.clone();
    let pending = tokio::spawn(async move { tools.dispatch(&call("t", "slow", None), c).await });
    let slow_pid = wait_for_pid(&dir.join("slow.pid"), Duration::from_secs(5)).await;
    assert!(!is_dead(slow_pid));
    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(5), pending).await;
    assert!(
        wait_dead(slow_pid, Duration::from_secs(5)).await,
        "the setsid grandchild {slow_pid} outlived the cancelled call"
    );
}

#[tokio::test]
async fn a_call_ends_soon_after_its_command_exits_even_if_an_escaped_process_holds_stdout() {
    let dir = TempDir::new("keepout");
    // A grandchild that leaves the group and clears its environment (out of the supervisor's
    // reach, as SECURITY.md says) and keeps stdout open.
    let script = format!(
        "setsid env -i sh -c 'echo $$ > {}; exec sleep 60' &\n\
         while [ ! -s {} ]; do sleep 0.01; done\necho '{{\"ok\": true}}'\n",
        dir.join("escaped.pid").display(),
        dir.join("escaped.pid").display()
    );
    let tools = command_tools(&dir, &[("keepout", "", &script)]);
    let started = std::time::Instant::now();
    let (code, message) = err(tools.dispatch(&call("t", "keepout", None), ctx()).await);
    let escaped = read_pid(&dir.join("escaped.pid"));
    if let Some(pid) = escaped {
        let _ = support::process::signal(pid, libc::SIGKILL);
    }
    assert_eq!(code, ErrorCode::ToolError);
    assert!(
        message.contains("still holds its stdout or stderr open"),
        "{message}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the call waited {:?}, not its 30 s limit",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_command_that_ignores_stdin_still_succeeds() {
    let dir = TempDir::new("nostdin");
    let tools = command_tools(&dir, &[("quick", "", "echo '{\"ok\": true}'\n")]);
    // A large input makes the write fail with a broken pipe when the command exits first.
    let big = serde_json::to_string(&json!({ "text": "x".repeat(4 << 20) })).unwrap();
    for input in [None, Some(big.as_str())] {
        assert_eq!(
            ok(tools.dispatch(&call("t", "quick", input), ctx()).await),
            json!({"ok": true})
        );
    }
}

#[tokio::test]
async fn stdout_must_be_one_json_value_and_bad_stdout_is_quoted() {
    let dir = TempDir::new("stdout");
    let tools = command_tools(
        &dir,
        &[
            ("garbage", "", "echo 'hello there'\n"),
            ("long", "", "printf 'x%.0s' $(seq 300)\n"),
            ("two", "", "echo '1'\necho '2'\n"),
            ("empty", "", "cat > /dev/null\n"),
            ("flood", "", "exec cat /dev/zero\n"),
            (
                "checked",
                "        output_schema: { type: string }\n",
                "echo 5\n",
            ),
        ],
    );
    let contract = r#"a command tool must print one JSON value, its result (e.g. {"ok":true}), or nothing for null"#;
    assert_eq!(
        err(tools.dispatch(&call("t", "garbage", None), ctx()).await),
        (
            ErrorCode::ToolError,
            format!(
                r#"t.garbage: printed invalid JSON on stdout (expected value at line 1 column 1): "hello there\n"; {contract}"#
            )
        )
    );
    let (code, message) = err(tools.dispatch(&call("t", "long", None), ctx()).await);
    assert_eq!(code, ErrorCode::ToolError);
    assert!(
        message.contains(&format!(": \"{}\"… (300 bytes in all); ", "x".repeat(200))),
        "{message}"
    );
    let (code, message) = err(tools.dispatch(&call("t", "two", None), ctx()).await);
    assert_eq!(code, ErrorCode::ToolError);
    assert!(
        message.starts_with("t.two: printed invalid JSON on stdout (trailing characters"),
        "{message}"
    );
    assert!(message.contains(r#": "1\n2\n"; "#), "{message}");
    assert_eq!(
        ok(tools.dispatch(&call("t", "empty", None), ctx()).await),
        json!(null)
    );
    assert_eq!(
        err(tools.dispatch(&call("t", "flood", None), ctx()).await),
        (
            ErrorCode::ToolError,
            format!("t.flood: printed more than 16 MiB on stdout; {contract}")
        )
    );
    let (code, message) = err(tools.dispatch(&call("t", "checked", None), ctx()).await);
    assert_eq!(code, ErrorCode::ValidationError);
    assert_eq!(
        message,
        "t.checked: the tool returned an output that does not match its output schema \
         (a fault of the tool, not of your program): output must be a string; got 5"
    );
}

#[tokio::test]
async fn a_missing_command_is_a_tool_error_naming_it() {
    let dir = TempDir::new("missing");
    let file = dir.join("tools.yaml");
    std::fs::write(
        &file,
        "version: 1\nproviders:\n  t:\n    tools:\n      gone: { command: ./no-such-tool }\n",
    )
    .unwrap();
    let tools = ToolSet::new(ToolsFile::load(&file).unwrap()).unwrap();
    let (code, message) = err(tools.dispatch(&call("t", "gone", None), ctx()).await);
    assert_eq!(code, ErrorCode::ToolError);
    assert!(message.starts_with("t.gone: cannot run /"), "{message}");
    assert!(
        message.contains("no-such-tool: No such file or directory"),
        "{message}"
    );
}

#[test]
fn loading_a_missing_tools_file_names_it() {
    let e = ToolsFile::load("/nonexistent/tools.yaml").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("cannot read tools file /nonexistent/tools.yaml: "),
        "{e}"
    );
}
