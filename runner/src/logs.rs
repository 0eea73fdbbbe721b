//! Console capture with the spec's truncation: earliest lines first, then a UTF-16 character budget.

use execbox_protocol::RuntimeOptions;

/// Collects console lines for one execution, applying the limits as lines arrive.
///
/// Equivalent to the spec's "keep the first `maxLogLines` lines, then apply `maxLogChars`
/// cumulatively, clipping the line where the budget runs out", but never stores what would
/// be dropped, so a guest flooding the console costs no memory.
#[derive(Debug, Default)]
pub(crate) struct LogBuffer {
    lines: Vec<String>,
    /// Lines seen so far, kept or not.
    seen: u64,
    /// UTF-16 units still allowed.
    remaining: u64,
    max_lines: u64,
    /// Set once a line was clipped or the budget hit zero: nothing more is kept.
    full: bool,
}

impl LogBuffer {
    /// An empty buffer with the limits of `options`.
    pub(crate) fn new(options: &RuntimeOptions) -> Self {
        LogBuffer {
            lines: Vec::new(),
            seen: 0,
            remaining: options.max_log_chars,
            max_lines: options.max_log_lines,
            full: false,
        }
    }

    /// Records one console line.
    pub(crate) fn push(&mut self, line: &str) {
        self.seen += 1;
        if self.full || self.seen > self.max_lines {
            return;
        }
        if self.remaining == 0 {
            self.full = true;
            return;
        }
        let units = line.encode_utf16().count() as u64;
        if units <= self.remaining {
            self.remaining -= units;
            self.lines.push(line.to_owned());
            return;
        }
        self.lines.push(clip_utf16(line, self.remaining as usize));
        self.remaining = 0;
        self.full = true;
    }

    /// The kept lines.
    pub(crate) fn into_lines(self) -> Vec<String> {
        self.lines
    }
}

/// The longest prefix of `s` that fits in `units` UTF-16 code units. A surrogate pair that
/// would be split is dropped whole (a Rust string cannot hold half of one).
fn clip_utf16(s: &str, units: usize) -> String {
    let mut used = 0;
    let mut end = 0;
    for (i, c) in s.char_indices() {
        let w = c.len_utf16();
        if used + w > units {
            break;
        }
        used += w;
        end = i + c.len_utf8();
    }
    s[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logs(max_lines: u64, max_chars: u64, lines: &[&str]) -> Vec<String> {
        let mut buf = LogBuffer::new(&RuntimeOptions {
            max_log_lines: max_lines,
            max_log_chars: max_chars,
            ..RuntimeOptions::default()
        });
        for l in lines {
            buf.push(l);
        }
        buf.into_lines()
    }

    #[test]
    fn lines_first_then_characters_like_the_reference() {
        assert_eq!(
            logs(2, 10, &["12345", "67890", "ignored"]),
            ["12345", "67890"]
        );
        assert_eq!(
            logs(3, 20, &["12345", "67890", "abc"]),
            ["12345", "67890", "abc"]
        );
        assert_eq!(logs(10, 7, &["12345", "67890", "x"]), ["12345", "67"]);
    }

    #[test]
    fn exhausted_budget_drops_even_empty_lines() {
        assert_eq!(logs(10, 5, &["12345", "", "a"]), ["12345"]);
        assert_eq!(logs(10, 6, &["12345", "", "a"]), ["12345", "", "a"]);
    }

    #[test]
    fn characters_are_counted_in_utf16_units() {
        // U+1F600 is two UTF-16 units; it does not fit in the last unit and is not split.
        assert_eq!(logs(10, 3, &["a\u{1F600}b"]), ["a\u{1F600}"]);
        assert_eq!(logs(10, 2, &["a\u{1F600}b"]), ["a"]);
        assert_eq!(logs(10, 4, &["é\u{1F600}", "x"]), ["é\u{1F600}", "x"]);
    }

    #[test]
    fn zero_limits_keep_nothing() {
        assert!(logs(0, 100, &["a"]).is_empty());
        assert!(logs(10, 0, &["a"]).is_empty());
    }
}
