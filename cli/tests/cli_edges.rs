//! The `execbox` CLI's edges, each with the real binary: Ctrl-C and SIGTERM, usage errors,
//! sizes with units, errors said once, diagnostics flags and shell completions.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use support::cli::{command, execbox, text, wait_output};
use support::process::{eventually_blocking, is_dead, read_pid, signal};
use support::scripts::inline_tool;
use support::temp::TempDir;

/// A tools file in `dir` with one tool, `t.hold`, running `sh -c SCRIPT hold PIDFILE`.
fn holding_tools(dir: &TempDir, script: &str) -> (PathBuf, PathBuf) {
    let pid_file = dir.join("tool.pid");
    let tools = inline_tool(dir.path(), "hold", script, &pid_file.display().to_string());
    (tools, pid_file)
}

/// Starts `execbox run -` on `code` and waits until the tool has written its pid. The caller
/// waits for the child.
#[allow(clippy::zombie_processes)]
fn start_holding(tools: &Path, pid_file: &Path, code: &str) -> (Child, u32) {
    let mut child = command(&[
        "run",
        "-",
        "--timeout-ms",
        "60000",
        "--tools",
        tools.to_str().unwrap(),
    ])
    .spawn()
    .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(code.as_bytes())
        .unwrap();
    if !eventually_blocking(Duration::from_secs(20), || read_pid(pid_file).is_some()) {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the tool never started");
    }
    let pid = read_pid(pid_file).unwrap();
    (child, pid)
}

#[test]
fn ctrl_c_cancels_the_execution_kills_its_tool_and_exits_130() {
    let dir = TempDir::new("ctrl-c");
    let (tools, pid_file) = holding_tools(&dir, "echo $$ > \"$1\"; exec sleep 30");
    let (child, tool) = start_holding(&tools, &pid_file, "await t.hold()");
    signal(child.id(), libc::SIGINT).unwrap();
    let out = wait_output(child, Duration::from_secs(10));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("cancelling the execution"), "{stderr}");
    assert!(stderr.contains("execbox: execution cancelled"), "{stderr}");
    assert!(!stderr.contains("timed out"), "{stderr}");
    assert!(
        eventually_blocking(Duration::from_secs(2), || is_dead(tool)),
        "the tool {tool} outlived execbox"
    );
}

#[test]
fn a_second_ctrl_c_stops_at_once_and_still_kills_the_tool() {
    let dir = TempDir::new("ctrl-c-twice");
    let (tools, pid_file) = holding_tools(&dir, "echo $$ > \"$1\"; exec sleep 30");
    // The guest starts a tool call, then sits in one native call that never polls for
    // interrupts, so the first Ctrl-C waits for the runner's cancel grace.
    let (child, tool) = start_holding(
        &tools,
        &pid_file,
        "t.hold(); Array.prototype.reverse.call({ length: 2 ** 53 - 1 })",
    );
    signal(child.id(), libc::SIGINT).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    signal(child.id(), libc::SIGINT).unwrap();
    let out = wait_output(child, Duration::from_secs(10));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("execbox: stopped at once"), "{stderr}");
    assert!(
        eventually_blocking(Duration::from_secs(2), || is_dead(tool)),
        "the tool {tool} outlived execbox"
    );
}

#[test]
fn sigterm_kills_the_tool_process_group_before_exiting() {
    let dir = TempDir::new("sigterm");
    // The tool's own child, in the tool's process group, is what must not survive.
    let (tools, pid_file) = holding_tools(&dir, "sleep 30 & echo $! > \"$1\"; wait");
    let (child, grandchild) = start_holding(&tools, &pid_file, "await t.hold()");
    signal(child.id(), libc::SIGTERM).unwrap();
    let out = wait_output(child, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(143), "{}", text(&out.stderr));
    // SIGKILL is delivered asynchronously: give the kernel a moment to finish the group.
    assert!(
        eventually_blocking(Duration::from_secs(2), || is_dead(grandchild)),
        "the tool's child {grandchild} outlived execbox"
    );
}

#[test]
fn a_runner_address_without_a_scheme_is_a_usage_error() {
    let out = execbox(&["run", "-", "--runner", "127.0.0.1:7070"], "1");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--runner"), "{stderr}");
    assert!(stderr.contains("expected ws://HOST:PORT"), "{stderr}");
    assert!(!stderr.contains("internal_error"), "{stderr}");
}

#[test]
fn sizes_take_units() {
    let out = execbox(&["run", "-", "--memory-limit-bytes", "64MiB"], "6 * 7");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "42");
    // A limit small enough to matter, written with a unit, is applied.
    let out = execbox(
        &["run", "-", "--memory-limit-bytes", "2MiB"],
        "const a = []; while (true) a.push('x'.repeat(1000));",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("memory_limit"),
        "{}",
        text(&out.stderr)
    );
    let out = execbox(&["run", "-", "--memory-limit-bytes", "64 parsecs"], "1");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("unknown unit"),
        "{}",
        text(&out.stderr)
    );
}

/// The runner `execbox run` spawns serves only it: limits over the runner's default ceilings
/// (1 GiB, 24 h, 100,000 log lines) are what the user asked for, and they run.
#[test]
fn run_may_ask_for_more_than_the_runner_ceilings_of_a_server() {
    let out = execbox(
        &[
            "run",
            "-",
            "--memory-limit-bytes",
            "2GiB",
            "--timeout-ms",
            "100000000",
            "--max-log-lines",
            "200000",
        ],
        "6 * 7",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "42");
}

#[test]
fn a_missing_tools_file_is_reported_once() {
    let out = execbox(&["run", "-", "--tools", "no/such/tools.yaml"], "1");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr.matches("No such file or directory").count(),
        1,
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("no/such/tools.yaml"), "{stderr}");
}

#[test]
fn quiet_and_verbose_set_what_is_said_on_stderr() {
    let quiet = execbox(&["run", "-", "-q"], "console.log('guest line'); 1");
    assert!(quiet.status.success());
    assert_eq!(text(&quiet.stderr), "guest line\n");

    let verbose = execbox(&["run", "-", "-vv", "--log-format", "json"], "1");
    assert!(verbose.status.success(), "{}", text(&verbose.stderr));
    let stderr = text(&verbose.stderr);
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(!lines.is_empty(), "-vv said nothing");
    assert!(lines.iter().all(|l| l["level"].is_string()), "{stderr}");
}

#[test]
fn runner_lines_are_prefixed_once() {
    let mut child = command(&["run", "-"])
        .env("RUST_LOG", "debug")
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"1").unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let lines: Vec<String> = stderr.lines().map_while(Result::ok).collect();
    assert!(child.wait().unwrap().success());
    let runner_lines: Vec<&String> = lines.iter().filter(|l| l.contains("runner=")).collect();
    assert!(
        !runner_lines.is_empty(),
        "no runner line under RUST_LOG=debug: {lines:#?}"
    );
    for line in runner_lines {
        let timestamps = line
            .split_whitespace()
            .filter(|w| w.len() >= 20 && w.ends_with('Z') && w.contains('T'))
            .count();
        assert_eq!(timestamps, 1, "{line}");
    }
}

#[test]
fn help_documents_rust_log_and_exit_statuses() {
    let out = execbox(&["--help"], "");
    let help = text(&out.stdout);
    assert!(help.contains("RUST_LOG"), "{help}");
    assert!(help.contains("130"), "{help}");
}

#[test]
fn completions_print_a_script_per_shell() {
    for (shell, marker) in [
        ("bash", "_execbox()"),
        ("zsh", "#compdef execbox"),
        ("fish", "complete -c execbox"),
    ] {
        let out = execbox(&["completions", shell], "");
        assert!(out.status.success(), "{shell}: {}", text(&out.stderr));
        assert!(text(&out.stdout).contains(marker), "{shell}");
    }
    let out = execbox(&["completions", "nosh"], "");
    assert_eq!(out.status.code(), Some(2));
}
