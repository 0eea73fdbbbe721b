//! The six protocol messages, their JSON encoding, and a decoder that names the bad field.
//!
//! Payloads the guest or a tool chose (`tool_call.input`, `tool_result.result`, `done.result`)
//! are kept as raw JSON text ([`RawValue`]): they are never rebuilt as trees on the way
//! through, so their nesting depth costs no stack and their text is forwarded byte for byte.

use std::collections::HashMap;
use std::fmt;

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::error::{ErrorBody, ErrorCode, ErrorLocation};
use crate::manifest::{expected, json_kind, ProviderManifest};
use crate::options::RuntimeOptions;
use crate::replay::{clock_from_value, clock_size_hint, replay_from_value, ClockRun, Replay};

/// Host → runner: run `code` with these providers and limits.
#[derive(Debug, Clone, PartialEq)]
pub struct Execute {
    /// Identifies the execution; echoed by `started` and `done`.
    pub id: String,
    /// The guest program.
    pub code: String,
    /// Limits; missing fields took their defaults while decoding.
    pub options: RuntimeOptions,
    /// Metadata of the tool namespaces to install.
    pub providers: Vec<ProviderManifest>,
    /// The seed of `Math.random()` and the clock readings to give the guest first, for a
    /// re-run that must take the same path (`replay` on the wire; optional, and other runners
    /// ignore it). `None` is an ordinary run.
    pub replay: Option<Replay>,
}

/// Host → runner: abort the execution `id` (a `done` with `timeout` follows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cancel {
    /// The execution to abort.
    pub id: String,
}

/// Runner → host: the execution was accepted; its clock started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    /// The accepted execution.
    pub id: String,
}

/// Runner → host: the guest called a tool; answer with exactly one `tool_result`.
#[derive(Debug, Clone)]
pub struct ToolCall {
    /// Never reused within a runner process (so never within a session).
    pub call_id: String,
    /// The namespace the guest called through.
    pub provider_name: String,
    /// The tool's `safeName`.
    pub safe_tool_name: String,
    /// The first argument, as JSON; `None` when the guest passed nothing or `undefined`.
    pub input: Option<Box<RawValue>>,
}

/// Host → runner: the outcome of one tool call.
#[derive(Debug, Clone)]
pub struct ToolResult {
    /// The call being answered.
    pub call_id: String,
    /// `Ok(None)` is a successful `undefined` (no `result` field).
    pub outcome: Result<Option<Box<RawValue>>, ErrorBody>,
}

/// Runner → host: the execution ended. Exactly one per accepted (or rejected) `execute`.
#[derive(Debug, Clone)]
pub struct Done {
    /// The execution that ended.
    pub id: String,
    /// Wall time of the run in milliseconds.
    pub duration_ms: u64,
    /// Captured console lines, after truncation.
    pub logs: Vec<String>,
    /// What truncation took from `logs`, when it took anything, so a host can say so
    /// (`logsTruncated` on the wire; an optional field other hosts ignore).
    pub logs_truncated: Option<LogsTruncated>,
    /// Every clock reading of the guest, replayed or real, in order and run-length encoded
    /// (`clock` on the wire); sent only for an `execute` that carried `replay`.
    pub clock: Option<Vec<ClockRun>>,
    /// `clock` is incomplete: the guest read the clock past
    /// [`MAX_CLOCK_RUNS`](crate::MAX_CLOCK_RUNS) runs, or the runs did not fit in the message
    /// (`clockOverflow` on the wire, omitted when false).
    pub clock_overflow: bool,
    /// `Ok(None)` is a successful `undefined` (no `result` field).
    pub outcome: Result<Option<Box<RawValue>>, ErrorBody>,
}

/// What the log limits (`maxLogLines`, then `maxLogChars`) took from an execution's logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogsTruncated {
    /// Console lines the guest wrote that are not in `logs` at all.
    pub omitted_lines: u64,
    /// The last line in `logs` was cut where the character budget ran out.
    pub cut_line: bool,
}

/// Any protocol message, in either direction.
#[derive(Debug, Clone)]
pub enum Message {
    /// `{"type":"execute"}`
    Execute(Execute),
    /// `{"type":"cancel"}`
    Cancel(Cancel),
    /// `{"type":"started"}`
    Started(Started),
    /// `{"type":"tool_call"}`
    ToolCall(ToolCall),
    /// `{"type":"tool_result"}`
    ToolResult(ToolResult),
    /// `{"type":"done"}`
    Done(Done),
}

impl Message {
    /// The wire `type` of this message.
    pub fn kind(&self) -> &'static str {
        match self {
            Message::Execute(_) => "execute",
            Message::Cancel(_) => "cancel",
            Message::Started(_) => "started",
            Message::ToolCall(_) => "tool_call",
            Message::ToolResult(_) => "tool_result",
            Message::Done(_) => "done",
        }
    }

    /// An upper bound of [`Message::encode`]'s length, computed without encoding: every
    /// string counted as if each byte needed a six-byte escape, raw payloads as they are.
    /// Lets a sender skip measuring the messages that cannot be over a size limit.
    pub fn size_hint(&self) -> usize {
        fn text(s: &str) -> usize {
            s.len().saturating_mul(6).saturating_add(2)
        }
        fn raw(r: Option<&RawValue>) -> usize {
            r.map_or(0, |r| r.get().len())
        }
        fn error(e: Option<&ErrorBody>) -> usize {
            e.map_or(0, |e| {
                let name = e.name.as_deref().map_or(0, text);
                let location = e.location.as_ref().map_or(0, |l| {
                    l.source.as_deref().map_or(0, text).saturating_add(96)
                });
                text(&e.message)
                    .saturating_add(64)
                    .saturating_add(name)
                    .saturating_add(location)
            })
        }
        const OVERHEAD: usize = 160;
        let body = match self {
            // Executes are only ever measured by the host; their manifests are small.
            Message::Execute(m) => text(&m.id)
                .saturating_add(text(&m.code))
                .saturating_add(self_encoded_providers(m))
                .saturating_add(m.replay.as_ref().map_or(0, |r| clock_size_hint(&r.clock))),
            Message::Cancel(m) => text(&m.id),
            Message::Started(m) => text(&m.id),
            Message::ToolCall(m) => text(&m.call_id)
                .saturating_add(text(&m.provider_name))
                .saturating_add(text(&m.safe_tool_name))
                .saturating_add(raw(m.input.as_deref())),
            Message::ToolResult(m) => text(&m.call_id)
                .saturating_add(raw(m.outcome.as_ref().ok().and_then(|r| r.as_deref())))
                .saturating_add(error(m.outcome.as_ref().err())),
            Message::Done(m) => m
                .logs
                .iter()
                .fold(text(&m.id), |n, line| {
                    n.saturating_add(text(line)).saturating_add(1)
                })
                .saturating_add(raw(m.outcome.as_ref().ok().and_then(|r| r.as_deref())))
                .saturating_add(error(m.outcome.as_ref().err()))
                .saturating_add(m.clock.as_deref().map_or(0, clock_size_hint)),
        };
        body.saturating_add(OVERHEAD)
    }

    /// Encodes the message as one line of JSON, without the trailing newline.
    pub fn encode(&self) -> String {
        let wire = match self {
            Message::Execute(m) => Wire {
                kind: "execute",
                id: Some(&m.id),
                code: Some(&m.code),
                options: Some(m.options),
                providers: Some(&m.providers),
                replay: m.replay.as_ref(),
                ..Wire::default()
            },
            Message::Cancel(m) => Wire {
                kind: "cancel",
                id: Some(&m.id),
                ..Wire::default()
            },
            Message::Started(m) => Wire {
                kind: "started",
                id: Some(&m.id),
                ..Wire::default()
            },
            Message::ToolCall(m) => Wire {
                kind: "tool_call",
                call_id: Some(&m.call_id),
                provider_name: Some(&m.provider_name),
                safe_tool_name: Some(&m.safe_tool_name),
                input: m.input.as_deref(),
                ..Wire::default()
            },
            Message::ToolResult(m) => Wire {
                kind: "tool_result",
                call_id: Some(&m.call_id),
                ok: Some(m.outcome.is_ok()),
                result: m.outcome.as_ref().ok().and_then(|r| r.as_deref()),
                error: m.outcome.as_ref().err(),
                ..Wire::default()
            },
            Message::Done(m) => Wire {
                kind: "done",
                id: Some(&m.id),
                ok: Some(m.outcome.is_ok()),
                duration_ms: Some(m.duration_ms),
                logs: Some(&m.logs),
                logs_truncated: m.logs_truncated,
                clock: m.clock.as_deref(),
                clock_overflow: m.clock_overflow.then_some(true),
                result: m.outcome.as_ref().ok().and_then(|r| r.as_deref()),
                error: m.outcome.as_ref().err(),
                ..Wire::default()
            },
        };
        serde_json::to_string(&wire).expect("protocol messages always serialize")
    }

    /// Decodes one message from a line of JSON (without its newline).
    ///
    /// Decoding never recurses into guest- or tool-chosen payloads, so a deeply nested
    /// `result` costs neither stack nor a parse tree.
    pub fn decode(line: &str) -> Result<Message, DecodeError> {
        let fields =
            Fields::parse(line).map_err(|e| match serde_json::from_str::<Value>(line) {
                Ok(v) => DecodeError::NotAnObject(json_kind(&v)),
                Err(_) => DecodeError::NotJson(e.to_string()),
            })?;
        let kind = fields.kind()?;
        match kind.as_str() {
            "execute" => decode_execute(&fields).map(Message::Execute),
            "cancel" => Ok(Message::Cancel(Cancel {
                id: fields.string("cancel", "id")?,
            })),
            "started" => Ok(Message::Started(Started {
                id: fields.string("started", "id")?,
            })),
            "tool_call" => decode_tool_call(&fields).map(Message::ToolCall),
            "tool_result" => decode_tool_result(&fields).map(Message::ToolResult),
            "done" => decode_done(&fields).map(Message::Done),
            _ => Err(DecodeError::UnknownType(kind)),
        }
    }
}

/// What [`Message::decode`] makes of `line` when it is an `execute` (the same steps, so the
/// same answer); `None` when it is anything else, or no message at all, without decoding
/// further: no payload is copied, and a line that is not an object is not parsed again to
/// say what it is.
pub(crate) fn decode_if_execute(line: &str) -> Option<Result<Execute, DecodeError>> {
    let fields = Fields::parse(line).ok()?;
    (fields.kind().ok()? == "execute").then(|| decode_execute(&fields))
}

/// Why a line is not a valid message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The line is not JSON at all.
    NotJson(String),
    /// The line is JSON but not an object; holds the kind it is.
    NotAnObject(&'static str),
    /// There is no string `type` field.
    MissingType,
    /// `type` names no protocol message.
    UnknownType(String),
    /// A known message with a missing or ill-typed field.
    InvalidField {
        /// The message's `type`.
        kind: &'static str,
        /// The message's `id`, when it has a readable one.
        id: Option<String>,
        /// The message's `callId`, when it has a readable one.
        call_id: Option<String>,
        /// Dotted path of the offending field, e.g. `options.timeoutMs`.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::NotJson(e) => write!(f, "message is not valid JSON: {e}"),
            DecodeError::NotAnObject(kind) => {
                write!(f, "message must be a JSON object, got {kind}")
            }
            DecodeError::MissingType => f.write_str("message has no string \"type\" field"),
            DecodeError::UnknownType(t) => write!(f, "unknown message type {t:?}"),
            DecodeError::InvalidField {
                kind,
                field,
                reason,
                ..
            } => write!(f, "invalid {kind} message: {field} {reason}"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// The top-level fields of a message, each still raw JSON.
struct Fields<'a> {
    map: HashMap<String, &'a RawValue>,
}

impl<'a> Fields<'a> {
    /// The top-level fields of a JSON object, each left raw.
    fn parse(line: &'a str) -> Result<Fields<'a>, serde_json::Error> {
        Ok(Fields {
            map: serde_json::from_str(line)?,
        })
    }

    /// The string `type` field.
    fn kind(&self) -> Result<String, DecodeError> {
        let raw = self.get("type").ok_or(DecodeError::MissingType)?;
        serde_json::from_str::<String>(raw.get()).map_err(|_| DecodeError::MissingType)
    }

    fn get(&self, name: &str) -> Option<&'a RawValue> {
        self.map.get(name).copied()
    }

    fn id(&self) -> Option<String> {
        self.get("id")
            .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
    }

    fn call_id(&self) -> Option<String> {
        self.get("callId")
            .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
    }

    fn invalid(
        &self,
        kind: &'static str,
        field: impl Into<String>,
        reason: impl Into<String>,
    ) -> DecodeError {
        DecodeError::InvalidField {
            kind,
            id: self.id(),
            call_id: self.call_id(),
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// A small field parsed as a JSON tree (bounded by serde_json's recursion limit).
    fn value(&self, kind: &'static str, name: &str) -> Result<Option<Value>, DecodeError> {
        match self.get(name) {
            None => Ok(None),
            Some(raw) => serde_json::from_str::<Value>(raw.get())
                .or_else(|e| match replace_lone_surrogates(raw.get()) {
                    // JavaScript hosts may send escaped lone surrogates, which are valid JSON
                    // but no Rust string: they become U+FFFD, as the runner does for guests.
                    Some(repaired) => serde_json::from_str::<Value>(&repaired),
                    None => Err(e),
                })
                .map(Some)
                .map_err(|e| self.invalid(kind, name, format!("cannot be read: {e}"))),
        }
    }

    fn string(&self, kind: &'static str, name: &str) -> Result<String, DecodeError> {
        match self.value(kind, name)? {
            Some(Value::String(s)) => Ok(s),
            Some(other) => Err(self.invalid(kind, name, expected("a string", &other))),
            None => Err(self.invalid(kind, name, "is required")),
        }
    }

    fn boolean(&self, kind: &'static str, name: &str) -> Result<bool, DecodeError> {
        match self.value(kind, name)? {
            Some(Value::Bool(b)) => Ok(b),
            Some(other) => Err(self.invalid(kind, name, expected("a boolean", &other))),
            None => Err(self.invalid(kind, name, "is required")),
        }
    }

    /// An optional payload kept as raw JSON.
    fn raw(&self, name: &str) -> Option<Box<RawValue>> {
        self.get(name).map(RawValue::to_owned)
    }

    fn error_body(&self, kind: &'static str) -> Result<ErrorBody, DecodeError> {
        let value = self
            .value(kind, "error")?
            .ok_or_else(|| self.invalid(kind, "error", "is required when ok is false"))?;
        let obj = value
            .as_object()
            .ok_or_else(|| self.invalid(kind, "error", expected("an object", &value)))?;
        let code = match obj.get("code") {
            Some(Value::String(s)) => match ErrorCode::parse(s) {
                Some(code) => code,
                // A host may answer a tool call with a code of its own: the call still fails,
                // as runtime_error with the host's message (as the reference runner does),
                // instead of the guest waiting for an answer that was dropped.
                None if kind == "tool_result" => ErrorCode::RuntimeError,
                None => {
                    return Err(self.invalid(
                        kind,
                        "error.code",
                        format!("must be one of the seven error codes, got {s:?}"),
                    ))
                }
            },
            Some(other) => {
                return Err(self.invalid(kind, "error.code", expected("a string", other)))
            }
            None => return Err(self.invalid(kind, "error.code", "is required")),
        };
        let message = match obj.get("message") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => {
                return Err(self.invalid(kind, "error.message", expected("a string", other)))
            }
            None => return Err(self.invalid(kind, "error.message", "is required")),
        };
        // The name and location only present an error: one that is not well-formed is left
        // out rather than failing the message that carries it.
        let name = match obj.get("name") {
            Some(Value::String(s)) => Some(s.clone()),
            _ => None,
        };
        let location = obj
            .get("location")
            .and_then(|l| serde_json::from_value::<ErrorLocation>(l.clone()).ok())
            .map(Box::new);
        let reason = match obj.get("reason") {
            Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
            _ => None,
        };
        let retry_after_ms = obj.get("retryAfterMs").and_then(Value::as_u64);
        let status = obj
            .get("status")
            .and_then(Value::as_u64)
            .and_then(|s| u16::try_from(s).ok())
            .filter(|s| (100..=599).contains(s));
        Ok(ErrorBody {
            code,
            message,
            name,
            location,
            reason,
            retry_after_ms,
            status,
        })
    }
}

/// `json` with every escaped lone surrogate (`\\uD800`-`\\uDFFF` not part of a pair)
/// replaced by `\\uFFFD`; `None` when there is none.
pub fn replace_lone_surrogates(json: &str) -> Option<String> {
    fn unit_at(bytes: &[u8], i: usize) -> Option<u16> {
        // `\uXXXX` at i; i points at the backslash.
        if bytes.get(i) != Some(&b'\\') || bytes.get(i + 1) != Some(&b'u') {
            return None;
        }
        let hex = std::str::from_utf8(bytes.get(i + 2..i + 6)?).ok()?;
        u16::from_str_radix(hex, 16).ok()
    }
    let bytes = json.as_bytes();
    let mut out: Option<String> = None;
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            i += 1;
            continue;
        }
        let Some(unit) = unit_at(bytes, i) else {
            i += 2; // any other escape, including an escaped backslash
            continue;
        };
        let high = (0xD800..0xDC00).contains(&unit);
        let low = (0xDC00..0xE000).contains(&unit);
        if high && unit_at(bytes, i + 6).is_some_and(|next| (0xDC00..0xE000).contains(&next)) {
            i += 12;
            continue;
        }
        if high || low {
            let out = out.get_or_insert_with(|| String::with_capacity(json.len()));
            out.push_str(&json[copied..i]);
            out.push_str("\\uFFFD");
            copied = i + 6;
        }
        i += 6;
    }
    out.map(|mut out| {
        out.push_str(&json[copied..]);
        out
    })
}

fn self_encoded_providers(m: &Execute) -> usize {
    m.providers
        .iter()
        .map(|p| serde_json::to_string(&p.to_value()).map_or(0, |s| s.len()))
        .sum()
}

fn decode_execute(f: &Fields<'_>) -> Result<Execute, DecodeError> {
    const K: &str = "execute";
    let id = f.string(K, "id")?;
    let code = f.string(K, "code")?;
    let mut options = RuntimeOptions::default();
    match f.value(K, "options")? {
        None | Some(Value::Null) => {}
        Some(Value::Object(obj)) => {
            let slots: [&mut u64; 4] = [
                &mut options.timeout_ms,
                &mut options.memory_limit_bytes,
                &mut options.max_log_lines,
                &mut options.max_log_chars,
            ];
            for (name, slot) in RuntimeOptions::FIELDS.iter().zip(slots) {
                match obj.get(*name) {
                    None | Some(Value::Null) => {}
                    Some(Value::Number(n)) => match n.as_f64() {
                        Some(x) if x.is_finite() && x >= 0.0 => *slot = x as u64,
                        _ => {
                            return Err(f.invalid(
                                K,
                                format!("options.{name}"),
                                format!("must be a non-negative number, got {n}"),
                            ))
                        }
                    },
                    Some(other) => {
                        return Err(f.invalid(
                            K,
                            format!("options.{name}"),
                            expected("a number", other),
                        ))
                    }
                }
            }
        }
        Some(other) => return Err(f.invalid(K, "options", expected("an object", &other))),
    }
    let providers = match f.value(K, "providers")? {
        Some(Value::Array(items)) => {
            let mut providers = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let manifest = ProviderManifest::from_value(item, &format!("providers[{i}]"))
                    .map_err(|(field, reason)| f.invalid(K, field, reason))?;
                if providers
                    .iter()
                    .any(|p: &ProviderManifest| p.name == manifest.name)
                {
                    return Err(f.invalid(
                        K,
                        format!("providers[{i}].name"),
                        format!("duplicates provider {:?}", manifest.name),
                    ));
                }
                providers.push(manifest);
            }
            providers
        }
        Some(other) => return Err(f.invalid(K, "providers", expected("an array", &other))),
        None => return Err(f.invalid(K, "providers", "is required")),
    };
    let replay = match f.value(K, "replay")? {
        None | Some(Value::Null) => None,
        Some(value) => Some(
            replay_from_value(&value, "replay")
                .map_err(|(field, reason)| f.invalid(K, field, reason))?,
        ),
    };
    Ok(Execute {
        id,
        code,
        options,
        providers,
        replay,
    })
}

fn decode_tool_call(f: &Fields<'_>) -> Result<ToolCall, DecodeError> {
    const K: &str = "tool_call";
    Ok(ToolCall {
        call_id: f.string(K, "callId")?,
        provider_name: f.string(K, "providerName")?,
        safe_tool_name: f.string(K, "safeToolName")?,
        input: f.raw("input"),
    })
}

fn decode_tool_result(f: &Fields<'_>) -> Result<ToolResult, DecodeError> {
    const K: &str = "tool_result";
    let call_id = f.string(K, "callId")?;
    let outcome = if f.boolean(K, "ok")? {
        Ok(f.raw("result"))
    } else {
        Err(f.error_body(K)?)
    };
    Ok(ToolResult { call_id, outcome })
}

fn decode_done(f: &Fields<'_>) -> Result<Done, DecodeError> {
    const K: &str = "done";
    let id = f.string(K, "id")?;
    let duration_ms = match f.value(K, "durationMs")? {
        Some(Value::Number(n)) => n
            .as_f64()
            .filter(|x| *x >= 0.0)
            .map(|x| x as u64)
            .ok_or_else(|| {
                f.invalid(
                    K,
                    "durationMs",
                    format!("must be a non-negative number, got {n}"),
                )
            })?,
        Some(other) => return Err(f.invalid(K, "durationMs", expected("a number", &other))),
        None => return Err(f.invalid(K, "durationMs", "is required")),
    };
    let logs = match f.value(K, "logs")? {
        Some(Value::Array(items)) => items
            .into_iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s),
                other => Err(f.invalid(K, format!("logs[{i}]"), expected("a string", &other))),
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(other) => return Err(f.invalid(K, "logs", expected("an array", &other))),
        None => return Err(f.invalid(K, "logs", "is required")),
    };
    // Only presents the logs: one that is not well-formed is left out.
    let logs_truncated = f
        .value(K, "logsTruncated")?
        .and_then(|v| serde_json::from_value::<LogsTruncated>(v).ok());
    let clock = match f.value(K, "clock")? {
        None | Some(Value::Null) => None,
        Some(value) => Some(
            clock_from_value(&value, "clock")
                .map_err(|(field, reason)| f.invalid(K, field, reason))?,
        ),
    };
    let clock_overflow = match f.value(K, "clockOverflow")? {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => b,
        Some(other) => return Err(f.invalid(K, "clockOverflow", expected("a boolean", &other))),
    };
    let outcome = if f.boolean(K, "ok")? {
        Ok(f.raw("result"))
    } else {
        Err(f.error_body(K)?)
    };
    Ok(Done {
        id,
        duration_ms,
        logs,
        logs_truncated,
        clock,
        clock_overflow,
        outcome,
    })
}

/// The union of every message's fields, for encoding in wire order.
#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct Wire<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    call_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    provider_name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    safe_tool_name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    input: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    options: Option<RuntimeOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    providers: Option<&'a [ProviderManifest]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    replay: Option<&'a Replay>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ok: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    duration_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    logs: Option<&'a [String]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    logs_truncated: Option<LogsTruncated>,
    #[serde(skip_serializing_if = "Option::is_none")]
    clock: Option<&'a [ClockRun]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    clock_overflow: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a ErrorBody>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC_EXECUTE: &str = r#"{"type":"execute","id":"exec-1","code":"const value = await tools.echo({\"ok\":true}); value.ok","options":{"timeoutMs":1000,"memoryLimitBytes":67108864,"maxLogLines":100,"maxLogChars":64000},"providers":[{"name":"tools","tools":{"echo":{"safeName":"echo","originalName":"echo","description":"Echo input"}},"types":"declare namespace tools { ... }"}]}"#;

    fn reencode(line: &str) -> Value {
        let msg = Message::decode(line).unwrap();
        serde_json::from_str(&msg.encode()).unwrap()
    }

    #[test]
    fn spec_transcript_lines_round_trip() {
        let lines = [
            SPEC_EXECUTE,
            r#"{"type":"started","id":"exec-1"}"#,
            r#"{"type":"tool_call","callId":"call-1","providerName":"tools","safeToolName":"echo","input":{"ok":true}}"#,
            r#"{"type":"tool_result","callId":"call-1","ok":true,"result":{"ok":true}}"#,
            r#"{"type":"done","id":"exec-1","ok":true,"durationMs":3,"logs":[],"result":true}"#,
            r#"{"type":"cancel","id":"exec-2"}"#,
            r#"{"type":"done","id":"exec-2","ok":false,"durationMs":1005,"logs":[],"error":{"code":"timeout","message":"Execution timed out"}}"#,
        ];
        for line in lines {
            let original: Value = serde_json::from_str(line).unwrap();
            assert_eq!(reencode(line), original, "{line}");
        }
    }

    #[test]
    fn missing_options_take_defaults_per_field() {
        let line =
            r#"{"type":"execute","id":"a","code":"1","options":{"timeoutMs":7},"providers":[]}"#;
        let Message::Execute(e) = Message::decode(line).unwrap() else {
            panic!()
        };
        assert_eq!(e.options.timeout_ms, 7);
        assert_eq!(
            e.options.memory_limit_bytes,
            RuntimeOptions::DEFAULT_MEMORY_LIMIT_BYTES
        );
        let line = r#"{"type":"execute","id":"a","code":"1","providers":[]}"#;
        let Message::Execute(e) = Message::decode(line).unwrap() else {
            panic!()
        };
        assert_eq!(e.options, RuntimeOptions::default());
    }

    #[test]
    fn invalid_execute_names_the_field_and_keeps_the_id() {
        let cases = [
            (
                r#"{"type":"execute","code":"1","providers":[]}"#,
                None,
                "id",
            ),
            (
                r#"{"type":"execute","id":"x","providers":[]}"#,
                Some("x"),
                "code",
            ),
            (
                r#"{"type":"execute","id":"x","code":"1"}"#,
                Some("x"),
                "providers",
            ),
            (
                r#"{"type":"execute","id":"x","code":1,"providers":[]}"#,
                Some("x"),
                "code",
            ),
            (
                r#"{"type":"execute","id":"x","code":"1","options":{"timeoutMs":"5"},"providers":[]}"#,
                Some("x"),
                "options.timeoutMs",
            ),
            (
                r#"{"type":"execute","id":"x","code":"1","providers":[{"name":"t","tools":{"a":{}}}]}"#,
                Some("x"),
                "providers[0].tools.a.safeName",
            ),
        ];
        for (line, want_id, want_field) in cases {
            match Message::decode(line) {
                Err(DecodeError::InvalidField { id, field, .. }) => {
                    assert_eq!(id.as_deref(), want_id, "{line}");
                    assert_eq!(field, want_field, "{line}");
                }
                other => panic!("{line}: {other:?}"),
            }
        }
    }

    #[test]
    fn replay_and_clock_round_trip() {
        let lines = [
            r#"{"type":"execute","id":"r","code":"1","options":{"timeoutMs":5000,"memoryLimitBytes":67108864,"maxLogLines":100,"maxLogChars":64000},"providers":[],"replay":{"randomSeed":42,"clock":[[1000,2],[2000.5,1]]}}"#,
            r#"{"type":"execute","id":"r","code":"1","options":{"timeoutMs":5000,"memoryLimitBytes":67108864,"maxLogLines":100,"maxLogChars":64000},"providers":[],"replay":{"randomSeed":0}}"#,
            r#"{"type":"done","id":"r","ok":true,"durationMs":3,"logs":[],"clock":[[1000,2],[1700000000123,1]],"clockOverflow":true,"result":1}"#,
            r#"{"type":"done","id":"r","ok":true,"durationMs":3,"logs":[],"clock":[]}"#,
        ];
        for line in lines {
            let original: Value = serde_json::from_str(line).unwrap();
            assert_eq!(reencode(line), original, "{line}");
        }
        let Message::Execute(e) = Message::decode(lines[0]).unwrap() else {
            panic!("not an execute")
        };
        let replay = e.replay.unwrap();
        assert_eq!(replay.random_seed, 42);
        assert_eq!(
            replay.clock[1],
            ClockRun {
                ms: 2000.5,
                count: 1
            }
        );
        let Message::Done(d) = Message::decode(lines[2]).unwrap() else {
            panic!("not a done")
        };
        assert!(d.clock_overflow);
        assert_eq!(d.clock.unwrap().len(), 2);
        // Absent (or null) replay is an ordinary run, and a done without clock has none.
        let Message::Execute(e) = Message::decode(
            r#"{"type":"execute","id":"a","code":"1","providers":[],"replay":null}"#,
        )
        .unwrap() else {
            panic!("not an execute")
        };
        assert_eq!(e.replay, None);
        assert!(!Message::Execute(e).encode().contains("replay"));
    }

    #[test]
    fn malformed_replay_is_an_invalid_execute_naming_the_field() {
        let cases = [
            (r#""yes""#, "replay"),
            (r#"{"clock":[]}"#, "replay.randomSeed"),
            (r#"{"randomSeed":9007199254740992}"#, "replay.randomSeed"),
            (
                r#"{"randomSeed":1,"clock":[[1,1],[2,1],[3,1],[4,0]]}"#,
                "replay.clock[3][1]",
            ),
            (r#"{"randomSeed":1,"clock":[[1e400,1]]}"#, "replay"),
        ];
        for (replay, field) in cases {
            let line = format!(
                r#"{{"type":"execute","id":"x","code":"1","providers":[],"replay":{replay}}}"#
            );
            match Message::decode(&line) {
                Err(DecodeError::InvalidField { id, field: got, .. }) => {
                    assert_eq!(id.as_deref(), Some("x"), "{line}");
                    assert_eq!(got, field, "{line}");
                }
                other => panic!("{line}: {other:?}"),
            }
        }
        let done = r#"{"type":"done","id":"a","ok":true,"durationMs":1,"logs":[],"clock":[[1,0]]}"#;
        assert!(matches!(
            Message::decode(done),
            Err(DecodeError::InvalidField { field, .. }) if field == "clock[0][1]"
        ));
    }

    #[test]
    fn deep_payloads_decode_without_recursion() {
        let depth = 100_000;
        let result = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let line = format!(r#"{{"type":"tool_result","callId":"c","ok":true,"result":{result}}}"#);
        let Message::ToolResult(r) = Message::decode(&line).unwrap() else {
            panic!()
        };
        assert_eq!(r.outcome.unwrap().unwrap().get().len(), depth * 2);
    }

    #[test]
    fn garbage_is_classified() {
        assert!(matches!(
            Message::decode("nope"),
            Err(DecodeError::NotJson(_))
        ));
        assert!(matches!(
            Message::decode("[1]"),
            Err(DecodeError::NotAnObject("an array"))
        ));
        assert!(matches!(
            Message::decode("{}"),
            Err(DecodeError::MissingType)
        ));
        assert!(matches!(
            Message::decode(r#"{"type":"hello"}"#),
            Err(DecodeError::UnknownType(t)) if t == "hello"
        ));
    }

    #[test]
    fn undefined_result_has_no_result_field() {
        let done = Message::Done(Done {
            id: "a".into(),
            duration_ms: 1,
            logs: vec![],
            logs_truncated: None,
            clock: None,
            clock_overflow: false,
            outcome: Ok(None),
        });
        assert_eq!(
            done.encode(),
            r#"{"type":"done","id":"a","ok":true,"durationMs":1,"logs":[]}"#
        );
    }

    #[test]
    fn a_tool_error_with_a_code_of_the_hosts_own_is_a_runtime_error() {
        let line = r#"{"type":"tool_result","callId":"c","ok":false,"error":{"code":"quota_exceeded","message":"over quota"}}"#;
        let Message::ToolResult(r) = Message::decode(line).unwrap() else {
            panic!("not a tool_result")
        };
        let error = r.outcome.unwrap_err();
        assert_eq!(error.code, ErrorCode::RuntimeError);
        assert_eq!(error.message, "over quota");
        // A runner's done must still use one of the seven.
        let done = r#"{"type":"done","id":"a","ok":false,"durationMs":1,"logs":[],"error":{"code":"quota_exceeded","message":"m"}}"#;
        assert!(Message::decode(done).is_err());
    }

    #[test]
    fn escaped_lone_surrogates_become_replacement_characters() {
        let line = r#"{"type":"tool_result","callId":"c\udc00","ok":false,"error":{"code":"tool_error","message":"a\ud800b \ud83d\ude00 \\ud800"}}"#;
        let Message::ToolResult(r) = Message::decode(line).unwrap() else {
            panic!("not a tool_result")
        };
        assert_eq!(r.call_id, "c\u{fffd}");
        assert_eq!(
            r.outcome.unwrap_err().message,
            "a\u{fffd}b \u{1f600} \\ud800"
        );
        assert_eq!(replace_lone_surrogates(r#""ok \ud83d\ude00""#), None);
        assert_eq!(
            replace_lone_surrogates(r#""\ude00\ud83d""#).as_deref(),
            Some(r#""\uFFFD\uFFFD""#)
        );
    }

    #[test]
    fn size_hint_bounds_the_encoded_length() {
        let logs = vec!["\u{1}\"\\".repeat(50), "plain".into(), "é".repeat(10)];
        let messages = [
            Message::decode(SPEC_EXECUTE).unwrap(),
            Message::Done(Done {
                id: "a\u{0}".into(),
                duration_ms: u64::MAX,
                logs,
                logs_truncated: None,
                clock: Some(vec![
                    ClockRun {
                        ms: -1.5e-300,
                        count: u32::MAX
                    };
                    3
                ]),
                clock_overflow: true,
                outcome: Err(ErrorBody::new(ErrorCode::RuntimeError, "\u{7}".repeat(9))),
            }),
            Message::ToolCall(ToolCall {
                call_id: "call-1".into(),
                provider_name: "p".into(),
                safe_tool_name: "t".into(),
                input: Some(RawValue::from_string(r#"{"a":[1,2,"\u0000"]}"#.into()).unwrap()),
            }),
        ];
        for message in messages {
            assert!(message.encode().len() <= message.size_hint(), "{message:?}");
        }
    }
}
