//! Console capture with the spec's truncation: earliest lines first, then a UTF-16 character budget.

use execbox_protocol::{LogsTruncated, RuntimeOptions};

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
    /// The last kept line was clipped.
    cut: bool,
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
            cut: false,
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
        self.cut = true;
    }

    /// The kept lines, and what truncation took from them (`None` when it took nothing):
    /// the lines not kept at all, and whether the last kept line was clipped.
    pub(crate) fn into_parts(self) -> (Vec<String>, Option<LogsTruncated>) {
        let omitted_lines = self.seen - self.lines.len() as u64;
        let truncated = (omitted_lines > 0 || self.cut).then_some(LogsTruncated {
            omitted_lines,
            cut_line: self.cut,
        });
        (self.lines, truncated)
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

    fn buffer(max_lines: u64, max_chars: u64, lines: &[&str]) -> LogBuffer {
        let mut buf = LogBuffer::new(&RuntimeOptions {
            max_log_lines: max_lines,
            max_log_chars: max_chars,
            ..RuntimeOptions::default()
        });
        for l in lines {
            buf.push(l);
        }
        buf
    }

    fn logs(max_lines: u64, max_chars: u64, lines: &[&str]) -> Vec<String> {
        buffer(max_lines, max_chars, lines).into_parts().0
    }

    fn truncated(max_lines: u64, max_chars: u64, lines: &[&str]) -> Option<(u64, bool)> {
        let (_, truncated) = buffer(max_lines, max_chars, lines).into_parts();
        truncated.map(|t| (t.omitted_lines, t.cut_line))
    }

    #[test]
    fn what_truncation_took_is_counted() {
        let many: Vec<String> = (0..500).map(|i| i.to_string()).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(truncated(100, 64_000, &many), Some((400, false)));
        // "67890" is cut to "67"; "x" is omitted.
        assert_eq!(truncated(10, 7, &["12345", "67890", "x"]), Some((1, true)));
        // An exact fit cuts nothing; the lines after it are omitted.
        assert_eq!(
            truncated(10, 10, &["12345", "67890", "x"]),
            Some((1, false))
        );
        assert_eq!(truncated(2, 10, &["12345", "67890"]), None);
        assert_eq!(truncated(0, 10, &["a", "b"]), Some((2, false)));
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
