//! One session: WebSocket frames to NDJSON lines on a runner process's stdin, its stdout lines
//! back as text frames, with bounded output buffering, an idle timeout, and a close frame that
//! says why the session ended.

use std::io;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use execbox_protocol::{answered_execute, peek_envelope, PEEK_BYTES};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Error as WsError, Message as Frame};
use tokio_tungstenite::WebSocketStream;

use super::child::RunnerChild;
use super::http::Replay;
use super::metrics::Metrics;
use super::Phase;

/// A session's WebSocket.
pub(crate) type Ws = WebSocketStream<Replay>;

/// How long cancelled executions have to answer once the drain timeout has passed, before
/// their sessions are closed anyway.
const CANCEL_GRACE: Duration = Duration::from_secs(5);
/// How often a draining session checks whether it has an execution in flight.
const DRAIN_TICK: Duration = Duration::from_millis(20);

/// How long a runner has to exit once its stdin is closed, before SIGKILL.
pub(crate) const EXIT_GRACE: Duration = Duration::from_secs(1);
/// How long the last frames and the close frame may take to reach the client.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// The limits of one session.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// `--max-message-bytes`.
    pub(crate) max_message_bytes: usize,
    /// `--idle-timeout-ms`.
    pub(crate) idle_timeout: Duration,
}

/// What a session shares with the supervisor.
pub(crate) struct Context {
    /// Who connected (for the session's log line).
    pub(crate) peer: SocketAddr,
    /// Counters the session moves.
    pub(crate) metrics: Arc<Metrics>,
    /// Serving, draining (close once nothing is in flight), or cancelling (the drain timeout
    /// passed: cancel what is in flight, then close).
    pub(crate) phase: watch::Receiver<Phase>,
}

/// Most bytes of runner output a session holds for a client that does not read:
/// twice `--max-message-bytes` plus 1 MiB (a whole message being written, another queued, and
/// room for small ones). Past it the session is closed with 1008 and its runner killed.
pub(crate) fn outbound_bound(max_message_bytes: usize) -> usize {
    max_message_bytes.saturating_mul(2).saturating_add(1 << 20)
}

/// What the client did last, for the idle timeout.
struct Activity {
    /// The last frame from the client, or the last `done` out.
    last: Instant,
    /// `execute` frames in minus `done` lines out.
    in_flight: usize,
    /// The ids of the executions in flight (what a drain cancels).
    ids: Vec<String>,
    /// `done` lines out.
    executions: u64,
}

type Shared = Arc<Mutex<Activity>>;

fn lock(activity: &Shared) -> std::sync::MutexGuard<'_, Activity> {
    activity.lock().unwrap_or_else(|e| e.into_inner())
}

enum Out {
    Line(String),
    Close(Option<CloseFrame>),
}

enum FromClient {
    /// The client closed or the connection failed.
    Gone(String),
    /// A frame over `--max-message-bytes` + [`PEEK_BYTES`].
    TooBig(String),
    /// The runner's stdin is closed: it is exiting.
    StdinClosed,
}

enum FromRunner {
    /// Its stdout ended: it exited (the watchdog) or crashed.
    Eof,
    /// The client does not read fast enough.
    Overflow(usize),
}

enum End {
    Client(FromClient),
    Runner(FromRunner),
    WriteFailed,
    Idle,
    /// The supervisor is draining and nothing is in flight (or the cancels went unanswered).
    Drained,
}

/// Serves one session with `child` until either side ends it; returns once the runner is reaped,
/// after one info line saying how the session went.
pub(crate) async fn serve(ws: Ws, mut child: RunnerChild, limits: Limits, context: Context) {
    let began = Instant::now();
    let Context {
        peer,
        metrics,
        mut phase,
    } = context;
    let activity: Shared = Arc::new(Mutex::new(Activity {
        last: Instant::now(),
        in_flight: 0,
        ids: Vec::new(),
        executions: 0,
    }));
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        tracing::error!("a runner process without stdin or stdout");
        return;
    };
    let bound = outbound_bound(limits.max_message_bytes);
    let mut pumps = Pumps::start(ws, stdin, stdout, &activity, limits, metrics);
    let (end, cancelled) = pumps
        .wait_for_end(&activity, &mut phase, limits.idle_timeout, peer)
        .await;
    let ended = end.summary(cancelled);
    let pid = child.pid();
    let status = pumps.end(end, child, limits, bound).await;
    tracing::debug!(?pid, ?status, "runner process reaped");
    let executions = lock(&activity).executions;
    tracing::info!(
        %peer,
        executions,
        duration_ms = began.elapsed().as_millis() as u64,
        ended,
        "session ended"
    );
    pumps.shut_down().await;
}

/// A session's three tasks and the channels that steer them.
struct Pumps {
    /// Client frames to the runner's stdin ([`read_client`]).
    inbound: Option<JoinHandle<FromClient>>,
    /// The runner's stdout lines to the writer ([`read_runner`]).
    outbound: Option<JoinHandle<FromRunner>>,
    /// Lines and the close frame to the client ([`write`]).
    writer: Option<JoinHandle<()>>,
    /// What the writer sends, in order.
    out: mpsc::UnboundedSender<Out>,
    /// A close frame that goes before everything queued for the writer.
    abort: Option<oneshot::Sender<CloseFrame>>,
    /// `cancel` lines for the runner's stdin, written between client frames.
    cancels: mpsc::UnboundedSender<Vec<u8>>,
}

impl Pumps {
    /// Starts the tasks that move frames and lines between the client and the runner.
    fn start(
        ws: Ws,
        stdin: ChildStdin,
        stdout: ChildStdout,
        activity: &Shared,
        limits: Limits,
        metrics: Arc<Metrics>,
    ) -> Pumps {
        let (sink, stream) = ws.split();
        let (cancel_tx, cancel_rx) = mpsc::unbounded_channel::<Vec<u8>>();
        let queued = Arc::new(AtomicUsize::new(0));
        let (out_tx, out_rx) = mpsc::unbounded_channel::<Out>();
        let (abort_tx, abort_rx) = oneshot::channel::<CloseFrame>();
        let writer = tokio::spawn(write(sink, out_rx, abort_rx, queued.clone()));
        let inbound = tokio::spawn(read_client(
            stream,
            stdin,
            activity.clone(),
            limits.max_message_bytes,
            cancel_rx,
        ));
        let bound = outbound_bound(limits.max_message_bytes);
        let outbound = tokio::spawn(read_runner(
            stdout,
            out_tx.clone(),
            queued,
            bound,
            activity.clone(),
            metrics,
        ));
        Pumps {
            inbound: Some(inbound),
            outbound: Some(outbound),
            writer: Some(writer),
            out: out_tx,
            abort: Some(abort_tx),
            cancels: cancel_tx,
        }
    }

    /// Waits for what ends the session: a task that ends, the idle timeout, or the
    /// supervisor's drain. Also says whether the drain cancelled executions in flight.
    async fn wait_for_end(
        &mut self,
        activity: &Shared,
        phase: &mut watch::Receiver<Phase>,
        idle: Duration,
        peer: SocketAddr,
    ) -> (End, bool) {
        let mut phase_open = true;
        let mut cancelled_at: Option<Instant> = None;
        let end = loop {
            let now_phase = *phase.borrow_and_update();
            if let Some(end) = self.drain(now_phase, activity, &mut cancelled_at, peer) {
                break end;
            }
            let deadline = {
                let a = lock(activity);
                if a.in_flight > 0 {
                    Instant::now() + idle
                } else {
                    a.last + idle
                }
            };
            tokio::select! {
                r = self.inbound.as_mut().expect("running") => {
                    self.inbound = None;
                    break End::Client(r.unwrap_or_else(|e| FromClient::Gone(format!("reader failed: {e}"))));
                }
                r = self.outbound.as_mut().expect("running") => {
                    self.outbound = None;
                    break End::Runner(r.unwrap_or(FromRunner::Eof));
                }
                _ = self.writer.as_mut().expect("running") => {
                    self.writer = None;
                    break End::WriteFailed;
                }
                () = tokio::time::sleep_until(deadline.into()) => {
                    let a = lock(activity);
                    if a.in_flight == 0 && a.last.elapsed() >= idle {
                        break End::Idle;
                    }
                }
                changed = phase.changed(), if phase_open => {
                    phase_open = changed.is_ok();
                }
                () = tokio::time::sleep(DRAIN_TICK), if now_phase != Phase::Serving => {}
            }
        };
        (end, cancelled_at.is_some())
    }

    /// One look at the supervisor's drain: the session ends once nothing is in flight; past
    /// the drain timeout ([`Phase::Cancelling`]) the executions in flight are cancelled once
    /// (`cancelled_at` records when), and the session ends [`CANCEL_GRACE`] later regardless.
    fn drain(
        &self,
        phase: Phase,
        activity: &Shared,
        cancelled_at: &mut Option<Instant>,
        peer: SocketAddr,
    ) -> Option<End> {
        if phase == Phase::Serving {
            return None;
        }
        let a = lock(activity);
        if a.in_flight == 0 {
            return Some(End::Drained);
        }
        if phase == Phase::Cancelling {
            match *cancelled_at {
                None => {
                    *cancelled_at = Some(Instant::now());
                    tracing::info!(%peer, executions = ?a.ids, "drain timeout: cancelling the executions in flight");
                    for id in &a.ids {
                        let line = serde_json::json!({"type": "cancel", "id": id});
                        let _ = self.cancels.send(format!("{line}\n").into_bytes());
                    }
                }
                Some(at) if at.elapsed() >= CANCEL_GRACE => return Some(End::Drained),
                Some(_) => {}
            }
        }
        None
    }

    /// Queues the close frame that says why the session ended.
    fn send_close(&self, code: CloseCode, reason: String) {
        let _ = self.out.send(Out::Close(Some(CloseFrame {
            code,
            reason: reason.into(),
        })));
    }

    /// Ends the session the way `end` calls for: tells the client why (a close frame, or
    /// none when it left), and lets the runner exit (or kills it); returns its exit status.
    async fn end(
        &mut self,
        end: End,
        child: RunnerChild,
        limits: Limits,
        bound: usize,
    ) -> io::Result<ExitStatus> {
        let pid = child.pid();
        match end {
            End::Client(FromClient::Gone(why)) => {
                tracing::debug!(?pid, "session ended by the client: {why}");
                let _ = self.out.send(Out::Close(None));
                child.finish(EXIT_GRACE).await
            }
            End::Client(FromClient::TooBig(why)) => {
                tracing::debug!(?pid, "closing the session: {why}");
                let limit = limits.max_message_bytes;
                self.send_close(
                    CloseCode::Size,
                    format!("frame over the message limit ({limit} bytes + 4 KiB)"),
                );
                child.finish(EXIT_GRACE).await
            }
            End::Client(FromClient::StdinClosed) | End::Runner(FromRunner::Eof) => {
                // Flush its last lines (the watchdog's `done`), then say why the session ended.
                if let Some(reader) = self.outbound.take() {
                    let _ = tokio::time::timeout(EXIT_GRACE, reader).await;
                }
                let status = child.finish(EXIT_GRACE).await;
                let (code, reason) = ended_by_runner(&status);
                self.send_close(code, reason);
                status
            }
            End::Runner(FromRunner::Overflow(bytes)) => {
                tracing::warn!(?pid, "closing a session whose client does not read: {bytes} bytes of output waiting (bound {bound})");
                if let Some(abort) = self.abort.take() {
                    let _ = abort.send(CloseFrame {
                        code: CloseCode::Policy,
                        reason: format!("client too slow: over {bound} bytes of output waiting")
                            .into(),
                    });
                }
                child.kill().await
            }
            End::Idle => {
                tracing::debug!(?pid, "closing an idle session");
                self.send_close(
                    CloseCode::Away,
                    format!(
                        "idle: no execution and no message for {} ms",
                        limits.idle_timeout.as_millis()
                    ),
                );
                stop(&mut self.inbound).await;
                child.finish(EXIT_GRACE).await
            }
            End::WriteFailed => {
                tracing::debug!(?pid, "session ended: cannot write to the client");
                stop(&mut self.inbound).await;
                child.finish(EXIT_GRACE).await
            }
            End::Drained => {
                tracing::debug!(?pid, "closing a session: the runner is shutting down");
                self.send_close(CloseCode::Away, "runner shutting down".into());
                stop(&mut self.inbound).await;
                child.finish(EXIT_GRACE).await
            }
        }
    }

    /// Stops the readers and lets the writer send what is queued and the close frame, for
    /// at most twice [`CLOSE_GRACE`].
    async fn shut_down(self) {
        let Pumps {
            mut inbound,
            mut outbound,
            writer,
            out,
            abort,
            cancels,
        } = self;
        drop(out);
        stop(&mut inbound).await;
        stop(&mut outbound).await;
        if let Some(mut w) = writer {
            if tokio::time::timeout(CLOSE_GRACE * 2, &mut w).await.is_err() {
                w.abort();
                let _ = w.await;
            }
        }
        drop((abort, cancels));
    }
}

impl End {
    /// How the session ended, for its log line; `cancelled`: the drain cancelled executions.
    fn summary(&self, cancelled: bool) -> &'static str {
        match self {
            End::Client(FromClient::Gone(_)) => "client closed",
            End::Client(FromClient::TooBig(_)) => "frame too large",
            End::Client(FromClient::StdinClosed) | End::Runner(FromRunner::Eof) => "runner exited",
            End::Runner(FromRunner::Overflow(_)) => "client too slow",
            End::WriteFailed => "write failed",
            End::Idle => "idle",
            End::Drained if cancelled => "drained, executions cancelled",
            End::Drained => "drained",
        }
    }
}

async fn stop<T>(task: &mut Option<JoinHandle<T>>) {
    if let Some(task) = task.take() {
        task.abort();
        let _ = task.await;
    }
}

/// The close frame after the runner ended on its own.
fn ended_by_runner(status: &io::Result<ExitStatus>) -> (CloseCode, String) {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Ok(s) if s.code() == Some(crate::stdio::WATCHDOG_EXIT_CODE) => (
            CloseCode::Error,
            "session ended: an execution did not stop at its deadline (watchdog)".into(),
        ),
        Ok(s) if s.success() => (CloseCode::Normal, "session ended by the runner".into()),
        Ok(s) => match s.signal() {
            Some(signal) => (
                CloseCode::Error,
                format!("runner process killed by signal {signal}"),
            ),
            None => (
                CloseCode::Error,
                format!(
                    "runner process exited with status {}",
                    s.code().unwrap_or(-1)
                ),
            ),
        },
        Err(e) => (CloseCode::Error, format!("runner process lost: {e}")),
    }
}

/// Client frames to runner lines. Each frame is one line: its raw `\n` and `\r` (JSON
/// whitespace, or invalid inside a string anyway) become spaces. Binary frames are text too.
async fn read_client(
    mut stream: SplitStream<Ws>,
    mut stdin: ChildStdin,
    activity: Shared,
    max_message_bytes: usize,
    mut cancels: mpsc::UnboundedReceiver<Vec<u8>>,
) -> FromClient {
    loop {
        let next = tokio::select! {
            next = stream.next() => next,
            Some(cancel) = cancels.recv() => {
                if stdin.write_all(&cancel).await.is_err() {
                    return FromClient::StdinClosed;
                }
                continue;
            }
        };
        let frame = match next {
            None => return FromClient::Gone("connection closed".into()),
            Some(Err(WsError::Capacity(e))) => {
                return FromClient::TooBig(format!(
                    "{e} (limit {max_message_bytes} + {PEEK_BYTES})"
                ))
            }
            Some(Err(e)) => return FromClient::Gone(format!("read failed: {e}")),
            Some(Ok(frame)) => frame,
        };
        let mut line: Vec<u8> = match frame {
            Frame::Text(text) => Vec::from(bytes_of(text)),
            Frame::Binary(bytes) => Vec::from(bytes),
            Frame::Close(_) => return FromClient::Gone("the client closed the session".into()),
            Frame::Ping(_) | Frame::Pong(_) | Frame::Frame(_) => {
                lock(&activity).last = Instant::now();
                continue;
            }
        };
        for b in &mut line {
            if *b == b'\n' || *b == b'\r' {
                *b = b' ';
            }
        }
        // What the runner will make of this very line, by the rules it reads it with: an
        // execute it owes a `done` is in flight until that `done`; anything it drops is not.
        let answered = answered_execute(&line, max_message_bytes);
        {
            let mut a = lock(&activity);
            a.last = Instant::now();
            if let Some(id) = answered {
                a.in_flight += 1;
                a.ids.push(id);
            }
        }
        line.push(b'\n');
        // Waits while the runner does not read: the client is slowed, nothing piles up here.
        if stdin.write_all(&line).await.is_err() {
            return FromClient::StdinClosed;
        }
    }
}

fn bytes_of(
    text: tokio_tungstenite::tungstenite::Utf8Bytes,
) -> tokio_tungstenite::tungstenite::Bytes {
    text.into()
}

/// Runner lines to the writer, counting the bytes waiting for the client. Reads on whatever
/// the client does, so the runner never blocks on a full pipe; past `bound` it gives up.
async fn read_runner(
    mut stdout: ChildStdout,
    out: mpsc::UnboundedSender<Out>,
    queued: Arc<AtomicUsize>,
    bound: usize,
    activity: Shared,
    metrics: Arc<Metrics>,
) -> FromRunner {
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match stdout.read(&mut buf).await {
            Ok(0) | Err(_) => return FromRunner::Eof,
            Ok(n) => n,
        };
        let mut search = pending.len();
        pending.extend_from_slice(&buf[..n]);
        let mut start = 0;
        while let Some(pos) = pending[search..].iter().position(|&b| b == b'\n') {
            let end = search + pos;
            let line = &pending[start..end];
            start = end + 1;
            search = start;
            if line.is_empty() {
                continue;
            }
            let envelope = peek_envelope(&line[..PEEK_BYTES.min(line.len())]);
            let done = envelope.kind.as_deref() == Some("done");
            if done {
                metrics.done(line);
            } else if envelope.kind.as_deref() == Some("tool_call") {
                metrics.tool_call();
            }
            let text = String::from_utf8_lossy(line).into_owned();
            let waiting = queued.fetch_add(text.len(), Ordering::SeqCst) + text.len();
            if waiting > bound {
                return FromRunner::Overflow(waiting);
            }
            // A closed channel means the session is ending; keep draining until it does.
            let _ = out.send(Out::Line(text));
            // Only once the line is queued: a draining session closes when nothing is in
            // flight, and its close frame must follow this `done`.
            if done {
                let mut a = lock(&activity);
                a.in_flight = a.in_flight.saturating_sub(1);
                a.executions += 1;
                a.last = Instant::now();
                if let Some(id) = envelope.id {
                    if let Some(i) = a.ids.iter().position(|x| *x == id) {
                        a.ids.swap_remove(i);
                    }
                }
            }
        }
        pending.drain(..start);
        let waiting = queued.load(Ordering::SeqCst) + pending.len();
        if waiting > bound {
            return FromRunner::Overflow(waiting);
        }
    }
}

/// Sends lines as text frames, then a close frame. An abort (a close frame) goes first,
/// even while a frame is blocked on a client that does not read.
async fn write(
    mut sink: SplitSink<Ws, Frame>,
    mut out: mpsc::UnboundedReceiver<Out>,
    mut abort: oneshot::Receiver<CloseFrame>,
    queued: Arc<AtomicUsize>,
) {
    loop {
        let next = tokio::select! {
            biased;
            Ok(frame) = &mut abort => return close(&mut sink, Some(frame)).await,
            next = out.recv() => next,
        };
        match next {
            Some(Out::Line(text)) => {
                let len = text.len();
                let sent = tokio::select! {
                    biased;
                    Ok(frame) = &mut abort => return close(&mut sink, Some(frame)).await,
                    sent = sink.send(Frame::text(text)) => sent,
                };
                queued.fetch_sub(len, Ordering::SeqCst);
                if sent.is_err() {
                    return;
                }
            }
            Some(Out::Close(frame)) => return close(&mut sink, frame).await,
            None => return close(&mut sink, None).await,
        }
    }
}

async fn close(sink: &mut SplitSink<Ws, Frame>, frame: Option<CloseFrame>) {
    let _ = tokio::time::timeout(CLOSE_GRACE, async {
        if frame.is_some() {
            let _ = sink.send(Frame::Close(frame)).await;
        }
        let _ = sink.close().await;
    })
    .await;
}
