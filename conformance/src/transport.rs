//! Transports: how the replayer reaches a runner, as a fresh process over stdio or a WebSocket connection per transcript.

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use tungstenite::client::IntoClientRequest;
use tungstenite::http::header::{HeaderValue, AUTHORIZATION};
use tungstenite::protocol::WebSocket;

/// How long to wait for a TCP connection and a WebSocket handshake.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a WebSocket write may block before it fails.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How much of a runner's stderr is kept.
const STDERR_TAIL_BYTES: usize = 64 * 1024;
/// How many stderr lines a failure report shows.
const STDERR_TAIL_LINES: usize = 20;
/// How long to wait for an exit status after a runner closed its stdout.
const EXIT_GRACE: Duration = Duration::from_millis(500);
/// How long [`ListeningRunner::spawn`] waits for the address line.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(10);

/// A way to reach a runner: opens one fresh session per transcript.
pub trait Transport: Send + Sync {
    /// Opens a session (spawns a process, or connects).
    fn connect(&self) -> io::Result<Box<dyn Connection>>;
}

/// What [`Connection::recv`] got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    /// One message: a line without its newline, or a text frame.
    Message(String),
    /// Nothing arrived in time.
    Timeout,
    /// The runner closed the session; says how (and, for a process, its exit status).
    Closed(String),
}

/// Whether the runner process exited, for [`Connection::wait_exit`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// The transport has no process to watch (WebSocket).
    NotApplicable,
    /// The process exited; holds its status, e.g. `exit status: 0`.
    Exited(String),
    /// The process was still running when the wait ended.
    StillRunning,
}

/// One open session with a runner; dropping it ends the session (and kills a spawned process).
pub trait Connection {
    /// Sends one message: a line on stdin, or a text frame.
    fn send(&mut self, text: &str) -> io::Result<()>;
    /// Waits up to `timeout` for the runner's next message.
    fn recv(&mut self, timeout: Duration) -> Received;
    /// Closes the host side: stdin EOF, or a WebSocket close frame.
    fn close(&mut self) -> io::Result<()>;
    /// Waits up to `timeout` for the runner process to exit.
    fn wait_exit(&mut self, timeout: Duration) -> Exit;
    /// The last lines the runner wrote to stderr, when there is a process to read.
    fn stderr_tail(&self) -> Option<String>;
}

/// Spawns `command` afresh for every transcript and speaks NDJSON over its stdin and stdout.
///
/// The process is killed when its session ends; its stderr is kept for failure reports.
#[derive(Debug, Clone)]
pub struct StdioRunner {
    /// Program and arguments.
    pub command: Vec<String>,
}

impl StdioRunner {
    /// Splits a shell-style command line (`"node runner.js --flag"`) into program and arguments.
    pub fn from_command_line(line: &str) -> io::Result<StdioRunner> {
        let command = shell_words::split(line)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{line:?}: {e}")))?;
        if command.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the runner command is empty",
            ));
        }
        Ok(StdioRunner { command })
    }
}

impl Transport for StdioRunner {
    fn connect(&self) -> io::Result<Box<dyn Connection>> {
        let (program, args) = self
            .command
            .split_first()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty runner command"))?;
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("cannot start {program:?}: {e}")))?;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");

        let (to_stdin, lines_in) = mpsc::channel::<String>();
        thread::spawn(move || {
            let mut stdin = stdin;
            for line in lines_in {
                if stdin.write_all(line.as_bytes()).is_err() || stdin.flush().is_err() {
                    break;
                }
            }
            // Dropping stdin here is the EOF the runner sees.
        });
        let (events_out, events) = mpsc::channel();
        thread::spawn(move || read_lines(stdout, events_out));
        let tail = Tail::shared();
        let tail_writer = Arc::clone(&tail);
        thread::spawn(move || drain_into(stderr, &tail_writer));

        Ok(Box::new(StdioConnection {
            child,
            to_stdin: Some(to_stdin),
            events,
            stderr: tail,
            closed_because: None,
        }))
    }
}

/// An event from a runner's stdout.
enum Event {
    Line(String),
    Eof,
    Error(String),
}

fn read_lines(stdout: ChildStdout, events: Sender<Event>) {
    let mut reader = BufReader::new(stdout);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) => {
                let _ = events.send(Event::Eof);
                return;
            }
            Ok(_) => {
                while matches!(buf.last(), Some(b'\n' | b'\r')) {
                    buf.pop();
                }
                if buf.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let line = String::from_utf8_lossy(&buf).into_owned();
                if events.send(Event::Line(line)).is_err() {
                    return;
                }
            }
            Err(e) => {
                let _ = events.send(Event::Error(e.to_string()));
                return;
            }
        }
    }
}

/// The last bytes a process wrote to stderr.
pub(crate) struct Tail {
    bytes: VecDeque<u8>,
}

impl Tail {
    pub(crate) fn shared() -> Arc<Mutex<Tail>> {
        Arc::new(Mutex::new(Tail {
            bytes: VecDeque::new(),
        }))
    }

    fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend(chunk);
        let excess = self.bytes.len().saturating_sub(STDERR_TAIL_BYTES);
        self.bytes.drain(..excess);
    }

    /// The last [`STDERR_TAIL_LINES`] lines, or `None` when nothing was written.
    pub(crate) fn lines(&self) -> Option<String> {
        let (a, b) = self.bytes.as_slices();
        let text = String::from_utf8_lossy(&[a, b].concat()).into_owned();
        let lines: Vec<&str> = text.lines().collect();
        let start = lines.len().saturating_sub(STDERR_TAIL_LINES);
        let shown = lines[start..].join("\n");
        (!shown.trim().is_empty()).then_some(shown)
    }
}

pub(crate) fn drain_into(mut from: impl Read, tail: &Mutex<Tail>) {
    let mut buf = [0u8; 8192];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => tail
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(&buf[..n]),
        }
    }
}

struct StdioConnection {
    child: Child,
    to_stdin: Option<Sender<String>>,
    events: Receiver<Event>,
    stderr: Arc<Mutex<Tail>>,
    closed_because: Option<String>,
}

impl StdioConnection {
    fn exit_note(&mut self) -> String {
        match self.wait_exit(EXIT_GRACE) {
            Exit::Exited(status) => format!("it exited ({status})"),
            _ => "it is still running".to_string(),
        }
    }
}

impl Connection for StdioConnection {
    fn send(&mut self, text: &str) -> io::Result<()> {
        let to_stdin = self
            .to_stdin
            .as_ref()
            .ok_or_else(|| io::Error::new(io::ErrorKind::BrokenPipe, "stdin was already closed"))?;
        to_stdin
            .send(format!("{text}\n"))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the runner's stdin is closed"))
    }

    fn recv(&mut self, timeout: Duration) -> Received {
        if let Some(why) = &self.closed_because {
            return Received::Closed(why.clone());
        }
        let why = match self.events.recv_timeout(timeout) {
            Ok(Event::Line(line)) => return Received::Message(line),
            Err(RecvTimeoutError::Timeout) => return Received::Timeout,
            Ok(Event::Eof) | Err(RecvTimeoutError::Disconnected) => {
                format!("the runner closed its stdout; {}", self.exit_note())
            }
            Ok(Event::Error(e)) => format!("reading the runner's stdout failed: {e}"),
        };
        self.closed_because = Some(why.clone());
        Received::Closed(why)
    }

    fn close(&mut self) -> io::Result<()> {
        self.to_stdin = None;
        Ok(())
    }

    fn wait_exit(&mut self, timeout: Duration) -> Exit {
        let deadline = Instant::now() + timeout;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return Exit::Exited(status.to_string()),
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(5)),
                Ok(None) => return Exit::StillRunning,
                Err(e) => return Exit::Exited(format!("cannot be waited for: {e}")),
            }
        }
    }

    fn stderr_tail(&self) -> Option<String> {
        self.stderr
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .lines()
    }
}

impl Drop for StdioConnection {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Connects to a runner's WebSocket endpoint afresh for every transcript; one message per text frame.
#[derive(Clone)]
pub struct WsRunner {
    /// `ws://HOST:PORT[/PATH]`.
    pub url: String,
    /// Sent as `Authorization: Bearer TOKEN` on each upgrade, for a token-protected runner.
    pub token: Option<String>,
}

impl std::fmt::Debug for WsRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WsRunner")
            .field("url", &self.url)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Transport for WsRunner {
    fn connect(&self) -> io::Result<Box<dyn Connection>> {
        Ok(Box::new(connect_ws(&self.url, self.token.as_deref())?))
    }
}

/// Opens one WebSocket session with `url`, sending `Authorization: Bearer TOKEN` when given a token.
pub(crate) fn connect_ws(url: &str, bearer: Option<&str>) -> io::Result<WsConnection> {
    let invalid =
        |why: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("{url:?}: {why}"));
    let rest = url
        .strip_prefix("ws://")
        .ok_or_else(|| invalid("only ws:// URLs are supported"))?;
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.is_empty() {
        return Err(invalid("no host"));
    }
    let has_port = authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| !p.contains(']'));
    let address = if has_port {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    let mut request = url
        .into_client_request()
        .map_err(|e| invalid(&e.to_string()))?;
    if let Some(token) = bearer {
        let value = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| invalid("the bearer token is not a valid header value"))?;
        request.headers_mut().insert(AUTHORIZATION, value);
    }
    let mut last_error = invalid("the host resolves to no address");
    let mut stream = None;
    for addr in address.to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last_error = e,
        }
    }
    let stream = stream.ok_or(last_error)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(CONNECT_TIMEOUT))?;
    stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
    let (ws, _response) = tungstenite::client(request, stream)
        .map_err(|e| io::Error::other(format!("WebSocket handshake with {url}: {e}")))?;
    Ok(WsConnection {
        ws,
        closed_because: None,
    })
}

/// One WebSocket session; one message per text frame.
pub(crate) struct WsConnection {
    ws: WebSocket<TcpStream>,
    closed_because: Option<String>,
}

impl Connection for WsConnection {
    fn send(&mut self, text: &str) -> io::Result<()> {
        self.ws
            .send(tungstenite::Message::text(text))
            .map_err(|e| io::Error::other(format!("WebSocket send: {e}")))
    }

    fn recv(&mut self, timeout: Duration) -> Received {
        if let Some(why) = &self.closed_because {
            return Received::Closed(why.clone());
        }
        let deadline = Instant::now() + timeout;
        let why = loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Received::Timeout;
            }
            let wait = remaining.max(Duration::from_millis(1));
            if let Err(e) = self.ws.get_mut().set_read_timeout(Some(wait)) {
                break format!("cannot set a read timeout: {e}");
            }
            match self.ws.read() {
                Ok(tungstenite::Message::Text(text)) => return Received::Message(text.to_string()),
                Ok(tungstenite::Message::Binary(bytes)) => {
                    return Received::Message(format!(
                        "(a binary frame of {} bytes, where the protocol sends text frames)",
                        bytes.len()
                    ))
                }
                Ok(tungstenite::Message::Close(frame)) => {
                    break match frame {
                        Some(f) => {
                            format!("the runner closed the WebSocket ({} {})", f.code, f.reason)
                        }
                        None => "the runner closed the WebSocket".to_string(),
                    }
                }
                Ok(_) => continue, // ping, pong: tungstenite answers pings itself
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    continue
                }
                Err(tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed) => {
                    break "the WebSocket connection is closed".to_string()
                }
                Err(e) => break format!("WebSocket read: {e}"),
            }
        };
        self.closed_because = Some(why.clone());
        Received::Closed(why)
    }

    fn close(&mut self) -> io::Result<()> {
        self.ws
            .close(None)
            .or_else(|e| match e {
                tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed => Ok(()),
                e => Err(e),
            })
            .map_err(|e| io::Error::other(format!("WebSocket close: {e}")))?;
        self.closed_because = Some("the host closed the WebSocket".into());
        Ok(())
    }

    fn wait_exit(&mut self, _timeout: Duration) -> Exit {
        Exit::NotApplicable
    }

    fn stderr_tail(&self) -> Option<String> {
        None
    }
}

impl Drop for WsConnection {
    fn drop(&mut self) {
        // Say goodbye politely, without waiting for the runner's answer.
        if self.closed_because.is_none() {
            let _ = self
                .ws
                .get_mut()
                .set_write_timeout(Some(Duration::from_millis(100)));
            let _ = self.ws.close(None);
            let _ = self.ws.flush();
        }
    }
}

/// A runner process serving WebSocket sessions, started with `--listen 127.0.0.1:0`.
///
/// The runner must print its bound address, exactly `ws://127.0.0.1:PORT`, as the first line
/// of its stdout. The process is killed when this value drops.
pub struct ListeningRunner {
    child: Child,
    url: String,
    stderr: Arc<Mutex<Tail>>,
}

impl ListeningRunner {
    /// Runs `command` with `--listen 127.0.0.1:0` appended and reads its address line.
    pub fn spawn(command: &[String]) -> io::Result<ListeningRunner> {
        let (program, args) = command
            .split_first()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty runner command"))?;
        let mut child = Command::new(program)
            .args(args)
            .args(["--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("cannot start {program:?}: {e}")))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        let tail = Tail::shared();
        let tail_writer = Arc::clone(&tail);
        thread::spawn(move || drain_into(stderr, &tail_writer));
        let (first_line, line) = mpsc::channel();
        thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut first = String::new();
            let _ = first_line.send(reader.read_line(&mut first).map(|_| first));
            // Keep draining so a chatty runner never blocks on a full pipe.
            let _ = io::copy(&mut reader, &mut io::sink());
        });
        let mut runner = ListeningRunner {
            child,
            url: String::new(),
            stderr: tail,
        };
        let failed = |runner: &ListeningRunner, why: String| {
            let stderr = runner
                .stderr_tail()
                .map(|t| format!("\nrunner stderr:\n{t}"))
                .unwrap_or_default();
            io::Error::other(format!("{why}{stderr}"))
        };
        let first = match line.recv_timeout(LISTEN_TIMEOUT) {
            Ok(Ok(first)) => first,
            Ok(Err(e)) => return Err(failed(&runner, format!("reading the address line: {e}"))),
            Err(_) => {
                let why = format!(
                    "no address line on stdout within {} s",
                    LISTEN_TIMEOUT.as_secs()
                );
                return Err(failed(&runner, why));
            }
        };
        let url = first.trim_end_matches(['\r', '\n']);
        if !url.starts_with("ws://127.0.0.1:") {
            let why = format!("expected a first stdout line like ws://127.0.0.1:PORT, got {url:?}");
            return Err(failed(&runner, why));
        }
        runner.url = url.to_string();
        Ok(runner)
    }

    /// The address the runner printed, `ws://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A [`WsRunner`] connecting to this runner.
    pub fn ws_runner(&self) -> WsRunner {
        WsRunner {
            url: self.url.clone(),
            token: None,
        }
    }

    /// The last lines the runner wrote to stderr (shared by every session it served).
    pub fn stderr_tail(&self) -> Option<String> {
        self.stderr
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .lines()
    }
}

impl Drop for ListeningRunner {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
