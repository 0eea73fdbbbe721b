//! The `execbox` CLI driven as a user drives it: arguments, stdin, and what it printed.

use std::io::Write;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use super::process::signal;
use super::runners::EXECBOX;

/// `execbox ARGS...` from the workspace root (where `examples/` is), with piped stdio and
/// neither `EXECBOX_TOKEN`, `RUST_LOG` nor an OTLP endpoint from the environment.
pub fn command(args: &[&str]) -> Command {
    let mut command = Command::new(EXECBOX);
    command
        .args(args)
        .env_remove("EXECBOX_TOKEN")
        .env_remove("RUST_LOG")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Runs `execbox ARGS...` with `stdin` as its input, to its end.
pub fn execbox(args: &[&str], stdin: &str) -> Output {
    let mut child = command(args).spawn().expect("start execbox");
    // A usage error may end the process before it reads its input: a broken pipe then.
    let _ = child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(stdin.as_bytes());
    child.wait_with_output().expect("wait for execbox")
}

/// Output as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Waits up to `within` for `child` to exit, with its output; kills it and panics if it does
/// not.
pub fn wait_output(child: Child, within: Duration) -> Output {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(within) {
        Ok(out) => out.expect("wait for execbox"),
        Err(_) => {
            let _ = signal(pid, libc::SIGKILL);
            panic!("execbox did not exit within {within:?}");
        }
    }
}
