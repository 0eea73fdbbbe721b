//! What a runner makes of one line it reads: the one classification a runner acts on and a
//! relay in front of it (the `--listen` supervisor) counts executions by.
//!
//! A line goes through the framing rules ([`LineFramer`](crate::LineFramer): size, blank,
//! UTF-8) and then [`Message::decode`]; [`Received::answered_execute`] says whether the runner
//! owes it exactly one `done`. A relay that counts executions in flight with
//! [`answered_execute`] therefore counts exactly the `execute`s the runner answers: a line with
//! trailing garbage, a NUL after the object, or a `type` past the first 4 KiB is counted the
//! way the runner reads it.

use crate::framing::{cut_line, peek_envelope, Cut, Frame};
use crate::message::{decode_if_execute, DecodeError, Message};

/// One line a runner read, classified.
#[derive(Debug)]
pub enum Received {
    /// A well-formed message.
    Message(Message),
    /// A line that is not a valid message.
    Invalid(DecodeError),
    /// A line over the message size limit, refused before parsing.
    Oversized {
        /// Its size in bytes.
        len: usize,
        /// Its first bytes (at most [`PEEK_BYTES`](crate::PEEK_BYTES)), to tell which message
        /// it was.
        prefix: Vec<u8>,
    },
    /// A line that is not UTF-8.
    NotUtf8 {
        /// Its size in bytes.
        len: usize,
    },
}

impl Received {
    /// Classifies one framed line.
    pub fn from_frame(frame: Frame) -> Received {
        match frame {
            Frame::Line(line) => Received::from_text(&line),
            Frame::InvalidUtf8 { len } => Received::NotUtf8 { len },
            Frame::Oversized { len, prefix } => Received::Oversized { len, prefix },
        }
    }

    /// Decodes one message text.
    pub fn from_text(text: &str) -> Received {
        match Message::decode(text) {
            Ok(message) => Received::Message(message),
            Err(error) => Received::Invalid(error),
        }
    }

    /// When this line is an `execute` a runner answers with exactly one `done`, the id that
    /// `done` carries: a decoded `execute` (run, or refused as busy or invalid), an `execute`
    /// with a bad field (its id, or `""` when it has no readable one), and an oversized line
    /// whose first bytes say `"type":"execute"` (the id read there, or `""`). Anything else
    /// (not JSON, trailing bytes after the object, no `type`, not UTF-8) is logged by the
    /// runner and answered with nothing.
    pub fn answered_execute(&self) -> Option<String> {
        match self {
            Received::Message(Message::Execute(execute)) => Some(execute.id.clone()),
            Received::Invalid(DecodeError::InvalidField {
                kind: "execute",
                id,
                ..
            }) => Some(id.clone().unwrap_or_default()),
            Received::Oversized { prefix, .. } => {
                let envelope = peek_envelope(prefix);
                (envelope.kind.as_deref() == Some("execute"))
                    .then(|| envelope.id.unwrap_or_default())
            }
            _ => None,
        }
    }
}

/// The id of the `done` a runner with message size limit `limit` owes for `line` (one
/// complete line, its newline removed) when it is an `execute`: exactly what
/// [`Received::answered_execute`] says of the line the runner frames and decodes, by the same
/// steps ([`LineFramer`](crate::LineFramer)'s rules, then [`Message::decode`]'s), and `None`
/// for anything else. For a relay that counts executions in flight: it borrows the line, and
/// decodes nothing of a line that is not an `execute` past its `type`.
pub fn answered_execute(line: &[u8], limit: usize) -> Option<String> {
    match cut_line(line, limit) {
        Cut::Blank | Cut::NotUtf8(_) => None,
        Cut::Text(text) => match decode_if_execute(text)? {
            Ok(execute) => Some(execute.id),
            Err(error) => Received::Invalid(error).answered_execute(),
        },
        Cut::Oversized(len, prefix) => Received::Oversized {
            len,
            prefix: prefix.to_vec(),
        }
        .answered_execute(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LineFramer;

    const EXECUTE: &str = r#"{"type":"execute","id":"e1","code":"1","providers":[]}"#;

    /// What the runner's path (LineFramer, then `Received::from_frame`) makes of `line`.
    fn through_framer(line: &[u8], limit: usize) -> Option<Received> {
        let mut framer = LineFramer::new(limit);
        framer.push(line);
        framer.push(b"\n");
        let frame = framer.next_frame();
        assert!(framer.next_frame().is_none());
        frame.map(Received::from_frame)
    }

    fn answered(line: &[u8], limit: usize) -> Option<String> {
        let relay = answered_execute(line, limit);
        let runner = through_framer(line, limit).and_then(|r| r.answered_execute());
        assert_eq!(relay, runner, "relay and runner disagree on {line:?}");
        relay
    }

    #[test]
    fn only_an_execute_the_runner_answers_is_counted_by_the_shared_classifier() {
        let id = Some("e1".to_owned());
        assert_eq!(answered(EXECUTE.as_bytes(), 1000), id);
        // Trailing garbage: the runner cannot decode it and answers nothing.
        for tail in [" {}", "\u{0}", " x", "}", "\u{0}{}", " []"] {
            let line = format!("{EXECUTE}{tail}");
            assert_eq!(answered(line.as_bytes(), 1000), None, "{line:?}");
        }
        // Whitespace around the object is JSON whitespace; a trailing \r is the framing's.
        assert_eq!(answered(format!(" {EXECUTE} \r").as_bytes(), 1000), id);
        // A bad field is answered with validation_error, under its id.
        let bad = r#"{"type":"execute","id":"e2","code":1,"providers":[]}"#;
        assert_eq!(answered(bad.as_bytes(), 1000), Some("e2".to_owned()));
        let no_id = r#"{"type":"execute","code":"1","providers":[]}"#;
        assert_eq!(answered(no_id.as_bytes(), 1000), Some(String::new()));
        // The `type` after the first 4 KiB: a peek would miss it, the decoder does not.
        let late = format!(
            r#"{{"code":"{}","id":"e3","providers":[],"type":"execute"}}"#,
            "x".repeat(8000)
        );
        assert_eq!(answered(late.as_bytes(), 100_000), Some("e3".to_owned()));
        // Oversized: answered when its first bytes say execute.
        assert_eq!(answered(EXECUTE.as_bytes(), 20), id);
        assert_eq!(answered(late.as_bytes(), 1000), None);
        // Not UTF-8, blank, other messages: nothing.
        assert_eq!(
            answered(b"{\"type\":\"execute\",\"id\":\"\xff\"}", 1000),
            None
        );
        assert_eq!(answered(b"   \t", 1000), None);
        assert_eq!(answered(br#"{"type":"cancel","id":"e1"}"#, 1000), None);
    }
}
