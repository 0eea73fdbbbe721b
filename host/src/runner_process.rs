//! Runner child processes over stdio, and the executor that spawns one per execution.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;

#[cfg(not(unix))]
use execbox_protocol::Message;
use execbox_protocol::{ErrorCode, LineFramer, DEFAULT_MAX_MESSAGE_BYTES};
#[cfg(not(unix))]
use tokio::io::AsyncWriteExt;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use crate::connection::{Connection, RunnerEvent, SessionTimings, Terminate};
use crate::executor::{ExecuteFuture, ExecuteRequest, ExecuteResult, Executor};
use crate::program;

/// How to start a runner process.
#[derive(Debug, Clone)]
pub struct RunnerCommand {
    /// The program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Environment variables set for it. It inherits none of this process's but `RUST_LOG`,
    /// `RUST_BACKTRACE`, `RUST_MIN_STACK`, `LD_LIBRARY_PATH`, `LANG`, `LC_ALL` and `TZ`.
    pub env: Vec<(OsString, OsString)>,
}

impl RunnerCommand {
    /// `program args...`.
    pub fn new(program: impl Into<PathBuf>) -> Self {
        RunnerCommand {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
        }
    }

    /// Appends an argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Sets an environment variable for the runner (e.g. `RUST_LOG`).
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Finds the `execbox-runner` binary the way a user expects: the `EXECBOX_RUNNER`
    /// environment variable, else next to the current executable (or one folder up, for test
    /// binaries under `target/*/deps`), else on `PATH`.
    pub fn find() -> Result<Self, RunnerNotFound> {
        let name = format!("{RUNNER_NAME}{}", std::env::consts::EXE_SUFFIX);
        if let Some(path) = std::env::var_os(RUNNER_ENV).filter(|p| !p.is_empty()) {
            let command = RunnerCommand::new(path);
            return match command.resolve() {
                Ok(_) => Ok(command),
                Err(why) => Err(RunnerNotFound::Env {
                    path: command.program,
                    why,
                }),
            };
        }
        let exe = std::env::current_exe().ok();
        let beside: Vec<PathBuf> = exe
            .iter()
            .flat_map(|exe| exe.ancestors().skip(1).take(2))
            .map(|dir| dir.join(&name))
            .collect();
        for candidate in &beside {
            if program::is_executable(candidate) {
                return Ok(RunnerCommand::new(candidate));
            }
        }
        match program::search_own_path(std::ffi::OsStr::new(&name)) {
            Ok(found) => Ok(RunnerCommand::new(found)),
            Err(_) => Err(RunnerNotFound::Missing {
                looked_beside: beside.first().cloned(),
            }),
        }
    }

    /// The program's path if it can be run: a path with a folder must name an executable
    /// file; a bare name is looked up on `PATH`.
    pub fn resolve(&self) -> Result<PathBuf, String> {
        if self.program.components().count() > 1 {
            return match std::fs::metadata(&self.program) {
                Err(e) => Err(e.to_string()),
                Ok(meta) if !meta.is_file() => Err("not a file".into()),
                Ok(_) if !program::is_executable(&self.program) => Err("not executable".into()),
                Ok(_) => Ok(self.program.clone()),
            };
        }
        program::search_own_path(self.program.as_os_str()).map_err(|e| match e.skipped {
            Some(why) => format!("found on PATH, but {why}"),
            None => format!("not found on PATH{}", e.ignored_note()),
        })
    }

    /// Spawns the runner and connects to its stdio. The child is killed when the connection
    /// is terminated or dropped.
    pub fn spawn(&self, timings: SessionTimings) -> std::io::Result<Connection> {
        let mut command = Command::new(&self.program);
        // The runner gets none of the host's environment (its secrets included) but what a
        // process needs to start and to log; the variables given to this command are added.
        command.env_clear();
        for key in RUNNER_ENV_PASSED {
            if let Some(value) = std::env::var_os(key) {
                command.env(key, value);
            }
        }
        command
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // Its own process group: a terminal's Ctrl-C goes to us, and we decide whether the
        // runner gets a `cancel` or is killed. It still exits when we do (its stdin closes).
        #[cfg(unix)]
        command.process_group(0);
        let mut child = command.spawn().map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("cannot start runner {}: {e}", self.program.display()),
            )
        })?;
        let pid = child.id().unwrap_or_default();
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        let (event_tx, event_rx) = mpsc::unbounded_channel::<RunnerEvent>();

        // The last stderr lines, to explain a crash.
        let (stderr_tx, stderr_rx) = tokio::sync::oneshot::channel::<String>();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            let mut tail: Vec<String> = Vec::new();
            while let Ok(Some(line)) = lines.next_line().await {
                relay_runner_log(pid, &line);
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
        connect(stdin, event_rx, terminate, timings)
    }
}

/// A connection over a runner's stdin, written by each sender itself on Unix
/// ([`PipeWriter`](crate::pipe_writer::PipeWriter)).
#[cfg(unix)]
fn connect(
    stdin: tokio::process::ChildStdin,
    events: mpsc::UnboundedReceiver<RunnerEvent>,
    terminate: Terminate,
    timings: SessionTimings,
) -> std::io::Result<Connection> {
    let pipe = crate::pipe_writer::PipeWriter::new(stdin.into_owned_fd()?)?;
    Ok(Connection::with_pipe(pipe, events, terminate, timings))
}

/// A connection over a runner's stdin, written by a writer task.
#[cfg(not(unix))]
fn connect(
    mut stdin: tokio::process::ChildStdin,
    events: mpsc::UnboundedReceiver<RunnerEvent>,
    terminate: Terminate,
    timings: SessionTimings,
) -> std::io::Result<Connection> {
    let (host_tx, mut host_rx) = mpsc::unbounded_channel::<Message>();
    tokio::spawn(async move {
        while let Some(message) = host_rx.recv().await {
            let mut line = message.encode();
            line.push('\n');
            if stdin.write_all(line.as_bytes()).await.is_err() || stdin.flush().await.is_err() {
                break;
            }
        }
    });
    Ok(Connection::new(host_tx, events, terminate, timings))
}

/// Re-emits one stderr line of a runner as our own `tracing` event, at the runner's level and
/// without its timestamp and level (so a subscriber prefixes it once). Lines in another shape
/// are kept whole, at debug level.
fn relay_runner_log(pid: u32, line: &str) {
    let (level, message) = split_log_prefix(line).unwrap_or(("DEBUG", line));
    match level {
        "ERROR" => tracing::error!(runner = pid, "{message}"),
        "WARN" => tracing::warn!(runner = pid, "{message}"),
        "INFO" => tracing::info!(runner = pid, "{message}"),
        "TRACE" => tracing::trace!(runner = pid, "{message}"),
        _ => tracing::debug!(runner = pid, "{message}"),
    }
}

/// `2026-11-22T20:13:35.123456Z  WARN message` → `("WARN", "message")`: the text format of
/// `tracing-subscriber` that runners write.
fn split_log_prefix(line: &str) -> Option<(&str, &str)> {
    let (timestamp, rest) = line.split_once(' ')?;
    if !(timestamp.len() >= 20 && timestamp.contains('T') && timestamp.ends_with('Z')) {
        return None;
    }
    let rest = rest.trim_start();
    let (level, message) = rest.split_once(' ').unwrap_or((rest, ""));
    matches!(level, "ERROR" | "WARN" | "INFO" | "DEBUG" | "TRACE")
        .then(|| (level, message.trim_start()))
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
            let event = RunnerEvent::from_frame(frame);
            if events.send(event).is_err() {
                return;
            }
        }
    }
    framer.finish();
    while let Some(frame) = framer.next_frame() {
        let _ = events.send(RunnerEvent::from_frame(frame));
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
    /// An executor spawning `command` per execution; fails when it cannot be run (see
    /// [`RunnerCommand::find`] for the usual runner).
    pub fn new(command: RunnerCommand) -> Result<Self, RunnerNotFound> {
        Ok(ProcessExecutor {
            command: command.checked()?,
            timings: SessionTimings::default(),
        })
    }

    /// Overrides the host-side grace periods.
    pub fn with_timings(mut self, timings: SessionTimings) -> Self {
        self.timings = timings;
        self
    }
}

impl Executor for ProcessExecutor {
    fn execute(&self, request: ExecuteRequest) -> ExecuteFuture<'_> {
        Box::pin(async move {
            match self.command.spawn(self.timings) {
                Ok(connection) => connection.execute_once(&request).await,
                Err(e) => spawn_failure(&e),
            }
        })
    }
}

/// The result of an execution whose runner could not be started.
pub(crate) fn spawn_failure(error: &std::io::Error) -> ExecuteResult {
    ExecuteResult::failed(
        ErrorCode::InternalError,
        format!("cannot start a runner: {error}"),
    )
}

/// The runner's binary name, without the platform's executable suffix.
const RUNNER_NAME: &str = "execbox-runner";

/// The environment variable naming the runner binary.
const RUNNER_ENV: &str = "EXECBOX_RUNNER";

/// The host's environment variables a runner process is started with; nothing else of the
/// host's environment reaches it (a compromised runner could read its own environment).
const RUNNER_ENV_PASSED: [&str; 7] = [
    "RUST_LOG",
    "RUST_BACKTRACE",
    "RUST_MIN_STACK",
    "LD_LIBRARY_PATH",
    "LANG",
    "LC_ALL",
    "TZ",
];

/// The runner binary cannot be found or run: executors refuse to start without one.
#[derive(Debug, thiserror::Error)]
pub enum RunnerNotFound {
    /// `EXECBOX_RUNNER` names something that cannot be run.
    #[error("EXECBOX_RUNNER={}: {why}; point it at the execbox-runner binary", path.display())]
    Env {
        /// The value of the variable.
        path: PathBuf,
        /// Why it cannot be run.
        why: String,
    },
    /// No `execbox-runner` next to this program nor on `PATH`.
    #[error(
        "cannot find the execbox-runner binary{}nor on PATH; install it with `cargo install \
         --path runner` (or `cargo install execbox-runner`), or set EXECBOX_RUNNER to its path",
        match looked_beside { Some(p) => format!(" (looked for {}) ", p.display()), None => " ".into() }
    )]
    Missing {
        /// Where it was looked for next to the current executable.
        looked_beside: Option<PathBuf>,
    },
    /// An explicitly given runner command cannot be run.
    #[error("runner {}: {why}", program.display())]
    Command {
        /// The program as given.
        program: PathBuf,
        /// Why it cannot be run.
        why: String,
    },
}

impl RunnerCommand {
    /// Checks that the program can be run, for executors to fail at construction.
    pub(crate) fn checked(self) -> Result<Self, RunnerNotFound> {
        match self.resolve() {
            Ok(_) => Ok(self),
            Err(why) => Err(RunnerNotFound::Command {
                program: self.program,
                why,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::split_log_prefix;

    #[test]
    fn runner_log_lines_lose_their_timestamp_and_level_once() {
        assert_eq!(
            split_log_prefix("2026-11-22T20:13:35.123456Z  WARN lockdown: no landlock"),
            Some(("WARN", "lockdown: no landlock"))
        );
        assert_eq!(
            split_log_prefix("2026-11-22T20:13:35.123456Z ERROR boom"),
            Some(("ERROR", "boom"))
        );
        assert_eq!(split_log_prefix("thread 'main' panicked at x"), None);
        assert_eq!(split_log_prefix("2026-11-22T20:13:35Z LOUD hi"), None);
    }
}
