//! External executors: a command run per the External Executor Protocol (seed 004), one
//! process (group) per execution.
//!
//! **Request**: the executor's `command args...` is started in the capability's folder, in
//! its own process group, with the host's environment plus `EXECBOX_EXECUTION_ID`,
//! `EXECBOX_CAPABILITY` and `EXECBOX_CAPABILITY_PATH`, then the executor's `env`. One UTF-8
//! JSON object is written to its stdin, which is then closed:
//!
//! | field | meaning |
//! |---|---|
//! | `schemaVersion` | always `1` |
//! | `capability` | `{name, type, path, config}`: `config` is the whole `capability.yaml` |
//! | `input` | the params, already checked against `input_schema` (`null` when none) |
//! | `execution` | `{id, parentId, timeoutMs}` |
//!
//! **Result**, from the process:
//!
//! | process outcome | status |
//! |---|---|
//! | exit 0, stdout one JSON value | `completed`; an object with `result` (and optionally `additionalContext`) and nothing else is taken apart, anything else is the result |
//! | exit 0, blank stdout | `completed`, no result |
//! | exit 0, stdout not JSON, or over 16 MiB | `failed` |
//! | it did not read its whole request (stdin) | `failed`, whatever its exit status |
//! | exit N ≠ 0, or killed by a signal | `failed`, with its trimmed stderr (the last 16 KiB) |
//! | running past the time limit | its process group is killed; `timeout` |
//! | stopped | SIGTERM to its group, SIGKILL 500 ms later; `stopped` |

use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use execbox_host::json::parse_json;
use execbox_host::process_output::{
    escape_controls, read_capped, signal_name, signal_of, Captured, Keep,
};
use execbox_host::supervisor::{self, ProcessGroup, Signal};
use serde::Serialize;
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::process::Child;
use tokio_util::sync::CancellationToken;

use super::config::{CapabilityConfig, ExecutorConfig, ExecutorKind};
use super::outcome::{split_result, RunOutcome};
use super::store::EXECUTION_ID_ENV;

/// The most an external executor may print on stdout (16 MiB).
pub const MAX_EXECUTOR_STDOUT_BYTES: usize = 16 * 1024 * 1024;

/// The last this many bytes of an executor's stderr are kept for its error message.
pub const MAX_EXECUTOR_STDERR_BYTES: usize = 16 * 1024;

/// How long a stopped executor has between SIGTERM and SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_millis(500);

/// One run's inputs.
pub(crate) struct ExternalRun<'a> {
    pub executor: &'a ExecutorConfig,
    pub capability: &'a CapabilityConfig,
    pub params: &'a Value,
    pub execution_id: &'a str,
    pub parent_id: Option<&'a str>,
    pub timeout: Duration,
    pub cancel: CancellationToken,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Envelope<'a> {
    schema_version: u32,
    capability: EnvelopeCapability<'a>,
    input: &'a Value,
    execution: EnvelopeExecution<'a>,
}

#[derive(Serialize)]
struct EnvelopeCapability<'a> {
    name: &'a str,
    #[serde(rename = "type")]
    capability_type: &'a str,
    path: &'a Path,
    config: &'a super::config::CapabilityDef,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EnvelopeExecution<'a> {
    id: &'a str,
    parent_id: Option<&'a str>,
    timeout_ms: u64,
}

/// Runs one execution; `on_spawn` is told the process group as soon as it exists (the
/// manager records it, so a restart can kill it).
pub(crate) async fn run(run: ExternalRun<'_>, on_spawn: impl FnOnce(u32)) -> RunOutcome {
    let ExecutorKind::External { command, args, env } = &run.executor.kind else {
        return RunOutcome::Failed("internal: not an external executor".into());
    };
    let name = &run.executor.def.name;
    let request = match request(&run) {
        Ok(bytes) => bytes,
        Err(e) => {
            return RunOutcome::Failed(format!(
                "cannot encode the request for executor `{name}`: {e}"
            ))
        }
    };
    // Our own copy of the read end stays open, so that after the process ends we can see
    // whether it read its whole request (what is left in the pipe).
    let (reader, writer) = match std::io::pipe() {
        Ok(pipe) => pipe,
        Err(e) => {
            return RunOutcome::Failed(format!("cannot create a pipe for executor `{name}`: {e}"))
        }
    };
    let probe = match reader.try_clone() {
        Ok(p) => p,
        Err(e) => {
            return RunOutcome::Failed(format!("cannot create a pipe for executor `{name}`: {e}"))
        }
    };
    let mut cmd = command_for(&run, command, args, env, reader);
    // Killed on every way out of this function, even if its future is dropped: the group and
    // every process that left it (the supervisor).
    let (mut child, group) = match supervisor::spawn(&mut cmd) {
        Ok(spawned) => spawned,
        Err(e) => {
            return RunOutcome::Failed(format!(
                "cannot run executor `{name}` ({}): {e}",
                command.display()
            ))
        }
    };
    // Drop our handle on the child's read end now held by the child (Stdio moved it).
    drop(cmd);
    if let Some(pgid) = group.id() {
        on_spawn(pgid);
    }
    let exited = match wait_for_exit(&run, &mut child, &group, writer, request).await {
        Ok(exited) => exited,
        Err(ended) => return ended,
    };
    // Nothing of the run outlives it.
    group.signal(Signal::Kill);
    let status = match exited.status {
        Ok(status) => status,
        Err(e) => return RunOutcome::Failed(format!("waiting for executor `{name}` failed: {e}")),
    };
    let undrained = match exited.written {
        None => true,
        Some(Err(_)) => true,
        Some(Ok(())) => unread_bytes(&probe) > 0,
    };
    drop(probe);
    outcome_of(name, status, undrained, &exited.out, &exited.err)
}

/// The request written to the executor's stdin: the envelope as one JSON line.
fn request(run: &ExternalRun<'_>) -> serde_json::Result<Vec<u8>> {
    let envelope = Envelope {
        schema_version: 1,
        capability: EnvelopeCapability {
            name: &run.capability.def.name,
            capability_type: &run.capability.def.capability_type,
            path: &run.capability.dir,
            config: &run.capability.def,
        },
        input: run.params,
        execution: EnvelopeExecution {
            id: run.execution_id,
            parent_id: run.parent_id,
            timeout_ms: run.timeout.as_millis() as u64,
        },
    };
    let mut bytes = serde_json::to_vec(&envelope)?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// The executor's command for one run: in the capability's folder, its request on `stdin`,
/// its output piped, and the execution's variables set after the executor's own `env`.
fn command_for(
    run: &ExternalRun<'_>,
    command: &Path,
    args: &[String],
    env: &[(String, String)],
    stdin: std::io::PipeReader,
) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(command);
    cmd.args(args)
        .current_dir(&run.capability.dir)
        .envs(env.iter().map(|(k, v)| (k, v)))
        // After the executor's own `env`, which cannot override them: recovery after a crash
        // recognises the processes of an execution by `EXECBOX_EXECUTION_ID` before killing
        // their group (store.rs).
        .env(EXECUTION_ID_ENV, run.execution_id)
        .env("EXECBOX_CAPABILITY", &run.capability.def.name)
        .env("EXECBOX_CAPABILITY_PATH", &run.capability.dir)
        .stdin(Stdio::from(stdin))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// How the executor's process ended, with what it printed.
struct Exited {
    status: std::io::Result<ExitStatus>,
    out: Captured,
    err: Captured,
    /// How writing the request went (`None`: the process ended before it was written).
    written: Option<std::io::Result<()>>,
}

/// Writes the request to the executor and waits for it to exit and close its output. When
/// the run is stopped or out of time first, its group is signalled (SIGTERM then SIGKILL,
/// or SIGKILL) and that end is the `Err`.
async fn wait_for_exit(
    run: &ExternalRun<'_>,
    child: &mut Child,
    group: &ProcessGroup,
    writer: std::io::PipeWriter,
    request: Vec<u8>,
) -> Result<Exited, RunOutcome> {
    let write = async move {
        let mut sender =
            tokio::net::unix::pipe::Sender::from_owned_fd(std::os::fd::OwnedFd::from(writer))?;
        sender.write_all(&request).await?;
        sender.flush().await?;
        drop(sender);
        Ok::<(), std::io::Error>(())
    };
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let read_out = read_capped(stdout, MAX_EXECUTOR_STDOUT_BYTES, Keep::Head);
    let read_err = read_capped(stderr, MAX_EXECUTOR_STDERR_BYTES, Keep::Tail);
    let mut write = std::pin::pin!(write);
    let mut written: Option<std::io::Result<()>> = None;
    let all = async {
        let status_and_output = async { tokio::join!(child.wait(), read_out, read_err) };
        let mut status_and_output = std::pin::pin!(status_and_output);
        loop {
            tokio::select! {
                w = &mut write, if written.is_none() => written = Some(w),
                done = &mut status_and_output => return done,
            }
        }
    };
    enum Stop {
        Cancelled,
        TimedOut,
    }
    let finished = tokio::select! {
        biased;
        _ = run.cancel.cancelled() => Err(Stop::Cancelled),
        _ = tokio::time::sleep(run.timeout) => Err(Stop::TimedOut),
        done = all => Ok(done),
    };
    match finished {
        Ok((status, out, err)) => Ok(Exited {
            status,
            out,
            err,
            written,
        }),
        Err(Stop::Cancelled) => {
            group.signal(Signal::Term);
            let _ = tokio::time::timeout(STOP_GRACE, child.wait()).await;
            group.signal(Signal::Kill);
            let _ = tokio::time::timeout(STOP_GRACE, child.wait()).await;
            Err(RunOutcome::Stopped)
        }
        Err(Stop::TimedOut) => {
            group.signal(Signal::Kill);
            let _ = tokio::time::timeout(STOP_GRACE, child.wait()).await;
            Err(RunOutcome::TimedOut(format!(
                "capability `{}` ran past its time limit of {} ms; executor `{}` and its process group were killed",
                run.capability.def.name,
                run.timeout.as_millis(),
                run.executor.def.name
            )))
        }
    }
}

/// What an executor that exited produced, per the table in this module's docs: a failure
/// (its exit status with its stderr, an unread request, too much or malformed stdout) or
/// the result on its stdout.
fn outcome_of(
    name: &str,
    status: ExitStatus,
    undrained: bool,
    out: &Captured,
    err: &Captured,
) -> RunOutcome {
    let stderr_text = String::from_utf8_lossy(&err.bytes);
    let stderr_text = escape_controls(stderr_text.trim(), false);
    let stderr_text = if err.overflowed {
        format!("…{stderr_text}")
    } else {
        stderr_text
    };
    if !status.success() {
        let how = match (status.code(), signal_of(status)) {
            (Some(code), _) => format!("exited with status {code}"),
            (None, Some(signal)) => match signal_name(signal) {
                Some(n) => format!("was killed by signal {signal} ({n})"),
                None => format!("was killed by signal {signal}"),
            },
            (None, None) => format!("failed ({status})"),
        };
        return RunOutcome::Failed(if stderr_text.is_empty() {
            format!("executor `{name}` {how} and printed nothing on stderr")
        } else {
            stderr_text
        });
    }
    if undrained {
        return RunOutcome::Failed(format!(
            "executor `{name}` exited without reading its whole request on stdin; an external executor must read stdin to its end before it exits"
        ));
    }
    if out.overflowed {
        return RunOutcome::Failed(format!(
            "executor `{name}` printed more than {} MiB on stdout; print one JSON value, the result",
            MAX_EXECUTOR_STDOUT_BYTES / (1024 * 1024)
        ));
    }
    let text = match std::str::from_utf8(&out.bytes) {
        Ok(t) => t,
        Err(e) => {
            return RunOutcome::Failed(format!(
                "executor `{name}` printed stdout that is not UTF-8: {e}"
            ))
        }
    };
    if text.trim().is_empty() {
        return split_result(None);
    }
    match parse_json(text) {
        Ok(value) => split_result(Some(value)),
        Err(e) => {
            let mut head: String = text.chars().take(200).collect();
            if head.len() < text.len() {
                head.push('…');
            }
            RunOutcome::Failed(format!(
                "executor `{name}` printed invalid JSON on stdout ({e}): {:?}; print one JSON value (the result, or {{\"result\": ..., \"additionalContext\": ...}}), or nothing",
                head
            ))
        }
    }
}

/// Bytes still waiting in a pipe, read through our copy of its read end.
#[cfg(unix)]
#[allow(unsafe_code)]
fn unread_bytes(pipe: &std::io::PipeReader) -> usize {
    use std::os::fd::AsRawFd;
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one c_int through the pointer, which points at `n`.
    let r = unsafe { libc::ioctl(pipe.as_raw_fd(), libc::FIONREAD, &mut n) };
    if r == 0 {
        n.max(0) as usize
    } else {
        0
    }
}

#[cfg(not(unix))]
fn unread_bytes(_pipe: &std::io::PipeReader) -> usize {
    0
}
