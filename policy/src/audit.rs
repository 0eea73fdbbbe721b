//! The audit log: one JSON line per event, appended and flushed before the caller goes on.
//!
//! Each line is one object:
//!
//! | field | presence | meaning |
//! |---|---|---|
//! | `ts` | always | when the event was recorded, RFC 3339 in UTC |
//! | `event` | always | `execution_started`, `execution_finished`, `tool_call_started`, `tool_call`, or for capabilities `capability_started`, `capability_stop_requested`, `capability_finished` |
//! | `execution_id` | always | the execution |
//! | `principal` | always | the principal's name, `null` without one |
//! | `capability` | `capability_*` | the capability's name |
//! | `tool` | `tool_call*` | `provider.tool`, as the guest called it |
//! | `original_tool` | `tool_call*` | the tool's own name, as its definition gives it (an MCP server's `delete-all`) |
//! | `call_id` | `tool_call*`, when the call has one | the runner's id of the call: pairs a `tool_call_started` line with its `tool_call` line |
//! | `outcome` | `tool_call`, `execution_finished`, `capability_finished`; `capability_started` when refused | `ok`, `denied`, `rate_limited`, `approval_denied`, `blocked`, `awaiting_approval`, or the error code; for `capability_finished` the terminal status (`completed`, `failed`, `timeout`, `stopped`) |
//! | `duration_ms` | `tool_call`, `execution_finished`, `capability_finished` | milliseconds, with microseconds as decimals |
//! | `input_sha256` | `tool_call*` | SHA-256 of the input as compact JSON, hex |
//! | `input` | with `include_input: true` | the input itself (off by default: inputs carry secrets) |
//! | `error` | when there is one | the error message |
//! | `rule` | `tool_call*`, when a policy rule decided the call | the rule (`rules[N]`, with its name) and what it decided: `{"name": "rules[0] (big)", "action": "approve"}` |
//!
//! The file is opened with `O_APPEND` (created with mode 0600), and each line is handed to
//! the kernel in a single `write(2)`: concurrent writers, in this process or others, never
//! interleave within a line. There is no buffer in between, so a line is out of the process
//! when [`AuditLog::record`] returns (it is not `fsync`ed: a power loss may lose the last
//! lines, a crash of the process does not). A write that fails, or writes less than the whole
//! line (a full disk), is an error: the caller fails the execution closed.
//!
//! In PostgreSQL ([`AuditLog::open_at`] with a `postgres://` URL), each event is instead one
//! row of `audit_events` (see `pg_store.rs`), committed before [`AuditLog::record`] returns:
//! its `line` column is the JSON line above, byte for byte, beside indexed columns. A row
//! that cannot be written is an error, as a failed write to the file is.
//!
//! A call that passed the policy's checks gets a `tool_call_started` line before it runs (if
//! that line cannot be written, the call does not run), and a `tool_call` line with its
//! outcome after. A refused call gets only its `tool_call` line.
//!
//! A write cut short leaves part of a line. It is ended with a line break at once if the file
//! takes one more byte; if not, the next line written to the file, by this process or
//! another, starts with the line break (a writer looks at the file's last byte first). A
//! reader therefore finds at most that one fragment unreadable, never two lines glued
//! together. Writers take turns for the look and the write: threads of a process by a mutex,
//! processes by an advisory lock (`flock`) on the file, held for one `write(2)`.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use execbox_protocol::ErrorCode;
use serde::Serialize;
use serde_json::Value;

use super::pg_store::{AuditRow, PolicyDb};
use super::{PolicyError, StoreLocation};

/// What happened, in an audit line's `outcome`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuditOutcome {
    /// The call or execution succeeded.
    Ok,
    /// The principal lacks a permission the tool requires.
    Denied,
    /// The call exceeded its rate limit.
    RateLimited,
    /// Approval was refused, or nobody could be asked.
    ApprovalDenied,
    /// A policy rule blocked the call.
    Blocked,
    /// The call or execution failed with this code.
    Error(ErrorCode),
    /// A capability execution ended with this status (`completed`, `failed`, ...).
    Status(&'static str),
}

impl AuditOutcome {
    /// The value of `outcome`.
    pub fn as_str(&self) -> &'static str {
        match self {
            AuditOutcome::Ok => "ok",
            AuditOutcome::Denied => "denied",
            AuditOutcome::RateLimited => "rate_limited",
            AuditOutcome::ApprovalDenied => "approval_denied",
            AuditOutcome::Blocked => "blocked",
            AuditOutcome::Error(code) => code.as_str(),
            AuditOutcome::Status(status) => status,
        }
    }
}

impl Serialize for AuditOutcome {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// One event to record; built with [`AuditEvent::execution_started`],
/// [`AuditEvent::execution_finished`] or [`AuditEvent::tool_call`].
#[derive(Clone, Debug)]
pub struct AuditEvent<'a> {
    event: &'static str,
    execution_id: &'a str,
    principal: Option<&'a str>,
    capability: Option<&'a str>,
    tool: Option<&'a str>,
    original_tool: Option<&'a str>,
    call_id: Option<&'a str>,
    outcome: Option<AuditOutcome>,
    duration: Option<Duration>,
    input: Input<'a>,
    error: Option<&'a str>,
    rule: Option<RuleLine<'a>>,
}

/// The policy rule that decided a call, as its audit line names it.
#[derive(Clone, Copy, Debug, Serialize)]
struct RuleLine<'a> {
    name: &'a str,
    action: &'static str,
}

/// A call's input as an event carries it.
#[derive(Clone, Copy, Debug)]
enum Input<'a> {
    None,
    Value(&'a Value),
    Digested(&'a InputDigest),
}

/// A call's input reduced to what its audit line needs (the digest, and the input itself
/// with `include_input`), so that the input can move into the tool before the line is written.
#[derive(Clone, Debug)]
pub(crate) struct InputDigest {
    sha256: String,
    input: Option<Value>,
}

impl<'a> AuditEvent<'a> {
    /// An execution begins.
    pub fn execution_started(execution_id: &'a str, principal: Option<&'a str>) -> Self {
        AuditEvent {
            event: "execution_started",
            execution_id,
            principal,
            capability: None,
            tool: None,
            original_tool: None,
            call_id: None,
            outcome: None,
            duration: None,
            input: Input::None,
            error: None,
            rule: None,
        }
    }

    /// An execution ended with `outcome` after `duration`.
    pub fn execution_finished(
        execution_id: &'a str,
        principal: Option<&'a str>,
        outcome: AuditOutcome,
        duration: Duration,
    ) -> Self {
        AuditEvent {
            event: "execution_finished",
            outcome: Some(outcome),
            duration: Some(duration),
            ..Self::execution_started(execution_id, principal)
        }
    }

    /// A call of `tool` (`provider.tool`) with `input` ended with `outcome` after `duration`
    /// (zero for a call refused before it ran).
    pub fn tool_call(
        execution_id: &'a str,
        principal: Option<&'a str>,
        tool: &'a str,
        input: &'a Value,
        outcome: AuditOutcome,
        duration: Duration,
    ) -> Self {
        AuditEvent {
            event: "tool_call",
            tool: Some(tool),
            input: Input::Value(input),
            outcome: Some(outcome),
            duration: Some(duration),
            ..Self::execution_started(execution_id, principal)
        }
    }

    /// A call of `tool` (`provider.tool`) with `input` was admitted and is about to run:
    /// written (and its write checked) before the tool runs, so that no call runs
    /// unrecorded; its `tool_call` line follows with the outcome.
    pub(crate) fn tool_call_started(
        execution_id: &'a str,
        principal: Option<&'a str>,
        tool: &'a str,
        input: &'a InputDigest,
    ) -> Self {
        AuditEvent {
            event: "tool_call_started",
            tool: Some(tool),
            input: Input::Digested(input),
            ..Self::execution_started(execution_id, principal)
        }
    }

    /// [`AuditEvent::tool_call`] with the input already digested.
    pub(crate) fn tool_call_digested(
        execution_id: &'a str,
        principal: Option<&'a str>,
        tool: &'a str,
        input: &'a InputDigest,
        outcome: AuditOutcome,
        duration: Duration,
    ) -> Self {
        AuditEvent {
            event: "tool_call",
            tool: Some(tool),
            input: Input::Digested(input),
            outcome: Some(outcome),
            duration: Some(duration),
            ..Self::execution_started(execution_id, principal)
        }
    }

    /// A capability execution was started (or, with [`AuditEvent::refused`], refused).
    pub fn capability_started(
        execution_id: &'a str,
        principal: Option<&'a str>,
        capability: &'a str,
    ) -> Self {
        AuditEvent {
            event: "capability_started",
            capability: Some(capability),
            ..Self::execution_started(execution_id, principal)
        }
    }

    /// A stop of a capability execution was asked for.
    pub fn capability_stop_requested(
        execution_id: &'a str,
        principal: Option<&'a str>,
        capability: &'a str,
    ) -> Self {
        AuditEvent {
            event: "capability_stop_requested",
            ..Self::capability_started(execution_id, principal, capability)
        }
    }

    /// A capability execution ended with `status` after `duration`.
    pub fn capability_finished(
        execution_id: &'a str,
        principal: Option<&'a str>,
        capability: &'a str,
        status: &'static str,
        duration: Duration,
    ) -> Self {
        AuditEvent {
            event: "capability_finished",
            outcome: Some(AuditOutcome::Status(status)),
            duration: Some(duration),
            ..Self::capability_started(execution_id, principal, capability)
        }
    }

    /// A decision on the call a paused execution waits on: `approver` (the principal who
    /// decided, if any) approved (`outcome` `approved`) or denied (`denied`, with the reason
    /// as its error) the call of `tool`; `refused` decisions (the approver may not) carry
    /// [`AuditOutcome::Denied`] via [`AuditEvent::refused`].
    pub fn approval_decided(
        execution_id: &'a str,
        approver: Option<&'a str>,
        tool: &'a str,
        approved: bool,
    ) -> Self {
        AuditEvent {
            event: "approval_decided",
            tool: Some(tool),
            outcome: Some(AuditOutcome::Status(if approved {
                "approved"
            } else {
                "denied"
            })),
            ..Self::execution_started(execution_id, approver)
        }
    }

    /// Sets the outcome (a refused start: [`AuditOutcome::Denied`]).
    pub fn refused(mut self, outcome: AuditOutcome) -> Self {
        self.outcome = Some(outcome);
        self
    }

    /// Adds the error message.
    pub fn error(mut self, message: &'a str) -> Self {
        self.error = Some(message);
        self
    }

    /// Adds the policy rule that decided the call (`rules[N]`, with its name) and its action.
    pub fn rule(mut self, name: &'a str, action: crate::RuleAction) -> Self {
        self.rule = Some(RuleLine {
            name,
            action: action.as_str(),
        });
        self
    }

    /// Adds the tool's own name, as its definition gives it (an MCP server's `delete-all`,
    /// which the guest calls `delete_all` or `delete_all__2`).
    pub fn original_tool(mut self, name: &'a str) -> Self {
        self.original_tool = Some(name);
        self
    }

    /// Adds the runner's id of the call (`callId`), which pairs a `tool_call_started` line
    /// with its `tool_call` line; ignored when empty.
    pub fn call_id(mut self, call_id: &'a str) -> Self {
        self.call_id = (!call_id.is_empty()).then_some(call_id);
        self
    }
}

/// The line as written.
#[derive(Serialize)]
struct Line<'a> {
    ts: String,
    event: &'a str,
    execution_id: &'a str,
    principal: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    capability: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    original_tool: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    call_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    outcome: Option<AuditOutcome>,
    #[serde(skip_serializing_if = "Option::is_none")]
    duration_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    input_sha256: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    input: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rule: Option<RuleLine<'a>>,
}

/// An append-only JSON-lines audit log, in a file or a PostgreSQL database; see the module
/// docs for the format. Share it behind an `Arc`: [`AuditLog::record`] takes `&self` and is
/// safe from many threads and processes.
pub struct AuditLog {
    location: StoreLocation,
    sink: Sink,
    include_input: bool,
}

enum Sink {
    File(FileSink),
    Postgres(PolicyDb),
}

struct FileSink {
    file: File,
    /// The file could be opened for reading too (to look for a torn last line).
    readable: bool,
    /// Held by the thread writing a line.
    turn: Mutex<()>,
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AuditLog({})", self.location)
    }
}

impl AuditLog {
    /// Opens (creating, mode 0600) `path` for appending; `include_input` puts tool inputs in
    /// the lines, not just their digest.
    pub fn open(path: impl AsRef<Path>, include_input: bool) -> Result<AuditLog, PolicyError> {
        let path = path.as_ref();
        let open = |read: bool| {
            let mut options = OpenOptions::new();
            options.append(true).create(true).read(read);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            options.open(path)
        };
        // Read access only serves to see whether the file ends in a torn line; a file that
        // may only be appended to is used without it.
        let (file, readable) = match open(true) {
            Ok(file) => (file, true),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => (
                open(false).map_err(|source| PolicyError::Audit {
                    path: path.to_path_buf(),
                    source,
                })?,
                false,
            ),
            Err(source) => {
                return Err(PolicyError::Audit {
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        Ok(AuditLog {
            location: StoreLocation::Sqlite(path.to_path_buf()),
            sink: Sink::File(FileSink {
                file,
                readable,
                turn: Mutex::new(()),
            }),
            include_input,
        })
    }

    /// The audit log at `location`: a file ([`AuditLog::open`]), or a PostgreSQL database
    /// where each event is a row of `audit_events` (see `pg_store.rs`), whose table is
    /// created or migrated now (or, when the database cannot be reached now, on the first
    /// event: until then every event fails, and with it the execution).
    pub fn open_at(location: &StoreLocation, include_input: bool) -> Result<AuditLog, PolicyError> {
        match location {
            StoreLocation::Sqlite(path) => AuditLog::open(path, include_input),
            StoreLocation::Postgres(url) => Ok(AuditLog {
                location: location.clone(),
                sink: Sink::Postgres(PolicyDb::open(url).map_err(PolicyError::AuditDatabase)?),
                include_input,
            }),
        }
    }

    /// Where the log is: its file, or its database (shown with the password hidden).
    pub fn location(&self) -> &StoreLocation {
        &self.location
    }

    /// A failure to make a line, naming the log.
    fn failed(&self, source: std::io::Error) -> PolicyError {
        PolicyError::Audit {
            path: PathBuf::from(self.location.to_string()),
            source,
        }
    }

    /// Appends one line for `event`; when this returns `Ok` the line is written.
    pub fn record(&self, event: &AuditEvent<'_>) -> Result<(), PolicyError> {
        let digested;
        let (input_sha256, input) = match event.input {
            Input::None => (None, None),
            Input::Value(v) => {
                digested = self.digest(v)?;
                (Some(digested.sha256.as_str()), digested.input.as_ref())
            }
            Input::Digested(d) => (Some(d.sha256.as_str()), d.input.as_ref()),
        };
        let line = Line {
            ts: now_rfc3339(),
            event: event.event,
            execution_id: event.execution_id,
            principal: event.principal,
            capability: event.capability,
            tool: event.tool,
            original_tool: event.original_tool,
            call_id: event.call_id,
            outcome: event.outcome,
            duration_ms: event
                .duration
                .map(|d| (d.as_secs_f64() * 1_000_000.0).round() / 1000.0),
            input_sha256,
            input,
            error: event.error,
            rule: event.rule,
        };
        let mut bytes = Vec::with_capacity(512);
        serde_json::to_writer(&mut bytes, &line)
            .map_err(|e| self.failed(std::io::Error::other(e)))?;
        let file = match &self.sink {
            Sink::File(file) => file,
            Sink::Postgres(db) => {
                let text =
                    String::from_utf8(bytes).map_err(|e| self.failed(std::io::Error::other(e)))?;
                return db
                    .append_audit(&AuditRow {
                        at: &line.ts,
                        event: line.event,
                        execution_id: line.execution_id,
                        principal: line.principal,
                        tool: line.tool,
                        line: &text,
                    })
                    .map_err(PolicyError::AuditDatabase);
            }
        };
        bytes.push(b'\n');
        // Writers take turns (threads of this process by the mutex, processes by an advisory
        // lock on the file), so that none sees the end of a line still being written as torn.
        let _turn = file.turn.lock().unwrap_or_else(|e| e.into_inner());
        let locked = file.file.lock().is_ok();
        let result = file.append(&bytes);
        if locked {
            let _ = file.file.unlock();
        }
        result.map_err(|e| self.failed(e))
    }
    /// The digest of `input` (SHA-256 of its compact JSON), and the input itself when lines
    /// include it.
    pub(crate) fn digest(&self, input: &Value) -> Result<InputDigest, PolicyError> {
        let json = serde_json::to_vec(input).map_err(|e| self.failed(std::io::Error::other(e)))?;
        Ok(InputDigest {
            sha256: sha256_hex(&json),
            input: self.include_input.then(|| input.clone()),
        })
    }
}

impl FileSink {
    /// Writes one line, ending a torn last line first.
    fn append(&self, line: &[u8]) -> std::io::Result<()> {
        let mut bytes = Vec::with_capacity(line.len() + 1);
        if self.ends_in_a_torn_line() {
            // A line cut short by an earlier failed write (here or in another process) is
            // ended first, so that this one stays whole and readable.
            bytes.push(b'\n');
        }
        bytes.extend_from_slice(line);
        // One write(2) of the whole line: with O_APPEND the kernel places it at the end of the
        // file atomically, so concurrent writers never interleave within a line.
        let written = (&self.file).write(&bytes)?;
        if written != bytes.len() {
            // A short write (a full disk, a file size limit) left part of a line: end it now
            // if the file takes one more byte; if not, the next line written ends it.
            let _ = (&self.file).write(b"\n");
            return Err(std::io::Error::new(
                std::io::ErrorKind::WriteZero,
                format!(
                    "only {written} of {} bytes of an audit line were written (disk full?)",
                    bytes.len()
                ),
            ));
        }
        Ok(())
    }

    /// Whether the file's last byte is not a line break: the end of a line whose write failed
    /// part way. Only a regular file that could be opened for reading can tell; anything
    /// else (a pipe, a device) is taken as whole.
    fn ends_in_a_torn_line(&self) -> bool {
        #[cfg(unix)]
        if self.readable {
            use std::os::unix::fs::FileExt as _;
            let Ok(meta) = self.file.metadata() else {
                return false;
            };
            if !meta.is_file() || meta.len() == 0 {
                return false;
            }
            let mut last = [0u8; 1];
            return matches!(self.file.read_at(&mut last, meta.len() - 1), Ok(1) if last[0] != b'\n');
        }
        false
    }
}

fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".to_string())
}

fn sha256_hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = String::with_capacity(64);
    for b in digest.as_ref() {
        out.push(HEX[usize::from(b >> 4)] as char);
        out.push(HEX[usize::from(b & 15)] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use serde_json::json;

    use super::*;

    fn temp_file(name: &str) -> PathBuf {
        static N: AtomicUsize = AtomicUsize::new(0);
        std::env::temp_dir().join(format!(
            "execbox-audit-{name}-{}-{}.jsonl",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ))
    }

    fn lines(path: &Path) -> Vec<Value> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
            .collect()
    }

    #[test]
    fn each_event_is_one_line_with_the_documented_fields() {
        let path = temp_file("fields");
        let log = AuditLog::open(&path, false).unwrap();
        let input = json!({"city": "Paris", "secret": "hunter2"});
        log.record(&AuditEvent::execution_started("e1", Some("alice")))
            .unwrap();
        log.record(
            &AuditEvent::tool_call(
                "e1",
                Some("alice"),
                "weather.get",
                &input,
                AuditOutcome::RateLimited,
                Duration::ZERO,
            )
            .error("rate limit exceeded for weather.get: 3 per 1m; retry in 20 s"),
        )
        .unwrap();
        log.record(&AuditEvent::execution_finished(
            "e1",
            None,
            AuditOutcome::Error(ErrorCode::Timeout),
            Duration::from_micros(1_234_567),
        ))
        .unwrap();
        let got = lines(&path);
        assert_eq!(got.len(), 3);
        let ts = got[0]["ts"].as_str().unwrap();
        assert!(
            time::OffsetDateTime::parse(ts, &time::format_description::well_known::Rfc3339).is_ok(),
            "{ts}"
        );
        assert_eq!(got[0]["event"], "execution_started");
        assert_eq!(got[0]["principal"], "alice");
        assert!(got[0].get("tool").is_none());
        let call = &got[1];
        assert_eq!(call["event"], "tool_call");
        assert_eq!(call["tool"], "weather.get");
        assert_eq!(call["outcome"], "rate_limited");
        assert_eq!(call["duration_ms"], 0.0);
        assert_eq!(
            call["input_sha256"],
            sha256_hex(br#"{"city":"Paris","secret":"hunter2"}"#)
        );
        assert!(call.get("input").is_none(), "inputs stay out by default");
        assert!(!std::fs::read_to_string(&path).unwrap().contains("hunter2"));
        assert!(call["error"]
            .as_str()
            .unwrap()
            .starts_with("rate limit exceeded"));
        assert_eq!(got[2]["principal"], Value::Null);
        assert_eq!(got[2]["outcome"], "timeout");
        assert_eq!(got[2]["duration_ms"], 1234.567);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn include_input_puts_the_input_in_the_line() {
        let path = temp_file("input");
        let log = AuditLog::open(&path, true).unwrap();
        let input = json!({"q": "line\nbreak"});
        log.record(&AuditEvent::tool_call(
            "e",
            None,
            "t.x",
            &input,
            AuditOutcome::Ok,
            Duration::from_millis(3),
        ))
        .unwrap();
        assert_eq!(lines(&path)[0]["input"], input);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn lines_stay_whole_under_concurrent_writers() {
        let path = temp_file("concurrent");
        // Two logs on one file (as two processes would have) and eight threads.
        let logs = [
            Arc::new(AuditLog::open(&path, true).unwrap()),
            Arc::new(AuditLog::open(&path, true).unwrap()),
        ];
        let big = json!({"padding": "x".repeat(10_000)});
        std::thread::scope(|s| {
            for t in 0..8 {
                let log = logs[t % 2].clone();
                let big = &big;
                s.spawn(move || {
                    for i in 0..250 {
                        let id = format!("t{t}-{i}");
                        log.record(&AuditEvent::tool_call(
                            &id,
                            Some("p"),
                            "t.x",
                            big,
                            AuditOutcome::Ok,
                            Duration::from_micros(5),
                        ))
                        .unwrap();
                    }
                });
            }
        });
        let got = lines(&path);
        assert_eq!(got.len(), 2000);
        assert!(got.iter().all(|l| l["input"] == big));
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_line_torn_by_a_failed_write_is_ended_before_the_next_one() {
        let path = temp_file("torn");
        // What a write cut short by a full disk leaves, here or in another process.
        std::fs::write(
            &path,
            "{\"ts\":\"2026-01-01T00:00:00Z\",\"event\":\"tool_ca",
        )
        .unwrap();
        let log = AuditLog::open(&path, false).unwrap();
        log.record(&AuditEvent::execution_started("e2", None))
            .unwrap();
        log.record(&AuditEvent::execution_started("e3", None))
            .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(serde_json::from_str::<Value>(lines[0]).is_err(), "{text}");
        for (line, id) in lines[1..].iter().zip(["e2", "e3"]) {
            let line: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {text}"));
            assert_eq!(line["execution_id"], id);
        }
        assert!(text.ends_with("}\n"), "{text}");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_call_has_an_admitted_line_and_an_outcome_line_naming_both_tool_names() {
        let path = temp_file("started");
        let log = AuditLog::open(&path, true).unwrap();
        let input = json!({"all": true});
        let digest = log.digest(&input).unwrap();
        log.record(
            &AuditEvent::tool_call_started("e", Some("p"), "ops.delete_all__2", &digest)
                .original_tool("delete_all")
                .call_id("3"),
        )
        .unwrap();
        log.record(
            &AuditEvent::tool_call(
                "e",
                Some("p"),
                "ops.delete_all__2",
                &input,
                AuditOutcome::Ok,
                Duration::from_millis(2),
            )
            .original_tool("delete_all")
            .call_id("3"),
        )
        .unwrap();
        let got = lines(&path);
        assert_eq!(got[0]["event"], "tool_call_started");
        assert_eq!(got[1]["event"], "tool_call");
        for line in &got {
            assert_eq!(line["tool"], "ops.delete_all__2");
            assert_eq!(line["original_tool"], "delete_all");
            assert_eq!(line["call_id"], "3");
            assert_eq!(line["input"], input);
            assert_eq!(line["input_sha256"], got[0]["input_sha256"]);
        }
        assert!(got[0].get("outcome").is_none() && got[0].get("duration_ms").is_none());
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn an_unwritable_audit_file_is_an_error() {
        let e = AuditLog::open("/nonexistent-dir/audit.jsonl", false).unwrap_err();
        assert!(
            e.to_string().starts_with(
                "cannot write the audit log /nonexistent-dir/audit.jsonl: No such file"
            ),
            "{e}"
        );
        assert!(e.to_string().ends_with("refusing to run unaudited"), "{e}");
        // A full disk: /dev/full accepts the open and fails every write with ENOSPC.
        if Path::new("/dev/full").exists() {
            let log = AuditLog::open("/dev/full", false).unwrap();
            let e = log
                .record(&AuditEvent::execution_started("e", None))
                .unwrap_err();
            assert!(matches!(e, PolicyError::Audit { .. }), "{e}");
            assert!(e.to_string().contains("/dev/full"), "{e}");
        }
    }
}
