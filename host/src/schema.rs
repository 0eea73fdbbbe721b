//! JSON Schema compilation and validation with error messages that name the failing keyword,
//! and depth-bounded JSON parsing for values that cross the boundary.
//!
//! Schemas are compiled once, when a [`ToolSet`](crate::ToolSet) is built. Remote and file
//! `$ref`s are never fetched (the `jsonschema` crate is built without its resolvers), so a
//! schema that needs one fails to compile. Formats are annotations only (the 2020-12 default).
//!
//! Instances may nest up to [`MAX_NESTING_DEPTH`] levels. Deep instances are validated,
//! parsed and encoded on a helper thread with a large stack ([`with_deep_stack`]), so neither
//! a deep value nor a recursive schema can exhaust the stack of an async worker thread.

use std::fmt::Write as _;

use execbox_protocol::MAX_NESTING_DEPTH;
use serde::Deserialize;
use serde_json::Value;

/// A compiled schema.
pub struct Schema {
    validator: jsonschema::Validator,
}

impl std::fmt::Debug for Schema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Schema").finish_non_exhaustive()
    }
}

/// At most this many characters of a validator's text go into a message; its text quotes
/// the offending value, which may be large.
const MAX_DETAIL_CHARS: usize = 500;

/// Report at most this many further errors in a count.
const MAX_COUNTED_ERRORS: usize = 100;

impl Schema {
    /// Compiles `schema` (any draft the `jsonschema` crate knows; `$schema` picks it,
    /// 2020-12 otherwise). `Err` holds why the schema is unusable, for humans.
    pub fn compile(schema: &Value) -> Result<Schema, String> {
        if let Err(e) = execbox_protocol::check_transport_safe(schema) {
            return Err(format!("schema {e}"));
        }
        let build = || jsonschema::options().build(schema);
        let validator = if value_depth(schema) > SHALLOW_DEPTH {
            with_deep_stack(build)
        } else {
            build()
        };
        match validator {
            Ok(validator) => Ok(Schema { validator }),
            Err(e) => {
                let path = e.instance_path().as_str();
                if path.is_empty() {
                    Err(truncate(&e.to_string(), MAX_DETAIL_CHARS))
                } else {
                    Err(format!(
                        "at {path}: {}",
                        truncate(&e.to_string(), MAX_DETAIL_CHARS)
                    ))
                }
            }
        }
    }

    /// Validates `instance`; `what` (`"input"` or `"output"`) starts the message.
    ///
    /// The message names the schema keyword that failed and, when it is not the root, the
    /// place in the instance: `input does not match schema at /properties/x/type
    /// (instance /x): "a" is not of type "number"`. Further errors are only counted.
    pub fn validate(&self, instance: &Value, what: &str) -> Result<(), String> {
        let mut errors = self.validator.iter_errors(instance);
        let Some(first) = errors.next() else {
            return Ok(());
        };
        let mut message = format!("{what} does not match schema at {}", first.schema_path());
        let instance_path = first.instance_path().as_str();
        if !instance_path.is_empty() {
            let _ = write!(message, " (instance {instance_path})");
        }
        let _ = write!(
            message,
            ": {}",
            truncate(&first.to_string(), MAX_DETAIL_CHARS)
        );
        let more = errors.take(MAX_COUNTED_ERRORS).count();
        match more {
            0 => {}
            1 => message.push_str(" (and 1 more error)"),
            n if n == MAX_COUNTED_ERRORS => {
                let _ = write!(message, " (and at least {n} more errors)");
            }
            n => {
                let _ = write!(message, " (and {n} more errors)");
            }
        }
        Err(message)
    }

    /// Whether `instance` is valid.
    pub fn is_valid(&self, instance: &Value) -> bool {
        self.validator.is_valid(instance)
    }
}

/// `text` cut to at most `max` characters, with `…` when something was cut.
pub(crate) fn truncate(text: &str, max: usize) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(depth: usize) -> String {
        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn validation_messages_name_the_keyword_and_the_instance_place() {
        let schema = Schema::compile(&json!({
            "type": "object",
            "properties": {"x": {"type": "number"}},
            "required": ["x"]
        }))
        .unwrap();
        assert_eq!(
            schema.validate(&json!({"x": "a"}), "input").unwrap_err(),
            r#"input does not match schema at /properties/x/type (instance /x): "a" is not of type "number""#
        );
        assert_eq!(
            schema.validate(&json!({}), "output").unwrap_err(),
            r#"output does not match schema at /required: "x" is a required property"#
        );
        assert_eq!(
            schema.validate(&json!(null), "input").unwrap_err(),
            r#"input does not match schema at /type: null is not of type "object""#
        );
        assert!(schema.validate(&json!({"x": 1}), "input").is_ok());
    }

    #[test]
    fn further_errors_are_counted() {
        let schema =
            Schema::compile(&json!({"type": "array", "items": {"type": "string"}})).unwrap();
        let message = schema.validate(&json!([1, 2, 3]), "input").unwrap_err();
        assert!(message.ends_with("(and 2 more errors)"), "{message}");
    }

    #[test]
    fn long_instances_are_cut_in_messages() {
        let schema = Schema::compile(&json!({"type": "number"})).unwrap();
        let message = schema
            .validate(&json!("x".repeat(10_000)), "input")
            .unwrap_err();
        assert!(message.len() < 1000, "{}", message.len());
        assert!(message.contains('…'));
    }

    #[test]
    fn bad_schemas_and_remote_refs_do_not_compile() {
        let err = Schema::compile(&json!({"type": "strin"})).unwrap_err();
        assert!(err.contains("strin"), "{err}");
        let err = Schema::compile(&json!({"$ref": "https://example.com/s.json"})).unwrap_err();
        assert!(err.contains("example.com"), "{err}");
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

    #[test]
    fn deep_instances_validate_against_recursive_schemas_on_the_deep_stack() {
        let schema = Schema::compile(&json!({
            "$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}}},
            "$ref": "#/$defs/n"
        }))
        .unwrap();
        let v = parse_json(&nested(MAX_NESTING_DEPTH)).unwrap();
        let ok = with_deep_stack(|| schema.validate(&v, "input"));
        assert_eq!(ok, Ok(()));
        drop_value(v);
    }
}
