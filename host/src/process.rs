//! Runner child processes over stdio, and the executor that spawns one per execution.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;

use execbox_protocol::{LineFramer, Message, RuntimeOptions, DEFAULT_MAX_MESSAGE_BYTES};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::connection::{Connection, RunnerEvent, SessionTimings, Terminate};
use crate::executor::{ExecuteFuture, Executor};
use crate::toolset::ToolSet;

/// How to start a runner process.
#[derive(Debug, Clone)]
pub struct RunnerCommand {
    /// The program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
}

impl RunnerCommand {
    /// `program args...`.
    pub fn new(program: impl Into<PathBuf>) -> Self {
        RunnerCommand {
            program: program.into(),
            args: Vec::new(),
        }
    }

    /// Appends an argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// The `execbox-runner` binary: next to the current executable (or one level up, for test
    /// binaries under `target/*/deps`), else from `PATH`.
    pub fn default_runner() -> Self {
        let name = format!("execbox-runner{}", std::env::consts::EXE_SUFFIX);
        if let Ok(exe) = std::env::current_exe() {
            for dir in exe.ancestors().skip(1).take(2) {
                let candidate = dir.join(&name);
                if candidate.is_file() {
                    return RunnerCommand::new(candidate);
                }
            }
        }
        RunnerCommand::new(name)
    }

    /// Spawns the runner and connects to its stdio. The child is killed when the connection
    /// is terminated or dropped.
    pub fn spawn(&self, timings: SessionTimings) -> std::io::Result<Connection> {
        let mut child = Command::new(&self.program)
            .args(&self.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("cannot start runner {}: {e}", self.program.display()),
                )
            })?;
        let pid = child.id().unwrap_or_default();
        let mut stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        let (host_tx, mut host_rx) = mpsc::unbounded_channel::<Message>();
        let (event_tx, event_rx) = mpsc::unbounded_channel::<RunnerEvent>();

        tokio::spawn(async move {
            while let Some(message) = host_rx.recv().await {
                let mut line = message.encode();
                line.push('\n');
                if stdin.write_all(line.as_bytes()).await.is_err() || stdin.flush().await.is_err() {
                    break;
                }
            }
        });

        // The last stderr lines, to explain a crash.
        let (stderr_tx, stderr_rx) = tokio::sync::oneshot::channel::<String>();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            let mut tail: Vec<String> = Vec::new();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::debug!(runner = pid, "{line}");
                tail.push(line);
                if tail.len() > 5 {
                    tail.remove(0);
                }
            }
            let _ = stderr_tx.send(tail.join(" | "));
        });

        let (exit_tx, exit_rx) = tokio::sync::oneshot::channel::<()>();
        let child_slot = std::sync::Arc::new(tokio::sync::Mutex::new(Some(child)));
        let reaper = child_slot.clone();
        tokio::spawn(async move {
            read_stdout(stdout, &event_tx).await;
            // stdout closed: the runner is exiting (or closed stdout, which is as bad).
            let status = {
                let mut slot = reaper.lock().await;
                match slot.as_mut() {
                    Some(child) => exit_status(child).await,
                    None => "terminated by the host".to_owned(),
                }
            };
            let stderr_tail = stderr_rx.await.unwrap_or_default();
            let how = if stderr_tail.is_empty() {
                status
            } else {
                format!("{status}; stderr: {stderr_tail}")
            };
            let _ = event_tx.send(RunnerEvent::Closed(how));
            let _ = exit_tx.send(());
        });

        let terminate: Terminate = Box::new(move || {
            Box::pin(async move {
                let mut slot = child_slot.lock().await;
                if let Some(mut child) = slot.take() {
                    let _ = child.start_kill();
                    let _ = child.wait().await; // reap: no zombie left behind
                }
                drop(slot);
                drop(exit_rx);
            })
        });
        Ok(Connection::new(host_tx, event_rx, terminate, timings))
    }
}

async fn exit_status(child: &mut Child) -> String {
    match tokio::time::timeout(std::time::Duration::from_secs(2), child.wait()).await {
        Ok(Ok(status)) => format!("runner exited with {status}"),
        Ok(Err(e)) => format!("runner exit status unknown: {e}"),
        Err(_) => {
            let _ = child.start_kill();
            let _ = child.wait().await;
            "runner closed stdout and was killed".to_owned()
        }
    }
}

async fn read_stdout(
    mut stdout: tokio::process::ChildStdout,
    events: &mpsc::UnboundedSender<RunnerEvent>,
) {
    let mut framer = LineFramer::new(DEFAULT_MAX_MESSAGE_BYTES);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match stdout.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        framer.push(&buf[..n]);
        while let Some(frame) = framer.next_frame() {
            let event = crate::ws::frame_to_event(frame);
            if events.send(event).is_err() {
                return;
            }
        }
    }
    framer.finish();
    while let Some(frame) = framer.next_frame() {
        let _ = events.send(crate::ws::frame_to_event(frame));
    }
}

/// Spawns a fresh runner process for every execution: the strongest isolation between
/// executions, at the cost of a process start (a few milliseconds) each time.
#[derive(Debug, Clone)]
pub struct ProcessExecutor {
    command: RunnerCommand,
    timings: SessionTimings,
}

impl ProcessExecutor {
    /// An executor spawning `command` per execution.
    pub fn new(command: RunnerCommand) -> Self {
        ProcessExecutor {
            command,
            timings: SessionTimings::default(),
        }
    }

    /// Overrides the host-side grace periods.
    pub fn with_timings(mut self, timings: SessionTimings) -> Self {
        self.timings = timings;
        self
    }
}

impl Executor for ProcessExecutor {
    fn execute<'a>(
        &'a self,
        code: &'a str,
        tools: &'a ToolSet,
        options: RuntimeOptions,
        cancel: CancellationToken,
    ) -> ExecuteFuture<'a> {
        Box::pin(async move {
            match self.command.spawn(self.timings) {
                Ok(connection) => connection.execute_once(code, tools, options, &cancel).await,
                Err(e) => crate::pool::spawn_failure(&e),
            }
        })
    }
}
