//! Runs the conformance kit's benchmark driver against the real `execbox-runner`, over stdio and WebSocket, in its quick form.
//!
//! Nothing here asserts speed: the tests check that every measure comes back as a positive
//! number and that the JSON and Markdown forms have exactly their documented shape.
//! `execbox-conformance bench` prints these same two forms (`BenchReport::to_json`,
//! `BenchReport::to_markdown`); `conformance/tests/bench_cli.rs` covers its flags and errors.

use execbox_conformance::{run_bench, BenchOptions, BenchTarget, ListeningRunner};

const RUNNER: &str = env!("CARGO_BIN_EXE_execbox-runner");

const KEYS: [&str; 6] = [
    "trivial_p50_us",
    "trivial_p99_us",
    "tool_call_p50_us",
    "tool_call_p99_us",
    "exec_per_s",
    "spawn_to_first_done_ms",
];

fn assert_six_positive_numbers(json: &str) {
    let value: serde_json::Value = serde_json::from_str(json).expect("one JSON object");
    let object = value.as_object().expect("a JSON object");
    let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
    keys.sort_unstable();
    let mut expected = KEYS.to_vec();
    expected.sort_unstable();
    assert_eq!(keys, expected, "{json}");
    for key in KEYS {
        let n = object[key].as_f64().unwrap_or(-1.0);
        assert!(n > 0.0, "{key} is not a positive number in {json}");
    }
}

#[test]
fn quick_bench_over_stdio_reports_six_positive_numbers() {
    let target = BenchTarget::Stdio(vec![RUNNER.to_string()]);
    let report = run_bench(&target, &BenchOptions::quick()).expect("the bench runs");
    assert_eq!(report.transport, "stdio");
    assert!(report.trivial.p50 <= report.trivial.p99);
    assert!(report.tool_call.p50 <= report.tool_call.p99);
    assert_six_positive_numbers(&report.to_json());
    assert!(!report.to_json().contains('\n'), "one line");
}

#[test]
fn quick_bench_prints_a_markdown_table_of_the_four_measures() {
    let target = BenchTarget::Stdio(vec![RUNNER.to_string()]);
    let options = BenchOptions {
        executions: 20,
        tool_calls: 20,
        warmup: 2,
        spawns: 2,
        ..BenchOptions::quick()
    };
    let table = run_bench(&target, &options)
        .expect("the bench runs")
        .to_markdown();
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("stdio runner `"), "{table}");
    assert!(lines[0].contains("20 executions and 20 tool calls after 2 warm-up each, 2 spawns"));
    assert_eq!(lines[1], "");
    assert_eq!(lines[2], "| measure | p50 | p99 |");
    assert_eq!(lines[3], "|---|---|---|");
    let rows: Vec<&str> = lines[4..]
        .iter()
        .map(|l| l.split(" | ").next().unwrap())
        .collect();
    assert_eq!(
        rows,
        [
            "| trivial execution round trip",
            "| tool call round trip",
            "| spawn to first `done`",
            "| executions per second, one runner",
        ]
    );
    assert!(
        lines[4].contains(" µs |") || lines[4].contains(" ms |"),
        "{table}"
    );
    assert!(lines[7].ends_with("/s | |"), "{table}");
}

#[test]
fn quick_bench_over_websocket_measures_connect_to_first_done() {
    let server = ListeningRunner::spawn(&[RUNNER.to_string()]).expect("runner listens");
    let target = BenchTarget::Ws {
        url: server.url().to_string(),
        token: Some("ignored-by-this-runner".into()),
    };
    let report = run_bench(&target, &BenchOptions::quick()).expect("the bench runs");
    assert_eq!(report.transport, "WebSocket");
    assert_six_positive_numbers(&report.to_json());
    assert!(report.to_markdown().contains("| connect to first `done` |"));
}
