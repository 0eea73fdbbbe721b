//! Runner processes and the suite's end of their sessions, over stdio and WebSocket.

use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use execbox_protocol::Message;
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message as WsFrame;

use super::{Report, GRACE};
use crate::support::runners::EXECBOX;

/// How a process ended, naming SIGSYS (the seccomp filter's verdict) when it is that.
fn describe_exit(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status.signal() {
        Some(31) => "killed by SIGSYS: the seccomp lockdown refused a system call".to_owned(),
        Some(sig) => format!("killed by signal {sig}"),
        None => format!("{status}"),
    }
}

/// How a runner is doing, for a failure message: its exit status if it ended, and its last
/// stderr lines.
fn diagnosis(child: &mut tokio::process::Child, pid: u32, stderr: &StderrTail) -> String {
    let status = match child.try_wait() {
        Ok(Some(status)) => describe_exit(status),
        Ok(None) => "still running".to_owned(),
        Err(e) => format!("status unknown: {e}"),
    };
    format!("runner {pid} {status}; stderr: {}", stderr.text())
}

/// The last lines a runner wrote to stderr, to explain a failure.
#[derive(Clone, Default)]
struct StderrTail(Arc<Mutex<VecDeque<String>>>);

impl StderrTail {
    /// Reads `stderr` to its end in the background, keeping the last lines.
    pub(crate) fn drain(&self, stderr: impl tokio::io::AsyncRead + Unpin + Send + 'static) {
        let tail = self.0.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
                if tail.len() == 8 {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
        });
    }

    /// The lines kept, joined.
    pub(crate) fn text(&self) -> String {
        let tail = self.0.lock().unwrap_or_else(|e| e.into_inner());
        tail.iter().cloned().collect::<Vec<_>>().join(" | ")
    }
}

// ---------------------------------------------------------------------------------------------
// Peers: the suite's end of a stdio or WebSocket session
// ---------------------------------------------------------------------------------------------

/// One thing a runner sent.
#[derive(Debug, Clone)]
pub(crate) enum In {
    /// A valid protocol message (decoded with `execbox-protocol`, kept as JSON).
    Msg(Value),
    /// Output that is not a valid protocol message.
    Garbage(String),
    /// The session ended; `again` when the runner refused it at `--max-sessions` (1013).
    Closed {
        /// How it ended.
        reason: String,
        /// Close code 1013.
        again: bool,
    },
}

/// One thing to send: a line (stdio) or text frame, or raw bytes (stdio) or a binary frame.
#[derive(Debug, Clone)]
pub(crate) enum Out {
    /// A message text; stdio appends the newline.
    Line(String),
    /// Bytes as they are: written raw on stdio, one binary frame on WebSocket.
    Bytes(Vec<u8>),
}

enum Op {
    /// Sent together: one `write` on stdio, consecutive frames on WebSocket.
    Batch(Vec<Out>),
    /// Written one byte per `write` (stdio) to exercise the framer.
    Drip(Vec<u8>),
    /// stdin EOF, or a WebSocket close frame.
    Close,
}

/// The suite's end of one session, whatever the transport.
pub(crate) struct Peer {
    ops: mpsc::UnboundedSender<Op>,
    inbox: mpsc::UnboundedReceiver<In>,
    tasks: Vec<JoinHandle<()>>,
    ended: Option<In>,
}

impl Peer {
    /// Sends one message text.
    pub(crate) fn send(&self, line: String) {
        self.send_all(vec![Out::Line(line)]);
    }

    /// Sends `items` together (one write on stdio).
    pub(crate) fn send_all(&self, items: Vec<Out>) {
        let _ = self.ops.send(Op::Batch(items));
    }

    /// Writes `bytes` one per write (stdio).
    pub(crate) fn drip(&self, bytes: Vec<u8>) {
        let _ = self.ops.send(Op::Drip(bytes));
    }

    /// Ends the session gracefully: stdin EOF, or a close frame.
    pub(crate) fn close(&self) {
        let _ = self.ops.send(Op::Close);
    }

    /// Drops the transport at once: on WebSocket the TCP connection goes without a close frame.
    pub(crate) fn abort(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        self.ended = Some(In::Closed {
            reason: "aborted by the suite".into(),
            again: false,
        });
    }

    /// The next item, or `None` once `until` passes.
    pub(crate) async fn recv(&mut self, until: Instant) -> Option<In> {
        if let Some(ended) = &self.ended {
            return Some(ended.clone());
        }
        match tokio::time::timeout_at(until, self.inbox.recv()).await {
            Err(_) => None,
            Ok(Some(item)) => {
                if matches!(item, In::Closed { .. }) {
                    self.ended = Some(item.clone());
                }
                Some(item)
            }
            Ok(None) => {
                let closed = In::Closed {
                    reason: "transport ended".into(),
                    again: false,
                };
                self.ended = Some(closed.clone());
                Some(closed)
            }
        }
    }

    /// Expects nothing to arrive for `quiet`; describes what did.
    pub(crate) async fn expect_silence(&mut self, quiet: Duration) -> Result<(), String> {
        match self.recv(Instant::now() + quiet).await {
            None => Ok(()),
            Some(In::Msg(m)) => Err(format!("unexpected message {}", compact(&m))),
            Some(In::Garbage(g)) => Err(format!("unexpected output {g}")),
            Some(In::Closed { reason, .. }) => Err(format!("session ended: {reason}")),
        }
    }
}

fn classify_line(line: &[u8]) -> In {
    let Ok(text) = std::str::from_utf8(line) else {
        return In::Garbage(format!("{} bytes of invalid UTF-8", line.len()));
    };
    match Message::decode(text) {
        Ok(_) => match serde_json::from_str(text) {
            Ok(value) => In::Msg(value),
            Err(e) => In::Garbage(format!("{e}: {}", clip(text))),
        },
        Err(e) => In::Garbage(format!("{e}: {}", clip(text))),
    }
}

fn clip(text: &str) -> String {
    let mut shown: String = text.chars().take(300).collect();
    if shown.len() < text.len() {
        shown.push('…');
    }
    shown
}

/// A message as compact JSON, clipped for a failure message.
pub(crate) fn compact(value: &Value) -> String {
    clip(&value.to_string())
}

fn stdio_peer(mut stdin: tokio::process::ChildStdin, stdout: tokio::process::ChildStdout) -> Peer {
    let (ops, mut op_rx) = mpsc::unbounded_channel::<Op>();
    let (in_tx, inbox) = mpsc::unbounded_channel::<In>();
    let writer = tokio::spawn(async move {
        while let Some(op) = op_rx.recv().await {
            let written = match op {
                Op::Batch(items) => {
                    let mut bytes = Vec::new();
                    for item in items {
                        match item {
                            Out::Line(line) => {
                                bytes.extend_from_slice(line.as_bytes());
                                bytes.push(b'\n');
                            }
                            Out::Bytes(raw) => bytes.extend_from_slice(&raw),
                        }
                    }
                    stdin.write_all(&bytes).await
                }
                Op::Drip(bytes) => {
                    let mut result = Ok(());
                    for byte in bytes {
                        result = stdin.write_all(&[byte]).await;
                        if result.is_err() {
                            break;
                        }
                        tokio::time::sleep(Duration::from_micros(200)).await;
                    }
                    result
                }
                Op::Close => break,
            };
            if written.is_err() {
                break;
            }
        }
        drop(stdin);
    });
    let reader = tokio::spawn(async move {
        let mut stdout = BufReader::with_capacity(1 << 16, stdout);
        let mut line = Vec::new();
        loop {
            line.clear();
            match stdout.read_until(b'\n', &mut line).await {
                Ok(0) => {
                    let _ = in_tx.send(In::Closed {
                        reason: "runner closed stdout".into(),
                        again: false,
                    });
                    return;
                }
                Ok(_) => {
                    if line.last() == Some(&b'\n') {
                        line.pop();
                    }
                    if in_tx.send(classify_line(&line)).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    let _ = in_tx.send(In::Closed {
                        reason: format!("cannot read stdout: {e}"),
                        again: false,
                    });
                    return;
                }
            }
        }
    });
    Peer {
        ops,
        inbox,
        tasks: vec![writer, reader],
        ended: None,
    }
}

/// A runner process serving one stdio session.
pub(crate) struct StdioRunner {
    child: tokio::process::Child,
    /// Its pid.
    pub pid: u32,
    pub(crate) peer: Peer,
    stderr: StderrTail,
}

impl StdioRunner {
    /// Starts `execbox runner ARGS...` with piped stdio, locked down as by default.
    pub(crate) fn spawn(args: &[&str]) -> StdioRunner {
        let mut child = tokio::process::Command::new(EXECBOX)
            .arg("runner")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn execbox runner");
        let pid = child.id().expect("runner pid");
        let stderr = StderrTail::default();
        stderr.drain(child.stderr.take().expect("piped stderr"));
        let peer = stdio_peer(
            child.stdin.take().expect("piped stdin"),
            child.stdout.take().expect("piped stdout"),
        );
        StdioRunner {
            child,
            pid,
            peer,
            stderr,
        }
    }

    /// How the runner is doing, for a failure message: its exit status if it ended, and
    /// its last stderr lines.
    pub(crate) fn diagnose(&mut self) -> String {
        diagnosis(&mut self.child, self.pid, &self.stderr)
    }

    /// Closes stdin and expects a clean exit within [`GRACE`].
    pub(crate) async fn finish(mut self) -> Result<(), String> {
        self.peer.close();
        match tokio::time::timeout(GRACE, self.child.wait()).await {
            Ok(Ok(status)) if status.success() => Ok(()),
            Ok(Ok(status)) => Err(format!(
                "runner {} ended with {} after stdin closed; stderr: {}",
                self.pid,
                describe_exit(status),
                self.stderr.text()
            )),
            Ok(Err(e)) => Err(format!("cannot wait for runner {}: {e}", self.pid)),
            Err(_) => {
                let _ = self.child.start_kill();
                let _ = self.child.wait().await;
                Err(format!(
                    "runner {} did not exit within {GRACE:?} of stdin closing",
                    self.pid
                ))
            }
        }
    }
}

/// A runner serving WebSocket sessions on a loopback port.
pub(crate) struct WsRunner {
    child: tokio::process::Child,
    /// Its pid.
    pub pid: u32,
    /// `ws://127.0.0.1:PORT`.
    pub url: String,
    stderr: StderrTail,
}

impl WsRunner {
    /// Starts `execbox runner --listen 127.0.0.1:0 ARGS...` and reads its URL.
    pub(crate) async fn spawn(args: &[&str]) -> WsRunner {
        let mut child = tokio::process::Command::new(EXECBOX)
            .args(["runner", "--listen", "127.0.0.1:0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn execbox runner --listen");
        let pid = child.id().expect("runner pid");
        let stderr = StderrTail::default();
        stderr.drain(child.stderr.take().expect("piped stderr"));
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut line = String::new();
        let read = tokio::time::timeout(GRACE, stdout.read_line(&mut line)).await;
        assert!(
            matches!(read, Ok(Ok(n)) if n > 0) && line.starts_with("ws://"),
            "listening runner printed {line:?}; stderr: {}",
            stderr.text()
        );
        // Keep draining stdout; nothing else is expected there.
        tokio::spawn(async move {
            let mut rest = String::new();
            while matches!(stdout.read_line(&mut rest).await, Ok(n) if n > 0) {
                rest.clear();
            }
        });
        WsRunner {
            child,
            pid,
            url: line.trim().to_owned(),
            stderr,
        }
    }

    /// How the listening runner is doing, for a failure message.
    pub(crate) fn diagnose(&mut self) -> String {
        diagnosis(&mut self.child, self.pid, &self.stderr)
    }

    /// Checks it is still serving, then kills and reaps it.
    pub(crate) async fn stop(mut self) -> Result<(), String> {
        let alive = match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(format!(
                "listening runner {} died: {}; stderr: {}",
                self.pid,
                describe_exit(status),
                self.stderr.text()
            )),
            Err(e) => Err(format!("cannot check runner {}: {e}", self.pid)),
        };
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
        alive
    }
}

/// Opens one WebSocket session with the runner's frame limits lifted on our side.
async fn ws_connect(url: &str) -> Result<Peer, String> {
    let config = WebSocketConfig::default()
        .max_message_size(None)
        .max_frame_size(None);
    let (ws, _) = tokio_tungstenite::connect_async_with_config(url, Some(config), true)
        .await
        .map_err(|e| format!("cannot connect to {url}: {e}"))?;
    let (mut sink, mut stream) = ws.split();
    let (ops, mut op_rx) = mpsc::unbounded_channel::<Op>();
    let (in_tx, inbox) = mpsc::unbounded_channel::<In>();
    let writer = tokio::spawn(async move {
        while let Some(op) = op_rx.recv().await {
            let sent = match op {
                Op::Batch(items) => {
                    let mut result = Ok(());
                    for item in items {
                        let frame = match item {
                            Out::Line(text) => WsFrame::text(text),
                            Out::Bytes(bytes) => WsFrame::binary(bytes),
                        };
                        result = sink.feed(frame).await;
                        if result.is_err() {
                            break;
                        }
                    }
                    match result {
                        Ok(()) => sink.flush().await,
                        Err(e) => Err(e),
                    }
                }
                Op::Drip(bytes) => sink.send(WsFrame::binary(bytes)).await,
                Op::Close => {
                    let _ = sink.close().await;
                    break;
                }
            };
            if sent.is_err() {
                break;
            }
        }
    });
    let reader = tokio::spawn(async move {
        let closed = loop {
            match stream.next().await {
                Some(Ok(WsFrame::Text(text))) => {
                    if in_tx.send(classify_line(text.as_bytes())).is_err() {
                        return;
                    }
                }
                Some(Ok(WsFrame::Binary(bytes))) => {
                    let _ = in_tx.send(In::Garbage(format!(
                        "a binary frame of {} bytes",
                        bytes.len()
                    )));
                }
                Some(Ok(WsFrame::Close(frame))) => {
                    break match frame {
                        Some(f) => In::Closed {
                            again: f.code == CloseCode::Again,
                            reason: format!("runner closed the session ({}: {})", f.code, f.reason),
                        },
                        None => In::Closed {
                            reason: "runner closed the session".into(),
                            again: false,
                        },
                    };
                }
                Some(Ok(_)) => continue,
                Some(Err(e)) => {
                    break In::Closed {
                        reason: format!("session failed: {e}"),
                        again: false,
                    }
                }
                None => {
                    break In::Closed {
                        reason: "connection closed".into(),
                        again: false,
                    }
                }
            }
        };
        let _ = in_tx.send(closed);
    });
    Ok(Peer {
        ops,
        inbox,
        tasks: vec![writer, reader],
        ended: None,
    })
}

/// Connects, retrying for up to [`GRACE`] (a refused or failed handshake is counted and retried).
pub(crate) async fn ws_open(url: &str, report: &mut Report) -> Result<Peer, String> {
    let until = Instant::now() + GRACE;
    loop {
        match ws_connect(url).await {
            Ok(peer) => return Ok(peer),
            Err(e) if Instant::now() >= until => return Err(e),
            Err(_) => {
                report.fault("connection attempts that failed and were retried", 1, 1);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}
