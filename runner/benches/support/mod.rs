//! The driver both benches share: the real `execbox-runner` over stdio, through real pipes,
//! as a host sees it. `EXECBOX_RUNNER=PATH` measures another build of the runner (to compare
//! two versions with the same driver), `RUNNER_ARGS="..."` passes it flags.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::Value;

/// A stdio runner process, killed when dropped.
pub struct Runner {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Runner {
    /// Starts the runner; with `quiet`, its stderr is discarded (watchdog warnings), otherwise
    /// it is this process's.
    pub fn spawn(quiet: bool) -> Runner {
        let program = std::env::var_os("EXECBOX_RUNNER")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_execbox-runner").into());
        let args: Vec<String> = std::env::var("RUNNER_ARGS")
            .map(|a| a.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default();
        let mut child = Command::new(program)
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(if quiet {
                Stdio::null()
            } else {
                Stdio::inherit()
            })
            .spawn()
            .expect("spawn runner");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Runner {
            child,
            stdin,
            stdout,
        }
    }

    /// Sends one message line (`line` without its newline) in one write; false once the
    /// runner is gone.
    pub fn send_line(&mut self, line: &str) -> bool {
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        self.stdin.write_all(&bytes).is_ok() && self.stdin.flush().is_ok()
    }

    /// Sends one message; false once the runner is gone.
    pub fn send(&mut self, message: &Value) -> bool {
        self.send_line(&message.to_string())
    }

    /// The next message, or `None` when the runner closed its stdout.
    pub fn recv(&mut self) -> Option<Value> {
        let mut line = String::new();
        if self.stdout.read_line(&mut line).ok()? == 0 {
            return None;
        }
        Some(serde_json::from_str(&line).expect("a runner line is a message"))
    }

    /// The next message of `kind` (others are skipped), or `None` when stdout closed.
    pub fn recv_type(&mut self, kind: &str) -> Option<Value> {
        loop {
            let message = self.recv()?;
            if message["type"] == kind {
                return Some(message);
            }
        }
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Its VmRSS, in KiB (0 when it is gone).
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
