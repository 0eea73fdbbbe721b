//! `execbox-conformance bench` from the outside: its flags, and a clear message with exit 2 for every runner it cannot measure.
//!
//! Runs against small `sh` stand-ins that misbehave on purpose; the measurements against the
//! real runner are in `runner/tests/bench.rs`, which can name that binary.

use std::process::{Command, Output};

const CLI: &str = env!("CARGO_BIN_EXE_execbox-conformance");

fn cli(args: &[&str]) -> Output {
    Command::new(CLI)
        .args(args)
        .output()
        .expect("run execbox-conformance")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn bench_fails(runner: &str, expected: &str) {
    let out = cli(&["bench", "--quick", "--json", "--runner", runner]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(out.stdout.is_empty(), "no figures on failure");
    let err = stderr(&out);
    assert!(
        err.starts_with("execbox-conformance bench: "),
        "unprefixed: {err}"
    );
    assert!(err.contains(expected), "expected {expected:?} in: {err}");
}

#[test]
fn bench_of_a_missing_program_says_it_cannot_spawn_it() {
    bench_fails(
        "/nonexistent/execbox-runner --flag",
        "cannot start or reach the runner: cannot spawn \"/nonexistent/execbox-runner\"",
    );
}

#[test]
fn bench_of_a_runner_sending_garbage_quotes_the_line() {
    bench_fails(
        "sh -c 'echo this is not json; cat >/dev/null'",
        "the runner sent something that is not a protocol message while waiting for started (",
    );
    bench_fails(
        "sh -c 'echo this is not json; cat >/dev/null'",
        "): this is not json",
    );
}

#[test]
fn bench_of_a_runner_that_exits_shows_its_status_and_stderr() {
    bench_fails(
        "sh -c 'read line; echo cannot sandbox >&2; exit 3'",
        "exit status: 3",
    );
    bench_fails(
        "sh -c 'read line; echo cannot sandbox >&2; exit 3'",
        "runner stderr (tail):\n  | cannot sandbox",
    );
}

#[test]
fn bench_of_a_runner_with_a_wrong_done_names_it() {
    let started = r#"{"type":"started","id":"b0"}"#;
    let wrong = r#"{"type":"done","id":"b0","ok":true,"durationMs":0,"logs":[],"result":3}"#;
    bench_fails(
        &format!(
            "sh -c 'read line; echo '\\''{started}'\\''; echo '\\''{wrong}'\\''; cat >/dev/null'"
        ),
        "the done of b0 has the wrong result",
    );
    let failed = r#"{"type":"done","id":"b0","ok":false,"durationMs":0,"logs":[],"error":{"code":"internal_error","message":"nope"}}"#;
    bench_fails(
        &format!("sh -c 'read line; echo '\\''{started}'\\''; echo '\\''{failed}'\\''; cat >/dev/null'"),
        "the execution b0 failed where it must succeed: {\"code\":\"internal_error\",\"message\":\"nope\"}",
    );
    let other = r#"{"type":"done","id":"b7","ok":true,"durationMs":0,"logs":[],"result":2}"#;
    bench_fails(
        &format!(
            "sh -c 'read line; echo '\\''{started}'\\''; echo '\\''{other}'\\''; cat >/dev/null'"
        ),
        "unexpected message while waiting for the done of b0",
    );
}

#[test]
fn bench_of_an_unreachable_websocket_says_so() {
    let out = cli(&["bench", "--quick", "--ws", "ws://127.0.0.1:1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("cannot connect to ws://127.0.0.1:1"));
    let out = cli(&["bench", "--ws", "http://example.invalid"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("only ws:// URLs are supported"));
}

#[test]
fn bench_needs_exactly_one_target_and_positive_counts() {
    for args in [
        &["bench"][..],
        &["bench", "--runner", "x", "--ws", "ws://127.0.0.1:1"],
        &["bench", "--runner", "x", "--filter", "spec/"],
        &["bench", "--runner", "x", "--iterations", "many"],
    ] {
        let out = cli(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
    }
    let out = cli(&["bench", "--runner", "sh", "--iterations", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("must each be at least 1"),
        "{}",
        stderr(&out)
    );
    let out = cli(&["bench", "--runner", "sh", "--spawns", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("must each be at least 1"));
}

#[test]
fn replaying_without_a_subcommand_works_as_before() {
    // The replay flags still need no subcommand, and still fail fast on a runner that cannot start.
    let out = cli(&[
        "--runner",
        "/nonexistent/runner",
        "--filter",
        "spec/",
        "--jobs",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.starts_with("execbox-conformance: cannot start or reach the runner"),
        "{err}"
    );
    // Replay flags do not mix with the subcommand, nor bench flags with replaying.
    assert_eq!(cli(&["--runner", "x", "bench"]).status.code(), Some(2));
    assert_eq!(cli(&["--runner", "x", "--quick"]).status.code(), Some(2));
    assert_eq!(cli(&[]).status.code(), Some(2));
}

#[test]
fn bench_help_documents_the_json_keys() {
    let out = cli(&["bench", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    for key in [
        "trivial_p50_us",
        "tool_call_p99_us",
        "exec_per_s",
        "spawn_to_first_done_ms",
        "EXECBOX_TOKEN",
    ] {
        assert!(help.contains(key), "{key} missing from:\n{help}");
    }
}
