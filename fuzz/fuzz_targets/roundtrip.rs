//! Fuzz target: every line that decodes re-encodes canonically.
//!
//! For each line `Message::decode` accepts, `encode` gives one line (no newline, framed back as
//! exactly itself) that decodes again and re-encodes to the identical string.
#![no_main]

use execbox_protocol::{Frame, LineFramer, Message, DEFAULT_MAX_MESSAGE_BYTES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut framer = LineFramer::new(DEFAULT_MAX_MESSAGE_BYTES);
    framer.push(data);
    framer.finish();
    while let Some(frame) = framer.next_frame() {
        let Frame::Line(line) = frame else { continue };
        let Ok(message) = Message::decode(&line) else {
            continue;
        };
        let first = message.encode();
        assert!(!first.contains('\n'), "encoding spans lines: {first:?}");
        let mut reframer = LineFramer::new(DEFAULT_MAX_MESSAGE_BYTES);
        reframer.push(first.as_bytes());
        reframer.push(b"\n");
        assert_eq!(reframer.next_frame(), Some(Frame::Line(first.clone())));
        assert_eq!(reframer.next_frame(), None);
        let again = Message::decode(&first)
            .unwrap_or_else(|e| panic!("encoding does not decode ({e}): {first}\nfrom: {line}"));
        assert_eq!(again.kind(), message.kind());
        let second = again.encode();
        assert_eq!(second, first, "encoding is not canonical; from: {line}");
    }
});
