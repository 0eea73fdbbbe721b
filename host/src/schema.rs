//! JSON Schema compilation and validation with error messages that say where, what was expected
//! and what was there, and depth-bounded JSON parsing for values that cross the boundary.
//!
//! A tool's schemas are compiled once: when a [`ToolSet`](crate::ToolSet) is built, or at the
//! tool's first call for a deferred [`ToolSchema`](crate::ToolSchema). Remote and file
//! `$ref`s are never fetched (the `jsonschema` crate is built without its resolvers), so a
//! schema that needs one fails to compile. Formats are annotations only (the 2020-12 default).
//!
//! Instances may nest up to [`MAX_NESTING_DEPTH`] levels. Deep instances are validated,
//! parsed and encoded on a helper thread with a large stack ([`with_deep_stack`]), so neither
//! a deep value nor a recursive schema can exhaust the stack of an async worker thread.

use std::fmt::Write as _;
use std::sync::Arc;

use crate::json::{truncate, value_depth, with_deep_stack, SHALLOW_DEPTH};
use serde_json::Value;

/// A compiled schema, and its source (to name what a failing keyword expected), shared with
/// the tool that holds it.
pub struct Schema {
    validator: jsonschema::Validator,
    source: Arc<Value>,
}

impl std::fmt::Debug for Schema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Schema").finish_non_exhaustive()
    }
}

/// At most this many characters of one failure's description go into a message.
const MAX_DETAIL_CHARS: usize = 500;

/// At most this many characters of an offending value are quoted (`got ...`).
pub const MAX_QUOTED_VALUE_CHARS: usize = 80;

/// At most this many failures are described in one message; the rest are counted.
pub const MAX_LISTED_ERRORS: usize = 3;

/// Count at most this many further failures.
const MAX_COUNTED_ERRORS: usize = 100;

/// At most this many names are listed (enum options, allowed properties).
const MAX_LISTED_NAMES: usize = 10;

impl Schema {
    /// Compiles `schema` (any draft the `jsonschema` crate knows; `$schema` picks it,
    /// 2020-12 otherwise). `Err` holds why the schema is unusable, for humans.
    pub fn compile(schema: &Value) -> Result<Schema, String> {
        Self::compile_shared(Arc::new(schema.clone()))
    }

    /// [`Schema::compile`], keeping `schema` itself (not a copy) as the source.
    pub(crate) fn compile_shared(schema: Arc<Value>) -> Result<Schema, String> {
        if let Err(e) = execbox_protocol::check_transport_safe(&schema) {
            return Err(format!("schema {e}"));
        }
        let build = || jsonschema::options().build(&schema);
        let validator = if value_depth(&schema) > SHALLOW_DEPTH {
            with_deep_stack(build)
        } else {
            build()
        };
        match validator {
            Ok(validator) => Ok(Schema {
                validator,
                source: schema,
            }),
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

    /// The schema compiled, shared with the tool that holds it.
    #[cfg(test)]
    pub(crate) fn source(&self) -> &Arc<Value> {
        &self.source
    }

    /// Validates `instance`; `root` (`"input"` or `"output"`) names the instance in paths.
    ///
    /// Each failure says where (a JavaScript-style path from `root`: `input.items[3].kind`,
    /// `input["odd key"]`), what was expected and what was there:
    /// `input.units must be one of "metric", "imperial"; got "kelvin"`. With several
    /// failures the first [`MAX_LISTED_ERRORS`] are numbered and the rest counted:
    /// `2 errors: (1) input.x must be a number; got "a" (2) input.y is required but missing`.
    pub fn validate(&self, instance: &Value, root: &str) -> Result<(), String> {
        let mut errors = self.validator.iter_errors(instance);
        let Some(first) = errors.next() else {
            return Ok(());
        };
        let mut listed = vec![self.describe(&first, instance, root)];
        let mut more = 0;
        for error in errors.take(MAX_COUNTED_ERRORS) {
            if listed.len() < MAX_LISTED_ERRORS {
                listed.push(self.describe(&error, instance, root));
            } else {
                more += 1;
            }
        }
        if listed.len() == 1 {
            return Err(listed.pop().expect("one failure"));
        }
        let total = listed.len() + more;
        let mut message = if more == MAX_COUNTED_ERRORS + 1 - MAX_LISTED_ERRORS {
            format!("at least {total} errors:")
        } else {
            format!("{total} errors:")
        };
        for (i, text) in listed.iter().enumerate() {
            let _ = write!(message, " ({}) {text}", i + 1);
        }
        if more > 0 {
            let _ = write!(message, " (and {more} more)");
        }
        Err(message)
    }

    /// One failure as `<path> <what was expected>; got <value>`.
    fn describe(
        &self,
        error: &jsonschema::ValidationError<'_>,
        instance: &Value,
        root: &str,
    ) -> String {
        use jsonschema::error::{TypeKind, ValidationErrorKind as K};
        let path = js_path(root, instance, error.instance_path().as_str());
        let value = error.instance();
        let got = quote_value(value);
        let count = |what: &str| match value.as_ref() {
            Value::Array(items) => plural(items.len(), what),
            Value::Object(map) => plural(map.len(), what),
            Value::String(s) => plural(s.chars().count(), what),
            _ => got.clone(),
        };
        let text = match error.kind() {
            K::Type { kind } => {
                let mut names: Vec<&str> = match kind {
                    TypeKind::Single(t) => vec![type_name(t.as_str())],
                    TypeKind::Multiple(ts) => ts.iter().map(|t| type_name(t.as_str())).collect(),
                };
                // `a string or null` reads better than `null or a string`.
                names.sort_by_key(|n| *n == "null");
                format!("{path} must be {}; got {got}", or_list(&names))
            }
            K::Enum { options } => {
                let options: Vec<String> = match options.as_ref() {
                    Value::Array(items) => items.iter().map(quote_value).collect(),
                    other => vec![quote_value(other)],
                };
                format!("{path} must be one of {}; got {got}", name_list(&options))
            }
            K::Constant { expected_value } => {
                format!("{path} must be {}; got {got}", quote_value(expected_value))
            }
            K::Required { property } => match property.as_str() {
                Some(name) => format!("{} is required but missing", js_key(&path, name)),
                None => format!("{path} is missing the required property {property}"),
            },
            K::AdditionalProperties { unexpected } | K::UnevaluatedProperties { unexpected } => {
                let names: Vec<String> = unexpected.iter().map(|n| quote_str(n)).collect();
                let mut text = format!(
                    "{path} has {} {}",
                    if names.len() == 1 { "an unexpected property" } else { "unexpected properties" },
                    name_list(&names)
                );
                if let Some(allowed) = self.allowed_properties(error.schema_path().as_str()) {
                    let _ = write!(text, " (allowed: {})", name_list(&allowed));
                }
                text
            }
            K::MinLength { limit } => {
                format!("{path} must be at least {} long; got {got}", plural(*limit as usize, "character"))
            }
            K::MaxLength { limit } => format!(
                "{path} must be at most {} long; got {} ({got})",
                plural(*limit as usize, "character"),
                count("character")
            ),
            K::Minimum { limit } => format!("{path} must be >= {limit}; got {got}"),
            K::Maximum { limit } => format!("{path} must be <= {limit}; got {got}"),
            K::ExclusiveMinimum { limit } => format!("{path} must be > {limit}; got {got}"),
            K::ExclusiveMaximum { limit } => format!("{path} must be < {limit}; got {got}"),
            K::MultipleOf { multiple_of } => {
                format!("{path} must be a multiple of {multiple_of}; got {got}")
            }
            K::MinItems { limit } => format!(
                "{path} must have at least {}; got {}",
                plural(*limit as usize, "item"),
                count("item")
            ),
            K::MaxItems { limit } => format!(
                "{path} must have at most {}; got {}",
                plural(*limit as usize, "item"),
                count("item")
            ),
            K::AdditionalItems { limit } => format!(
                "{path} must have at most {}; got {}",
                plural(*limit, "item"),
                count("item")
            ),
            K::MinProperties { limit } => format!(
                "{path} must have at least {}; got {}",
                plural(*limit as usize, "property"),
                count("property")
            ),
            K::MaxProperties { limit } => format!(
                "{path} must have at most {}; got {}",
                plural(*limit as usize, "property"),
                count("property")
            ),
            K::UniqueItems => format!("{path} must not contain duplicate items; got {got}"),
            K::Pattern { pattern } => {
                format!("{path} must match the pattern {}; got {got}", quote_str(pattern))
            }
            K::Format { format } => format!("{path} must be a valid {format}; got {got}"),
            K::AnyOf { .. } | K::OneOfNotValid { .. } => {
                let keyword = error.kind().keyword();
                match self.expected_type(error.schema_path().as_str()) {
                    Some(ty) => format!("{path} must be {ty}; got {got}"),
                    None => format!(
                        "{path} must match one of the schemas of `{keyword}`; got {got}"
                    ),
                }
            }
            K::OneOfMultipleValid { .. } => format!(
                "{path} must match exactly one of the schemas of `oneOf`, but matches several; got {got}"
            ),
            K::Not { schema } => {
                format!("{path} must not match {}; got {got}", quote_value(schema))
            }
            K::FalseSchema => format!("{path} is not allowed; got {got}"),
            K::Contains => {
                format!("{path} must contain at least one item matching the schema; got {got}")
            }
            K::UnevaluatedItems { .. } => format!("{path} has unexpected items; got {got}"),
            K::PropertyNames { error: inner } => {
                format!("{path} has an invalid property name: {inner}")
            }
            _ => format!("{path}: {error}"),
        };
        truncate(&text, MAX_DETAIL_CHARS)
    }

    /// The names under `properties` next to the keyword at `keyword_path` (a JSON pointer
    /// into the schema), when there are any.
    fn allowed_properties(&self, keyword_path: &str) -> Option<Vec<String>> {
        let parent = keyword_path.rsplit_once('/')?.0;
        let properties = self
            .source
            .pointer(parent)?
            .get("properties")?
            .as_object()?;
        if properties.is_empty() {
            return None;
        }
        Some(properties.keys().map(|k| quote_str(k)).collect())
    }

    /// The schema holding the keyword at `keyword_path` as a one-line TypeScript type, when
    /// it says more than `unknown` and fits in a message.
    fn expected_type(&self, keyword_path: &str) -> Option<String> {
        let parent = keyword_path.rsplit_once('/')?.0;
        let schema = self.source.pointer(parent)?;
        let ty = crate::declarations::schema_to_type(schema, 0);
        // On one line a JSDoc loses its leading stars: `/** N. @integer @minimum 1 */`.
        let one_line = ty
            .lines()
            .map(|line| match line.trim() {
                "*" => "",
                line => line.strip_prefix("* ").unwrap_or(line),
            })
            .flat_map(str::split_whitespace)
            .collect::<Vec<_>>()
            .join(" ");
        if one_line == "unknown" || one_line.chars().count() > 200 {
            return None;
        }
        Some(format!("of type {one_line}"))
    }
}

/// A JSON pointer into `instance` as a JavaScript-style path from `root`: `input.items[3]`,
/// `input["odd key"]`. A segment is an index only where the instance has an array.
pub fn js_path(root: &str, instance: &Value, pointer: &str) -> String {
    let mut path = root.to_string();
    let mut at = Some(instance);
    for raw in pointer.split('/').skip(1) {
        let segment = raw.replace("~1", "/").replace("~0", "~");
        match at {
            Some(Value::Array(items)) if segment.parse::<usize>().is_ok() => {
                let index: usize = segment.parse().expect("checked");
                let _ = write!(path, "[{index}]");
                at = items.get(index);
            }
            Some(Value::Object(map)) => {
                path = js_key(&path, &segment);
                at = map.get(&segment);
            }
            _ => {
                path = js_key(&path, &segment);
                at = None;
            }
        }
    }
    path
}

/// `path.key`, or `path["key"]` when `key` is not an identifier.
fn js_key(path: &str, key: &str) -> String {
    if crate::names::is_identifier(key) {
        format!("{path}.{key}")
    } else {
        format!("{path}[{}]", quote_str(key))
    }
}

/// A JSON value as compact JSON, cut to [`MAX_QUOTED_VALUE_CHARS`] characters with `…`.
/// Never serializes more than it shows, however large the value.
pub fn quote_value(value: &Value) -> String {
    struct Capped(Vec<u8>, usize);
    impl std::io::Write for Capped {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let room = self.1.saturating_sub(self.0.len());
            if room == 0 {
                return Err(std::io::Error::other("full"));
            }
            let n = buf.len().min(room);
            self.0.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    // Four bytes per character at most, and one more to know whether something was cut.
    let mut out = Capped(Vec::new(), MAX_QUOTED_VALUE_CHARS * 4 + 1);
    let _ = serde_json::to_writer(&mut out, value);
    truncate(&String::from_utf8_lossy(&out.0), MAX_QUOTED_VALUE_CHARS)
}

/// A string as a JSON string literal, control characters escaped.
fn quote_str(text: &str) -> String {
    Value::String(text.to_string()).to_string()
}

fn type_name(t: &str) -> &'static str {
    match t {
        "array" => "an array",
        "boolean" => "a boolean",
        "integer" => "an integer",
        "null" => "null",
        "number" => "a number",
        "object" => "an object",
        "string" => "a string",
        _ => "a value of another type",
    }
}

/// `a`, `a or b`, `a, b or c`.
fn or_list(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => (*one).to_string(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

/// `a, b, c`, at most [`MAX_LISTED_NAMES`] of them, then `… (N more)`.
fn name_list(items: &[String]) -> String {
    if items.len() <= MAX_LISTED_NAMES {
        return items.join(", ");
    }
    format!(
        "{}, … ({} more)",
        items[..MAX_LISTED_NAMES].join(", "),
        items.len() - MAX_LISTED_NAMES
    )
}

/// `1 item`, `2 items`, `1 property`, `3 properties`.
fn plural(n: usize, what: &str) -> String {
    match (n, what) {
        (1, _) => format!("1 {what}"),
        (_, "property") => format!("{n} properties"),
        _ => format!("{n} {what}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::{drop_value, parse_json};
    use execbox_protocol::MAX_NESTING_DEPTH;
    use serde_json::json;

    fn nested(depth: usize) -> String {
        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
    }

    fn failure(schema: Value, instance: Value) -> String {
        Schema::compile(&schema)
            .unwrap()
            .validate(&instance, "input")
            .unwrap_err()
    }

    #[test]
    fn validation_messages_give_the_path_what_was_expected_and_the_value() {
        let schema = Schema::compile(&json!({
            "type": "object",
            "properties": {"x": {"type": "number"}},
            "required": ["x"]
        }))
        .unwrap();
        assert_eq!(
            schema.validate(&json!({"x": "a"}), "input").unwrap_err(),
            r#"input.x must be a number; got "a""#
        );
        assert_eq!(
            schema.validate(&json!({}), "output").unwrap_err(),
            "output.x is required but missing"
        );
        assert_eq!(
            schema.validate(&json!(null), "input").unwrap_err(),
            "input must be an object; got null"
        );
        assert!(schema.validate(&json!({"x": 1}), "input").is_ok());
    }

    #[test]
    fn paths_index_arrays_and_quote_odd_keys() {
        let items = json!({"type": "object", "properties": {"items": {"type": "array",
            "items": {"type": "object", "properties": {"kind": {"enum": ["a", "b"]}}}}}});
        assert_eq!(
            failure(items, json!({"items": [{}, {}, {}, {"kind": "c"}]})),
            r#"input.items[3].kind must be one of "a", "b"; got "c""#
        );
        let odd = json!({"properties": {"odd key": {"properties": {"0": {"type": "string"}}}}});
        assert_eq!(
            failure(odd, json!({"odd key": {"0": 1}})),
            r#"input["odd key"]["0"] must be a string; got 1"#
        );
        assert_eq!(
            js_path("input", &json!({"a/b": [0]}), "/a~1b/0"),
            r#"input["a/b"][0]"#
        );
    }

    #[test]
    fn constraints_are_spelt_out() {
        let cases = [
            (
                json!({"type": ["string", "null"]}),
                json!(5),
                r#"input must be a string or null; got 5"#,
            ),
            (json!({"minimum": 1}), json!(0), "input must be >= 1; got 0"),
            (
                json!({"exclusiveMaximum": 10}),
                json!(10),
                "input must be < 10; got 10",
            ),
            (
                json!({"maxLength": 3}),
                json!("abcd"),
                r#"input must be at most 3 characters long; got 4 characters ("abcd")"#,
            ),
            (
                json!({"minItems": 2}),
                json!([1]),
                "input must have at least 2 items; got 1 item",
            ),
            (
                json!({"const": "x"}),
                json!("y"),
                r#"input must be "x"; got "y""#,
            ),
            (
                json!({"pattern": "^a+$"}),
                json!("b"),
                r#"input must match the pattern "^a+$"; got "b""#,
            ),
            (
                json!({"properties": {"city": {}, "units": {}}, "additionalProperties": false}),
                json!({"city": "x", "colour": 1}),
                r#"input has an unexpected property "colour" (allowed: "city", "units")"#,
            ),
            (
                json!({"properties": {"v": {"anyOf": [{"type": "string"}, {"type": "number"}]}}}),
                json!({"v": true}),
                "input.v must be of type string | number; got true",
            ),
            (
                json!({"anyOf": [{
                    "type": "object",
                    "properties": {"n": {"type": "integer", "minimum": 1, "description": "N."}},
                    "additionalProperties": false
                }, {"type": "null"}]}),
                json!(5),
                "input must be of type { /** N. @integer @minimum 1 */ n?: number; \
                 /* no other properties */ } | null; got 5",
            ),
        ];
        for (schema, instance, want) in cases {
            assert_eq!(failure(schema.clone(), instance), want, "{schema}");
        }
    }

    #[test]
    fn several_failures_are_numbered_then_counted() {
        let schema = json!({"type": "array", "items": {"type": "string"}});
        assert_eq!(
            failure(schema.clone(), json!([1, 2])),
            "2 errors: (1) input[0] must be a string; got 1 (2) input[1] must be a string; got 2"
        );
        assert_eq!(
            failure(schema.clone(), json!([1, 2, 3, 4, 5])),
            "5 errors: (1) input[0] must be a string; got 1 (2) input[1] must be a string; got 2 \
             (3) input[2] must be a string; got 3 (and 2 more)"
        );
        let many = failure(schema, Value::Array(vec![json!(1); 500]));
        assert!(many.starts_with("at least 101 errors: (1)"), "{many}");
        assert!(many.ends_with("(and 98 more)"), "{many}");
    }

    #[test]
    fn long_values_are_cut_in_messages() {
        let message = failure(json!({"type": "number"}), json!("x".repeat(10_000)));
        assert_eq!(
            message,
            format!(
                "input must be a number; got \"{}…",
                "x".repeat(MAX_QUOTED_VALUE_CHARS - 1)
            )
        );
        let control = failure(json!({"type": "number"}), json!("a\u{1b}[31m\n"));
        assert_eq!(control, r#"input must be a number; got "a\u001b[31m\n""#);
    }

    #[test]
    fn bad_schemas_and_remote_refs_do_not_compile() {
        let err = Schema::compile(&json!({"type": "strin"})).unwrap_err();
        assert!(err.contains("strin"), "{err}");
        let err = Schema::compile(&json!({"$ref": "https://example.com/s.json"})).unwrap_err();
        assert!(err.contains("example.com"), "{err}");
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
