//! OpenAPI schemas turned into self-contained JSON Schemas: `$ref`s inlined, bounded.
//!
//! A tool's schema must stand alone (the host compiles it without the document, and its
//! TypeScript declarations read no `$ref`), so every local `$ref` is replaced by what it
//! points at, with three bounds that keep GitHub-sized documents cheap:
//!
//! - **recursion**: a schema met again inside itself (`Node.children: Node[]`) is expanded
//!   again at most [`MAX_RECURSION`] times, then becomes `{}` (any value) with a description
//!   saying so;
//! - **depth**: past [`MAX_DEPTH`] nested schemas, `{}`; a `$ref` inside
//!   [`MAX_REF_NESTING`] expanded `$ref`s becomes `{}` with a description naming it (an issue's
//!   repository's owner is expanded; that owner's own references are not);
//! - **size**: past [`MAX_SCHEMA_NODES`] schema objects in one tool's schema, further `$ref`s
//!   become `{}` with a description naming the schema left out.
//!
//! `allOf`, `oneOf` and `anyOf` are kept as they are. OpenAPI 3.0's `nullable: true` becomes
//! a `"null"` type (or an `anyOf` with `{type: "null"}`), its boolean `exclusiveMinimum` and
//! `exclusiveMaximum` the numeric ones; `discriminator`, `xml`, `externalDocs` and examples
//! are dropped (they say nothing a validator or a declaration uses).

use serde_json::{Map, Value};

use crate::document::Document;

/// How many times a schema may be expanded inside itself before it becomes `{}`.
pub const MAX_RECURSION: usize = 2;

/// How deeply schemas may nest before the rest becomes `{}`.
pub const MAX_DEPTH: usize = 48;

/// How many schema objects one tool's schema may hold before further `$ref`s become `{}`.
pub const MAX_SCHEMA_NODES: usize = 1_500;

/// The most bytes of values (descriptions, `enum`s, defaults: whatever is copied as it is)
/// one tool schema takes from the document: 256 KiB. Past it, further `$ref`s are not
/// expanded, as past [`MAX_SCHEMA_NODES`]: a small document whose schemas copy one large
/// `enum` into thousands of places cannot grow without bound.
pub const MAX_SCHEMA_BYTES: usize = 256 * 1024;

/// The most bytes of values all the tool schemas of one document take: 64 MiB. Past it,
/// no `$ref` is expanded any more (the tools keep working, with looser types).
pub const MAX_DOCUMENT_SCHEMA_BYTES: usize = 64 * 1024 * 1024;

/// How many `$ref`s may be expanded one inside another before the next becomes `{}`.
pub const MAX_REF_NESTING: usize = 3;

/// Keywords whose value is one schema.
const ONE: &[&str] = &[
    "items",
    "additionalProperties",
    "not",
    "contains",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
    "if",
    "then",
    "else",
    "additionalItems",
];

/// Keywords whose value is a list of schemas.
const LIST: &[&str] = &["allOf", "oneOf", "anyOf", "prefixItems"];

/// Keywords whose value maps names to schemas.
const MAP: &[&str] = &["properties", "patternProperties", "dependentSchemas"];

/// Keywords dropped: documentation for people, not constraints.
const DROPPED: &[&str] = &[
    "discriminator",
    "xml",
    "externalDocs",
    "example",
    "examples",
    "$schema",
    "$id",
    "$defs",
    "definitions",
    "$comment",
];

/// About how many bytes `value` takes as JSON, without writing it.
fn approximate_size(value: &Value) -> usize {
    let mut size = 0;
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        size += match v {
            Value::String(s) => s.len() + 2,
            Value::Array(items) => {
                stack.extend(items.iter());
                2 + items.len()
            }
            Value::Object(map) => {
                stack.extend(map.values());
                2 + map.keys().map(|k| k.len() + 4).sum::<usize>()
            }
            _ => 8,
        };
    }
    size
}

/// Builds self-contained schemas from one document; one per tool schema (the node budget is
/// per tool).
pub struct Inliner<'d> {
    doc: &'d Document,
    is_3_0: bool,
    stack: Vec<&'d str>,
    nodes: usize,
    /// Bytes of values copied (see [`MAX_SCHEMA_BYTES`]).
    bytes: usize,
}

impl<'d> Inliner<'d> {
    /// A fresh inliner with its whole budget.
    pub fn new(doc: &'d Document) -> Self {
        Inliner {
            doc,
            is_3_0: doc.is_3_0(),
            stack: Vec::new(),
            nodes: 0,
            bytes: 0,
        }
    }

    /// Counts the bytes of a value copied as it is, for this schema and the document.
    fn charge(&mut self, value: &Value) {
        let size = approximate_size(value);
        self.bytes += size;
        self.doc
            .copied
            .fetch_add(size, std::sync::atomic::Ordering::Relaxed);
    }

    /// `schema` with its `$ref`s inlined and OpenAPI's dialect turned into JSON Schema.
    pub fn schema(&mut self, schema: &'d Value) -> Value {
        self.convert(schema, 0)
    }

    fn convert(&mut self, schema: &'d Value, depth: usize) -> Value {
        let Value::Object(object) = schema else {
            // `true`, `false`; anything else is no schema at all: any value.
            return match schema {
                Value::Bool(_) => schema.clone(),
                _ => Value::Object(Map::new()),
            };
        };
        if depth > MAX_DEPTH {
            return any("nested too deeply to be expanded");
        }
        self.nodes += 1;
        if let Some(reference) = object.get("$ref").and_then(Value::as_str) {
            return self.reference(reference, object, depth);
        }
        let mut out = Map::with_capacity(object.len());
        let mut nullable = false;
        for (key, value) in object {
            let key = key.as_str();
            if ONE.contains(&key) {
                out.insert(key.into(), self.convert(value, depth + 1));
            } else if LIST.contains(&key) {
                let items = match value {
                    Value::Array(items) => {
                        items.iter().map(|s| self.convert(s, depth + 1)).collect()
                    }
                    _ => Vec::new(),
                };
                out.insert(key.into(), Value::Array(items));
            } else if MAP.contains(&key) {
                let mut map = Map::new();
                if let Value::Object(entries) = value {
                    for (name, s) in entries {
                        map.insert(name.clone(), self.convert(s, depth + 1));
                    }
                }
                out.insert(key.into(), Value::Object(map));
            } else if DROPPED.contains(&key) {
            } else if self.is_3_0 && key == "nullable" {
                nullable = value == &Value::Bool(true);
            } else if self.is_3_0 && matches!(key, "exclusiveMinimum" | "exclusiveMaximum") {
                if value == &Value::Bool(true) {
                    let bound = if key == "exclusiveMinimum" {
                        "minimum"
                    } else {
                        "maximum"
                    };
                    if let Some(limit) = object.get(bound) {
                        out.insert(key.into(), limit.clone());
                    }
                }
            } else {
                self.charge(value);
                out.insert(key.into(), value.clone());
            }
        }
        // A 3.0 `exclusiveMinimum: true` replaced `minimum`.
        if self.is_3_0 {
            for (flag, bound) in [
                ("exclusiveMinimum", "minimum"),
                ("exclusiveMaximum", "maximum"),
            ] {
                if object.get(flag) == Some(&Value::Bool(true)) {
                    out.remove(bound);
                }
            }
        }
        if nullable {
            make_nullable(&mut out);
        }
        Value::Object(out)
    }

    fn reference(
        &mut self,
        reference: &'d str,
        object: &'d Map<String, Value>,
        depth: usize,
    ) -> Value {
        let name = reference.rsplit('/').next().unwrap_or(reference);
        let Some(target) = self.doc.resolve(reference) else {
            return any(&format!(
                "{name}: not expanded ({})",
                crate::document::unresolved(reference)
            ));
        };
        let seen = self.stack.iter().filter(|r| **r == reference).count();
        if seen > MAX_RECURSION {
            return any(&format!("{name} (recursive; not expanded further)"));
        }
        if self.stack.len() >= MAX_REF_NESTING {
            return any(&format!(
                "{name} (not expanded: inside {MAX_REF_NESTING} other expanded schemas)"
            ));
        }
        let copied = self.doc.copied.load(std::sync::atomic::Ordering::Relaxed);
        if self.nodes > MAX_SCHEMA_NODES
            || self.bytes > MAX_SCHEMA_BYTES
            || copied > MAX_DOCUMENT_SCHEMA_BYTES
        {
            return any(&format!("{name} (not expanded: the schema is too large)"));
        }
        self.stack.push(reference);
        let mut out = self.convert(target, depth + 1);
        self.stack.pop();
        // 3.1 allows keywords beside `$ref`; a description there describes this use of it.
        if let (Value::Object(out), Some(description)) = (&mut out, object.get("description")) {
            out.insert("description".into(), description.clone());
        }
        out
    }
}

/// `{}` (any value), saying why.
fn any(why: &str) -> Value {
    let mut map = Map::new();
    map.insert("description".into(), Value::String(why.to_string()));
    Value::Object(map)
}

/// Adds `null` to what a schema allows (3.0's `nullable: true`).
fn make_nullable(schema: &mut Map<String, Value>) {
    match schema.get_mut("type") {
        Some(Value::String(t)) => {
            let t = std::mem::take(t);
            schema.insert(
                "type".into(),
                Value::Array(vec![Value::String(t), "null".into()]),
            );
        }
        Some(Value::Array(types)) => {
            if !types.iter().any(|t| t == "null") {
                types.push("null".into());
            }
        }
        _ => {
            let inner = std::mem::take(schema);
            let mut null = Map::new();
            null.insert("type".into(), "null".into());
            schema.insert(
                "anyOf".into(),
                Value::Array(vec![Value::Object(inner), Value::Object(null)]),
            );
            return;
        }
    }
    if let Some(Value::Array(values)) = schema.get_mut("enum") {
        if !values.iter().any(Value::is_null) {
            values.push(Value::Null);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc(version: &str, schemas: Value) -> Document {
        Document::from_value(
            json!({"openapi": version, "paths": {}, "components": {"schemas": schemas}}),
            "test",
        )
        .unwrap()
    }

    #[test]
    fn a_large_value_copied_into_many_places_stays_within_the_byte_budgets() {
        // S0 has 37 properties of S1, S1 37 of S2, S2 a 20,000-item enum: inlined in full,
        // 1,369 copies of the enum (hundreds of MB) from a document of 400 KB.
        let items: Vec<Value> = (0..20_000).map(|n| json!(format!("value-{n}"))).collect();
        let wide = |target: &str| {
            let props: Map<String, Value> = (0..37)
                .map(|n| {
                    (
                        format!("p{n}"),
                        json!({"$ref": format!("#/components/schemas/{target}")}),
                    )
                })
                .collect();
            json!({"type": "object", "properties": props})
        };
        let d = doc(
            "3.1.0",
            json!({"S0": wide("S1"), "S1": wide("S2"), "S2": {"type": "string", "enum": items}}),
        );
        let root = json!({"$ref": "#/components/schemas/S0"});
        let mut total = 0;
        for _ in 0..4 {
            let schema = Inliner::new(&d).schema(&root);
            let size = schema.to_string().len();
            assert!(size < 2 * MAX_SCHEMA_BYTES, "{size}");
            assert!(schema
                .to_string()
                .contains("not expanded: the schema is too large"));
            total += size;
        }
        assert!(d.copied.load(std::sync::atomic::Ordering::Relaxed) >= total / 2);
    }

    #[test]
    fn refs_are_inlined_and_combinators_kept() {
        let d = doc(
            "3.1.0",
            json!({
                "Pet": {"type": "object", "properties": {"name": {"type": "string"}, "tag": {"$ref": "#/components/schemas/Tag"}}},
                "Tag": {"type": "string", "example": "x"},
                "Either": {"oneOf": [{"$ref": "#/components/schemas/Tag"}, {"type": "integer"}], "discriminator": {"propertyName": "k"}}
            }),
        );
        let pet = Inliner::new(&d).schema(d.resolve("#/components/schemas/Pet").unwrap());
        assert_eq!(
            pet,
            json!({"type": "object", "properties": {"name": {"type": "string"}, "tag": {"type": "string"}}})
        );
        let either = Inliner::new(&d).schema(d.resolve("#/components/schemas/Either").unwrap());
        assert_eq!(
            either,
            json!({"oneOf": [{"type": "string"}, {"type": "integer"}]})
        );
    }

    #[test]
    fn recursion_is_bounded() {
        let d = doc(
            "3.1.0",
            json!({"Node": {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#/components/schemas/Node"}}}}}),
        );
        let node = Inliner::new(&d).schema(&json!({"$ref": "#/components/schemas/Node"}));
        let mut level = &node;
        let mut expanded = 0;
        while let Some(items) = level.pointer("/properties/children/items") {
            level = items;
            expanded += 1;
        }
        assert_eq!(expanded, MAX_RECURSION + 1);
        assert_eq!(
            level,
            &json!({"description": "Node (recursive; not expanded further)"})
        );
        // Mutual recursion too.
        let d = doc(
            "3.1.0",
            json!({"A": {"properties": {"b": {"$ref": "#/components/schemas/B"}}}, "B": {"properties": {"a": {"$ref": "#/components/schemas/A"}}}}),
        );
        let a = Inliner::new(&d).schema(&json!({"$ref": "#/components/schemas/A"}));
        assert!(a
            .to_string()
            .contains("(not expanded: inside 3 other expanded schemas)"));
    }

    #[test]
    fn missing_and_remote_refs_become_any_value_saying_why() {
        let d = doc("3.1.0", json!({}));
        let s = Inliner::new(&d).schema(&json!({"$ref": "#/components/schemas/Gone"}));
        assert!(s["description"]
            .as_str()
            .unwrap()
            .contains("points at nothing"));
        let s = Inliner::new(&d).schema(&json!({"$ref": "common.yaml#/Thing"}));
        assert!(s["description"]
            .as_str()
            .unwrap()
            .contains("outside the document"));
    }

    #[test]
    fn openapi_3_0_nullable_and_exclusive_bounds_become_json_schema() {
        let d = doc("3.0.3", json!({}));
        let (a, b) = (
            json!({"type": "string", "nullable": true, "enum": ["a"]}),
            json!({"allOf": [{"type": "string"}], "nullable": true}),
        );
        let mut i = Inliner::new(&d);
        assert_eq!(
            i.schema(&a),
            json!({"type": ["string", "null"], "enum": ["a", null]})
        );
        assert_eq!(
            i.schema(&b),
            json!({"anyOf": [{"allOf": [{"type": "string"}]}, {"type": "null"}]})
        );
        assert_eq!(
            i.schema(&json!({"type": "number", "minimum": 0, "exclusiveMinimum": true, "maximum": 9, "exclusiveMaximum": false})),
            json!({"type": "number", "exclusiveMinimum": 0, "maximum": 9})
        );
        // In 3.1 these are plain JSON Schema and pass through.
        let d = doc("3.1.0", json!({}));
        assert_eq!(
            Inliner::new(&d)
                .schema(&json!({"type": "number", "exclusiveMinimum": 0, "nullable": true})),
            json!({"type": "number", "exclusiveMinimum": 0, "nullable": true})
        );
    }

    #[test]
    fn a_large_schema_stops_expanding_refs_past_the_budget() {
        // A wide schema whose every property is a ref to a wide schema: 200 × 200 nodes.
        let mut wide = Map::new();
        for i in 0..200 {
            wide.insert(format!("p{i}"), json!({"type": "string"}));
        }
        let mut outer = Map::new();
        for i in 0..200 {
            outer.insert(
                format!("q{i}"),
                json!({"$ref": "#/components/schemas/Wide"}),
            );
        }
        let d = doc(
            "3.1.0",
            json!({"Wide": {"type": "object", "properties": wide}, "Outer": {"type": "object", "properties": outer}}),
        );
        let outer = json!({"$ref": "#/components/schemas/Outer"});
        let mut i = Inliner::new(&d);
        let s = i.schema(&outer);
        assert!(i.nodes <= MAX_SCHEMA_NODES + 1_000, "{}", i.nodes);
        assert!(s
            .to_string()
            .contains("Wide (not expanded: the schema is too large)"));
    }
}
