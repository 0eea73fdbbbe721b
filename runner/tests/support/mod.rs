//! What the runner's integration tests share: the real binary over stdio ([`Runner`]) and
//! behind `--listen` ([`Listener`]), a WebSocket client, and what `/proc` says about a process.
//! Each test file uses part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::client::Request;
use tokio_tungstenite::tungstenite::http::HeaderName;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message as Frame;

/// The binary under test.
pub const RUNNER: &str = env!("CARGO_BIN_EXE_execbox-runner");
/// Generous bound on any wait for something that must happen.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// An `execute` whose providers are one namespace, `tools`, with `echo` and `hang`.
pub fn execute(id: &str, code: &str, options: Value) -> Value {
    json!({"type": "execute", "id": id, "code": code, "options": options,
           "providers": [{"name": "tools", "tools": {"echo": {"safeName": "echo"},
                                                     "hang": {"safeName": "hang"}}}]})
}

/// A stdio runner process, killed when dropped; its stderr is discarded.
pub struct Runner {
    pub child: Child,
    /// `None` once the test closed it (`runner.stdin.take()`).
    pub stdin: Option<ChildStdin>,
    pub stdout: BufReader<ChildStdout>,
}

impl Runner {
    pub fn spawn(args: &[&str]) -> Runner {
        let mut child = Command::new(RUNNER)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn runner");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Runner {
            child,
            stdin,
            stdout,
        }
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(bytes).unwrap();
        stdin.flush().unwrap();
    }

    /// Sends one message as one line.
    pub fn send(&mut self, message: Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.send_raw(line.as_bytes());
    }

    /// The next stdout line, without its newline; panics when stdout closed.
    pub fn line(&mut self) -> String {
        let mut line = String::new();
        let n = self.stdout.read_line(&mut line).unwrap();
        assert!(
            n > 0,
            "runner closed stdout (exit: {:?})",
            self.child.try_wait()
        );
        line.trim_end().to_owned()
    }

    /// The next message.
    pub fn recv(&mut self) -> Value {
        let line = self.line();
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line:?}"))
    }

    /// Runs `code`, which must finish without tool calls, and returns its `done`.
    pub fn run(&mut self, id: &str, code: &str) -> Value {
        self.send(execute(id, code, json!({})));
        assert_eq!(self.recv(), json!({"type": "started", "id": id}));
        let done = self.recv();
        assert_eq!(done["type"], "done", "{done}");
        done
    }

    /// Everything left on stdout until it closes.
    pub fn rest(&mut self) -> String {
        let mut rest = String::new();
        self.stdout.read_to_string(&mut rest).unwrap();
        rest
    }

    /// Whether the process exits within `within`.
    pub fn wait_exit(&mut self, within: Duration) -> bool {
        let until = Instant::now() + within;
        while Instant::now() < until {
            if self.child.try_wait().unwrap().is_some() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    /// A field of its `/proc/PID/status`, e.g. `Seccomp` -> `"2"`.
    pub fn status(&self, field: &str) -> String {
        status_of(self.child.id(), field)
            .unwrap_or_else(|| panic!("no {field} in /proc/PID/status"))
    }

    /// Soft and hard value of a row of its `/proc/PID/limits`, e.g. `Max open files`.
    pub fn limit(&self, row: &str) -> (String, String) {
        let limits = std::fs::read_to_string(format!("/proc/{}/limits", self.child.id())).unwrap();
        let line = limits.lines().find(|l| l.starts_with(row)).unwrap();
        let mut values = line[row.len()..].split_whitespace().map(str::to_owned);
        (values.next().unwrap(), values.next().unwrap())
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A listening runner (`--listen 127.0.0.1:0`), killed when dropped; its stderr is collected.
pub struct Listener {
    pub child: Child,
    /// `ws://HOST:PORT` as it printed it.
    pub url: String,
    stderr: Arc<Mutex<String>>,
    /// The bearer token, when it was started with one.
    token: Option<TokenFile>,
}

/// A token file, removed when dropped.
struct TokenFile {
    path: std::path::PathBuf,
    token: String,
}

impl Drop for TokenFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Listener {
    /// `--listen 127.0.0.1:0` plus `args`, with no token.
    pub fn spawn(args: &[&str]) -> Listener {
        let mut command = Command::new(RUNNER);
        command.args(["--listen", "127.0.0.1:0"]).args(args);
        Listener::start(&mut command, None)
    }

    /// Like [`Listener::spawn`], requiring `token` (given in a `--token-file`).
    pub fn with_token(token: &str, args: &[&str]) -> Listener {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "execbox-test-token-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::write(&path, token).unwrap();
        let mut command = Command::new(RUNNER);
        command
            .args(["--listen", "127.0.0.1:0", "--token-file"])
            .arg(&path)
            .args(args);
        let token = TokenFile {
            path,
            token: token.to_owned(),
        };
        Listener::start(&mut command, Some(token))
    }

    /// Starts `command` (a listening runner) without `EXECBOX_TOKEN` and `RUST_LOG`, and waits
    /// for the address it prints.
    pub fn spawn_with(command: &mut Command) -> Listener {
        Listener::start(command, None)
    }

    fn start(command: &mut Command, token: Option<TokenFile>) -> Listener {
        let mut child = command
            .env_remove("EXECBOX_TOKEN")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn runner");
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        let mut pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut url = String::new();
        stdout.read_line(&mut url).unwrap();
        assert!(
            url.starts_with("ws://"),
            "first stdout line {url:?}; stderr: {}",
            stderr.lock().unwrap()
        );
        Listener {
            child,
            url: url.trim().to_owned(),
            stderr,
            token,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn port(&self) -> u16 {
        self.url.rsplit(':').next().unwrap().parse().unwrap()
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        self.url.trim_start_matches("ws://").to_owned()
    }

    /// Everything on its stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits (bounded) until stderr holds `needle`: it is read on a thread of its own, which
    /// may still be catching up with the process's exit.
    pub async fn wait_stderr(&self, needle: &str) {
        let until = Instant::now() + PATIENCE;
        while !self.stderr().contains(needle) {
            assert!(
                Instant::now() < until,
                "no {needle:?} in stderr: {}",
                self.stderr()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// An upgrade request to it, with its token if it has one.
    pub fn request(&self) -> Request {
        let mut request = self.url.as_str().into_client_request().unwrap();
        if let Some(token) = &self.token {
            let bearer = format!("Bearer {}", token.token);
            request
                .headers_mut()
                .insert("authorization", bearer.parse().unwrap());
        }
        request
    }

    /// A new session, with its token if it has one.
    pub async fn connect(&self) -> Ws {
        tokio_tungstenite::connect_async(self.request())
            .await
            .unwrap()
            .0
    }

    #[cfg(target_os = "linux")]
    pub fn sigterm(&self) {
        #[allow(unsafe_code)]
        // SAFETY: kill only sends a signal to our own child.
        let sent = unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(sent, 0);
    }

    /// Waits (bounded) for the process to exit.
    pub fn exit_status(&mut self) -> ExitStatus {
        let until = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < until,
                "still running; stderr: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A WebSocket session with a listening runner.
pub type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// How a session ended: its close code and reason, `None` without a close frame.
pub type Closed = Option<(CloseCode, String)>;

/// A request to `url` with extra headers.
pub fn request(url: &str, headers: &[(&str, &str)]) -> Request {
    let mut request = url.into_client_request().unwrap();
    for (k, v) in headers {
        let name: HeaderName = k.parse().unwrap();
        request.headers_mut().insert(name, v.parse().unwrap());
    }
    request
}

/// A new session with a runner that needs no token.
pub async fn connect(url: &str) -> Ws {
    tokio_tungstenite::connect_async(url).await.unwrap().0
}

pub async fn send(ws: &mut Ws, message: Value) {
    ws.send(Frame::text(message.to_string())).await.unwrap();
}

/// The next message, or how the session ended; panics after [`PATIENCE`] of silence.
pub async fn next(ws: &mut Ws) -> Result<Value, Closed> {
    loop {
        match tokio::time::timeout(PATIENCE, ws.next()).await {
            Ok(Some(Ok(Frame::Text(text)))) => return Ok(serde_json::from_str(&text).unwrap()),
            Ok(Some(Ok(Frame::Close(frame)))) => {
                return Err(frame.map(|f| (f.code, f.reason.to_string())))
            }
            Ok(Some(Ok(_))) => continue,
            Ok(Some(Err(_)) | None) => return Err(None),
            Err(_) => panic!("nothing from the runner within {PATIENCE:?}"),
        }
    }
}

/// The next message; panics if the session closed instead.
pub async fn recv(ws: &mut Ws) -> Value {
    match next(ws).await {
        Ok(message) => message,
        Err(how) => panic!("expected a message, the session closed: {how:?}"),
    }
}

/// The fields of `/proc/PID/stat` after the command name, which may hold spaces and
/// parentheses: everything after the last `)`. `[0]` is the state, `[1]` the parent's pid.
pub fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// The pids of `pid`'s child processes.
pub fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|&p| stat_fields(p).is_some_and(|f| f[1] == pid.to_string()))
        .collect()
}

/// Gone entirely: neither running nor a zombie waiting to be reaped.
pub fn is_gone(pid: u32) -> bool {
    stat_fields(pid).is_none_or(|f| f[0] == "X")
}

/// Not running: gone, or a zombie.
pub fn is_dead(pid: u32) -> bool {
    stat_fields(pid).is_none_or(|f| f[0] == "Z" || f[0] == "X")
}

/// utime + stime of `pid`, in seconds.
#[cfg(target_os = "linux")]
pub fn cpu_seconds(pid: u32) -> f64 {
    let fields = stat_fields(pid).expect("process exists");
    // After the name: state(0) ppid(1) ... utime(11) stime(12).
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    #[allow(unsafe_code)]
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks as f64 / hz
}

/// A field of `/proc/PID/status`, e.g. `Seccomp` -> `"2"`.
pub fn status_of(pid: u32, field: &str) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:\t")))
        .map(str::to_owned)
}

/// VmRSS of `pid` in KiB (0 when it is gone).
pub fn rss_kib(pid: u32) -> u64 {
    status_of(pid, "VmRSS")
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}
