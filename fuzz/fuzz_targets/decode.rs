//! Fuzz target: arbitrary bytes through `LineFramer`, `Message::decode` and `peek_envelope`.
//!
//! Never panics, and agrees with two oracles:
//! - framing is independent of how the stream is split into pushes, and equals a line-by-line
//!   model of the documented rules (size limit with one spare byte for `\r`, blank lines
//!   dropped, invalid UTF-8 reported by length, oversized lines by length and prefix);
//! - `peek_envelope` of a line that decodes, and has no backslash escapes, reads the same
//!   `type`, `id` and `callId` as the decoder.
#![no_main]

use execbox_protocol::{
    peek_envelope, Frame, LineFramer, Message, DEFAULT_MAX_MESSAGE_BYTES, PEEK_BYTES,
};

use libfuzzer_sys::fuzz_target;

/// Frames `data` pushed at once (`seed` is `None`) or in pieces whose sizes come from `seed`.
fn frames(limit: usize, data: &[u8], seed: Option<u64>) -> Vec<Frame> {
    let mut framer = LineFramer::new(limit);
    let Some(mut seed) = seed else {
        framer.push(data);
        framer.finish();
        return std::iter::from_fn(|| framer.next_frame()).collect();
    };
    let mut rest = data;
    while !rest.is_empty() {
        // xorshift64: cheap, deterministic split points.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let n = (seed % 17) as usize;
        let n = if n == 16 {
            rest.len()
        } else {
            n.min(rest.len())
        };
        framer.push(&rest[..n]);
        rest = &rest[n..];
    }
    framer.finish();
    std::iter::from_fn(|| framer.next_frame()).collect()
}

/// The frames the documented rules give, line by line.
fn model(limit: usize, data: &[u8]) -> Vec<Frame> {
    let mut out = Vec::new();
    let mut lines: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
    if lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop(); // a trailing newline ends the last line; it does not start one
    }
    for raw in lines {
        if raw.len() > limit.saturating_add(1) {
            out.push(Frame::Oversized {
                len: raw.len(),
                prefix: raw[..raw.len().min(PEEK_BYTES)].to_vec(),
            });
            continue;
        }
        let line = raw.strip_suffix(b"\r").unwrap_or(raw);
        if line.len() > limit {
            out.push(Frame::Oversized {
                len: line.len(),
                prefix: line[..line.len().min(PEEK_BYTES)].to_vec(),
            });
        } else if line.iter().all(u8::is_ascii_whitespace) {
        } else {
            match std::str::from_utf8(line) {
                Ok(s) => out.push(Frame::Line(s.to_owned())),
                Err(_) => out.push(Frame::InvalidUtf8 { len: line.len() }),
            }
        }
    }
    out
}

/// Decodes one line and cross-checks `peek_envelope` against the decoder.
fn decode(line: &str) {
    let envelope = peek_envelope(line.as_bytes());
    let Ok(message) = Message::decode(line) else {
        return;
    };
    if line.contains('\\') {
        return; // peek gives up at strings it cannot read; escapes are where that happens
    }
    assert_eq!(envelope.kind.as_deref(), Some(message.kind()), "{line}");
    let (id, call_id) = match &message {
        Message::Execute(m) => (Some(&m.id), None),
        Message::Cancel(m) => (Some(&m.id), None),
        Message::Started(m) => (Some(&m.id), None),
        Message::Done(m) => (Some(&m.id), None),
        Message::ToolCall(m) => (None, Some(&m.call_id)),
        Message::ToolResult(m) => (None, Some(&m.call_id)),
    };
    if let Some(id) = id {
        assert_eq!(envelope.id.as_ref(), Some(id), "{line}");
    }
    if let Some(call_id) = call_id {
        assert_eq!(envelope.call_id.as_ref(), Some(call_id), "{line}");
    }
}

fuzz_target!(|data: &[u8]| {
    let seed = data.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    }) | 1;
    // Small limits exercise the oversized paths, below and above PEEK_BYTES; the real one
    // the decoder.
    let small = 1 + data.first().map_or(0, |&b| usize::from(b) % 64);
    for limit in [small, PEEK_BYTES + small, DEFAULT_MAX_MESSAGE_BYTES] {
        let whole = frames(limit, data, None);
        let split = frames(limit, data, Some(seed));
        let want = model(limit, data);
        assert_eq!(split, whole, "framing depends on the push boundaries");
        assert_eq!(whole, want, "framing differs from the model");
        for frame in whole {
            match frame {
                Frame::Line(line) => decode(&line),
                Frame::Oversized { prefix, .. } => {
                    peek_envelope(&prefix);
                }
                Frame::InvalidUtf8 { .. } => {}
            }
        }
    }
    peek_envelope(data);
});
