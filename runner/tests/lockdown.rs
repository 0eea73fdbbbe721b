//! The OS lockdown seen from outside: `/proc/PID/{status,limits}` of a stdio runner and of a
//! `--listen` supervisor and its session runners, the hidden `--lockdown-probe` actions (each
//! in its own process), and fail-closed start.
#![cfg(target_os = "linux")]

mod support;

use std::io::{BufReader, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{json, Value};
use support::{children_of, execute, recv, send, status_of, Runner, RUNNER};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message as Frame;

/// Exit status of a probe whose action failed with EACCES or EPERM (`lockdown::PROBE_DENIED`).
const PROBE_DENIED: i32 = 3;

/// Seccomp in filter mode, no_new_privs, and no core dumps.
fn assert_locked_down(runner: &Runner) {
    assert_eq!(runner.status("Seccomp"), "2", "seccomp filter mode");
    assert_eq!(runner.status("NoNewPrivs"), "1");
    assert_eq!(runner.limit("Max core file size"), ("0".into(), "0".into()));
}

#[test]
fn stdio_runner_is_locked_down_and_still_executes() {
    let mut runner = Runner::spawn(&[]);
    assert_eq!(runner.run("a", "1 + 1")["result"], 2);
    assert_locked_down(&runner);
    // Stdio's threads all exist before the lockdown, so it may create none afterwards.
    assert_eq!(runner.limit("Max processes"), ("0".into(), "0".into()));
    assert_eq!(runner.limit("Max open files"), ("64".into(), "64".into()));

    // A varied workload still runs under the lockdown, tool calls included.
    let code = "let a = []; for (let i = 0; i < 200000; i++) a.push({i, s: 'x' + i}); \
                console.log(new Date(0).toISOString(), Math.random() < 1); a.length";
    let done = runner.run("b", code);
    assert_eq!(done["result"], 200000);
    assert_eq!(done["logs"], json!(["1970-01-01T00:00:00.000Z true"]));
    runner.send(execute("c", "(await tools.echo({n: 1})).n + 1", json!({})));
    assert_eq!(runner.recv()["type"], "started");
    let call = runner.recv();
    assert_eq!(call["type"], "tool_call");
    runner.send(
        json!({"type": "tool_result", "callId": call["callId"], "ok": true, "result": {"n": 41}}),
    );
    assert_eq!(runner.recv()["result"], 42);
    runner.send(execute("d", "while (true) {}", json!({"timeoutMs": 100})));
    assert_eq!(runner.recv()["type"], "started");
    assert_eq!(runner.recv()["error"]["code"], "timeout");
    let bomb = "let a = []; while (true) a.push('x'.repeat(1 << 16))";
    assert_eq!(runner.run("e", bomb)["error"]["code"], "memory_limit");
    assert_eq!(
        runner.run("f", "'still ' + 'alive'")["result"],
        "still alive"
    );
    assert_eq!(runner.child.try_wait().unwrap(), None, "the runner died");
}

#[test]
fn stdio_runner_holds_no_capability_and_no_inherited_descriptor() {
    // bash opens descriptor 7 and execs the runner, which inherits it.
    let mut child = Command::new("bash")
        .args([
            "-c",
            &format!("exec 7</dev/null 8>/dev/null; exec {RUNNER}"),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn bash");
    let stdin = child.stdin.take();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let mut runner = Runner {
        child,
        stdin,
        stdout,
    };
    // One execution: the lockdown is complete by then.
    let done = runner.run("a", "1 + 1");
    assert_eq!(done["result"], 2, "{done}");
    assert_locked_down(&runner);
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(runner.status(set), "0000000000000000", "{set}");
    }
    let fds: Vec<String> = std::fs::read_dir(format!("/proc/{}/fd", runner.child.id()))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(
        fds.iter().all(|fd| ["0", "1", "2"].contains(&fd.as_str())),
        "descriptors left open: {fds:?}"
    );
}

#[test]
fn probe_clock_syscalls_work_without_the_vdso() {
    assert_eq!(probe("clocks").code(), Some(0));
}

#[test]
fn insecure_no_sandbox_runs_without_seccomp() {
    let mut runner = Runner::spawn(&["--insecure-no-sandbox"]);
    assert_eq!(runner.run("a", "1 + 1")["result"], 2);
    assert_eq!(runner.status("Seccomp"), "0");
    assert_eq!(runner.status("NoNewPrivs"), "0");
}

#[tokio::test]
async fn listening_supervisor_and_its_session_runners_are_locked_down() {
    let mut runner = Runner::spawn(&["--listen", "127.0.0.1:0", "--max-sessions", "1"]);
    let url = runner.line();
    assert!(url.starts_with("ws://127.0.0.1:"), "{url}");
    // The address is printed only once the supervisor's lockdown is complete: Landlock (which
    // sets no_new_privs), rlimits and its own seccomp allowlist.
    assert_eq!(runner.status("Seccomp"), "2", "seccomp filter mode");
    assert_eq!(runner.status("NoNewPrivs"), "1");
    assert_eq!(runner.limit("Max core file size"), ("0".into(), "0".into()));
    assert_eq!(runner.limit("Max open files"), ("132".into(), "132".into()));

    // A session with a tool call, served by its own runner process.
    let (mut first, _) = tokio_tungstenite::connect_async(url.as_str())
        .await
        .unwrap();
    send(
        &mut first,
        execute("a", "(await tools.echo({n: 1})).n + 1", json!({})),
    )
    .await;
    assert_eq!(recv(&mut first).await["type"], "started");
    let call = recv(&mut first).await;
    assert_eq!(call["type"], "tool_call");
    let result =
        json!({"type": "tool_result", "callId": call["callId"], "ok": true, "result": {"n": 41}});
    send(&mut first, result).await;
    assert_eq!(recv(&mut first).await["result"], 42);
    // Every runner process of the supervisor (the session's and the warm ones) is locked down
    // as a stdio runner is.
    let children = children_of(runner.child.id());
    assert!(!children.is_empty(), "no runner processes");
    let own: u32 = runner.status("Seccomp_filters").parse().unwrap();
    for child in &children {
        assert_eq!(
            status_of(*child, "Seccomp").as_deref(),
            Some("2"),
            "runner {child}"
        );
        // The supervisor's filters (inherited) with the runner's own stacked on them, once it
        // has locked itself down (a warm runner may still be starting).
        let until = Instant::now() + Duration::from_secs(10);
        let filters = || -> u32 {
            status_of(*child, "Seccomp_filters")
                .and_then(|f| f.parse().ok())
                .unwrap_or(0)
        };
        while filters() <= own && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            filters() > own,
            "runner {child}: {} filters, supervisor {own}",
            filters()
        );
        assert_eq!(
            status_of(*child, "NoNewPrivs").as_deref(),
            Some("1"),
            "runner {child}"
        );
    }

    // Over --max-sessions, a connection is refused with 1013 (the refusal path, locked down).
    let (mut second, _) = tokio_tungstenite::connect_async(url.as_str())
        .await
        .unwrap();
    match second.next().await {
        Some(Ok(Frame::Close(Some(close)))) => assert_eq!(close.code, CloseCode::Again),
        other => panic!("expected a 1013 close, got {other:?}"),
    }

    // Once the first session ends, a new one (a new process) executes.
    first.close(None).await.unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    let done = loop {
        let (mut ws, _) = tokio_tungstenite::connect_async(url.as_str())
            .await
            .unwrap();
        send(&mut ws, execute("b", "6 * 7", json!({}))).await;
        match ws.next().await {
            Some(Ok(Frame::Text(text))) => {
                assert_eq!(
                    serde_json::from_str::<Value>(&text).unwrap()["type"],
                    "started"
                );
                break recv(&mut ws).await;
            }
            // The first session's slot is released once its runner process is reaped.
            Some(Ok(Frame::Close(_))) if Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            other => panic!("expected started, got {other:?}"),
        }
    };
    assert_eq!(done["result"], 42);
    assert_eq!(runner.child.try_wait().unwrap(), None, "the runner died");
}

fn probe(action: &str) -> ExitStatus {
    let output = Command::new(RUNNER)
        .args(["--lockdown-probe", action])
        .stdin(Stdio::null())
        .output()
        .expect("spawn probe");
    eprintln!(
        "probe {action}: {:?} {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    output.status
}

#[test]
fn probe_that_does_nothing_exits_cleanly_under_lockdown() {
    assert_eq!(probe("none").code(), Some(0));
}

#[test]
fn probe_can_create_a_thread_under_lockdown() {
    assert_eq!(probe("thread").code(), Some(0));
}

#[test]
fn probe_open_is_refused_with_eacces() {
    assert_eq!(probe("open").code(), Some(PROBE_DENIED));
}

#[test]
fn probe_socket_is_killed_by_seccomp() {
    assert_eq!(probe("socket").signal(), Some(libc::SIGSYS));
}

#[test]
fn probe_fork_is_killed_by_seccomp() {
    assert_eq!(probe("fork").signal(), Some(libc::SIGSYS));
}

#[test]
fn probe_spawning_a_program_is_killed_by_seccomp() {
    assert_eq!(probe("spawn").signal(), Some(libc::SIGSYS));
}

#[test]
fn probe_abort_still_ends_as_sigabrt_not_sigsys() {
    assert_eq!(probe("abort").signal(), Some(libc::SIGABRT));
}

#[test]
fn probe_landlock_alone_refuses_opening_a_file() {
    assert_eq!(probe("landlock-open").code(), Some(PROBE_DENIED));
}

#[test]
fn probe_landlock_alone_refuses_tcp_connect() {
    // Without Landlock this would be "connection refused" (exit 4), not EACCES.
    assert_eq!(probe("landlock-connect").code(), Some(PROBE_DENIED));
}

/// Runs the runner with `args` in a process where Landlock looks absent (ENOSYS).
fn run_without_landlock(args: &[&str], stdin: &[u8]) -> Output {
    use seccompiler::{BpfProgram, SeccompAction, SeccompFilter};
    let arch = std::env::consts::ARCH.try_into().unwrap();
    let rules = [(libc::SYS_landlock_create_ruleset, Vec::new())]
        .into_iter()
        .collect();
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    );
    let program: BpfProgram = filter.unwrap().try_into().unwrap();
    let mut command = Command::new(RUNNER);
    command
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let hide_landlock = move || {
        seccompiler::apply_filter(&program)
            .map_err(|_| std::io::Error::from_raw_os_error(libc::EPERM))
    };
    // SAFETY: the closure only makes two syscalls (prctl, seccomp) and allocates nothing.
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(hide_landlock);
    }
    let mut child = command.spawn().expect("spawn runner");
    // A runner that refuses to start may be gone before its input is written (EPIPE).
    let _ = child.stdin.take().unwrap().write_all(stdin);
    child.wait_with_output().unwrap()
}

#[test]
fn runner_refuses_to_start_when_the_lockdown_cannot_be_applied() {
    let line = format!("{}\n", execute("a", "1 + 1", json!({})));
    let refused = run_without_landlock(&[], line.as_bytes());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(refused.stdout.is_empty(), "no guest input was read");
    assert!(stderr.contains("Landlock is unavailable"), "{stderr}");
    assert!(
        stderr.contains("cannot apply the OS lockdown, refusing to start"),
        "{stderr}"
    );
    assert!(stderr.contains("--insecure-no-sandbox"), "{stderr}");

    let refused = run_without_landlock(&["--listen", "127.0.0.1:0"], b"");
    assert_eq!(refused.status.code(), Some(1));
    assert!(refused.stdout.is_empty(), "no address is printed");

    let insecure = run_without_landlock(&["--insecure-no-sandbox"], line.as_bytes());
    let stderr = String::from_utf8_lossy(&insecure.stderr);
    assert_eq!(insecure.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("WITHOUT the OS lockdown"), "{stderr}");
    let stdout = String::from_utf8_lossy(&insecure.stdout);
    let done: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(done["result"], 2);
}
