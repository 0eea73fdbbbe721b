//! The runner processes that serve sessions: how to start one, a few kept warm, and how one
//! is ended (stdin closed, a grace period, then SIGKILL) and always reaped.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{mpsc, Mutex};

use crate::ceilings::Ceilings;

use super::backoff::{suppressed_note, Backoff, RateLimited};
use super::metrics::Pids;

/// How many runner processes are kept started ahead of demand, waiting on stdin.
pub(crate) const WARM_CHILDREN: usize = 2;
/// How long a session waits for a runner process before it is closed with 1011.
const TAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The program that serves one session on stdin/stdout: an executable and the arguments that
/// make it a stdio runner (`execbox-runner` needs none, `execbox` needs `runner`).
#[derive(Debug, Clone)]
pub struct ChildCommand {
    program: PathBuf,
    args: Vec<OsString>,
}

impl ChildCommand {
    /// Runs `program` with no arguments.
    pub fn new(program: impl Into<PathBuf>) -> ChildCommand {
        ChildCommand {
            program: program.into(),
            args: Vec::new(),
        }
    }

    /// The executable of the current process.
    pub fn current_exe() -> io::Result<ChildCommand> {
        Ok(ChildCommand::new(std::env::current_exe()?))
    }

    /// Appends one argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> ChildCommand {
        self.args.push(arg.into());
        self
    }

    /// The executable (the supervisor's lockdown allows executing it, and nothing else).
    pub fn program(&self) -> &Path {
        &self.program
    }
}

/// Starts runner processes: the [`ChildCommand`] plus the flags passed through.
#[derive(Debug)]
pub(crate) struct Spawner {
    command: ChildCommand,
    passed: Vec<OsString>,
    pids: Pids,
}

impl Spawner {
    /// `--max-message-bytes`, `--max-pending-tool-calls`, the ceilings on `execute.options`
    /// and, when set, `--insecure-no-sandbox` are passed to each child.
    pub fn new(
        command: ChildCommand,
        max_message_bytes: usize,
        max_pending_tool_calls: u32,
        ceilings: Ceilings,
        insecure_no_sandbox: bool,
        pids: Pids,
    ) -> Spawner {
        let mut passed: Vec<OsString> = vec![
            "--max-message-bytes".into(),
            max_message_bytes.to_string().into(),
            "--max-pending-tool-calls".into(),
            max_pending_tool_calls.to_string().into(),
            "--max-timeout-ms".into(),
            ceilings.timeout_ms.to_string().into(),
            "--max-memory-limit-bytes".into(),
            ceilings.memory_limit_bytes.to_string().into(),
            "--max-log-lines".into(),
            ceilings.max_log_lines.to_string().into(),
            "--max-log-chars".into(),
            ceilings.max_log_chars.to_string().into(),
        ];
        if insecure_no_sandbox {
            passed.push("--insecure-no-sandbox".into());
        }
        Spawner {
            command,
            passed,
            pids,
        }
    }

    fn spawn(&self) -> io::Result<RunnerChild> {
        let mut child = Command::new(&self.command.program)
            .args(&self.command.args)
            .args(&self.passed)
            // The token authenticates clients to the supervisor; a session has no use for it.
            .env_remove(super::auth::TOKEN_ENV)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let pid = child.id();
        if let Some(pid) = pid {
            lock(&self.pids).insert(pid);
        }
        Ok(RunnerChild {
            child,
            stdin,
            stdout,
            pid,
            pids: self.pids.clone(),
        })
    }
}

/// One runner process serving (or ready to serve) one session. Dropping it kills it; tokio
/// reaps it in the background. [`RunnerChild::finish`] and [`RunnerChild::kill`] reap it here.
#[derive(Debug)]
pub(crate) struct RunnerChild {
    child: Child,
    /// Its stdin: NDJSON lines from the client. Dropping it is the EOF that ends the session.
    pub(crate) stdin: Option<ChildStdin>,
    /// Its stdout: protocol messages for the client.
    pub(crate) stdout: Option<ChildStdout>,
    pid: Option<u32>,
    pids: Pids,
}

fn lock(pids: &Pids) -> std::sync::MutexGuard<'_, std::collections::BTreeSet<u32>> {
    pids.lock().unwrap_or_else(|e| e.into_inner())
}

impl Drop for RunnerChild {
    fn drop(&mut self) {
        if let Some(pid) = self.pid {
            lock(&self.pids).remove(&pid);
        }
    }
}

impl RunnerChild {
    /// Its pid, while it runs.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Closes stdin, waits up to `grace` for the process to exit, then SIGKILLs it; reaps it.
    pub(crate) async fn finish(mut self, grace: Duration) -> io::Result<ExitStatus> {
        drop(self.stdin.take());
        match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(status) => status,
            Err(_) => {
                tracing::debug!(pid = ?self.pid(), "runner did not exit within {grace:?} of its stdin closing; killing it");
                self.kill().await
            }
        }
    }

    /// SIGKILLs the process and reaps it.
    pub(crate) async fn kill(mut self) -> io::Result<ExitStatus> {
        self.child.kill().await?;
        self.child.wait().await
    }

    /// Whether it has exited already (a warm process that failed to start, say).
    fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

/// Keeps [`WARM_CHILDREN`] runner processes started ahead of demand (each locks itself down
/// and waits on stdin), and replaces each one taken.
pub(crate) struct Warm {
    ready: Mutex<(mpsc::Receiver<RunnerChild>, RateLimited)>,
}

impl Warm {
    /// Starts the task that keeps the processes warm (inside the runtime).
    pub(crate) fn start(spawner: Arc<Spawner>) -> Warm {
        // One waits in the channel, one in the task's pending send.
        let (tx, rx) = mpsc::channel(WARM_CHILDREN - 1);
        tokio::spawn(async move {
            let mut backoff = Backoff::new(Duration::from_millis(5), Duration::from_secs(1));
            let mut warn = RateLimited::new(Duration::from_secs(1));
            loop {
                match spawner.spawn() {
                    Ok(child) => {
                        backoff.reset();
                        if tx.send(child).await.is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        if let Some(suppressed) = warn.allow(Instant::now()) {
                            tracing::warn!(
                                "cannot start a runner process ({}): {e}{}",
                                spawner.command.program.display(),
                                suppressed_note(suppressed)
                            );
                        }
                        tokio::time::sleep(backoff.next()).await;
                    }
                }
            }
        });
        Warm {
            ready: Mutex::new((rx, RateLimited::new(Duration::from_secs(1)))),
        }
    }

    /// A warm runner process that is still alive.
    pub(crate) async fn take(&self) -> io::Result<RunnerChild> {
        let deadline = tokio::time::Instant::now() + TAKE_TIMEOUT;
        let mut guard = self.ready.lock().await;
        let (ready, warn) = &mut *guard;
        loop {
            let child = tokio::time::timeout_at(deadline, ready.recv())
                .await
                .map_err(|_| {
                    io::Error::other(format!("no runner process started within {TAKE_TIMEOUT:?}"))
                })?
                .ok_or_else(|| io::Error::other("the warm pool is gone"))?;
            let mut child = child;
            match child.exited() {
                None => return Ok(child),
                Some(status) => {
                    if let Some(suppressed) = warn.allow(Instant::now()) {
                        tracing::warn!(
                            "a warm runner process exited before serving ({status}); taking another{}",
                            suppressed_note(suppressed)
                        );
                    }
                }
            }
        }
    }
}
