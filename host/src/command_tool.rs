//! External command tools: a YAML tools file declaring tools that run as child processes.
//!
//! This is a stable, versioned contract, modelled on Orbit's External Executor Protocol v1.
//! It lets an operator expose a script or binary as a tool without writing Rust.
//!
//! The tools file that declares them (format, parsing, checks) is
//! [`ToolsFile`](crate::tools_file), in `tools_file.rs`.
//!
//! # One call
//!
//! Each call spawns `command args...` as a new process (in its own process group on Unix).
//! A bare `command` is the program [`program::search_path`](crate::program::search_path)
//! finds on the tool's own `PATH` (its `env`), else on the host's: empty and relative
//! entries of `PATH` are ignored, never read as the current folder.
//!
//! **Environment**: the host's environment, plus `EXECBOX_TOOL` (`provider.tool`, the
//! original tool name) and `EXECBOX_EXECUTION_ID`, then the tool's `env` (which wins).
//!
//! **Request**: one UTF-8 JSON object and a newline on stdin, then stdin is closed:
//!
//! | field | presence | meaning |
//! |---|---|---|
//! | `schemaVersion` | always `1` | envelope version |
//! | `tool` | always | `{"provider": string, "name": string}`; `name` is the original name |
//! | `input` | always | the tool input, already validated against `input_schema`; `null` when the guest passed nothing |
//! | `executionId` | always | the execution the call belongs to |
//!
//! A command need not read stdin: a broken pipe while writing the request is ignored.
//!
//! **Result**, from the exit status. The messages below are what the command's handler
//! returns; [`ToolSet::dispatch`](crate::ToolSet::dispatch) prefixes each with the tool as
//! the guest calls it, `<provider>.<tool>: ` (safe name), so the guest reads e.g.
//! `text.word_count: exited with status 2; stderr: quota exceeded`.
//!
//! | process outcome | tool result |
//! |---|---|
//! | exit 0 | ok; stdout parsed as one JSON value (empty or blank stdout: `null`); invalid JSON is `tool_error`, `printed invalid JSON on stdout (<parse error>): "<stdout>"; a command tool must print ...`, quoting the first [`MAX_QUOTED_STDOUT_BYTES`] of stdout; a value not matching `output_schema` is `validation_error` |
//! | exit N ≠ 0 | `tool_error`, `exited with status N; stderr: <its last lines>`, or `exited with status N and printed nothing on stderr` |
//! | killed by signal N | `tool_error`, `was killed by signal N (SIGNAME)` (and `; stderr: ...`, if any) |
//! | still running after `timeout_seconds` | killed; `timeout`, `timed out after Ns (its timeout_seconds) and was killed` |
//! | execution cancelled or timed out | killed; `timeout`, `Execution timed out` |
//! | cannot be started | `tool_error`, `cannot run <command>: <OS error>` |
//!
//! stdout is read up to [`MAX_STDOUT_BYTES`]; a command printing more fails with `tool_error`.
//! JSON printed on stdout may nest up to [`MAX_NESTING_DEPTH`] levels; deeper is a
//! `serialization_error`. stderr is diagnostics: its last [`MAX_STDERR_BYTES`] are kept, error
//! messages quote its last [`MAX_ERROR_STDERR_LINES`] lines and at most its last
//! [`MAX_ERROR_MESSAGE_BYTES`] (starting with `…` when cut; control characters, line breaks
//! among them, escaped as `\n`, `\u001b`, so a message stays one line), and on success it is
//! only logged (`debug`). The environment is never quoted. The guest sees every failure as a
//! rejected promise whose error has the `code` and `message` above.
//!
//! **Cleanup**: when a call ends for any reason (exit, timeout, cancellation, the call's
//! future being dropped), every process of the call is killed with `SIGKILL` by the
//! [`supervisor`](crate::supervisor): its process group, and every descendant that left the
//! group (`setsid`, a double fork). No process a command tool starts outlives its call.
//!
//! # Security
//!
//! A tools file is trusted configuration: loading one is running arbitrary commands with the
//! host's privileges. Tool processes are not sandboxed; only the guest is.
//!
//! # Compatibility
//!
//! The `schemaVersion: 1` request and the result table above are the stable surface of
//! version 1. Later changes are additive (new optional request fields, new optional tools
//! file fields) or come with a new version number.

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use execbox_protocol::MAX_NESTING_DEPTH;
use serde::Serialize;
use serde_json::Value;
use tokio::io::AsyncWriteExt;

use crate::json::{
    drop_value, parse_json, truncate, value_depth, with_deep_stack, ParseJsonError, SHALLOW_DEPTH,
};
use crate::process_output::{escape_controls, read_capped, signal_name, signal_of, Keep};
use crate::program;
use crate::supervisor;
use crate::tool::{BoxFuture, ToolContext, ToolError, ToolHandler};

/// Default `timeout_seconds` of a command tool.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Largest accepted `timeout_seconds`.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(86_400);

/// A command printing more than this on stdout fails (16 MiB, the protocol's message size).
pub const MAX_STDOUT_BYTES: usize = 16 * 1024 * 1024;

/// Only the last this many bytes of stderr are kept (1 MiB); the rest is read and discarded.
pub const MAX_STDERR_BYTES: usize = 1024 * 1024;

/// Error messages built from stderr keep at most its last this many bytes (16 KiB).
pub const MAX_ERROR_MESSAGE_BYTES: usize = 16 * 1024;

/// Error messages built from stderr keep at most its last this many lines.
pub const MAX_ERROR_STDERR_LINES: usize = 10;

/// An error message about invalid stdout quotes at most its first this many bytes.
pub const MAX_QUOTED_STDOUT_BYTES: usize = 200;

/// How long the pipes may stay open after the command exited and what it left was killed.
const PIPE_GRACE: Duration = Duration::from_millis(500);

/// How long to wait for a killed process to be reaped before leaving it to tokio.
const REAP_GRACE: Duration = Duration::from_secs(1);

/// A tool implemented by an external command: see the [module docs](self) for the contract.
///
/// ```no_run
/// use execbox_host::{CommandTool, Provider, Tool};
/// use std::time::Duration;
///
/// let handler = CommandTool::new("text", "word_count", "/opt/tools/word_count.py")
///     .timeout(Duration::from_secs(10));
/// let provider = Provider::new("text").tool(Tool::from_handler("word_count", handler));
/// ```
#[derive(Clone)]
pub struct CommandTool(Arc<Spec>);

impl fmt::Debug for CommandTool {
    /// Shows the names of the `env` variables but never their values (they may be secrets).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.0;
        f.debug_struct("CommandTool")
            .field("provider", &s.provider)
            .field("tool", &s.tool)
            .field("command", &s.command)
            .field("args", &s.args)
            .field("env", &s.env.iter().map(|(k, _)| k).collect::<Vec<_>>())
            .field("current_dir", &s.current_dir)
            .field("timeout", &s.timeout)
            .finish()
    }
}

#[derive(Clone)]
struct Spec {
    provider: String,
    tool: String,
    command: PathBuf,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    current_dir: Option<PathBuf>,
    timeout: Duration,
}

impl CommandTool {
    /// Runs `command` for calls of `provider.tool` (`tool` is the original name, sent in the
    /// request and in `EXECBOX_TOOL`), without arguments, with [`DEFAULT_TIMEOUT`].
    pub fn new(
        provider: impl Into<String>,
        tool: impl Into<String>,
        command: impl Into<PathBuf>,
    ) -> Self {
        CommandTool(Arc::new(Spec {
            provider: provider.into(),
            tool: tool.into(),
            command: command.into(),
            args: Vec::new(),
            env: Vec::new(),
            current_dir: None,
            timeout: DEFAULT_TIMEOUT,
        }))
    }

    /// Runs the command in `dir` (relative `args` then resolve against it); by default in the
    /// host's working directory. A tools file sets its own folder.
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        Arc::make_mut(&mut self.0).current_dir = Some(dir.into());
        self
    }

    /// Appends arguments.
    pub fn args(mut self, args: impl IntoIterator<Item = impl Into<OsString>>) -> Self {
        Arc::make_mut(&mut self.0)
            .args
            .extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets an environment variable (after the inherited ones and the `EXECBOX_` ones).
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        Arc::make_mut(&mut self.0)
            .env
            .push((key.into(), value.into()));
        self
    }

    /// Sets the wall-clock budget of one call.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        Arc::make_mut(&mut self.0).timeout = timeout;
        self
    }

    /// The program that is run.
    pub fn command(&self) -> &Path {
        &self.0.command
    }

    /// The wall-clock budget of one call.
    pub fn get_timeout(&self) -> Duration {
        self.0.timeout
    }
}

impl ToolHandler for CommandTool {
    fn call(&self, input: Value, ctx: ToolContext) -> BoxFuture<Result<Value, ToolError>> {
        let spec = self.0.clone();
        Box::pin(async move { run(&spec, input, ctx).await })
    }

    fn timeout(&self) -> Option<Duration> {
        Some(self.0.timeout)
    }
}

/// Why a call stopped before the command finished.
enum Stop {
    Cancelled,
    TimedOut,
}

/// The program to start for `spec`: its command when that names a folder, else the one found
/// on the tool's own `PATH` (the last `PATH` of its `env`), else on the host's.
fn program_of(spec: &Spec) -> Result<PathBuf, String> {
    if spec.command.components().count() > 1 || spec.command.is_absolute() {
        return Ok(spec.command.clone());
    }
    let path = spec
        .env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .or_else(|| std::env::var_os("PATH"))
        .unwrap_or_default();
    program::search_path(spec.command.as_os_str(), &path).map_err(|e| match e.skipped {
        Some(why) => format!("found on PATH, but {why}"),
        None => format!(
            "not found on PATH ({}{})",
            path.to_string_lossy(),
            e.ignored_note()
        ),
    })
}

async fn run(spec: &Spec, input: Value, ctx: ToolContext) -> Result<Value, ToolError> {
    if ctx.cancel.is_cancelled() {
        return Err(ToolError::cancelled());
    }
    let label = format!("{}.{}", spec.provider, spec.tool);
    let mut request = encode_request(spec, &input, &ctx.execution_id)
        .map_err(|e| ToolError::serialization(format!("cannot encode the request: {e}")))?;
    drop_value(input);
    request.push(b'\n');

    let program = program_of(spec)
        .map_err(|why| ToolError::tool(format!("cannot run {}: {why}", spec.command.display())))?;
    let mut command = tokio::process::Command::new(&program);
    #[cfg(unix)]
    command.arg0(&spec.command);
    command
        .args(&spec.args)
        .env("EXECBOX_TOOL", &label)
        .env("EXECBOX_EXECUTION_ID", &ctx.execution_id)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(dir) = &spec.current_dir {
        command.current_dir(dir);
    }
    // Declared after `child`, so dropped before it: if this future is dropped mid-call the
    // group is killed while its leader is still unreaped, so the id cannot have been reused.
    let (mut child, group) = supervisor::spawn(&mut command)
        .map_err(|e| ToolError::tool(format!("cannot run {}: {e}", spec.command.display())))?;
    tracing::debug!(tool = %label, pid = child.id(), "started tool command");

    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let write = async move {
        if let Some(mut stdin) = stdin {
            let written = async {
                stdin.write_all(&request).await?;
                stdin.shutdown().await
            };
            match written.await {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {}
                Err(e) => tracing::debug!("writing the tool request failed: {e}"),
            }
        }
    };
    let finished = {
        // The call is over when the command exits: what it left behind is killed then, so a
        // descendant holding the pipes open (a daemon that kept stdout) cannot hold the call.
        let exited = async {
            let status = child.wait().await;
            group.kill();
            status
        };
        let all = async {
            let reads = async {
                tokio::join!(
                    read_capped(stdout, MAX_STDOUT_BYTES, Keep::Head),
                    read_capped(stderr, MAX_STDERR_BYTES, Keep::Tail)
                )
            };
            tokio::pin!(reads);
            let process = async { tokio::join!(write, exited).1 };
            tokio::pin!(process);
            let (status, outputs) = tokio::select! {
                outputs = &mut reads => (process.await, Some(outputs)),
                status = &mut process => (status, None),
            };
            // Exited and swept: the pipes end at once, unless something we could not reach
            // still holds them; it gets a moment, not the call's whole time limit.
            let outputs = match outputs {
                Some(outputs) => Some(outputs),
                None => tokio::time::timeout(PIPE_GRACE, &mut reads).await.ok(),
            };
            (outputs, status)
        };
        tokio::select! {
            biased;
            _ = ctx.cancel.cancelled() => Err(Stop::Cancelled),
            _ = tokio::time::sleep(spec.timeout) => Err(Stop::TimedOut),
            done = all => Ok(done),
        }
    };
    // Whatever happened, nothing of this call may outlive it: the group, and whatever left
    // it (the supervisor's sweep). After a normal exit the leader is already reaped, but a
    // group id stays reserved while any member lives; an empty group's id is only reused once
    // the kernel's pid counter wraps around, which is not a realistic risk between that wait
    // and this kill.
    group.kill();
    let _ = child.start_kill();
    let (out, err, status) = match finished {
        Ok((Some((out, err)), status)) => (out, err, status),
        Ok((None, _)) => {
            return Err(ToolError::tool(format!(
                "exited, but a process it started still holds its stdout or stderr open \
                 ({PIPE_GRACE:?} later); start background processes with their output \
                 redirected (`cmd >/dev/null 2>&1 &`)"
            )))
        }
        Err(stop) => {
            let _ = tokio::time::timeout(REAP_GRACE, child.wait()).await;
            return Err(match stop {
                Stop::Cancelled => ToolError::cancelled(),
                Stop::TimedOut => ToolError::timeout(format!(
                    "timed out after {}s (its timeout_seconds) and was killed",
                    spec.timeout.as_secs_f64()
                )),
            });
        }
    };
    let status = status.map_err(|e| {
        ToolError::tool(format!(
            "waiting for {} failed: {e}",
            spec.command.display()
        ))
    })?;
    let stderr_text = String::from_utf8_lossy(&err.bytes);
    let stderr_text = stderr_text.trim();
    if !stderr_text.is_empty() {
        tracing::debug!(tool = %label, "tool stderr: {}", truncate(stderr_text, 2000));
    }
    if out.overflowed {
        return Err(ToolError::tool(format!(
            "printed more than {} MiB on stdout; {STDOUT_CONTRACT}",
            MAX_STDOUT_BYTES / (1024 * 1024)
        )));
    }
    if status.success() {
        return parse_stdout(&out.bytes);
    }
    Err(ToolError::tool(failure_message(
        status,
        stderr_text,
        err.overflowed,
    )))
}

/// The `schemaVersion: 1` request envelope, as JSON text.
fn encode_request(spec: &Spec, input: &Value, execution_id: &str) -> Result<Vec<u8>, String> {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Request<'a> {
        schema_version: u32,
        tool: RequestTool<'a>,
        input: &'a Value,
        execution_id: &'a str,
    }
    #[derive(Serialize)]
    struct RequestTool<'a> {
        provider: &'a str,
        name: &'a str,
    }
    let depth = value_depth(input);
    if depth > MAX_NESTING_DEPTH {
        return Err(format!(
            "the input nests deeper than {MAX_NESTING_DEPTH} levels"
        ));
    }
    let request = Request {
        schema_version: 1,
        tool: RequestTool {
            provider: &spec.provider,
            name: &spec.tool,
        },
        input,
        execution_id,
    };
    let encode = || serde_json::to_vec(&request).map_err(|e| e.to_string());
    if depth > SHALLOW_DEPTH {
        with_deep_stack(encode)
    } else {
        encode()
    }
}

/// What a command tool must print, for messages about stdout that is not that.
const STDOUT_CONTRACT: &str = r#"a command tool must print one JSON value, its result (e.g. {"ok":true}), or nothing for null"#;

fn parse_stdout(bytes: &[u8]) -> Result<Value, ToolError> {
    let invalid = |why: &dyn fmt::Display| {
        ToolError::tool(format!(
            "printed invalid JSON on stdout ({why}): {}; {STDOUT_CONTRACT}",
            quote_bytes(bytes, MAX_QUOTED_STDOUT_BYTES)
        ))
    };
    let text = std::str::from_utf8(bytes).map_err(|e| invalid(&format_args!("not UTF-8: {e}")))?;
    if text.trim().is_empty() {
        return Ok(Value::Null);
    }
    parse_json(text).map_err(|e| match e {
        ParseJsonError::TooDeep => {
            ToolError::serialization(format!("Host value is not JSON-serializable: {e}"))
        }
        ParseJsonError::Syntax(e) => invalid(&e),
    })
}

/// The first `max` bytes of `bytes` as a double-quoted string (invalid UTF-8 as U+FFFD,
/// control characters escaped), followed by `…` and the total size when cut.
fn quote_bytes(bytes: &[u8], max: usize) -> String {
    let cut = bytes.len() > max;
    let head = String::from_utf8_lossy(&bytes[..bytes.len().min(max)]);
    // A character split by the cut shows as U+FFFD: drop it.
    let head = if cut {
        head.trim_end_matches('\u{FFFD}')
    } else {
        &head
    };
    let mut quoted = format!("\"{}\"", escape_controls(head, true));
    if cut {
        let _ = std::fmt::Write::write_fmt(
            &mut quoted,
            format_args!("… ({} bytes in all)", bytes.len()),
        );
    }
    quoted
}

/// The message of a command that did not exit 0.
fn failure_message(status: ExitStatus, stderr: &str, stderr_cut: bool) -> String {
    let mut message = match (status.code(), signal_of(status)) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => match signal_name(signal) {
            Some(name) => format!("was killed by signal {signal} ({name})"),
            None => format!("was killed by signal {signal}"),
        },
        (None, None) => format!("failed ({status})"),
    };
    if stderr.is_empty() {
        if status.code().is_some() {
            message.push_str(" and printed nothing on stderr");
        }
    } else {
        message.push_str("; stderr: ");
        message.push_str(&stderr_tail(stderr, stderr_cut));
    }
    message
}

/// The last lines of `stderr` (at most [`MAX_ERROR_STDERR_LINES`] and
/// [`MAX_ERROR_MESSAGE_BYTES`]), escaped to one line, starting with `…` when cut.
fn stderr_tail(stderr: &str, already_cut: bool) -> String {
    let mut start = stderr.len().saturating_sub(MAX_ERROR_MESSAGE_BYTES);
    while !stderr.is_char_boundary(start) {
        start += 1;
    }
    let mut cut = already_cut || start > 0;
    let mut tail = &stderr[start..];
    if let Some((i, _)) = tail.rmatch_indices('\n').nth(MAX_ERROR_STDERR_LINES - 1) {
        tail = &tail[i + 1..];
        cut = true;
    }
    let text = escape_controls(tail.trim(), false);
    if cut {
        format!("…{text}")
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_bare_command_never_runs_from_the_current_folder() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = std::env::temp_dir().join(format!("execbox-planted-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let planted = dir.join("planted");
        std::fs::write(&planted, "#!/bin/sh\necho '\"planted\"'\n").unwrap();
        std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o755)).unwrap();
        // POSIX reads an empty entry, and `.`, as the folder the command runs in.
        for path in ["", ".", "/nonexistent:", "::"] {
            let tool = CommandTool::new("t", "x", "planted")
                .current_dir(&dir)
                .env("PATH", path);
            let e = tool
                .call(Value::Null, ToolContext::new("e1"))
                .await
                .expect_err("a program of the current folder ran");
            assert_eq!(
                e.message,
                format!(
                    "cannot run planted: not found on PATH ({path}; empty and relative entries \
                     of PATH are not searched)"
                ),
                "PATH={path:?}"
            );
        }
        // Named by its path, it runs.
        let tool = CommandTool::new("t", "x", &planted);
        let out = tool.call(Value::Null, ToolContext::new("e1")).await;
        assert_eq!(out, Ok(Value::from("planted")));
        // A bare name found on an absolute entry runs, its PATH the tool's own.
        let tool = CommandTool::new("t", "x", "planted").env("PATH", dir.as_os_str());
        let out = tool.call(Value::Null, ToolContext::new("e1")).await;
        assert_eq!(out, Ok(Value::from("planted")));
    }

    #[test]
    fn failure_messages_give_the_status_and_the_last_lines_of_stderr() {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            failure_message(ExitStatus::from_raw(3 << 8), "", false),
            "exited with status 3 and printed nothing on stderr"
        );
        assert_eq!(
            failure_message(ExitStatus::from_raw(1 << 8), "boom", false),
            "exited with status 1; stderr: boom"
        );
        assert_eq!(
            failure_message(ExitStatus::from_raw(9), "", false),
            "was killed by signal 9 (SIGKILL)"
        );
        assert_eq!(
            failure_message(ExitStatus::from_raw(11), "oops\n", false),
            "was killed by signal 11 (SIGSEGV); stderr: oops"
        );
        let lines: String = (1..=30).map(|i| format!("line {i}\n")).collect();
        let message = failure_message(ExitStatus::from_raw(1 << 8), lines.trim(), false);
        assert_eq!(
            message,
            format!(
                "exited with status 1; stderr: …{}",
                (21..=30)
                    .map(|i| format!("line {i}"))
                    .collect::<Vec<_>>()
                    .join("\\n")
            )
        );
        let long = format!("start{}end", "é".repeat(MAX_ERROR_MESSAGE_BYTES));
        let message = failure_message(ExitStatus::from_raw(1 << 8), &long, false);
        assert!(
            message.starts_with("exited with status 1; stderr: …é"),
            "{message}"
        );
        assert!(message.ends_with("end"));
        assert!(message.len() <= MAX_ERROR_MESSAGE_BYTES + 40);
        assert_eq!(
            failure_message(
                ExitStatus::from_raw(2 << 8),
                "\u{1b}[31mred\u{1b}[0m\ttab",
                false
            ),
            "exited with status 2; stderr: \\u001b[31mred\\u001b[0m\\ttab"
        );
    }

    #[test]
    fn bad_stdout_is_quoted_cut_and_escaped() {
        assert_eq!(quote_bytes(b"hi \"x\"\n", 200), r#""hi \"x\"\n""#);
        let long = "é".repeat(150);
        assert_eq!(
            quote_bytes(long.as_bytes(), 200),
            format!("\"{}\"… (300 bytes in all)", "é".repeat(100))
        );
        assert_eq!(
            quote_bytes(b"\xff\x01", 200),
            r#""\u{fffd}\u0001""#.replace("\\u{fffd}", "\u{fffd}")
        );
    }
}
