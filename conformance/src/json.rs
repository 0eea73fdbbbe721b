//! JSON helpers that never exhaust the stack: a depth scan before parsing, unbounded-depth parsing, short previews.

use serde::Deserialize;
use serde_json::Value;

/// Deepest nesting this replayer parses into a tree, in transcripts and in runner messages.
///
/// The protocol caps transported values at 1000 levels, so a conforming runner never comes close;
/// a deeper runner message is reported as a failure instead of being parsed.
pub const MAX_PARSE_DEPTH: usize = 5_000;

/// Stack size of the threads that parse, match and drop JSON trees up to [`MAX_PARSE_DEPTH`] deep.
pub(crate) const BIG_STACK_BYTES: usize = 64 * 1024 * 1024;

/// Length of previews of expected and actual messages in failure reports, in characters.
pub(crate) const PREVIEW_CHARS: usize = 500;

/// The deepest nesting of arrays and objects in JSON text, found without recursion or parsing.
pub(crate) fn nesting_depth(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in text.as_bytes() {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Parses JSON text of any depth up to [`MAX_PARSE_DEPTH`].
///
/// Call it on a thread with a large stack (see [`with_big_stack`]): parsing, comparing and
/// dropping a tree all recurse once per level.
pub(crate) fn parse(text: &str) -> Result<Value, String> {
    let depth = nesting_depth(text);
    if depth > MAX_PARSE_DEPTH {
        return Err(format!(
            "it nests {depth} levels deep; this replayer reads at most {MAX_PARSE_DEPTH}"
        ));
    }
    let mut de = serde_json::Deserializer::from_str(text);
    de.disable_recursion_limit();
    let value = Value::deserialize(&mut de).map_err(|e| e.to_string())?;
    de.end().map_err(|e| e.to_string())?;
    Ok(value)
}

/// Runs `f` on a scoped thread with a [`BIG_STACK_BYTES`] stack and returns its result.
///
/// A panic in `f` is resumed on the calling thread.
pub(crate) fn with_big_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|scope| {
        let handle = std::thread::Builder::new()
            .name("execbox-conformance".into())
            .stack_size(BIG_STACK_BYTES)
            .spawn_scoped(scope, f)
            .expect("spawn a replay thread");
        match handle.join() {
            Ok(value) => value,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// `text` cut to `max` characters, with a note of the full length when cut.
pub(crate) fn preview(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((cut, _)) => format!("{}… ({} chars in all)", &text[..cut], text.chars().count()),
    }
}

/// Compact JSON of `value`, cut to `max` characters.
pub(crate) fn preview_value(value: &Value, max: usize) -> String {
    preview(&value.to_string(), max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_ignores_brackets_inside_strings() {
        assert_eq!(nesting_depth(r#"{"a":[1,"[[[\"]]"]}"#), 2);
        assert_eq!(nesting_depth("0"), 0);
        assert_eq!(
            nesting_depth(&format!("{}{}", "[".repeat(7), "]".repeat(7))),
            7
        );
    }

    #[test]
    fn deep_values_parse_on_a_big_stack_and_too_deep_ones_are_refused() {
        let deep = format!("{}0{}", "[".repeat(3000), "]".repeat(3000));
        assert!(with_big_stack(|| parse(&deep).map(drop)).is_ok());
        let too_deep = format!("{}0{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(parse(&too_deep).unwrap_err().contains("100000 levels"));
    }

    #[test]
    fn previews_cut_on_char_boundaries() {
        assert_eq!(preview("héllo", 10), "héllo");
        assert_eq!(preview("héllo", 2), "hé… (5 chars in all)");
    }
}
