//! Review finding m6: a client's `execute.options` were accepted whatever they asked (1 TiB of
//! `memoryLimitBytes` on a pod sized for 8 sessions of 64 MiB). The runner's ceilings
//! (`--max-timeout-ms`, `--max-memory-limit-bytes`, `--max-log-lines`, `--max-log-chars`) now
//! refuse more, over stdio and in every `--listen` session, with a `validation_error` naming
//! the option, the value, the ceiling and the flag.
#![cfg(target_os = "linux")]

use std::process::{Command, Stdio};

use crate::support::{connect, execute, recv, send, Listener, Runner, RUNNER};
use serde_json::{json, Value};

const TIB: u64 = 1 << 40;
const CEILINGS: [&str; 4] = [
    "--max-memory-limit-bytes",
    "67108864",
    "--max-timeout-ms",
    "60000",
];

/// Asserts that `done` refuses `option` asked as `asked` over `ceiling` set by `flag`.
fn assert_refused(done: &Value, option: &str, asked: u64, ceiling: u64, unit: &str, flag: &str) {
    assert_eq!(done["type"], "done", "{done}");
    assert_eq!(done["ok"], false, "{done}");
    assert_eq!(done["error"]["code"], "validation_error", "{done}");
    assert_eq!(
        done["error"]["message"],
        format!(
            "options.{option} {asked} is over this runner's ceiling of {ceiling} {unit} ({flag}); \
             ask for at most that"
        ),
        "{done}"
    );
}

#[test]
fn stdio_runner_refuses_memory_and_timeout_over_its_ceilings_and_runs_what_fits() {
    let mut runner = Runner::spawn(&CEILINGS);
    runner.send(execute("big", "1 + 1", json!({"memoryLimitBytes": TIB})));
    let done = runner.recv();
    assert_refused(
        &done,
        "memoryLimitBytes",
        TIB,
        67108864,
        "bytes",
        "--max-memory-limit-bytes",
    );
    assert_eq!(done["id"], "big");
    runner.send(execute("long", "1 + 1", json!({"timeoutMs": 3_600_000})));
    let done = runner.recv();
    assert_refused(
        &done,
        "timeoutMs",
        3_600_000,
        60000,
        "ms",
        "--max-timeout-ms",
    );
    // At the ceilings, and with the options omitted: it runs.
    runner.send(execute(
        "fits",
        "1 + 1",
        json!({"memoryLimitBytes": 67108864, "timeoutMs": 60000}),
    ));
    assert_eq!(runner.recv(), json!({"type": "started", "id": "fits"}));
    assert_eq!(runner.recv()["result"], 2);
    assert_eq!(runner.run("omitted", "1 + 1")["result"], 2);
}

#[test]
fn stdio_runner_refuses_a_tebibyte_by_default() {
    let mut runner = Runner::spawn(&[]);
    runner.send(execute("big", "1 + 1", json!({"memoryLimitBytes": TIB})));
    let done = runner.recv();
    assert_refused(
        &done,
        "memoryLimitBytes",
        TIB,
        1 << 30,
        "bytes",
        "--max-memory-limit-bytes",
    );
    runner.send(execute("logs", "1 + 1", json!({"maxLogChars": 1u64 << 50})));
    let done = runner.recv();
    assert_refused(
        &done,
        "maxLogChars",
        1 << 50,
        100_000_000,
        "characters",
        "--max-log-chars",
    );
    assert_eq!(runner.run("after", "1 + 1")["result"], 2);
}

#[tokio::test]
async fn listen_sessions_refuse_memory_and_timeout_over_the_ceilings() {
    let listener = Listener::spawn(&CEILINGS);
    let mut ws = connect(&listener.url).await;
    send(
        &mut ws,
        execute("big", "1 + 1", json!({"memoryLimitBytes": TIB})),
    )
    .await;
    let done = recv(&mut ws).await;
    assert_refused(
        &done,
        "memoryLimitBytes",
        TIB,
        67108864,
        "bytes",
        "--max-memory-limit-bytes",
    );
    send(
        &mut ws,
        execute("long", "1 + 1", json!({"timeoutMs": 3_600_000})),
    )
    .await;
    let done = recv(&mut ws).await;
    assert_refused(
        &done,
        "timeoutMs",
        3_600_000,
        60000,
        "ms",
        "--max-timeout-ms",
    );
    send(
        &mut ws,
        execute(
            "fits",
            "1 + 1",
            json!({"memoryLimitBytes": 33554432, "timeoutMs": 1000}),
        ),
    )
    .await;
    assert_eq!(
        recv(&mut ws).await,
        json!({"type": "started", "id": "fits"})
    );
    assert_eq!(recv(&mut ws).await["result"], 2);
}

#[test]
fn a_ceiling_below_the_option_default_is_refused_at_start() {
    let output = Command::new(RUNNER)
        .args(["--max-memory-limit-bytes", "1000", "--insecure-no-sandbox"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "--max-memory-limit-bytes 1000 is below the default memoryLimitBytes of 67108864 \
             bytes"
        ),
        "{stderr}"
    );
}
