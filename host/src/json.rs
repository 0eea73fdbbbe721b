//! JSON helpers for values the guest controls: depth-checked parsing, recursion-free drops,
//! canonical JSON and its SHA-256 (what binds an approval to a call's input),
//! and a large-stack thread for work whose recursion follows a value's nesting.

use execbox_protocol::{RawValue, MAX_NESTING_DEPTH};
use ring::digest::{digest, SHA256};
use serde::Deserialize;
use serde_json::Value;

/// Parses a result payload into a JSON tree (deep values included).
pub fn raw_to_value(raw: &RawValue) -> serde_json::Result<Value> {
    let mut de = serde_json::Deserializer::from_str(raw.get());
    de.disable_recursion_limit();
    Value::deserialize(&mut de)
}

/// `text` cut to at most `max` characters, with `…` when something was cut.
pub fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((i, _)) => format!("{}…", &text[..i]),
    }
}

/// Why [`parse_json`] refused a text.
#[derive(Debug, thiserror::Error)]
pub enum ParseJsonError {
    /// Arrays/objects nest deeper than [`MAX_NESTING_DEPTH`].
    #[error("value nests deeper than {MAX_NESTING_DEPTH} levels")]
    TooDeep,
    /// The text is not one JSON value.
    #[error("{0}")]
    Syntax(#[from] serde_json::Error),
}

/// The deepest nesting of arrays and objects in a JSON text, counted without parsing it.
///
/// Brackets inside strings are skipped; the text need not be valid JSON.
pub fn json_depth(text: &str) -> usize {
    let mut depth = 0usize;
    let mut max = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in text.as_bytes() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// Parses one JSON value nesting at most [`MAX_NESTING_DEPTH`] levels (serde_json's own
/// limit is 128). The depth is checked before parsing, so no text can exhaust the stack.
pub fn parse_json(text: &str) -> Result<Value, ParseJsonError> {
    let depth = json_depth(text);
    if depth > MAX_NESTING_DEPTH {
        return Err(ParseJsonError::TooDeep);
    }
    let parse = || -> Result<Value, serde_json::Error> {
        let mut de = serde_json::Deserializer::from_str(text);
        de.disable_recursion_limit();
        let value = Value::deserialize(&mut de)?;
        de.end()?;
        Ok(value)
    };
    if depth > SHALLOW_DEPTH {
        Ok(with_deep_stack(parse)?)
    } else {
        Ok(parse()?)
    }
}

/// The nesting depth of a JSON tree, without recursion.
pub fn value_depth(value: &Value) -> usize {
    let mut max = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((v, depth)) = stack.pop() {
        match v {
            Value::Array(items) => stack.extend(items.iter().map(|c| (c, depth + 1))),
            Value::Object(map) => stack.extend(map.values().map(|c| (c, depth + 1))),
            _ => {
                max = max.max(depth);
                continue;
            }
        }
        max = max.max(depth + 1);
    }
    max
}

/// Drops a JSON tree without recursion (serde_json's own drop recurses once per level).
pub fn drop_value(value: Value) {
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => stack.extend(map.into_iter().map(|(_, v)| v)),
            _ => {}
        }
    }
}

/// Values nesting at most this deep are handled on the caller's stack.
pub const SHALLOW_DEPTH: usize = 64;

/// Stack size of the helper thread used by [`with_deep_stack`].
const DEEP_STACK_BYTES: usize = 64 * 1024 * 1024;

/// Runs `f` on a helper thread with a large stack (64 MiB of address space, committed
/// only as used) and waits for it.
///
/// Used for work whose recursion follows a value's nesting (up to [`MAX_NESTING_DEPTH`]) or a
/// schema's: parsing, encoding, validating. Blocks the calling thread; callers in async
/// code only use it for values nested deeper than [`SHALLOW_DEPTH`], which are rare. If the
/// thread cannot be spawned, `f` runs on the current thread.
pub fn with_deep_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    let mut f = Some(f);
    let result = std::thread::scope(|scope| {
        let spawned = std::thread::Builder::new()
            .name("execbox-deep-json".into())
            .stack_size(DEEP_STACK_BYTES)
            .spawn_scoped(scope, || (f.take().expect("taken once"))());
        match spawned {
            Ok(handle) => Some(handle.join()),
            Err(_) => None,
        }
    });
    match result {
        Some(Ok(value)) => value,
        Some(Err(panic)) => std::panic::resume_unwind(panic),
        None => (f.take().expect("not run"))(),
    }
}

/// `value` as canonical JSON: object keys sorted by their UTF-16 code units (RFC 8785's
/// order), no whitespace, strings and numbers as serde_json writes them.
pub fn canonical_json(value: &Value) -> String {
    fn write(value: &Value, out: &mut String) {
        match value {
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
                out.push('{');
                for (i, (key, value)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(key.clone()).to_string());
                    out.push(':');
                    write(value, out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(item, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    // Depth is bounded: inputs passed the protocol's nesting check.
    write(value, &mut out);
    out
}

/// The SHA-256 of `input` over [`canonical_json`], in lowercase hex.
pub fn input_sha256(input: &Value) -> String {
    digest(&SHA256, canonical_json(input).as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(depth: usize) -> String {
        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn very_deep_trees_drop_without_recursion() {
        let mut v = json!(null);
        for i in 0..200_000 {
            v = if i % 2 == 0 {
                Value::Array(vec![v])
            } else {
                Value::Object(serde_json::Map::from_iter([("k".to_string(), v)]))
            };
        }
        drop_value(v);
    }

    #[test]
    fn depth_is_counted_outside_strings() {
        assert_eq!(json_depth(r#"{"a":[1,{"b":"[[[{{"}]}"#), 3);
        assert_eq!(json_depth(r#""\"[""#), 0);
        assert_eq!(json_depth(&nested(5)), 5);
        assert_eq!(value_depth(&json!({"a": [1, {"b": []}]})), 4);
        assert_eq!(value_depth(&json!(1)), 0);
        assert_eq!(value_depth(&json!([])), 1);
    }

    #[test]
    fn parsing_accepts_the_transport_limit_and_refuses_deeper_without_recursing() {
        let v = parse_json(&nested(MAX_NESTING_DEPTH)).unwrap();
        assert_eq!(value_depth(&v), MAX_NESTING_DEPTH);
        drop_value(v);
        assert!(matches!(
            parse_json(&nested(MAX_NESTING_DEPTH + 1)),
            Err(ParseJsonError::TooDeep)
        ));
        assert!(matches!(
            parse_json(&nested(1_000_000)),
            Err(ParseJsonError::TooDeep)
        ));
        assert!(matches!(
            parse_json("[1] x"),
            Err(ParseJsonError::Syntax(_))
        ));
    }
}
