//! NDJSON framing: splits a byte stream into lines and checks each line's size before anything parses it.
//!
//! [`LineFramer`] is a pure state machine: the caller pushes the bytes it read and pulls
//! [`Frame`]s. A line longer than the limit is never buffered whole: only its first
//! [`PEEK_BYTES`] are kept, so the caller can still say which message was refused.

use std::collections::VecDeque;

/// Default maximum size of one message line, in bytes (newline excluded): 16 MiB.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// How much of an oversized line is kept for [`peek_envelope`].
pub const PEEK_BYTES: usize = 4096;

/// One unit pulled out of the byte stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A complete line of valid UTF-8, newline (and a preceding `\r`) removed.
    Line(String),
    /// A complete line that is not valid UTF-8; holds its length in bytes.
    InvalidUtf8 {
        /// Length of the line in bytes.
        len: usize,
    },
    /// A line over the limit; it was skipped up to its newline.
    Oversized {
        /// Length of the line in bytes.
        len: usize,
        /// Its first bytes, at most [`PEEK_BYTES`].
        prefix: Vec<u8>,
    },
}

/// Splits pushed bytes into [`Frame`]s, enforcing a per-line size limit.
#[derive(Debug)]
pub struct LineFramer {
    limit: usize,
    buf: Vec<u8>,
    /// Set while skipping the rest of an oversized line: its length so far and prefix.
    skipping: Option<(usize, Vec<u8>)>,
    ready: VecDeque<Frame>,
}

impl LineFramer {
    /// A framer refusing lines longer than `limit` bytes.
    pub fn new(limit: usize) -> Self {
        LineFramer {
            limit,
            buf: Vec::new(),
            skipping: None,
            ready: VecDeque::new(),
        }
    }

    /// Feeds bytes read from the transport.
    pub fn push(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let newline = bytes.iter().position(|&b| b == b'\n');
            let (chunk, rest, ends_line) = match newline {
                Some(i) => (&bytes[..i], &bytes[i + 1..], true),
                None => (bytes, &[][..], false),
            };
            bytes = rest;
            if let Some((len, prefix)) = &mut self.skipping {
                *len += chunk.len();
                // However the line was split into reads, keep its first PEEK_BYTES.
                let room = PEEK_BYTES.saturating_sub(prefix.len());
                prefix.extend_from_slice(&chunk[..room.min(chunk.len())]);
                if ends_line {
                    let (len, prefix) = self.skipping.take().expect("skipping");
                    self.ready.push_back(Frame::Oversized { len, prefix });
                }
                continue;
            }
            if self.buf.len() + chunk.len() > self.limit.saturating_add(1) {
                // Over the limit (one spare byte for a trailing '\r'): keep a prefix only.
                let mut prefix = std::mem::take(&mut self.buf);
                let len = prefix.len() + chunk.len();
                let room = PEEK_BYTES.saturating_sub(prefix.len());
                prefix.extend_from_slice(&chunk[..room.min(chunk.len())]);
                prefix.truncate(PEEK_BYTES);
                if ends_line {
                    self.ready.push_back(Frame::Oversized { len, prefix });
                } else {
                    self.skipping = Some((len, prefix));
                }
                continue;
            }
            self.buf.extend_from_slice(chunk);
            if ends_line {
                let line = std::mem::take(&mut self.buf);
                self.finish_line(line);
            }
        }
    }

    /// Ends the stream: a final line without a newline still counts.
    pub fn finish(&mut self) {
        if let Some((len, prefix)) = self.skipping.take() {
            self.ready.push_back(Frame::Oversized { len, prefix });
        } else if !self.buf.is_empty() {
            let line = std::mem::take(&mut self.buf);
            self.finish_line(line);
        }
    }

    /// The next complete frame, if any.
    pub fn next_frame(&mut self) -> Option<Frame> {
        self.ready.pop_front()
    }

    fn finish_line(&mut self, line: Vec<u8>) {
        if let Some(frame) = frame_line(line, self.limit) {
            self.ready.push_back(frame);
        }
    }
}

/// One line as the framing rules cut it, borrowed: what [`LineFramer`] makes a [`Frame`] of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cut<'a> {
    /// Nothing but whitespace: carries nothing, and is skipped.
    Blank,
    /// Valid UTF-8 within the limit (a trailing `\r` removed).
    Text(&'a str),
    /// Not valid UTF-8, within the limit: its length in bytes.
    NotUtf8(usize),
    /// Over the limit: its length, and its first [`PEEK_BYTES`].
    Oversized(usize, &'a [u8]),
}

/// Cuts one complete line (its newline removed) by the framing rules under `limit`: a
/// trailing `\r` goes, a line over `limit` is oversized, a blank one carries nothing, and the
/// rest is text or not UTF-8. The one place those rules live: [`LineFramer`] applies them to a
/// stream, [`crate::answered_execute`] to a line a relay holds.
pub(crate) fn cut_line(line: &[u8], limit: usize) -> Cut<'_> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.len() > limit {
        return Cut::Oversized(line.len(), &line[..PEEK_BYTES.min(line.len())]);
    }
    if line.iter().all(u8::is_ascii_whitespace) {
        return Cut::Blank;
    }
    match std::str::from_utf8(line) {
        Ok(text) => Cut::Text(text),
        Err(_) => Cut::NotUtf8(line.len()),
    }
}

/// The [`Frame`] a complete line makes (`None` for a blank line), by [`cut_line`]'s rules.
fn frame_line(mut line: Vec<u8>, limit: usize) -> Option<Frame> {
    let frame = match cut_line(&line, limit) {
        Cut::Blank => return None,
        Cut::NotUtf8(len) => Frame::InvalidUtf8 { len },
        Cut::Oversized(len, prefix) => Frame::Oversized {
            len,
            prefix: prefix.to_vec(),
        },
        Cut::Text(text) => {
            let len = text.len();
            line.truncate(len);
            // Checked by `cut_line`: converting the buffer itself saves a copy of the line.
            match String::from_utf8(line) {
                Ok(text) => Frame::Line(text),
                Err(e) => Frame::InvalidUtf8 {
                    len: e.as_bytes().len(),
                },
            }
        }
    };
    Some(frame)
}

/// What can be read of a message from its first bytes: top-level string fields only.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Envelope {
    /// The `type` field, if seen.
    pub kind: Option<String>,
    /// The `id` field, if seen.
    pub id: Option<String>,
    /// The `callId` field, if seen.
    pub call_id: Option<String>,
}

/// Reads the top-level `type`, `id` and `callId` string fields from the start of a JSON
/// object that may be cut anywhere. Fields after the cut are simply not seen.
pub fn peek_envelope(prefix: &[u8]) -> Envelope {
    let mut env = Envelope::default();
    let mut p = Peek { s: prefix, i: 0 };
    p.ws();
    if !p.eat(b'{') {
        return env;
    }
    loop {
        p.ws();
        let Some(key) = p.string() else { return env };
        p.ws();
        if !p.eat(b':') {
            return env;
        }
        p.ws();
        if p.peek() == Some(b'"') {
            let Some(value) = p.string() else { return env };
            match key.as_str() {
                "type" => env.kind = Some(value),
                "id" => env.id = Some(value),
                "callId" => env.call_id = Some(value),
                _ => {}
            }
        } else if !p.skip_value() {
            return env;
        }
        p.ws();
        if !p.eat(b',') {
            return env;
        }
    }
}

struct Peek<'a> {
    s: &'a [u8],
    i: usize,
}

impl Peek<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }
    fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.i += 1;
        }
    }
    /// A complete JSON string, decoded; `None` if cut or malformed.
    fn string(&mut self) -> Option<String> {
        let start = self.i;
        if !self.eat(b'"') {
            return None;
        }
        let mut escaped = false;
        while let Some(b) = self.peek() {
            self.i += 1;
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => {
                    let text = std::str::from_utf8(&self.s[start..self.i]).ok()?;
                    return serde_json::from_str(text).ok();
                }
                _ => {}
            }
        }
        None
    }
    /// Skips one non-string value (nesting counted, strings inside honoured).
    fn skip_value(&mut self) -> bool {
        let mut depth = 0usize;
        while let Some(b) = self.peek() {
            match b {
                b'"' => {
                    if self.string().is_none() {
                        return false;
                    }
                    continue;
                }
                b'[' | b'{' => depth += 1,
                b']' | b'}' if depth == 0 => return true,
                b']' | b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        self.i += 1;
                        return true;
                    }
                }
                b',' if depth == 0 => return true,
                _ => {}
            }
            self.i += 1;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(limit: usize, chunks: &[&[u8]]) -> Vec<Frame> {
        let mut f = LineFramer::new(limit);
        for c in chunks {
            f.push(c);
        }
        f.finish();
        std::iter::from_fn(|| f.next_frame()).collect()
    }

    #[test]
    fn lines_split_across_pushes_are_joined() {
        let got = frames(100, &[b"{\"a\"", b":1}\n{\"b\":2}\r\n", b"\n", b"tail"]);
        assert_eq!(
            got,
            vec![
                Frame::Line("{\"a\":1}".into()),
                Frame::Line("{\"b\":2}".into()),
                Frame::Line("tail".into()),
            ]
        );
    }

    #[test]
    fn oversized_line_is_refused_without_buffering_it_and_the_next_line_survives() {
        let big = vec![b'x'; 50_000];
        let got = frames(
            1000,
            &[
                b"{\"type\":\"execute\",\"id\":\"e1\",",
                &big,
                &big,
                b"\n{}\n",
            ],
        );
        match &got[0] {
            Frame::Oversized { len, prefix } => {
                assert_eq!(*len, 100_000 + 28);
                assert_eq!(prefix.len(), PEEK_BYTES);
                let env = peek_envelope(prefix);
                assert_eq!(env.kind.as_deref(), Some("execute"));
                assert_eq!(env.id.as_deref(), Some("e1"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(got[1], Frame::Line("{}".into()));
    }

    #[test]
    fn oversized_prefix_does_not_depend_on_how_reads_split_the_line() {
        let line = b"{\"code\":\"xxxxxxxxxxxxxxxxxxxxxxxx\",\"type\":\"execute\",\"id\":\"e1\"}\n";
        let mut f = LineFramer::new(8);
        for byte in line {
            f.push(std::slice::from_ref(byte));
        }
        match f.next_frame() {
            Some(Frame::Oversized { len, prefix }) => {
                assert_eq!(len, line.len() - 1);
                assert_eq!(peek_envelope(&prefix).id.as_deref(), Some("e1"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn invalid_utf8_is_its_own_frame() {
        let got = frames(100, &[b"\xff\xfe\n{}\n"]);
        assert_eq!(
            got,
            vec![Frame::InvalidUtf8 { len: 2 }, Frame::Line("{}".into())]
        );
    }

    #[test]
    fn peek_skips_nested_values_and_stops_at_the_cut() {
        let env = peek_envelope(
            br#"{"options":{"a":[1,{"b":"}"}]},"type":"tool_result","callId":"c-\"1","result":[[["#,
        );
        assert_eq!(env.kind.as_deref(), Some("tool_result"));
        assert_eq!(env.call_id.as_deref(), Some("c-\"1"));
        assert_eq!(peek_envelope(b"garbage"), Envelope::default());
        assert_eq!(peek_envelope(br#"{"id":"cut"#).id, None);
    }
}
