//! Stdio upstream servers as child processes: found on `PATH` as a shell would, in their own
//! supervised process group (killed when we stop), stderr relayed to ours, stdout filtered to JSON-RPC.
//!
//! A bare command name is looked up ([`execbox_host::program::search_path`]: empty and
//! relative entries of `PATH` are ignored) on the `PATH` the server's `env` gives, else ours;
//! when it is not there, on the `PATH` of the user's login shell (`$SHELL -l`), which is what a
//! terminal would have found, and which the server then runs with (an MCP client started
//! from a desktop often has a much shorter `PATH` than the user's terminal: `npx` and the
//! `node` it needs are typically missing from it).
//!
//! Every line the server prints on stdout that is not a JSON object or array is dropped and
//! reported (an MCP server must log to stderr), so a chatty or broken server gets a clear
//! message naming it instead of a silent hang.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, OnceLock};

use execbox_host::program;
use execbox_host::supervisor::{self, ProcessGroup};
use std::time::Duration;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::watch;

/// The longest line accepted from a server's stdout (one JSON-RPC message).
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// The longest stderr line relayed; longer ones are cut.
const MAX_STDERR_LINE: usize = 16 * 1024;
/// How many non-JSON stdout lines are reported one by one before they are only counted.
const REPORTED_GARBAGE_LINES: usize = 3;
/// Printed by the login shell before its `PATH`.
const PATH_MARKER: &str = "EXECBOX_LOGIN_PATH=";
/// How long the login shell may take to say its `PATH`.
const LOGIN_SHELL_TIMEOUT: Duration = Duration::from_secs(5);

/// A started server process: its pipes, its process group and its exit.
pub struct Spawned {
    /// The server's stdin (our messages to it).
    pub stdin: ChildStdin,
    /// The server's stdout, only its JSON lines.
    pub stdout: tokio::io::DuplexStream,
    /// The process group (and whatever left it), killed on [`ProcessGroup::kill`] and on
    /// drop.
    pub group: Arc<ProcessGroup>,
    /// `Some(how it ended)` once the process has exited.
    pub exit: watch::Receiver<Option<String>>,
    /// The first line it printed on stdout that was not JSON, for error messages.
    pub garbage: Arc<Mutex<Option<String>>>,
}

/// Starts `command args` for the server `name`; `Err` says why, for a person.
pub async fn spawn(
    name: &str,
    command: &str,
    args: &[String],
    env: &[(String, String)],
    cwd: Option<&Path>,
) -> Result<Spawned, String> {
    if let Some(cwd) = cwd {
        if !cwd.is_dir() {
            return Err(format!("its cwd {} is not a folder", cwd.display()));
        }
    }
    let (program, login_path) = resolve(command, env, cwd).await?;
    let mut cmd = Command::new(&program);
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(path) = login_path {
        cmd.env("PATH", path);
    }
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    if let Some(cwd) = cwd {
        cmd.current_dir(cwd);
    }
    // Supervised: its own group (a terminal's Ctrl-C reaches us, not it), and stopping it
    // reaches its children too (`npx` runs the server as a grandchild), even those that left
    // the group.
    let (mut child, group) = supervisor::spawn(&mut cmd)
        .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
    let group = Arc::new(group);
    let stdin = child.stdin.take().expect("piped stdin");
    let stdout = child.stdout.take().expect("piped stdout");
    let stderr = child.stderr.take().expect("piped stderr");
    let (reader, writer) = tokio::io::duplex(64 * 1024);
    let garbage = Arc::new(Mutex::new(None));
    tokio::spawn(filter_stdout(
        name.to_owned(),
        BufReader::new(stdout),
        writer,
        garbage.clone(),
    ));
    tokio::spawn(relay_stderr(name.to_owned(), BufReader::new(stderr)));
    let (exit_tx, exit) = watch::channel(None);
    tokio::spawn(wait_exit(child, exit_tx));
    Ok(Spawned {
        stdin,
        stdout: reader,
        group,
        exit,
        garbage,
    })
}

async fn wait_exit(mut child: Child, exit: watch::Sender<Option<String>>) {
    let how = match child.wait().await {
        Ok(status) => describe_exit(status),
        Err(e) => format!("could not be waited for: {e}"),
    };
    let _ = exit.send(Some(how));
}

fn describe_exit(status: std::process::ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return format!("was killed by signal {signal}");
        }
    }
    match status.code() {
        Some(code) => format!("exited with status {code}"),
        None => "exited".into(),
    }
}

/// One line from `reader` into `line`, at most `max` bytes (the rest of a longer line is
/// skipped); `Ok(None)` at EOF, `Ok(Some(false))` for a line that was too long.
async fn read_line_capped(
    reader: &mut (impl AsyncBufRead + Unpin),
    line: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Option<bool>> {
    line.clear();
    let mut too_long = false;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(if line.is_empty() && !too_long {
                None
            } else {
                Some(!too_long)
            });
        }
        let newline = available.iter().position(|&b| b == b'\n');
        let take = newline.map_or(available.len(), |i| i + 1);
        if !too_long {
            if line.len() + take > max {
                too_long = true;
                line.clear();
            } else {
                line.extend_from_slice(&available[..take]);
            }
        }
        reader.consume(take);
        if newline.is_some() {
            return Ok(Some(!too_long));
        }
    }
}

async fn filter_stdout(
    name: String,
    mut stdout: impl AsyncBufRead + Unpin,
    mut to_client: tokio::io::DuplexStream,
    garbage: Arc<Mutex<Option<String>>>,
) {
    let mut line = Vec::new();
    let mut dropped = 0usize;
    loop {
        let fits = match read_line_capped(&mut stdout, &mut line, MAX_MESSAGE_BYTES).await {
            Ok(Some(fits)) => fits,
            Ok(None) => break,
            Err(e) => {
                tracing::debug!(server = %name, "reading the server's stdout failed: {e}");
                break;
            }
        };
        if !fits {
            eprintln!(
                "execbox mcp: upstream {name:?} sent a message over {} MiB on stdout; dropped it",
                MAX_MESSAGE_BYTES / (1024 * 1024)
            );
            continue;
        }
        let text = trim_line(&line);
        if text.is_empty() {
            continue;
        }
        let json = matches!(text.first(), Some(b'{' | b'['))
            && serde_json::from_slice::<serde::de::IgnoredAny>(text).is_ok();
        if json {
            let mut framed = Vec::with_capacity(text.len() + 1);
            framed.extend_from_slice(text);
            framed.push(b'\n');
            if to_client.write_all(&framed).await.is_err() {
                break;
            }
            continue;
        }
        let quoted = super::content::one_line(&String::from_utf8_lossy(text), 200);
        {
            let mut first = garbage.lock().unwrap_or_else(|e| e.into_inner());
            if first.is_none() {
                *first = Some(quoted.clone());
            }
        }
        dropped += 1;
        if dropped <= REPORTED_GARBAGE_LINES {
            eprintln!(
                "execbox mcp: upstream {name:?} printed a line on stdout that is not JSON-RPC \
                 (an MCP server must write its logs to stderr); ignored: {quoted:?}"
            );
        } else if dropped == REPORTED_GARBAGE_LINES + 1 {
            eprintln!(
                "execbox mcp: upstream {name:?} keeps printing non-JSON lines on stdout; \
                 ignoring them silently"
            );
        }
    }
    let _ = to_client.shutdown().await;
}

fn trim_line(line: &[u8]) -> &[u8] {
    let mut end = line.len();
    while end > 0 && matches!(line[end - 1], b'\n' | b'\r') {
        end -= 1;
    }
    let mut start = 0;
    while start < end && line[start].is_ascii_whitespace() {
        start += 1;
    }
    &line[start..end]
}

async fn relay_stderr(name: String, mut stderr: impl AsyncBufRead + Unpin) {
    let mut line = Vec::new();
    while let Ok(Some(_)) = read_line_capped(&mut stderr, &mut line, MAX_STDERR_LINE).await {
        let text = String::from_utf8_lossy(trim_line(&line));
        if !text.is_empty() {
            eprintln!("[{name}] {text}");
        }
    }
}

/// The program to run for `command`, and the login shell's `PATH` when that is where it was
/// found (the server then runs with it).
async fn resolve(
    command: &str,
    env: &[(String, String)],
    cwd: Option<&Path>,
) -> Result<(PathBuf, Option<String>), String> {
    if command.contains('/') {
        let path = match cwd {
            Some(cwd) if Path::new(command).is_relative() => cwd.join(command),
            _ => PathBuf::from(command),
        };
        return if program::is_executable(&path) {
            Ok((path, None))
        } else if path.exists() {
            Err(format!("{} is not an executable file", path.display()))
        } else {
            Err(format!("{} does not exist", path.display()))
        };
    }
    let given_path = env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone());
    let ours = given_path
        .clone()
        .or_else(|| std::env::var("PATH").ok())
        .unwrap_or_default();
    if let Ok(found) = program::search_path(OsStr::new(command), OsStr::new(&ours)) {
        return Ok((found, None));
    }
    if given_path.is_none() {
        if let Some(login) = login_shell_path().await {
            if let Ok(found) = program::search_path(OsStr::new(command), OsStr::new(&login)) {
                return Ok((found, Some(login)));
            }
        }
    }
    Err(format!(
        "command {command:?} not found on PATH{}",
        if given_path.is_some() {
            " (the PATH its env sets)"
        } else {
            " nor on your login shell's PATH"
        }
    ))
}

/// The `PATH` of the user's login shell (`$SHELL -l`), asked once; `None` when there is no
/// `SHELL` or it does not answer in time.
async fn login_shell_path() -> Option<String> {
    static PATH: OnceLock<Option<String>> = OnceLock::new();
    if let Some(known) = PATH.get() {
        return known.clone();
    }
    let shell = std::env::var("SHELL").ok().filter(|s| !s.is_empty())?;
    let mut cmd = Command::new(&shell);
    // A marker before the value: a profile may print greetings of its own.
    cmd.args([
        "-l",
        "-c",
        "printf '\\n%s%s' \"$1\" \"$PATH\"",
        "sh",
        PATH_MARKER,
    ])
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    // Supervised too: a profile that starts an agent in the background does not leave it.
    let Ok((child, _group)) = supervisor::spawn(&mut cmd) else {
        PATH.get_or_init(|| None);
        return None;
    };
    let found = match tokio::time::timeout(LOGIN_SHELL_TIMEOUT, child.wait_with_output()).await {
        Ok(Ok(output)) if output.status.success() => {
            let text = String::from_utf8_lossy(&output.stdout);
            let path = text
                .rsplit_once(PATH_MARKER)
                .map(|(_, path)| path.trim().to_owned())
                .unwrap_or_default();
            (!path.is_empty()).then_some(path)
        }
        Ok(_) => None,
        Err(_) => {
            tracing::warn!("the login shell {shell} did not say its PATH within 5 s");
            None
        }
    };
    PATH.get_or_init(|| found).clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_are_capped_and_skipped_past_the_cap() {
        let data: &[u8] = b"short\nthis line is too long\nok\nlast";
        let mut reader = BufReader::with_capacity(4, data);
        let mut line = Vec::new();
        assert_eq!(
            read_line_capped(&mut reader, &mut line, 8).await.unwrap(),
            Some(true)
        );
        assert_eq!(line, b"short\n");
        assert_eq!(
            read_line_capped(&mut reader, &mut line, 8).await.unwrap(),
            Some(false)
        );
        assert_eq!(
            read_line_capped(&mut reader, &mut line, 8).await.unwrap(),
            Some(true)
        );
        assert_eq!(line, b"ok\n");
        assert_eq!(
            read_line_capped(&mut reader, &mut line, 8).await.unwrap(),
            Some(true)
        );
        assert_eq!(line, b"last");
        assert_eq!(
            read_line_capped(&mut reader, &mut line, 8).await.unwrap(),
            None
        );
    }

    #[tokio::test]
    async fn the_login_shell_says_its_path() {
        if std::env::var_os("SHELL").is_some() {
            let path = login_shell_path().await.expect("a PATH");
            assert!(
                !path.contains(PATH_MARKER) && !path.contains('\n'),
                "{path}"
            );
        }
    }

    #[tokio::test]
    async fn commands_are_found_on_the_path_or_refused_clearly() {
        let (sh, _) = resolve("sh", &[], None).await.unwrap();
        assert!(sh.ends_with("sh"), "{}", sh.display());
        let env = [("PATH".to_string(), "/nonexistent".to_string())];
        let why = resolve("sh", &env, None).await.unwrap_err();
        assert_eq!(
            why,
            "command \"sh\" not found on PATH (the PATH its env sets)"
        );
        let why = resolve("./missing-server", &[], Some(Path::new("/tmp")))
            .await
            .unwrap_err();
        assert_eq!(why, "/tmp/./missing-server does not exist");
    }
}
