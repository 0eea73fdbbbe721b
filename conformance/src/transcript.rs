//! Transcript files: parsing `.ndjson` lines into steps, with errors naming the file and line.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::json;
use crate::matcher::Pattern;

/// One scenario: the lines a host sends and the messages a conforming runner answers with.
#[derive(Debug)]
pub struct Transcript {
    /// `<area>/<name>`: the path under the transcripts directory, without `.ndjson`.
    pub name: String,
    /// Where it was read from, for messages (a path, or whatever [`Transcript::parse`] was given).
    pub source: String,
    /// The `{"comment": ...}` line: what the transcript checks and why.
    pub comment: Option<String>,
    /// The steps, in file order.
    pub steps: Vec<Step>,
}

/// One line of a transcript that does something.
#[derive(Debug)]
pub struct Step {
    /// 1-based line number in the file.
    pub line: usize,
    /// What to do.
    pub action: Action,
}

/// What a step does.
#[derive(Debug)]
pub enum Action {
    /// Send a message (`{"send": MSG}`, or a bare execute/cancel/tool_result line).
    Send {
        /// The message's JSON text, exactly as written in the transcript.
        text: String,
        /// Its top-level `callId`, rewritten to the runner's id if a received message bound it.
        call_id: Option<String>,
    },
    /// Send this text as one line / one text frame, unparsed (`{"send_raw": "..."}`).
    SendRaw(String),
    /// Expect this to be the runner's next message (`{"recv": MSG}` or a bare started/tool_call/done line).
    Recv(Expected),
    /// Wait this long before going on (`{"sleep_ms": N}`).
    Sleep(Duration),
    /// Close the transport: stdin EOF, or a WebSocket close (`{"close": true}`).
    Close,
    /// The runner process must exit within this long; stdio only (`{"expect_exit_within_ms": N}`).
    ExpectExitWithin(Duration),
    /// No runner message may arrive within this long (`{"expect_silence_ms": N}`).
    ExpectSilence(Duration),
    /// The next `Recv` must arrive within this long instead of the default (`{"expect_within_ms": N}`).
    ExpectWithin(Duration),
}

/// An expected runner message, compiled from a transcript line.
pub struct Expected {
    pub(crate) pattern: Pattern,
    text: String,
}

impl Expected {
    /// The expected message as compact JSON, as the transcript wrote it.
    pub fn text(&self) -> &str {
        &self.text
    }
}

impl fmt::Debug for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Expected").field(&self.text).finish()
    }
}

/// Why a transcript or a transcript directory could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A line is not valid transcript syntax.
    #[error("{source_name}:{line}: {message}")]
    Syntax {
        /// The file (or source name) holding the line.
        source_name: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A file or directory could not be read.
    #[error("cannot read {path}: {error}")]
    Io {
        /// The path that failed.
        path: PathBuf,
        /// The underlying error.
        error: std::io::Error,
    },
}

/// Messages the host sends, by `type`; a bare line of one of these types is a send.
const SEND_TYPES: [&str; 3] = ["execute", "cancel", "tool_result"];
/// Messages the runner sends, by `type`; a bare line of one of these types is a recv.
const RECV_TYPES: [&str; 3] = ["started", "tool_call", "done"];

impl Transcript {
    /// Parses transcript text. `name` becomes [`Transcript::name`] and names the source in errors.
    pub fn parse(name: &str, text: &str) -> Result<Transcript, LoadError> {
        Self::parse_from(name, name, text)
    }

    /// Reads and parses one transcript file; its name is the file stem.
    pub fn from_file(path: &Path) -> Result<Transcript, LoadError> {
        let text = std::fs::read_to_string(path).map_err(|error| LoadError::Io {
            path: path.to_path_buf(),
            error,
        })?;
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        Self::parse_from(&name, &path.display().to_string(), &text)
    }

    fn parse_from(name: &str, source: &str, text: &str) -> Result<Transcript, LoadError> {
        // Expected values may nest deep; parse them where the stack is big enough.
        json::with_big_stack(|| {
            let mut transcript = Transcript {
                name: name.to_string(),
                source: source.to_string(),
                comment: None,
                steps: Vec::new(),
            };
            let mut pending_within: Option<usize> = None;
            for (i, raw_line) in text.lines().enumerate() {
                let line = i + 1;
                let syntax = |message: String| LoadError::Syntax {
                    source_name: source.to_string(),
                    line,
                    message,
                };
                let content = raw_line.strip_suffix('\r').unwrap_or(raw_line);
                if content.trim().is_empty() {
                    continue;
                }
                match parse_line(content).map_err(syntax)? {
                    Line::Comment(c) => {
                        if transcript.comment.is_none() && transcript.steps.is_empty() {
                            transcript.comment = Some(c);
                        }
                    }
                    Line::Step(action) => {
                        match &action {
                            Action::ExpectWithin(_) => {
                                if let Some(earlier) = pending_within {
                                    return Err(syntax(format!(
                                        "expect_within_ms on line {earlier} is not followed by a recv"
                                    )));
                                }
                                pending_within = Some(line);
                            }
                            Action::Recv(_) => pending_within = None,
                            _ => {
                                if let Some(earlier) = pending_within {
                                    return Err(syntax(format!(
                                        "expect_within_ms on line {earlier} must be followed by a recv, \
                                         not this line"
                                    )));
                                }
                            }
                        }
                        transcript.steps.push(Step { line, action });
                    }
                }
            }
            if let Some(line) = pending_within {
                return Err(LoadError::Syntax {
                    source_name: source.to_string(),
                    line,
                    message: "expect_within_ms is not followed by a recv".into(),
                });
            }
            Ok(transcript)
        })
    }
}

/// Reads every `*.ndjson` under `dir` (recursively), sorted by path.
///
/// Each transcript is named by its path relative to `dir` without the extension, with `/`
/// separators: `spec/minimal_success`.
pub fn load_dir(dir: impl AsRef<Path>) -> Result<Vec<Transcript>, LoadError> {
    let dir = dir.as_ref();
    let mut files = Vec::new();
    collect(dir, &mut files)?;
    files.sort();
    files
        .iter()
        .map(|path| {
            let mut t = Transcript::from_file(path)?;
            let relative = path.strip_prefix(dir).unwrap_or(path).with_extension("");
            t.name = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            Ok(t)
        })
        .collect()
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), LoadError> {
    let io = |error| LoadError::Io {
        path: dir.to_path_buf(),
        error,
    };
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        if path.is_dir() {
            collect(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "ndjson") {
            out.push(path);
        }
    }
    Ok(())
}

/// What one non-blank line is.
enum Line {
    Comment(String),
    Step(Action),
}

fn parse_line(content: &str) -> Result<Line, String> {
    let fields =
        RawObject::parse(content).map_err(|e| format!("each line must be one JSON object: {e}"))?;
    if let Some(kind) = fields.get("type") {
        let kind: String = serde_json::from_str(kind.get())
            .map_err(|_| "\"type\" must be a string".to_string())?;
        return if SEND_TYPES.contains(&kind.as_str()) {
            Ok(Line::Step(send(content, &fields)))
        } else if RECV_TYPES.contains(&kind.as_str()) {
            Ok(Line::Step(Action::Recv(expected(content)?)))
        } else {
            Err(format!(
                "a bare line of type {kind:?} has no direction; wrap it in {{\"send\": ...}} or {{\"recv\": ...}}"
            ))
        };
    }
    let [(key, value)] = fields.0.as_slice() else {
        return Err(format!(
            "a line is a bare message (with \"type\") or has exactly one key, got {:?}",
            fields.0.iter().map(|(k, _)| k).collect::<Vec<_>>()
        ));
    };
    let text = value.get();
    let millis = || -> Result<Duration, String> {
        serde_json::from_str::<u64>(text)
            .map(Duration::from_millis)
            .map_err(|_| {
                format!("{key:?} must be a non-negative integer (milliseconds), got {text}")
            })
    };
    let action = match key.as_str() {
        "comment" => {
            return serde_json::from_str::<String>(text)
                .map(Line::Comment)
                .map_err(|_| "\"comment\" must be a string".into())
        }
        "send" => match RawObject::parse(text) {
            Ok(inner) => send(text, &inner),
            Err(_) => Action::Send {
                text: text.to_string(),
                call_id: None,
            },
        },
        "send_raw" => Action::SendRaw(
            serde_json::from_str::<String>(text)
                .map_err(|_| "\"send_raw\" must be a string".to_string())?,
        ),
        "recv" => Action::Recv(expected(text)?),
        "sleep_ms" => Action::Sleep(millis()?),
        "close" => match text {
            "true" => Action::Close,
            _ => return Err("\"close\" must be true".into()),
        },
        "expect_exit_within_ms" => Action::ExpectExitWithin(millis()?),
        "expect_silence_ms" => Action::ExpectSilence(millis()?),
        "expect_within_ms" => Action::ExpectWithin(millis()?),
        other => {
            return Err(format!(
            "unknown directive {other:?} (known: comment, send, send_raw, recv, sleep_ms, close, \
                 expect_exit_within_ms, expect_silence_ms, expect_within_ms)"
        ))
        }
    };
    Ok(Line::Step(action))
}

fn send(text: &str, fields: &RawObject) -> Action {
    let call_id = fields
        .get("callId")
        .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok());
    Action::Send {
        text: text.to_string(),
        call_id,
    }
}

fn expected(text: &str) -> Result<Expected, String> {
    let value: Value =
        json::parse(text).map_err(|e| format!("cannot read the expected message: {e}"))?;
    let pattern = Pattern::message(&value)?;
    Ok(Expected {
        pattern,
        text: value.to_string(),
    })
}

/// A JSON object's top-level fields in order, each kept as raw text (no depth limit applies).
pub(crate) struct RawObject(pub(crate) Vec<(String, Box<RawValue>)>);

impl RawObject {
    pub(crate) fn parse(text: &str) -> Result<RawObject, serde_json::Error> {
        serde_json::from_str(text)
    }

    pub(crate) fn get(&self, key: &str) -> Option<&RawValue> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_ref())
    }

    /// The object's JSON text with the top-level `key` set to the string `value`.
    pub(crate) fn with_string(&self, key: &str, value: &str) -> String {
        let mut out = String::from("{");
        for (i, (k, v)) in self.0.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&Value::String(k.clone()).to_string());
            out.push(':');
            if k == key {
                out.push_str(&Value::String(value.to_string()).to_string());
            } else {
                out.push_str(v.get());
            }
        }
        out.push('}');
        out
    }
}

impl<'de> Deserialize<'de> for RawObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct RawObjectVisitor;
        impl<'de> Visitor<'de> for RawObjectVisitor {
            type Value = RawObject;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawObject, A::Error> {
                let mut fields = Vec::new();
                while let Some(entry) = map.next_entry::<String, Box<RawValue>>()? {
                    fields.push(entry);
                }
                Ok(RawObject(fields))
            }
        }
        deserializer.deserialize_map(RawObjectVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_lines_take_their_direction_from_their_type() {
        let t = Transcript::parse(
            "t",
            concat!(
                "{\"comment\": \"why\"}\n",
                "{\"type\":\"execute\",\"id\":\"a\",\"code\":\"1\",\"providers\":[]}\n",
                "\n",
                "{\"type\":\"started\",\"id\":\"a\"}\n",
                "{\"expect_within_ms\": 50}\n",
                "{\"recv\": {\"type\":\"done\",\"id\":\"a\",\"ok\":true,\"durationMs\":0,\"logs\":[],\"result\":1}}\n",
                "{\"send\": {\"type\":\"tool_result\", \"callId\":\"c\",\"ok\":true}}\n",
                "{\"send_raw\": \"garbage\"}\n",
                "{\"sleep_ms\": 5}\n{\"expect_silence_ms\": 5}\n{\"close\": true}\n{\"expect_exit_within_ms\": 9}\n",
            ),
        )
        .unwrap();
        assert_eq!(t.comment.as_deref(), Some("why"));
        let lines: Vec<usize> = t.steps.iter().map(|s| s.line).collect();
        assert_eq!(lines, [2, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        assert!(
            matches!(&t.steps[0].action, Action::Send { text, call_id: None } if text.starts_with("{\"type\":\"execute\""))
        );
        assert!(matches!(&t.steps[1].action, Action::Recv(_)));
        assert!(
            matches!(&t.steps[4].action, Action::Send { text, call_id: Some(c) }
            if c == "c" && text == "{\"type\":\"tool_result\", \"callId\":\"c\",\"ok\":true}")
        );
        assert!(matches!(&t.steps[5].action, Action::SendRaw(s) if s == "garbage"));
    }

    #[test]
    fn errors_name_the_source_and_line() {
        let cases = [
            ("{\"comment\":\"x\"}\nnot json", 2, "one JSON object"),
            ("{\"type\":\"hello\"}", 1, "no direction"),
            ("{\"sleep_ms\": -1}", 1, "non-negative"),
            ("{\"recv\": {\"a\": \"$nope\"}}", 1, "unknown matcher"),
            (
                "{\"expect_within_ms\": 5}\n{\"sleep_ms\": 5}",
                2,
                "followed by a recv",
            ),
            ("{\"expect_within_ms\": 5}", 1, "not followed"),
            ("{\"send\": 1, \"recv\": 2}", 1, "exactly one key"),
            ("{\"bogus\": 1}", 1, "unknown directive"),
        ];
        for (text, line, needle) in cases {
            let err = Transcript::parse("area/x", text).unwrap_err().to_string();
            assert!(err.starts_with(&format!("area/x:{line}: ")), "{err}");
            assert!(err.contains(needle), "{err}");
        }
    }

    #[test]
    fn raw_objects_rewrite_one_field_and_keep_the_rest() {
        let deep = format!("{}{}", "[".repeat(50_000), "]".repeat(50_000));
        let text = format!(
            "{{\"type\":\"tool_result\",\"callId\":\"call-1\",\"ok\":true,\"result\":{deep}}}"
        );
        let obj = RawObject::parse(&text).unwrap();
        let rewritten = obj.with_string("callId", "r\"1");
        assert_eq!(rewritten, text.replace("\"call-1\"", "\"r\\\"1\""));
    }
}
