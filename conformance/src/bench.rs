//! The benchmark driver: times any runner's round trips over stdio or WebSocket, with little overhead of its own.
//!
//! [`run_bench`] measures four things through one sequential driver:
//!
//! - the trivial execution round trip: `execute` of `1 + 1` on a warm runner, to its `done`;
//! - the tool call round trip: from sending a `tool_result` to receiving the next `tool_call`,
//!   in a loop of sequential awaited calls of `t.echo`;
//! - executions per second: the trivial loop's count over its wall time (one runner, sequential);
//! - spawn to first `done` (stdio: spawn the command, send one `execute`, read its `done`), or
//!   connect to first `done` over WebSocket.
//!
//! The driver's own cost is kept small: over stdio it writes each line with one `write` on the
//! runner's stdin and reads lines with a `BufReader` on the same thread (no channels, no thread
//! hops); messages are decoded into a borrowed struct; nothing sleeps. A watchdog thread kills a
//! runner that stays silent past [`BenchOptions::recv_timeout`], so a hung runner is an error
//! instead of a hang.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::{self, BufRead, BufReader, Write};
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::json::{preview, PREVIEW_CHARS};
use crate::transport::{connect_ws, drain_into, Connection, Received, Tail, WsConnection};

/// The `timeoutMs` of every benchmark execution: long enough for thousands of slow tool calls.
const EXECUTION_TIMEOUT_MS: u64 = 600_000;
/// How often the watchdog looks at a stdio runner.
const WATCHDOG_TICK: Duration = Duration::from_millis(50);
/// How long a failed runner's stderr is read for the error message.
const STDERR_GRACE: Duration = Duration::from_millis(500);

/// Which runner to benchmark.
#[derive(Debug, Clone)]
pub enum BenchTarget {
    /// Spawn this command (program and arguments) and speak NDJSON over its stdio.
    Stdio(Vec<String>),
    /// Connect to a runner serving WebSocket at `url`.
    Ws {
        /// `ws://HOST:PORT[/PATH]`.
        url: String,
        /// Sent as `Authorization: Bearer TOKEN` on every connection when set.
        token: Option<String>,
    },
}

/// How much to measure. [`Default`] is the full run; [`BenchOptions::quick`] a smoke test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BenchOptions {
    /// Measured trivial executions (after the warm-up). Default 5000.
    pub executions: usize,
    /// Measured tool call round trips (after the warm-up). Default 5000.
    pub tool_calls: usize,
    /// Unmeasured executions, and unmeasured tool calls, before each loop. Default 200.
    pub warmup: usize,
    /// Measured spawns (or connections) to first `done`. Default 50.
    pub spawns: usize,
    /// Longest wait for any one runner message before giving up. Default 10 s.
    pub recv_timeout: Duration,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            executions: 5000,
            tool_calls: 5000,
            warmup: 200,
            spawns: 50,
            recv_timeout: Duration::from_secs(10),
        }
    }
}

impl BenchOptions {
    /// Small counts for smoke tests: 200 executions and tool calls, 20 warm-up, 5 spawns.
    pub fn quick() -> BenchOptions {
        BenchOptions {
            executions: 200,
            tool_calls: 200,
            warmup: 20,
            spawns: 5,
            ..BenchOptions::default()
        }
    }
}

/// The median and 99th percentile of a set of samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Percentiles {
    /// 50th percentile.
    pub p50: Duration,
    /// 99th percentile.
    pub p99: Duration,
}

impl Percentiles {
    fn of(samples: &mut [Duration]) -> Percentiles {
        samples.sort_unstable();
        let at = |p: f64| samples[((samples.len() - 1) as f64 * p).round() as usize];
        Percentiles {
            p50: at(0.5),
            p99: at(0.99),
        }
    }
}

/// What [`run_bench`] measured.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchReport {
    /// `stdio` or `WebSocket`.
    pub transport: &'static str,
    /// What ran: the command line, or the URL.
    pub target: String,
    /// The options the run used.
    pub options: BenchOptions,
    /// `execute` of `1 + 1` to its `done`, warm runner.
    pub trivial: Percentiles,
    /// `tool_result` sent to the next `tool_call` received.
    pub tool_call: Percentiles,
    /// Sequential trivial executions per second on one runner.
    pub exec_per_s: f64,
    /// Spawn (stdio) or connect (WebSocket) to the first `done`.
    pub first_done: Percentiles,
}

impl BenchReport {
    /// What the last row measures: `spawn to first done` or `connect to first done`.
    pub fn first_done_label(&self) -> &'static str {
        if self.transport == "stdio" {
            "spawn to first `done`"
        } else {
            "connect to first `done`"
        }
    }

    /// One JSON object with exactly the keys `trivial_p50_us`, `trivial_p99_us`,
    /// `tool_call_p50_us`, `tool_call_p99_us`, `exec_per_s` and `spawn_to_first_done_ms` (the
    /// p50; over WebSocket it is connect to first `done`).
    pub fn to_json(&self) -> String {
        let us = |d: Duration| round(d.as_secs_f64() * 1e6, 1);
        serde_json::json!({
            "trivial_p50_us": us(self.trivial.p50),
            "trivial_p99_us": us(self.trivial.p99),
            "tool_call_p50_us": us(self.tool_call.p50),
            "tool_call_p99_us": us(self.tool_call.p99),
            "exec_per_s": round(self.exec_per_s, 1),
            "spawn_to_first_done_ms": round(self.first_done.p50.as_secs_f64() * 1e3, 3),
        })
        .to_string()
    }

    /// A caption line, a blank line and a Markdown table of the four measures.
    pub fn to_markdown(&self) -> String {
        let o = &self.options;
        let mut out = format!(
            "{} runner `{}`: {} executions and {} tool calls after {} warm-up each, {} {}\n\n",
            self.transport,
            self.target,
            o.executions,
            o.tool_calls,
            o.warmup,
            o.spawns,
            if self.transport == "stdio" {
                "spawns"
            } else {
                "connections"
            },
        );
        out.push_str("| measure | p50 | p99 |\n|---|---|---|\n");
        let rows = [
            ("trivial execution round trip", self.trivial),
            ("tool call round trip", self.tool_call),
            (self.first_done_label(), self.first_done),
        ];
        for (name, p) in rows {
            let _ = writeln!(out, "| {name} | {} | {} |", human(p.p50), human(p.p99));
        }
        let _ = writeln!(
            out,
            "| executions per second, one runner | {}/s | |",
            thousands(self.exec_per_s.round() as u64)
        );
        out
    }
}

fn round(x: f64, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    (x * scale).round() / scale
}

/// `38 µs`, `0.24 ms`, `4.5 ms`, `190 ms`.
fn human(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1000.0 {
        format!("{us:.0} µs")
    } else if us < 10_000.0 {
        format!("{:.2} ms", us / 1e3)
    } else if us < 100_000.0 {
        format!("{:.1} ms", us / 1e3)
    } else {
        format!("{:.0} ms", us / 1e3)
    }
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let head = digits.len() % 3;
    let mut groups: Vec<&str> = Vec::new();
    if head > 0 {
        groups.push(&digits[..head]);
    }
    groups.extend(
        digits.as_bytes()[head..]
            .chunks(3)
            .map(|chunk| std::str::from_utf8(chunk).expect("ASCII digits")),
    );
    groups.join(",")
}

/// Why a benchmark could not finish.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The options cannot be run (a zero count, an empty command).
    #[error("invalid benchmark options: {0}")]
    Options(String),
    /// The runner could not be spawned or connected to.
    #[error("cannot start or reach the runner: {0}")]
    Start(String),
    /// The session broke: a send failed, the runner closed it, or it stayed silent.
    #[error("{0}")]
    Session(String),
    /// The runner sent a line that is not a JSON protocol message.
    #[error(
        "the runner sent something that is not a protocol message while {waiting} ({why}): {line}"
    )]
    Garbage {
        /// What the driver was waiting for.
        waiting: String,
        /// Why it is not a message.
        why: String,
        /// The line, cut to about 500 characters.
        line: String,
    },
    /// The runner sent a well-formed message that is wrong at that point (type, id, result).
    #[error("{0}")]
    Protocol(String),
}

impl BenchError {
    /// Appends the runner's stderr tail, when there is one, to the message.
    fn with_stderr(self, tail: Option<String>) -> BenchError {
        let Some(tail) = tail else { return self };
        let mut note = String::from("\nrunner stderr (tail):");
        for line in tail.lines() {
            note.push_str("\n  | ");
            note.push_str(line);
        }
        match self {
            BenchError::Options(m) => BenchError::Options(m + &note),
            BenchError::Start(m) => BenchError::Start(m + &note),
            BenchError::Session(m) => BenchError::Session(m + &note),
            BenchError::Protocol(m) => BenchError::Protocol(m + &note),
            BenchError::Garbage { waiting, why, line } => BenchError::Garbage {
                waiting,
                why: why + &note,
                line,
            },
        }
    }
}

/// Runs the whole benchmark against `target` and returns what it measured.
///
/// Phases, in order: the trivial loop and the tool call loop on one warm session, then
/// `spawns` fresh sessions to their first `done`. Every `done` is checked (id, `ok`, result),
/// so a runner that answers wrongly is an error, not a fast figure.
pub fn run_bench(target: &BenchTarget, options: &BenchOptions) -> Result<BenchReport, BenchError> {
    if options.executions == 0 || options.tool_calls == 0 || options.spawns == 0 {
        return Err(BenchError::Options(
            "executions, tool calls and spawns must each be at least 1".into(),
        ));
    }
    match target {
        BenchTarget::Stdio(command) => {
            if command.is_empty() {
                return Err(BenchError::Options("the runner command is empty".into()));
            }
            let watchdog = Watchdog::start(options.recv_timeout);
            let opener = || StdioLink::spawn(command, &watchdog);
            measure(
                "stdio",
                shell_words::join(command),
                options,
                opener,
                |link| link.failure_notes(),
            )
        }
        BenchTarget::Ws { url, token } => {
            let opener = || WsLink::connect(url, token.as_deref(), options.recv_timeout);
            measure("WebSocket", url.clone(), options, opener, |_| None)
        }
    }
}

fn measure<L: Link>(
    transport: &'static str,
    target: String,
    options: &BenchOptions,
    open: impl Fn() -> Result<L, BenchError>,
    notes: impl Fn(&mut L) -> Option<String>,
) -> Result<BenchReport, BenchError> {
    let mut driver = Driver::new();

    let mut warm = open()?;
    warm.settle();
    let (trivial, exec_per_s) = driver
        .trivial_loop(&mut warm, options)
        .map_err(|e| e.with_stderr(notes(&mut warm)))?;
    let tool_call = driver
        .tool_call_loop(&mut warm, options)
        .map_err(|e| e.with_stderr(notes(&mut warm)))?;
    drop(warm);

    let mut samples = Vec::with_capacity(options.spawns);
    for i in 0..options.spawns {
        let start = Instant::now();
        let mut link = open()?;
        let id = driver.execute_trivial(&mut link, i);
        let outcome = id.and_then(|()| driver.await_trivial_done(&mut link, i));
        let elapsed = start.elapsed();
        outcome.map_err(|e| e.with_stderr(notes(&mut link)))?;
        samples.push(elapsed);
    }

    Ok(BenchReport {
        transport,
        target,
        options: options.clone(),
        trivial,
        tool_call,
        exec_per_s,
        first_done: Percentiles::of(&mut samples),
    })
}

/// A runner message, decoded without copying what the driver does not need.
#[derive(Deserialize)]
struct Msg<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(rename = "callId", default, borrow)]
    call_id: Option<Cow<'a, str>>,
    #[serde(rename = "providerName", default, borrow)]
    provider_name: Option<Cow<'a, str>>,
    #[serde(rename = "safeToolName", default, borrow)]
    safe_tool_name: Option<Cow<'a, str>>,
    #[serde(default)]
    ok: Option<bool>,
    #[serde(default, borrow)]
    input: Option<&'a RawValue>,
    #[serde(default, borrow)]
    result: Option<&'a RawValue>,
    #[serde(default, borrow)]
    error: Option<&'a RawValue>,
}

fn decode<'a>(line: &'a str, waiting: &str) -> Result<Msg<'a>, BenchError> {
    serde_json::from_str(line).map_err(|e| BenchError::Garbage {
        waiting: waiting.to_string(),
        why: e.to_string(),
        line: preview(line, PREVIEW_CHARS),
    })
}

/// Builds the messages the driver sends into reused buffers.
struct Driver {
    line: String,
}

/// The one provider every benchmark execution declares: `t.echo`.
const PROVIDERS: &str = r#"[{"name":"t","tools":{"echo":{"safeName":"echo","originalName":"echo","description":"Returns its input"}},"types":"declare namespace t { function echo(input: unknown): Promise<unknown>; }"}]"#;

impl Driver {
    fn new() -> Driver {
        Driver {
            line: String::with_capacity(512),
        }
    }

    fn execute(&mut self, link: &mut impl Link, id: usize, code: &str) -> Result<(), BenchError> {
        self.line.clear();
        let _ = write!(
            self.line,
            r#"{{"type":"execute","id":"b{id}","code":{},"options":{{"timeoutMs":{EXECUTION_TIMEOUT_MS},"memoryLimitBytes":67108864,"maxLogLines":100,"maxLogChars":64000}},"providers":{PROVIDERS}}}"#,
            serde_json::Value::from(code)
        );
        link.send(&self.line)
    }

    fn execute_trivial(&mut self, link: &mut impl Link, id: usize) -> Result<(), BenchError> {
        self.execute(link, id, "1 + 1")
    }

    /// Reads `started` and then `done` of `b{id}`, which must be `ok` with the result 2.
    fn await_trivial_done(&mut self, link: &mut impl Link, id: usize) -> Result<(), BenchError> {
        expect_started(link, id)?;
        let waiting = "waiting for the done of `1 + 1`";
        let line = link.recv(waiting)?;
        let msg = decode(line, waiting)?;
        check_done(&msg, id, line, |raw| {
            raw.get().trim().parse::<f64>().ok() == Some(2.0)
        })
    }

    /// Warm-up, then the measured trivial loop; returns its percentiles and executions per second.
    fn trivial_loop(
        &mut self,
        link: &mut impl Link,
        options: &BenchOptions,
    ) -> Result<(Percentiles, f64), BenchError> {
        for i in 0..options.warmup {
            self.execute_trivial(link, i)?;
            self.await_trivial_done(link, i)?;
        }
        let mut samples = Vec::with_capacity(options.executions);
        let wall = Instant::now();
        for i in options.warmup..options.warmup + options.executions {
            let start = Instant::now();
            self.execute_trivial(link, i)?;
            self.await_trivial_done(link, i)?;
            samples.push(start.elapsed());
        }
        let per_s = options.executions as f64 / wall.elapsed().as_secs_f64();
        Ok((Percentiles::of(&mut samples), per_s))
    }

    /// One execution awaiting `t.echo(i)` in sequence; times each `tool_result` to the next `tool_call`.
    fn tool_call_loop(
        &mut self,
        link: &mut impl Link,
        options: &BenchOptions,
    ) -> Result<Percentiles, BenchError> {
        // One more call than samples: the answer to the last call is followed by `done`.
        let calls = options.warmup + options.tool_calls + 1;
        let id = usize::MAX;
        let code = format!("let s = 0; for (let i = 0; i < {calls}; i++) s += await t.echo(i); s");
        self.execute(link, id, &code)?;
        expect_started(link, id)?;
        let mut samples = Vec::with_capacity(options.tool_calls);
        let waiting = "waiting for the first tool_call of t.echo";
        let line = link.recv(waiting)?;
        self.answer(line, waiting, 0)?;
        for n in 1..calls {
            let start = Instant::now();
            link.send(&self.line)?;
            let waiting = "waiting for the next tool_call of t.echo";
            let line = link.recv(waiting)?;
            let elapsed = start.elapsed();
            self.answer(line, waiting, n)?;
            if n > options.warmup {
                samples.push(elapsed);
            }
        }
        link.send(&self.line)?;
        let waiting = "waiting for the done of the tool call loop";
        let line = link.recv(waiting)?;
        let msg = decode(line, waiting)?;
        let sum = (calls as u64 * (calls as u64 - 1) / 2) as f64;
        check_done(&msg, id, line, |raw| {
            raw.get().trim().parse::<f64>().ok() == Some(sum)
        })?;
        Ok(Percentiles::of(&mut samples))
    }

    /// Checks that `line` is the `n`th call of `t.echo` and puts its answer, the input echoed, in `self.line`.
    fn answer(&mut self, line: &str, waiting: &str, n: usize) -> Result<(), BenchError> {
        let msg = decode(line, waiting)?;
        let is_echo = msg.kind == "tool_call"
            && msg.provider_name.as_deref() == Some("t")
            && msg.safe_tool_name.as_deref() == Some("echo");
        let (true, Some(call_id)) = (is_echo, &msg.call_id) else {
            return Err(unexpected(&format!("{waiting} (call {n})"), line));
        };
        self.line.clear();
        self.line.push_str(r#"{"type":"tool_result","callId":"#);
        match call_id {
            // A borrowed string had no escapes, so it can be written back as it was.
            Cow::Borrowed(id) => {
                self.line.push('"');
                self.line.push_str(id);
                self.line.push('"');
            }
            Cow::Owned(id) => self
                .line
                .push_str(&serde_json::Value::from(id.as_str()).to_string()),
        }
        self.line.push_str(r#","ok":true,"result":"#);
        self.line
            .push_str(msg.input.map_or("null", |input| input.get()));
        self.line.push('}');
        Ok(())
    }
}

fn expect_started(link: &mut impl Link, id: usize) -> Result<(), BenchError> {
    let waiting = "waiting for started";
    let line = link.recv(waiting)?;
    let msg = decode(line, waiting)?;
    if msg.kind == "started" && msg.id.as_deref() == Some(exec_id(id).as_str()) {
        Ok(())
    } else {
        Err(unexpected(&format!("{waiting} of b{id}"), line))
    }
}

fn check_done(
    msg: &Msg<'_>,
    id: usize,
    line: &str,
    result_ok: impl Fn(&RawValue) -> bool,
) -> Result<(), BenchError> {
    if msg.kind != "done" || msg.id.as_deref() != Some(exec_id(id).as_str()) {
        return Err(unexpected(&format!("waiting for the done of b{id}"), line));
    }
    if msg.ok != Some(true) {
        let error = msg.error.map_or("no error", |e| e.get());
        return Err(BenchError::Protocol(format!(
            "the execution b{id} failed where it must succeed: {}",
            preview(error, PREVIEW_CHARS)
        )));
    }
    match msg.result {
        Some(result) if result_ok(result) => Ok(()),
        _ => Err(BenchError::Protocol(format!(
            "the done of b{id} has the wrong result: {}",
            preview(line, PREVIEW_CHARS)
        ))),
    }
}

fn exec_id(id: usize) -> String {
    format!("b{id}")
}

fn unexpected(waiting: &str, line: &str) -> BenchError {
    BenchError::Protocol(format!(
        "unexpected message while {waiting}: {}",
        preview(line, PREVIEW_CHARS)
    ))
}

/// One session with a runner, as the driver sees it.
trait Link {
    /// Sends one message (without its newline).
    fn send(&mut self, text: &str) -> Result<(), BenchError>;
    /// The next message; `waiting` says what for, in errors.
    fn recv(&mut self, waiting: &str) -> Result<&str, BenchError>;
    /// Lets a fresh long-lived session set up what the spawn loop leaves out of its timing.
    fn settle(&mut self) {}
}

/// Kills the current stdio runner when it sends nothing for too long.
struct Watchdog {
    timeout: Duration,
    shared: Arc<Watched>,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

struct Watched {
    /// Bumped by the driver on every message and every new child.
    progress: AtomicU64,
    /// The runner currently being driven.
    child: Mutex<Option<Child>>,
    /// Set when the watchdog killed a silent runner.
    fired: AtomicBool,
}

impl Watchdog {
    fn start(timeout: Duration) -> Watchdog {
        let shared = Arc::new(Watched {
            progress: AtomicU64::new(0),
            child: Mutex::new(None),
            fired: AtomicBool::new(false),
        });
        let (stop, stopped) = mpsc::channel::<()>();
        let watched = Arc::clone(&shared);
        let thread = thread::spawn(move || {
            let mut seen = (watched.progress.load(Ordering::Relaxed), Instant::now());
            while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(WATCHDOG_TICK) {
                let now = watched.progress.load(Ordering::Relaxed);
                if now != seen.0 {
                    seen = (now, Instant::now());
                } else if seen.1.elapsed() >= timeout {
                    if let Some(child) = lock(&watched.child).as_mut() {
                        watched.fired.store(true, Ordering::Relaxed);
                        let _ = child.kill();
                    }
                    seen.1 = Instant::now();
                }
            }
        });
        Watchdog {
            timeout,
            shared,
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// A spawned runner driven on the caller's thread: one `write` per line, a `BufReader` for lines.
struct StdioLink {
    watched: Arc<Watched>,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// The pipe, until a thread drains it into `tail`.
    stderr: Option<ChildStderr>,
    tail: Arc<Mutex<Tail>>,
    drained: Option<mpsc::Receiver<()>>,
    out: Vec<u8>,
    line: String,
    timeout: Duration,
}

impl StdioLink {
    fn spawn(command: &[String], watchdog: &Watchdog) -> Result<StdioLink, BenchError> {
        let (program, args) = command
            .split_first()
            .ok_or_else(|| BenchError::Options("the runner command is empty".into()))?;
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| BenchError::Start(format!("cannot spawn {program:?}: {e}")))?;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let stderr = child.stderr.take();
        let watched = Arc::clone(&watchdog.shared);
        *lock(&watched.child) = Some(child);
        watched.fired.store(false, Ordering::Relaxed);
        watched.progress.fetch_add(1, Ordering::Relaxed);
        Ok(StdioLink {
            watched,
            stdin: Some(stdin),
            stdout,
            stderr,
            tail: Tail::shared(),
            drained: None,
            out: Vec::with_capacity(512),
            line: String::with_capacity(512),
            timeout: watchdog.timeout,
        })
    }

    /// Starts draining stderr into the tail, so a chatty runner never blocks on a full pipe.
    fn drain_stderr(&mut self) {
        if let Some(stderr) = self.stderr.take() {
            let (done, drained) = mpsc::channel();
            let tail = Arc::clone(&self.tail);
            thread::spawn(move || {
                drain_into(stderr, &tail);
                let _ = done.send(());
            });
            self.drained = Some(drained);
        }
    }

    /// Says whether the runner exited, waiting for it briefly (error paths only).
    fn exit_note(&self) -> String {
        let deadline = Instant::now() + STDERR_GRACE;
        loop {
            let status = match lock(&self.watched.child).as_mut() {
                Some(child) => child.try_wait(),
                None => return "it is gone".into(),
            };
            match status {
                Ok(Some(status)) => return format!("it exited ({status})"),
                Ok(None) if Instant::now() < deadline => thread::sleep(WATCHDOG_TICK / 10),
                Ok(None) => return "it is still running".into(),
                Err(e) => return format!("it cannot be waited for: {e}"),
            }
        }
    }

    /// Ends the runner and returns the last lines of its stderr.
    fn failure_notes(&mut self) -> Option<String> {
        self.stdin = None;
        if let Some(child) = lock(&self.watched.child).as_mut() {
            let _ = child.kill();
        }
        self.drain_stderr();
        if let Some(drained) = &self.drained {
            let _ = drained.recv_timeout(STDERR_GRACE);
        }
        lock(&self.tail).lines()
    }
}

impl Link for StdioLink {
    fn send(&mut self, text: &str) -> Result<(), BenchError> {
        self.out.clear();
        self.out.extend_from_slice(text.as_bytes());
        self.out.push(b'\n');
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| BenchError::Session("the runner's stdin is closed".into()))?;
        match stdin.write_all(&self.out) {
            Ok(()) => Ok(()),
            Err(e) => Err(BenchError::Session(format!(
                "cannot write to the runner's stdin ({e}); {}",
                self.exit_note()
            ))),
        }
    }

    fn recv(&mut self, waiting: &str) -> Result<&str, BenchError> {
        loop {
            self.line.clear();
            let read = self.stdout.read_line(&mut self.line);
            self.watched.progress.fetch_add(1, Ordering::Relaxed);
            match read {
                Ok(0) if self.watched.fired.load(Ordering::Relaxed) => {
                    return Err(BenchError::Session(format!(
                        "no message within {} ms while {waiting}; the runner was killed",
                        self.timeout.as_millis()
                    )))
                }
                Ok(0) => {
                    return Err(BenchError::Session(format!(
                        "the runner closed its stdout while {waiting}; {}",
                        self.exit_note()
                    )))
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                    return Err(BenchError::Garbage {
                        waiting: waiting.to_string(),
                        why: "not UTF-8".into(),
                        line: String::new(),
                    })
                }
                Err(e) => {
                    return Err(BenchError::Session(format!(
                        "reading the runner's stdout failed while {waiting}: {e}"
                    )))
                }
            }
            let end = self.line.trim_end_matches(['\n', '\r']).len();
            self.line.truncate(end);
            if !self.line.trim().is_empty() {
                return Ok(&self.line);
            }
        }
    }

    fn settle(&mut self) {
        self.drain_stderr();
    }
}

impl Drop for StdioLink {
    fn drop(&mut self) {
        self.stdin = None;
        if let Some(mut child) = lock(&self.watched.child).take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A WebSocket session, through the kit's own client.
struct WsLink {
    conn: WsConnection,
    timeout: Duration,
    line: String,
}

impl WsLink {
    fn connect(url: &str, token: Option<&str>, timeout: Duration) -> Result<WsLink, BenchError> {
        let conn = connect_ws(url, token)
            .map_err(|e| BenchError::Start(format!("cannot connect to {url}: {e}")))?;
        Ok(WsLink {
            conn,
            timeout,
            line: String::new(),
        })
    }
}

impl Link for WsLink {
    fn send(&mut self, text: &str) -> Result<(), BenchError> {
        self.conn
            .send(text)
            .map_err(|e| BenchError::Session(format!("cannot send: {e}")))
    }

    fn recv(&mut self, waiting: &str) -> Result<&str, BenchError> {
        match self.conn.recv(self.timeout) {
            Received::Message(text) => {
                self.line = text;
                Ok(&self.line)
            }
            Received::Timeout => Err(BenchError::Session(format!(
                "no message within {} ms while {waiting}",
                self.timeout.as_millis()
            ))),
            Received::Closed(why) => Err(BenchError::Session(format!("{why} while {waiting}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_the_nearest_rank() {
        let mut samples: Vec<Duration> = (1..=100).rev().map(Duration::from_micros).collect();
        let p = Percentiles::of(&mut samples);
        assert_eq!(p.p50, Duration::from_micros(51));
        assert_eq!(p.p99, Duration::from_micros(99));
    }

    #[test]
    fn figures_are_printed_for_people() {
        assert_eq!(human(Duration::from_micros(38)), "38 µs");
        assert_eq!(human(Duration::from_micros(4500)), "4.50 ms");
        assert_eq!(human(Duration::from_millis(190)), "190 ms");
        assert_eq!(thousands(3987), "3,987");
        assert_eq!(thousands(439), "439");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn a_token_is_sent_as_a_bearer_authorization_header() {
        use std::io::Read;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("ws://{}/", listener.local_addr().unwrap());
        let server = thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut request = Vec::new();
            let mut byte = [0u8; 1];
            while !request.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap() == 1 {
                request.push(byte[0]);
            }
            String::from_utf8(request).unwrap()
        });
        // The stand-in server hangs up instead of answering, so the handshake fails.
        assert!(WsLink::connect(&url, Some("s3cret"), Duration::from_secs(5)).is_err());
        let request = server.join().unwrap().to_ascii_lowercase();
        assert!(
            request.contains("authorization: bearer s3cret\r\n"),
            "{request}"
        );
    }

    #[test]
    fn an_escaped_call_id_is_answered_escaped() {
        let mut driver = Driver::new();
        let line = r#"{"type":"tool_call","callId":"a\"b","providerName":"t","safeToolName":"echo","input":{"x":[1]}}"#;
        driver.answer(line, "waiting", 0).unwrap();
        assert_eq!(
            driver.line,
            r#"{"type":"tool_result","callId":"a\"b","ok":true,"result":{"x":[1]}}"#
        );
    }
}
