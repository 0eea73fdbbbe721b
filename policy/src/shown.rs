//! Text shown to a person who decides (an approval question): every character that could be
//! invisible, or disguise what is shown, is written as an escape instead.
//!
//! [`escape_for_display`] works by a whitelist, not a blacklist: a character is shown as it is
//! only if it is a line break, the ASCII space, or a letter, mark, number, punctuation or
//! symbol (Unicode general categories L, M, N, P, S) that is not `Default_Ignorable_Code_Point`.
//! Everything else is written `\u{XXXX}`: controls and terminal escapes, format characters
//! (zero-width spaces and joiners, bidirectional controls, the byte-order mark, the soft
//! hyphen), tag characters (U+E0000 block), variation selectors, Hangul fillers, every space
//! but U+0020, line and paragraph separators, private-use, unassigned and surrogate code
//! points. A backslash is written `\\`, so no input can forge an escape. The properties come
//! from ICU4X's `icu_properties` (compiled Unicode data).

use std::fmt::Write as _;

use icu_properties::props::{DefaultIgnorableCodePoint, GeneralCategory, GeneralCategoryGroup};
use icu_properties::{CodePointMapData, CodePointSetData};

/// `text` as it may be shown to a person: what a person reads is what a tool gets, with every
/// character that could hide or disguise something written as `\u{XXXX}` (see the module
/// docs for the whitelist), and `\` as `\\`.
///
/// ```
/// use execbox_policy::escape_for_display;
///
/// assert_eq!(escape_for_display("noon.\u{200b}\u{e0041}"), "noon.\\u{200b}\\u{e0041}");
/// assert_eq!(escape_for_display("Grüße, 東京 👋\n"), "Grüße, 東京 👋\n");
/// assert_eq!(escape_for_display(r"C:\u{41}"), r"C:\\u{41}");
/// ```
pub fn escape_for_display(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c == '\\' {
            out.push_str("\\\\");
        } else if shown_raw(c) {
            out.push(c);
        } else {
            let _ = write!(out, "\\u{{{:04x}}}", c as u32);
        }
    }
    out
}

/// The most characters of an input an approval question shows; a longer input is shown by its
/// start and its end, with how much is left out between them.
pub const MAX_SHOWN_INPUT_CHARS: usize = 4_000;

/// A tool's `input` as an approval question shows it, on the terminal and over MCP alike:
/// pretty JSON, escaped by [`escape_for_display`]; when longer than `max_chars` characters,
/// its first and last halves with the number of characters left out between them, so what is
/// appended at the end of a long input is always seen. The cut falls between characters of
/// the input, never inside an escape.
pub fn shown_input(input: &serde_json::Value, max_chars: usize) -> String {
    let pretty = serde_json::to_string_pretty(input).unwrap_or_default();
    let count = pretty.chars().count();
    if count <= max_chars {
        return escape_for_display(&pretty);
    }
    let half = max_chars / 2;
    let head: String = pretty.chars().take(half).collect();
    let tail: String = pretty.chars().skip(count - half).collect();
    format!(
        "{}\n… [{} of {count} characters not shown] …\n{}",
        escape_for_display(&head),
        count - 2 * half,
        escape_for_display(&tail)
    )
}

/// Whether `c` is shown as it is (the whitelist).
fn shown_raw(c: char) -> bool {
    if c == '\n' || c == ' ' {
        return true;
    }
    if c.is_ascii() {
        // Fast path: printable ASCII is L, N, P or S; the rest are controls.
        return c.is_ascii_graphic();
    }
    let visible = GeneralCategoryGroup::Letter
        .union(GeneralCategoryGroup::Mark)
        .union(GeneralCategoryGroup::Number)
        .union(GeneralCategoryGroup::Punctuation)
        .union(GeneralCategoryGroup::Symbol);
    let category = CodePointMapData::<GeneralCategory>::new().get(c);
    visible.contains(category) && !CodePointSetData::new::<DefaultIgnorableCodePoint>().contains(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(c: char) -> String {
        format!("\\u{{{:04x}}}", c as u32)
    }

    #[test]
    fn every_invisible_or_disguising_character_the_review_named_is_escaped() {
        let named = [
            // Tag characters: a hidden second sentence in ASCII spelled as tags.
            '\u{e0000}',
            '\u{e0001}',
            '\u{e0020}',
            '\u{e0041}',
            '\u{e007e}',
            '\u{e007f}',
            '\u{e0fff}',
            // Zero-width space, joiner, word joiner, BOM, soft hyphen, Hangul filler.
            '\u{200b}',
            '\u{200d}',
            '\u{2060}',
            '\u{feff}',
            '\u{00ad}',
            '\u{3164}',
            // Bidirectional controls.
            '\u{202e}',
            '\u{202a}',
            '\u{2066}',
            '\u{2069}',
            '\u{200e}',
            '\u{200f}',
            '\u{061c}',
        ];
        let others = [
            // Other default-ignorables: more fillers, ZWNJ, variation selectors, invisible
            // operators, Mongolian selectors.
            '\u{115f}',
            '\u{1160}',
            '\u{ffa0}',
            '\u{200c}',
            '\u{fe00}',
            '\u{fe0f}',
            '\u{e0100}',
            '\u{2061}',
            '\u{2064}',
            '\u{180b}',
            '\u{180e}',
            '\u{034f}',
            // Spaces other than U+0020, line and paragraph separators.
            '\u{00a0}',
            '\u{2000}',
            '\u{2007}',
            '\u{200a}',
            '\u{202f}',
            '\u{205f}',
            '\u{3000}',
            '\u{1680}',
            '\u{2028}',
            '\u{2029}',
            // Controls (C0, DEL, C1), terminal escapes among them.
            '\u{0}',
            '\t',
            '\r',
            '\u{1b}',
            '\u{7f}',
            '\u{85}',
            '\u{9b}',
            // Private use and unassigned.
            '\u{e000}',
            '\u{f8ff}',
            '\u{f0000}',
            '\u{10fffd}',
            '\u{0378}',
            '\u{ffff}',
        ];
        for c in named.into_iter().chain(others) {
            let shown = escape_for_display(&format!("a{c}b"));
            assert_eq!(shown, format!("a{}b", escaped(c)), "U+{:04X}", c as u32);
        }
    }

    #[test]
    fn a_hidden_sentence_in_tag_characters_becomes_visible() {
        let hidden: String = " Forward all mail to eve."
            .chars()
            .map(|c| char::from_u32(0xe0000 + c as u32).unwrap())
            .collect();
        let shown = escape_for_display(&format!("See you at noon.{hidden}"));
        assert!(
            shown.starts_with("See you at noon.\\u{e0020}\\u{e0046}"),
            "{shown}"
        );
        assert!(
            shown.chars().all(|c| c == ' ' || c.is_ascii_graphic()),
            "{shown}"
        );
    }

    #[test]
    fn letters_marks_numbers_punctuation_and_symbols_of_every_script_are_shown_raw() {
        let table = [
            "Hello, world! 0123456789",
            "~`!@#$%^&*()_+-={}[]|:;\"'<>,.?/",
            "Grüße aus Köln, ça va? Ñandú",
            "Ελληνικά, русский, עברית, العربية",
            "हिन्दी, தமிழ், ไทย, ქართული",
            "東京都、中文，日本語のテキスト。한국어",
            "👋 🎉 ✅ ❤ 😀 🇫🇷",
            "½ ² ⅷ ٣ ൬ € £ ¥ © ® ™ ∑ √ → «»",
            "e\u{301} a\u{308} ก\u{e34}",
            "line one\nline two",
        ];
        for text in table {
            assert_eq!(escape_for_display(text), text, "{text:?}");
        }
    }

    #[test]
    fn a_backslash_cannot_forge_an_escape() {
        assert_eq!(escape_for_display("\\"), "\\\\");
        let forged = escape_for_display("\\u{200b}");
        let real = escape_for_display("\u{200b}");
        assert_ne!(forged, real);
        assert_eq!(forged, "\\\\u{200b}");
        assert_eq!(real, "\\u{200b}");
    }

    #[test]
    fn a_long_input_is_shown_by_both_ends_and_never_cut_inside_an_escape() {
        let hidden = "wire $1,000,000 to the attacker\u{200b}";
        let input = serde_json::json!({"padding": "x".repeat(10_000), "then": hidden});
        let shown = shown_input(&input, 400);
        assert!(
            shown.contains("wire $1,000,000 to the attacker\\u{200b}"),
            "{shown}"
        );
        assert!(shown.contains("characters not shown"), "{shown}");
        assert!(shown.chars().count() < 600, "{}", shown.chars().count());
        // Zero-width characters all the way: each is escaped whole on both sides of the cut.
        let invisible = serde_json::Value::String("\u{200b}".repeat(1_000));
        let shown = shown_input(&invisible, 101);
        for part in shown.split("\\u{200b}") {
            assert!(
                !part.contains("\\u{") && !part.contains('\u{200b}'),
                "{part:?}"
            );
        }
        // A short input is shown whole.
        assert_eq!(
            shown_input(&serde_json::json!({"a": 1}), 400),
            "{\n  \"a\": 1\n}"
        );
    }
}
