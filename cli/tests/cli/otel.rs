//! Traces over OTLP/HTTP: `execbox run` and `execbox serve` sending their spans to a real
//! (tiny) receiver when the standard `OTEL_*` variables ask for it, and nothing otherwise.

use std::time::Duration;

use crate::support::capabilities::{Roots, Server};
use crate::support::cli::{command, text};
use crate::support::otlp::{named, OtlpReceiver, ReceivedSpan};
use crate::support::temp::TempDir;

const TWO_TOOLS: &str = "const c = await text.word_count({ text: 'secret words here' });\n\
     const u = await text.upper({ text: 'secret' });\n\
     return [c.words, u];";

/// `execbox ARGS` with `code` on stdin and `env` set, to its end.
fn run_with(args: &[&str], code: &str, env: &[(&str, &str)]) -> std::process::Output {
    let mut command = command(args);
    command.envs(env.iter().copied());
    let mut child = command.spawn().expect("start execbox");
    let _ = std::io::Write::write_all(&mut child.stdin.take().unwrap(), code.as_bytes());
    child.wait_with_output().expect("wait for execbox")
}

/// The one span named `name`.
fn one<'a>(spans: &'a [ReceivedSpan], name: &str) -> &'a ReceivedSpan {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "one {name} span expected: {spans:#?}");
    found[0]
}

#[test]
fn run_sends_an_execution_span_and_a_child_per_tool_call_before_it_exits() {
    let receiver = OtlpReceiver::start();
    let dir = TempDir::new("otel-run");
    let policy = dir.join("policy.yaml");
    std::fs::write(&policy, "version: 1\nprincipals:\n  alice: {}\n").unwrap();
    let out = run_with(
        &[
            "run",
            "-",
            "--tools",
            "examples/tools.yaml",
            "--policy",
            policy.to_str().unwrap(),
            "--principal",
            "alice",
        ],
        TWO_TOOLS,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint()),
            ("OTEL_SERVICE_NAME", "otel-test"),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).split_whitespace().collect::<String>(),
        r#"[3,"SECRET"]"#
    );
    // No waiting: the process has exited, so it must have sent everything.
    let spans = receiver.spans();
    let execution = one(&spans, "execbox.execution");
    assert_eq!(execution.service_name, "otel-test");
    assert_eq!(execution.attribute("execbox.principal"), "alice");
    assert_eq!(execution.attribute("execbox.outcome"), "ok");
    let id = execution.attribute("execbox.execution_id");
    assert!(!id.is_empty());
    let calls = named(&spans, "execbox.tool_call");
    let mut tools: Vec<&str> = calls.iter().map(|c| c.attribute("execbox.tool")).collect();
    tools.sort();
    assert_eq!(tools, ["text.upper", "text.word_count"]);
    for call in calls {
        assert_eq!(call.trace_id, execution.trace_id);
        assert_eq!(call.parent_span_id, execution.span_id, "{call:#?}");
        assert_eq!(call.attribute("execbox.execution_id"), id);
        assert_eq!(call.attribute("execbox.principal"), "alice");
        assert_eq!(call.attribute("execbox.outcome"), "ok");
        assert!(call.attribute("execbox.duration_ms").parse::<u64>().is_ok());
    }
    // Tool inputs are never recorded.
    for span in &spans {
        for value in span.attributes.values() {
            assert!(!value.contains("secret"), "an input in {span:#?}");
        }
    }
}

#[test]
fn without_otel_variables_nothing_is_sent() {
    let receiver = OtlpReceiver::start();
    // The service name alone does not turn the export on; nor does the endpoint of another
    // signal.
    let out = run_with(
        &["run", "-", "--tools", "examples/tools.yaml"],
        TWO_TOOLS,
        &[
            ("OTEL_SERVICE_NAME", "otel-test"),
            ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", receiver.endpoint()),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(receiver.requests(), Vec::<String>::new());
}

#[test]
fn an_unsupported_otlp_protocol_is_a_usage_error_naming_the_variable() {
    let receiver = OtlpReceiver::start();
    let out = run_with(
        &["run", "-"],
        "1",
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("OTEL_EXPORTER_OTLP_PROTOCOL=grpc") && stderr.contains("http/protobuf"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn serve_makes_a_traceparent_header_the_parent_of_its_spans() {
    let receiver = OtlpReceiver::start();
    let roots = Roots::new("otel-serve");
    roots.project.capability(
        "hello",
        "name: hello\ntype: script\ndescription: hello\nentry: index.js\n",
        &[("index.js", "'hi'")],
    );
    let project = roots.project_dir();
    let db = roots.temp.join("state.db");
    let mut server = Server::start_with_env(
        roots.temp.path(),
        &roots.global.0,
        &[
            "--project",
            project.to_str().unwrap(),
            "--db",
            db.to_str().unwrap(),
        ],
        &[(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            &format!("{}/v1/traces", receiver.endpoint()),
        )],
    );
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent = "00f067aa0ba902b7";
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::new();
        let started = client
            .post(server.at("/v1/executions"))
            .header("traceparent", format!("00-{trace}-{parent}-01"))
            .json(&serde_json::json!({"capability": "hello"}))
            .send()
            .await
            .unwrap();
        assert!(started.status().is_success(), "{started:?}");
        let body: serde_json::Value = started.json().await.unwrap();
        let id = body["executionId"].as_str().unwrap().to_owned();
        let waited = client
            .get(server.at(&format!("/v1/executions/{id}/wait")))
            .send()
            .await
            .unwrap();
        assert!(waited.status().is_success());
    });
    // SIGTERM: the server stops cleanly, sending its last spans first.
    crate::support::process::signal(server.child.id(), libc::SIGTERM).unwrap();
    let status = server.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let spans = receiver.spans();
    let requests = named(&spans, "execbox.http.request");
    let start = requests
        .iter()
        .find(|r| r.attribute("http.request.method") == "POST")
        .unwrap_or_else(|| panic!("no POST request span: {spans:#?}"));
    assert_eq!(start.trace_id, trace);
    assert_eq!(start.parent_span_id, parent);
    let capability = one(&spans, "execbox.capability");
    assert_eq!(capability.trace_id, trace);
    assert_eq!(capability.parent_span_id, start.span_id);
    assert_eq!(capability.attribute("execbox.capability"), "hello");
    assert_eq!(capability.attribute("execbox.outcome"), "ok");
    let execution = one(&spans, "execbox.execution");
    assert_eq!(execution.trace_id, trace);
    assert_eq!(execution.parent_span_id, capability.span_id);
    assert_eq!(
        execution.attribute("execbox.execution_id"),
        capability.attribute("execbox.execution_id")
    );
}
