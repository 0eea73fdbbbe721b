//! TypeScript declarations generated from tool schemas, for prompts: one namespace per provider.
//!
//! ```text
//! /** Text utilities */
//! declare namespace text {
//!   /** Count words in a text */
//!   function word_count(input: {
//!     text: string;
//!   }): Promise<{
//!     words: number;
//!   }>;
//! }
//! ```
//!
//! The mapping from JSON Schema is deliberately simple and total: every schema yields *some*
//! type, and whatever is not understood becomes `unknown`.
//!
//! | JSON Schema | TypeScript |
//! |---|---|
//! | `string`, `number`/`integer`, `boolean`, `null` | `string`, `number` (`integer`: and `@integer`), `boolean`, `null` |
//! | `array` with `items` / `prefixItems` | `T[]` / `[A, B]`; `unknown[]` without either |
//! | `object` with `properties` | `{ a: A; b?: B; }` (not `required` → `?`), one member per line; a last line `/* no other properties */` with `additionalProperties: false` |
//! | `object` without `properties` | `Record<string, T>` from `additionalProperties` (`unknown` by default, `never` if `false`) |
//! | `enum`, `const` | union of literals (objects and arrays in them → `unknown`) |
//! | `anyOf`, `oneOf` / `allOf` | union / intersection |
//! | `type: [..]`, `nullable: true` | union, `\| null` |
//! | `$ref`, `true`, anything else | `unknown`; `false` → `never` |
//!
//! What validation enforces that the type cannot say becomes JSDoc tags named after the
//! keywords, one per line, in a property's JSDoc:
//!
//! ```text
//!   /**
//!    * How many to fetch.
//!    * @integer
//!    * @minimum 1
//!    * @maximum 100
//!    */
//!   limit?: number;
//! ```
//!
//! They are `@integer`, `@minimum`, `@exclusiveMinimum`, `@maximum`, `@exclusiveMaximum`,
//! `@multipleOf`, `@minLength`, `@maxLength`, `@format` (of strings), `@pattern`,
//! `@minItems`, `@maxItems`, `@uniqueItems`, `@minProperties` and `@maxProperties`. The tags
//! of a part of a value share one line, the part named first: `@items @integer @minimum 0`
//! (each element), `@items[1] ...` (a tuple's second), `@additionalProperties ...` (a
//! record's values), `@anyOf[1] ...` (a union's member, when members' tags differ). Those of
//! the input and of the result are lines of the function's JSDoc: `@param input ...`,
//! `@returns @integer @minimum 0`.
//!
//! Property names that are not identifiers are quoted; `description`s become JSDoc. Nesting
//! deeper than [`MAX_TYPE_DEPTH`] becomes `unknown`. A tool without an input schema takes
//! `input?: unknown`; without an output schema it returns `Promise<unknown>`, or the type its
//! caller gives ([`ToolDeclaration::result_type`], e.g. what an MCP result becomes).
//! `@remarks` lines say what a call goes through ([`requirement_remarks`]: approval, rate
//! limit) and a tool's own name ([`name_remark`]); a `// observed result:` line gives the
//! shape of a result seen at run time ([`shape_of`]).

use std::collections::HashSet;
use std::fmt::Write as _;

use serde_json::{Map, Value};

use crate::names::is_identifier;
use crate::requirements::ToolRequirements;

/// Schemas nested deeper than this render as `unknown`.
pub const MAX_TYPE_DEPTH: usize = 16;

const INDENT: &str = "  ";

/// What [`provider_declaration`] needs to know about one tool.
#[derive(Debug, Clone, Copy)]
pub struct ToolDeclaration<'a> {
    /// The identifier the guest calls.
    pub safe_name: &'a str,
    /// Becomes the function's JSDoc.
    pub description: Option<&'a str>,
    /// Becomes the parameter type; `None` gives `input?: unknown`.
    pub input_schema: Option<&'a Value>,
    /// Becomes the promised type; `None` gives `Promise<unknown>`.
    pub output_schema: Option<&'a Value>,
    /// The error codes a call may reject with, each with when, as `@throws` lines of the
    /// JSDoc; empty for none (the declarations of [`ToolSet::declarations`](crate::ToolSet::declarations)).
    pub errors: &'a [(&'a str, String)],
    /// More facts for the JSDoc, one `@remarks` line each (`needs approval`,
    /// `upstream name: "get-sum"`); empty for none.
    pub remarks: &'a [String],
    /// The promised type when there is no output schema (`unknown` when `None`), e.g. what
    /// an MCP result becomes.
    pub result_type: Option<&'a str>,
    /// The shape of a result seen at run time ([`shape_of`]), written as a
    /// `// observed result: ...` line above the function; `None` for none.
    pub observed: Option<&'a str>,
}

/// The `declare namespace` block of one provider.
pub fn provider_declaration(
    provider: &str,
    description: Option<&str>,
    tools: &[ToolDeclaration<'_>],
) -> String {
    let mut out = String::new();
    if let Some(d) = description {
        out.push_str(&doc_comment(&namespace_summary(d), 0));
    }
    let _ = writeln!(out, "declare namespace {provider} {{");
    for tool in tools {
        let mut doc = tool.description.unwrap_or_default().trim().to_string();
        let subjects = [
            ("@param input", tool.input_schema),
            ("@returns", tool.output_schema),
        ];
        for (subject, schema) in subjects {
            let tags = schema.map(|s| constraints(s, 0)).unwrap_or_default();
            if !tags.is_empty() {
                if !doc.is_empty() {
                    doc.push('\n');
                }
                let _ = write!(doc, "{subject} {}", tags.join(" "));
            }
        }
        for (code, when) in tool.errors {
            if !doc.is_empty() {
                doc.push('\n');
            }
            let _ = write!(doc, "@throws {{Error}} code \"{code}\": {when}");
        }
        for remark in tool.remarks {
            if !doc.is_empty() {
                doc.push('\n');
            }
            let _ = write!(doc, "@remarks {remark}");
        }
        out.push_str(&doc_comment(&doc, 1));
        if let Some(observed) = tool.observed {
            let _ = writeln!(out, "{INDENT}// observed result: {observed}");
        }
        let param = match tool.input_schema {
            Some(schema) => format!("input: {}", schema_to_type(schema, 1)),
            None => "input?: unknown".to_string(),
        };
        let output = match tool.output_schema {
            Some(schema) => schema_to_type(schema, 1),
            None => tool.result_type.unwrap_or("unknown").to_string(),
        };
        let _ = writeln!(
            out,
            "{INDENT}function {}({param}): Promise<{output}>;",
            tool.safe_name
        );
    }
    out.push('}');
    out
}

/// The `@remarks` lines saying what a call of a tool with `requirements` goes through:
/// `needs approval: ...`, `rate limited: 10 per 1m ...`; empty when it declares neither.
pub fn requirement_remarks(requirements: &ToolRequirements) -> Vec<String> {
    let mut remarks = Vec::new();
    if requirements.requires_approval {
        remarks.push(
            "needs approval: each call waits for a person's yes; a no fails it with \
             \"tool_error\""
                .to_string(),
        );
    }
    if let Some(limit) = &requirements.rate_limit {
        remarks.push(format!(
            "rate limited: {limit}; a call over it fails with \"tool_error\", \
             error.reason \"rate_limited\" and error.retryAfterMs"
        ));
    }
    remarks
}

/// The `@remarks` line naming a tool's own name when its identifier differs from it
/// (`original name: "get-sum"; also callable as calc["get-sum"]`); `None` when they are equal.
/// `aliased`: whether the original name reaches this tool too (it does unless another tool
/// of the provider has it as its identifier).
pub fn name_remark(
    what: &str,
    provider: &str,
    safe_name: &str,
    original: &str,
    aliased: bool,
) -> Option<String> {
    (safe_name != original).then(|| {
        let quoted = Value::String(original.to_string()).to_string();
        if aliased {
            format!("{what}: {quoted}; also callable as {provider}[{quoted}]")
        } else {
            format!("{what}: {quoted}")
        }
    })
}

/// The TypeScript type of `schema`, written as if it started on a line indented `indent`
/// levels (multi-line object types close at that level).
///
/// ```text
/// {"type": ["string", "null"]} → string | null        {"enum": ["a", 1]} → "a" | 1
/// ```
pub fn schema_to_type(schema: &Value, indent: usize) -> String {
    render(schema, indent, 0).text
}

/// How tightly a rendered type binds, to know when it needs parentheses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Prec {
    Union,
    Intersection,
    Primary,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Ty {
    text: String,
    prec: Prec,
}

impl Ty {
    fn primary(text: impl Into<String>) -> Ty {
        Ty {
            text: text.into(),
            prec: Prec::Primary,
        }
    }
    fn unknown() -> Ty {
        Ty::primary("unknown")
    }
    fn never() -> Ty {
        Ty::primary("never")
    }
    fn is(&self, text: &str) -> bool {
        self.text == text
    }
    /// The text, parenthesised if it binds looser than `at_least`.
    fn at(&self, at_least: Prec) -> String {
        if self.prec < at_least {
            format!("({})", self.text)
        } else {
            self.text.clone()
        }
    }
}

fn union(members: Vec<Ty>) -> Ty {
    let mut seen = HashSet::new();
    let mut kept = Vec::new();
    for m in members {
        if m.is("unknown") {
            return Ty::unknown();
        }
        if m.is("never") || !seen.insert(m.text.clone()) {
            continue;
        }
        kept.push(m);
    }
    match kept.len() {
        0 => Ty::never(),
        1 => kept.pop().expect("one member"),
        _ => Ty {
            text: kept
                .iter()
                .map(|m| m.at(Prec::Intersection))
                .collect::<Vec<_>>()
                .join(" | "),
            prec: Prec::Union,
        },
    }
}

fn intersection(members: Vec<Ty>) -> Ty {
    let mut seen = HashSet::new();
    let mut kept = Vec::new();
    for m in members {
        if m.is("never") {
            return Ty::never();
        }
        if m.is("unknown") || !seen.insert(m.text.clone()) {
            continue;
        }
        kept.push(m);
    }
    match kept.len() {
        0 => Ty::unknown(),
        1 => kept.pop().expect("one member"),
        _ => Ty {
            text: kept
                .iter()
                .map(|m| m.at(Prec::Primary))
                .collect::<Vec<_>>()
                .join(" & "),
            prec: Prec::Intersection,
        },
    }
}

fn render(schema: &Value, indent: usize, depth: usize) -> Ty {
    let obj = match schema {
        Value::Bool(true) => return Ty::unknown(),
        Value::Bool(false) => return Ty::never(),
        Value::Object(obj) => obj,
        _ => return Ty::unknown(),
    };
    if depth >= MAX_TYPE_DEPTH || obj.contains_key("$ref") || obj.contains_key("$dynamicRef") {
        return Ty::unknown();
    }
    let mut ty = if let Some(c) = obj.get("const") {
        literal(c)
    } else if let Some(Value::Array(values)) = obj.get("enum") {
        union(values.iter().map(literal).collect())
    } else {
        let mut parts = vec![base_type(obj, indent, depth)];
        for key in ["anyOf", "oneOf"] {
            if let Some(Value::Array(members)) = obj.get(key) {
                parts.push(union(
                    members
                        .iter()
                        .map(|m| render(m, indent, depth + 1))
                        .collect(),
                ));
            }
        }
        if let Some(Value::Array(members)) = obj.get("allOf") {
            parts.extend(members.iter().map(|m| render(m, indent, depth + 1)));
        }
        intersection(parts)
    };
    if obj.get("nullable") == Some(&Value::Bool(true)) {
        ty = union(vec![ty, Ty::primary("null")]);
    }
    ty
}

/// The type from `type` (or, without it, from the object/array keywords present).
fn base_type(obj: &Map<String, Value>, indent: usize, depth: usize) -> Ty {
    let types: Vec<&str> = match obj.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        Some(_) => return Ty::unknown(),
        None if obj.contains_key("properties") || obj.contains_key("additionalProperties") => {
            vec!["object"]
        }
        None if obj.contains_key("items") || obj.contains_key("prefixItems") => vec!["array"],
        None => return Ty::unknown(),
    };
    union(
        types
            .into_iter()
            .map(|t| match t {
                "string" => Ty::primary("string"),
                "number" | "integer" => Ty::primary("number"),
                "boolean" => Ty::primary("boolean"),
                "null" => Ty::primary("null"),
                "array" => array_type(obj, indent, depth),
                "object" => object_type(obj, indent, depth),
                _ => Ty::unknown(),
            })
            .collect(),
    )
}

fn array_type(obj: &Map<String, Value>, indent: usize, depth: usize) -> Ty {
    let tuple = match (obj.get("prefixItems"), obj.get("items")) {
        (Some(Value::Array(items)), _) | (None, Some(Value::Array(items))) => Some(items),
        _ => None,
    };
    if let Some(items) = tuple {
        let members: Vec<String> = items
            .iter()
            .map(|s| render(s, indent, depth + 1).text)
            .collect();
        return Ty::primary(format!("[{}]", members.join(", ")));
    }
    match obj.get("items") {
        Some(items) => Ty::primary(format!(
            "{}[]",
            render(items, indent, depth + 1).at(Prec::Primary)
        )),
        None => Ty::primary("unknown[]"),
    }
}

fn object_type(obj: &Map<String, Value>, indent: usize, depth: usize) -> Ty {
    let additional = obj.get("additionalProperties");
    let properties = match obj.get("properties") {
        Some(Value::Object(p)) if !p.is_empty() => p,
        _ => {
            let value = match additional {
                Some(schema) => render(schema, indent, depth + 1),
                None => Ty::unknown(),
            };
            return Ty::primary(format!("Record<string, {}>", value.text));
        }
    };
    let required: HashSet<&str> = match obj.get("required") {
        Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).collect(),
        _ => HashSet::new(),
    };
    let pad = INDENT.repeat(indent + 1);
    let mut out = String::from("{\n");
    for (name, schema) in properties {
        let mut doc: Vec<String> = match schema.get("description") {
            Some(Value::String(d)) if !d.trim().is_empty() => vec![d.trim().to_string()],
            _ => Vec::new(),
        };
        doc.extend(constraints(schema, depth + 1));
        out.push_str(&doc_comment(&doc.join("\n"), indent + 1));
        let key = if is_identifier(name) {
            name.clone()
        } else {
            Value::String(name.clone()).to_string()
        };
        let optional = if required.contains(name.as_str()) {
            ""
        } else {
            "?"
        };
        let ty = render(schema, indent + 1, depth + 1);
        let _ = writeln!(out, "{pad}{key}{optional}: {};", ty.text);
    }
    if matches!(additional, Some(Value::Object(_))) {
        let _ = writeln!(out, "{pad}[key: string]: unknown;");
    } else if is_closed(obj) {
        let _ = writeln!(out, "{pad}{CLOSED}");
    }
    out.push_str(&INDENT.repeat(indent));
    out.push('}');
    Ty::primary(out)
}

/// A literal type for a JSON value; objects and arrays give `unknown`.
fn literal(value: &Value) -> Ty {
    match value {
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {
            Ty::primary(value.to_string())
        }
        Value::Array(_) | Value::Object(_) => Ty::unknown(),
    }
}

/// The line that ends the members of an object admitting no others.
const CLOSED: &str = "/* no other properties */";

/// Whether an object with `properties` admits no other property: `additionalProperties: false`
/// (without `patternProperties`), or `unevaluatedProperties: false` with no subschema that
/// could evaluate more.
fn is_closed(obj: &Map<String, Value>) -> bool {
    if obj.contains_key("patternProperties") {
        return false;
    }
    let no = Some(&Value::Bool(false));
    obj.get("additionalProperties") == no
        || (obj.get("unevaluatedProperties") == no
            && [
                "allOf",
                "anyOf",
                "oneOf",
                "if",
                "dependentSchemas",
                "$ref",
                "$dynamicRef",
            ]
            .iter()
            .all(|key| !obj.contains_key(*key)))
}

/// What validation enforces of `schema` that its TypeScript type cannot say, as JSDoc tags
/// named after their keywords, in a fixed order: `@integer`, `@minimum 1`,
/// `@exclusiveMaximum 10`, `@multipleOf 5`, `@minLength 1`, `@format date-time`,
/// `@pattern ^[a-z]+$`, `@minItems 1`, `@uniqueItems`, `@minProperties 1`, ...
///
/// The tags of a part of the value are one entry, the part named first: `@items @integer`
/// (every element), `@items[1] @maxLength 3` (a tuple's second), `@additionalProperties
/// @format uri` (a record's values), `@anyOf[1] @minLength 1` (a union's member, when its
/// members' tags differ; otherwise the member's tags are the value's). Not included: the
/// members of an object, which carry their own JSDoc, and a closed object, which says so
/// among its members ([`CLOSED`]). `enum` and `const` are literal types and need no tag.
fn constraints(schema: &Value, depth: usize) -> Vec<String> {
    let Value::Object(obj) = schema else {
        return Vec::new();
    };
    if depth >= MAX_TYPE_DEPTH
        || obj.contains_key("$ref")
        || obj.contains_key("$dynamicRef")
        || obj.contains_key("const")
        || matches!(obj.get("enum"), Some(Value::Array(_)))
    {
        return Vec::new();
    }
    let types: Option<Vec<&str>> = match obj.get("type") {
        Some(Value::String(t)) => Some(vec![t.as_str()]),
        Some(Value::Array(ts)) => Some(ts.iter().filter_map(Value::as_str).collect()),
        _ => None,
    };
    let may_be = |t: &str| types.as_ref().is_none_or(|ts| ts.contains(&t));
    let number = |key: &str| obj.get(key).filter(|v| v.is_number()).map(Value::to_string);
    let mut tags = Vec::new();
    if types
        .as_ref()
        .is_some_and(|ts| ts.contains(&"integer") && !ts.contains(&"number"))
    {
        tags.push("@integer".to_string());
    }
    for (bound, exclusive) in [
        ("minimum", "exclusiveMinimum"),
        ("maximum", "exclusiveMaximum"),
    ] {
        match (number(bound), obj.get(exclusive)) {
            // Draft 4: `exclusiveMinimum: true` makes `minimum` itself exclusive.
            (Some(n), Some(Value::Bool(true))) => tags.push(format!("@{exclusive} {n}")),
            (n, _) => {
                if let Some(n) = n {
                    tags.push(format!("@{bound} {n}"));
                }
                if let Some(n) = number(exclusive) {
                    tags.push(format!("@{exclusive} {n}"));
                }
            }
        }
    }
    for key in ["multipleOf", "minLength", "maxLength"] {
        if let Some(n) = number(key) {
            tags.push(format!("@{key} {n}"));
        }
    }
    // Formats of numbers (`int32`, `double`, schemars' `uint8`) say no more than the tags.
    if let (true, Some(Value::String(format))) = (may_be("string"), obj.get("format")) {
        tags.push(format!("@format {}", as_written(format)));
    }
    if let Some(Value::String(pattern)) = obj.get("pattern") {
        tags.push(format!("@pattern {}", as_written(pattern)));
    }
    for key in ["minItems", "maxItems"] {
        if let Some(n) = number(key) {
            tags.push(format!("@{key} {n}"));
        }
    }
    if obj.get("uniqueItems") == Some(&Value::Bool(true)) {
        tags.push("@uniqueItems".to_string());
    }
    for key in ["minProperties", "maxProperties"] {
        if let Some(n) = number(key) {
            tags.push(format!("@{key} {n}"));
        }
    }
    let mut part = |subject: String, schema: &Value| {
        let inner = constraints(schema, depth + 1);
        if !inner.is_empty() {
            tags.push(format!("{subject} {}", inner.join(" ")));
        }
    };
    if may_be("array") {
        match (obj.get("prefixItems"), obj.get("items")) {
            (Some(Value::Array(items)), _) | (None, Some(Value::Array(items))) => {
                for (i, item) in items.iter().enumerate() {
                    part(format!("@items[{i}]"), item);
                }
            }
            (_, Some(items)) => part("@items".to_string(), items),
            _ => {}
        }
    }
    let has_properties = matches!(obj.get("properties"), Some(Value::Object(p)) if !p.is_empty());
    if let (true, false, Some(values)) = (
        may_be("object"),
        has_properties,
        obj.get("additionalProperties"),
    ) {
        part("@additionalProperties".to_string(), values);
    }
    for key in ["anyOf", "oneOf"] {
        let Some(Value::Array(members)) = obj.get(key) else {
            continue;
        };
        let each: Vec<Vec<String>> = members.iter().map(|m| constraints(m, depth + 1)).collect();
        let mut distinct: Vec<&Vec<String>> = Vec::new();
        for member in each.iter().filter(|t| !t.is_empty()) {
            if !distinct.contains(&member) {
                distinct.push(member);
            }
        }
        // A member's tags are the value's only when every other member is either tagged
        // alike or of a type they cannot be confused with (`null` beside a bounded number);
        // beside a plain `number`, `@integer` would claim more than validation checks.
        let lend = distinct.len() <= 1
            && members.iter().zip(&each).all(|(member, tags)| {
                !tags.is_empty()
                    || members
                        .iter()
                        .zip(&each)
                        .filter(|(_, t)| !t.is_empty())
                        .all(|(tagged, _)| disjoint_types(member, tagged))
            });
        if lend {
            tags.extend(distinct.into_iter().flatten().cloned());
        } else {
            for (i, member) in each.iter().enumerate().filter(|(_, t)| !t.is_empty()) {
                tags.push(format!("@{key}[{i}] {}", member.join(" ")));
            }
        }
    }
    if let Some(Value::Array(members)) = obj.get("allOf") {
        for member in members {
            tags.extend(constraints(member, depth + 1));
        }
    }
    let mut seen = HashSet::new();
    tags.retain(|tag| seen.insert(tag.clone()));
    tags
}

/// Whether no value can match both `a`'s and `b`'s `type` (each must name one; `integer` is
/// a `number`).
fn disjoint_types(a: &Value, b: &Value) -> bool {
    fn types(schema: &Value) -> Option<Vec<&str>> {
        let mut out: Vec<&str> = match schema.get("type")? {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            _ => return None,
        };
        if out.contains(&"integer") {
            out.push("number");
        }
        if out.contains(&"number") {
            out.push("integer");
        }
        Some(out)
    }
    match (types(a), types(b)) {
        (Some(a), Some(b)) => !a.iter().any(|t| b.contains(t)),
        _ => false,
    }
}

/// A pattern or format as written, or as a JSON string when it would not read back from a
/// JSDoc line as written (empty, blank at either end, or with a line break or control).
fn as_written(text: &str) -> String {
    let plain = !text.is_empty()
        && text.trim() == text
        && !text
            .chars()
            .any(|c| c.is_control() || matches!(c, '\u{2028}' | '\u{2029}'));
    if plain {
        return text.to_string();
    }
    Value::String(text.to_string())
        .to_string()
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

/// The deepest nesting [`shape_of`] writes out.
const MAX_SHAPE_DEPTH: usize = 4;
/// At most this many members of one object are written by [`shape_of`]; the rest are `...`.
const MAX_SHAPE_MEMBERS: usize = 12;

/// A TypeScript-like type of a JSON value, on one line and at most `max_chars` characters
/// (shallower, then cut with `…`, when longer): `{ sum: number; items: { id: string; tags?: string[] }[] }`.
/// Array elements are merged (a member missing from some is optional; different kinds make a
/// union), an empty array is `unknown[]`, deeper than a few levels is `{...}` or `unknown[]`.
pub fn shape_of(value: &Value, max_chars: usize) -> String {
    let mut text = String::new();
    for depth in (1..=MAX_SHAPE_DEPTH).rev() {
        text = shape(value, depth);
        if text.chars().count() <= max_chars {
            return text;
        }
    }
    let cut: String = text.chars().take(max_chars.saturating_sub(1)).collect();
    format!("{cut}…")
}

/// The shape of `value`, writing `depth` more levels of objects and arrays.
fn shape(value: &Value, depth: usize) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(_) => "boolean".into(),
        Value::Number(_) => "number".into(),
        Value::String(_) => "string".into(),
        Value::Array(items) => {
            if items.is_empty() || depth == 0 {
                return "unknown[]".into();
            }
            let element = merged_shape(items, depth - 1);
            if element.contains(" | ") {
                format!("({element})[]")
            } else {
                format!("{element}[]")
            }
        }
        Value::Object(map) => object_shape(&[map], depth),
    }
}

/// One shape for the elements of an array: objects merged into one, other kinds as a union.
fn merged_shape(items: &[Value], depth: usize) -> String {
    let objects: Vec<&Map<String, Value>> = items.iter().filter_map(Value::as_object).collect();
    let mut kinds: Vec<String> = Vec::new();
    let mut object_done = false;
    for item in items {
        let text = match item {
            Value::Object(_) if object_done => continue,
            Value::Object(_) => {
                object_done = true;
                object_shape(&objects, depth)
            }
            other => shape(other, depth),
        };
        if !kinds.contains(&text) {
            kinds.push(text);
        }
    }
    if kinds.len() > 3 {
        return "unknown".into();
    }
    kinds.join(" | ")
}

/// The shape of objects seen together: every member of any, optional (`?`) where some lack it.
fn object_shape(objects: &[&Map<String, Value>], depth: usize) -> String {
    if depth == 0 {
        return "{...}".into();
    }
    let mut keys: Vec<&String> = Vec::new();
    for object in objects {
        for key in object.keys() {
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
    }
    if keys.is_empty() {
        return "{}".into();
    }
    let mut members = Vec::new();
    for key in keys.iter().take(MAX_SHAPE_MEMBERS) {
        let values: Vec<Value> = objects
            .iter()
            .filter_map(|o| o.get(key.as_str()).cloned())
            .collect();
        let optional = if values.len() < objects.len() {
            "?"
        } else {
            ""
        };
        // A key the tool chose, quoted as JSON, with the two line separators JSON leaves raw
        // escaped too: the shape stays on its `//` line.
        let name = if is_identifier(key) {
            key.to_string()
        } else {
            Value::String(key.to_string())
                .to_string()
                .replace('\u{2028}', "\\u2028")
                .replace('\u{2029}', "\\u2029")
        };
        members.push(format!(
            "{name}{optional}: {}",
            merged_shape(&values, depth - 1)
        ));
    }
    if keys.len() > MAX_SHAPE_MEMBERS {
        members.push("...".into());
    }
    format!("{{ {} }}", members.join("; "))
}

/// A JSDoc comment at `indent` levels, ending with a newline; empty for blank text.
/// At most this many characters of a namespace's description go into its declaration.
pub const MAX_NAMESPACE_SUMMARY_CHARS: usize = 200;

/// What a namespace's declaration says of it: the first sentence of its description's first
/// paragraph, at most [`MAX_NAMESPACE_SUMMARY_CHARS`] characters (cut at a word, with `…`).
/// A provider's description can be a server's whole instructions, shown on top of every
/// answer about the namespace; each tool says the rest.
fn namespace_summary(description: &str) -> String {
    let paragraph = description
        .trim()
        .split("\n\n")
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let mut end = paragraph.len();
    for (at, c) in paragraph.char_indices() {
        if matches!(c, '.' | '!' | '?')
            && paragraph[at + c.len_utf8()..]
                .chars()
                .next()
                .is_none_or(char::is_whitespace)
        {
            end = at + c.len_utf8();
            break;
        }
    }
    let sentence = &paragraph[..end];
    if sentence.chars().count() <= MAX_NAMESPACE_SUMMARY_CHARS {
        return sentence.to_string();
    }
    let cut: String = sentence
        .chars()
        .take(MAX_NAMESPACE_SUMMARY_CHARS - 1)
        .collect();
    let cut = match cut.rfind(' ') {
        Some(space) if space > MAX_NAMESPACE_SUMMARY_CHARS / 2 => &cut[..space],
        _ => cut.as_str(),
    };
    format!("{}…", cut.trim_end())
}

fn doc_comment(text: &str, indent: usize) -> String {
    let text = text.trim().replace("*/", "*\\/");
    if text.is_empty() {
        return String::new();
    }
    let pad = INDENT.repeat(indent);
    let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
    if lines.len() == 1 {
        return format!("{pad}/** {} */\n", lines[0]);
    }
    let mut out = format!("{pad}/**\n");
    for line in lines {
        if line.is_empty() {
            let _ = writeln!(out, "{pad} *");
        } else {
            let _ = writeln!(out, "{pad} * {line}");
        }
    }
    let _ = writeln!(out, "{pad} */");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_namespace_is_declared_with_its_first_sentence_at_most_200_characters() {
        let instructions = "Testing server for MCP features.  It has every kind of tool.\n\n\
                            Use echo to test; use add for sums. Resources are under test://.";
        let out = provider_declaration("everything", Some(instructions), &[]);
        assert!(
            out.starts_with("/** Testing server for MCP features. */\ndeclare namespace"),
            "{out}"
        );
        assert_eq!(namespace_summary("Weather, by city"), "Weather, by city");
        assert_eq!(
            namespace_summary("v1.2 of the API. More."),
            "v1.2 of the API."
        );
        let long = "word ".repeat(100);
        let summary = namespace_summary(&long);
        assert!(summary.ends_with("word…"), "{summary}");
        assert!(summary.chars().count() <= MAX_NAMESPACE_SUMMARY_CHARS);
        let unbroken = "é".repeat(300);
        assert_eq!(
            namespace_summary(&unbroken).chars().count(),
            MAX_NAMESPACE_SUMMARY_CHARS
        );
    }

    fn ts(schema: Value) -> String {
        schema_to_type(&schema, 0)
    }

    #[test]
    fn scalars_unions_and_literals() {
        assert_eq!(ts(json!({"type": "string"})), "string");
        assert_eq!(ts(json!({"type": "integer"})), "number");
        assert_eq!(
            ts(json!({"type": ["number", "integer", "null"]})),
            "number | null"
        );
        assert_eq!(
            ts(json!({"type": "string", "nullable": true})),
            "string | null"
        );
        assert_eq!(
            ts(json!({"enum": ["a", "b\"c", 1.5, true, null, [1]]})),
            "unknown"
        );
        assert_eq!(
            ts(json!({"enum": ["a", "b\"c", 1.5, true, null]})),
            r#""a" | "b\"c" | 1.5 | true | null"#
        );
        assert_eq!(ts(json!({"const": "x"})), r#""x""#);
        assert_eq!(ts(json!({"enum": []})), "never");
        assert_eq!(
            ts(json!({"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "string"}]})),
            "string | number"
        );
        assert_eq!(
            ts(json!({"$ref": "#/$defs/x", "type": "string"})),
            "unknown"
        );
        assert_eq!(ts(json!(true)), "unknown");
        assert_eq!(ts(json!(false)), "never");
        assert_eq!(ts(json!({})), "unknown");
        assert_eq!(ts(json!({"type": "wat"})), "unknown");
        assert_eq!(ts(json!(42)), "unknown");
    }

    #[test]
    fn arrays_tuples_and_precedence() {
        assert_eq!(ts(json!({"type": "array"})), "unknown[]");
        assert_eq!(
            ts(json!({"type": "array", "items": {"type": "string"}})),
            "string[]"
        );
        assert_eq!(
            ts(json!({"type": "array", "items": {"type": ["string", "null"]}})),
            "(string | null)[]"
        );
        assert_eq!(
            ts(json!({"prefixItems": [{"type": "string"}, {"const": 1}]})),
            r#"[string, 1]"#
        );
        assert_eq!(
            ts(json!({"allOf": [{"type": "string"}, {"anyOf": [{"const": "a"}, {"const": "b"}]}]})),
            r#"string & ("a" | "b")"#
        );
        assert_eq!(
            ts(json!({"type": "array", "items": {"allOf": [{"type": "string"}, {"const": "a"}]}})),
            r#"(string & "a")[]"#
        );
    }

    #[test]
    fn objects_with_optional_quoted_and_documented_members() {
        let schema = json!({
            "type": "object",
            "required": ["query"],
            "properties": {
                "query": {"type": "string", "description": "What to look for"},
                "max-results": {"type": "integer"},
                "filter": {
                    "type": "object",
                    "properties": {"lang": {"enum": ["en", "de"]}},
                    "additionalProperties": {"type": "string"}
                }
            }
        });
        assert_eq!(
            ts(schema),
            "{\n  /** What to look for */\n  query: string;\n  /** @integer */\n  \"max-results\"?: number;\n  filter?: {\n    lang?: \"en\" | \"de\";\n    [key: string]: unknown;\n  };\n}"
        );
        assert_eq!(ts(json!({"type": "object"})), "Record<string, unknown>");
        assert_eq!(
            ts(json!({"type": "object", "additionalProperties": {"type": "number"}})),
            "Record<string, number>"
        );
        assert_eq!(
            ts(json!({"type": "object", "additionalProperties": false})),
            "Record<string, never>"
        );
    }

    #[test]
    fn an_integer_property_says_it_is_one_with_its_bounds_in_its_jsdoc() {
        let schema = json!({
            "type": "object",
            "properties": {
                "limit": {
                    "type": "integer", "minimum": 1, "maximum": 100,
                    "description": "How many to fetch."
                },
                "page": {"type": ["integer", "null"]},
                "ratio": {"type": ["integer", "number"], "exclusiveMinimum": 0, "exclusiveMaximum": 1}
            }
        });
        assert_eq!(
            ts(schema),
            "{
  /**
   * How many to fetch.
   * @integer
   * @minimum 1
   * @maximum 100
   */
  limit?: number;
  /** @integer */
  page?: number | null;
  /**
   * @exclusiveMinimum 0
   * @exclusiveMaximum 1
   */
  ratio?: number;
}"
        );
    }

    /// The tags of one property, as `/** ... */` lines joined by newlines.
    fn tags_of(property: Value) -> String {
        let text = ts(json!({"type": "object", "properties": {"p": property}}));
        let doc: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| (l.starts_with("/**") || l.starts_with('*')) && *l != "*/")
            .map(|l| {
                l.trim_start_matches("/**")
                    .trim_start_matches('*')
                    .trim_end_matches("*/")
                    .trim()
            })
            .filter(|l| !l.is_empty())
            .collect();
        doc.join("\n")
    }

    #[test]
    fn numbers_strings_and_their_formats_are_tagged_as_validation_checks_them() {
        assert_eq!(
            tags_of(json!({"type": "number", "multipleOf": 0.5, "maximum": 10})),
            "@maximum 10\n@multipleOf 0.5"
        );
        // Draft 4 writes an exclusive bound as a boolean beside it.
        assert_eq!(
            tags_of(
                json!({"type": "integer", "minimum": 0, "exclusiveMinimum": true,
                           "maximum": 9, "exclusiveMaximum": false})
            ),
            "@integer\n@exclusiveMinimum 0\n@maximum 9"
        );
        assert_eq!(
            tags_of(json!({"type": "string", "minLength": 1, "maxLength": 80,
                           "format": "date-time", "pattern": "^[^@]+@[^@]+$"})),
            "@minLength 1\n@maxLength 80\n@format date-time\n@pattern ^[^@]+@[^@]+$"
        );
        // A number's format (schemars' `uint32`) says nothing more than its tags.
        assert_eq!(
            tags_of(json!({"type": "integer", "format": "uint32", "minimum": 0})),
            "@integer\n@minimum 0"
        );
        // A pattern that would not read back as written is a JSON string; `*/` cannot end
        // the comment.
        assert_eq!(
            tags_of(json!({"type": "string", "pattern": "a\nb "})),
            r#"@pattern "a\nb ""#
        );
        assert_eq!(
            tags_of(json!({"type": "string", "pattern": "^a*/b$"})),
            r"@pattern ^a*\/b$"
        );
        // Literals say it all; `$ref` and anything unknown say nothing.
        assert_eq!(
            tags_of(json!({"type": "integer", "enum": [1, 2], "minimum": 1})),
            ""
        );
        assert_eq!(tags_of(json!({"type": "string", "const": "a"})), "");
        assert_eq!(tags_of(json!({"$ref": "#/$defs/n", "minimum": 1})), "");
        assert_eq!(tags_of(json!({"type": "string", "default": "x"})), "");
    }

    #[test]
    fn arrays_tag_their_counts_and_their_items_after_items() {
        assert_eq!(
            tags_of(json!({
                "type": "array", "minItems": 1, "maxItems": 5, "uniqueItems": true,
                "items": {"type": "integer", "minimum": 0}
            })),
            "@minItems 1\n@maxItems 5\n@uniqueItems\n@items @integer @minimum 0"
        );
        assert_eq!(
            tags_of(json!({
                "type": "array",
                "items": {"type": "array", "minItems": 2, "items": {"type": "integer"}}
            })),
            "@items @minItems 2 @items @integer"
        );
        assert_eq!(
            tags_of(
                json!({"prefixItems": [{"type": "string"}, {"type": "integer", "maximum": 3}]})
            ),
            "@items[1] @integer @maximum 3"
        );
        assert_eq!(
            tags_of(json!({"type": "array", "uniqueItems": false, "items": {"type": "string"}})),
            ""
        );
        // An array of objects: each member of the element carries its own tags.
        assert_eq!(
            ts(json!({
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["id"],
                    "properties": {"id": {"type": "integer"}},
                    "additionalProperties": false
                }
            })),
            "{\n  /** @integer */\n  id: number;\n  /* no other properties */\n}[]"
        );
    }

    #[test]
    fn a_closed_object_says_so_among_its_members() {
        let schema = json!({
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "filter": {
                    "type": "object",
                    "properties": {"lang": {"type": "string"}},
                    "additionalProperties": false
                }
            },
            "additionalProperties": false
        });
        assert_eq!(
            ts(schema),
            "{
  query?: string;
  filter?: {
    lang?: string;
    /* no other properties */
  };
  /* no other properties */
}"
        );
        let open = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        assert_eq!(ts(open), "{\n  a?: string;\n}");
        let patterned = json!({
            "type": "object",
            "properties": {"a": {"type": "string"}},
            "patternProperties": {"^x-": {}},
            "additionalProperties": false
        });
        assert_eq!(ts(patterned), "{\n  a?: string;\n}");
        let unevaluated = json!({
            "type": "object",
            "properties": {"a": {"type": "string"}},
            "unevaluatedProperties": false
        });
        assert!(ts(unevaluated).contains(CLOSED));
        assert_eq!(
            tags_of(json!({
                "type": "object", "minProperties": 1,
                "additionalProperties": {"type": "string", "format": "uri"}
            })),
            "@minProperties 1\n@additionalProperties @format uri"
        );
    }

    #[test]
    fn union_members_lend_their_tags_unless_they_differ() {
        // pydantic's `Optional[conint(ge=1)]`.
        assert_eq!(
            tags_of(json!({"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}]})),
            "@integer\n@minimum 1"
        );
        assert_eq!(
            tags_of(json!({"oneOf": [
                {"type": "integer", "minimum": 1},
                {"type": "string", "minLength": 1},
                {"type": "null"}
            ]})),
            "@oneOf[0] @integer @minimum 1\n@oneOf[1] @minLength 1"
        );
        // Beside a plain number, the integer's tags are its own, not the value's.
        assert_eq!(
            tags_of(json!({"anyOf": [{"type": "integer", "minimum": 1}, {"type": "number"}]})),
            "@anyOf[0] @integer @minimum 1"
        );
        assert_eq!(
            tags_of(json!({"anyOf": [{"type": "string", "minLength": 2}, {}]})),
            "@anyOf[0] @minLength 2"
        );
        assert_eq!(
            tags_of(json!({"allOf": [{"type": "integer"}, {"maximum": 9}, {"type": "integer"}]})),
            "@integer\n@maximum 9"
        );
    }

    #[test]
    fn a_tools_own_input_and_result_constraints_are_in_its_jsdoc() {
        let input = json!({
            "type": "object", "minProperties": 1,
            "properties": {"a": {"type": "string"}},
            "additionalProperties": false
        });
        let output = json!({"type": "integer", "minimum": 0});
        let text = provider_declaration(
            "calc",
            None,
            &[ToolDeclaration {
                safe_name: "count",
                description: None,
                input_schema: Some(&input),
                output_schema: Some(&output),
                errors: &[],
                remarks: &[],
                result_type: None,
                observed: None,
            }],
        );
        assert_eq!(
            text,
            "declare namespace calc {
  /**
   * @param input @minProperties 1
   * @returns @integer @minimum 0
   */
  function count(input: {
    a?: string;
    /* no other properties */
  }): Promise<number>;
}"
        );
        let text = provider_declaration(
            "calc",
            None,
            &[ToolDeclaration {
                safe_name: "count",
                description: Some("Counts."),
                input_schema: None,
                output_schema: Some(&output),
                errors: &[],
                remarks: &[],
                result_type: None,
                observed: None,
            }],
        );
        assert!(
            text.contains("  /**\n   * Counts.\n   * @returns @integer @minimum 0\n   */\n"),
            "{text}"
        );
    }

    #[test]
    fn deep_schemas_are_cut_off() {
        let mut schema = json!({"type": "string"});
        for _ in 0..100 {
            schema = json!({"type": "array", "items": schema});
        }
        let text = ts(schema);
        assert_eq!(text, format!("unknown{}", "[]".repeat(MAX_TYPE_DEPTH)));
    }

    #[test]
    fn shapes_of_values_are_merged_and_bounded() {
        assert_eq!(shape_of(&json!({"sum": 3}), 200), "{ sum: number }");
        assert_eq!(
            shape_of(
                &json!({"items": [{"id": "a", "tags": ["x"]}, {"id": "b"}], "next-page": null}),
                200
            ),
            "{ items: { id: string; tags?: string[] }[]; \"next-page\": null }"
        );
        assert_eq!(
            shape_of(&json!([1, "a", null]), 200),
            "(number | string | null)[]"
        );
        assert_eq!(shape_of(&json!([]), 200), "unknown[]");
        // A tool's key cannot end the `//` line the shape is shown on.
        assert_eq!(
            shape_of(&json!({"a\nb\u{2028}*/": 1}), 200),
            "{ \"a\\nb\\u2028*/\": number }"
        );
        assert_eq!(shape_of(&json!("x"), 200), "string");
        let deep = json!({"a": {"b": {"c": {"d": {"e": 1}}}}});
        assert_eq!(shape_of(&deep, 200), "{ a: { b: { c: { d: {...} } } } }");
        assert_eq!(shape_of(&deep, 20), "{ a: { b: {...} } }");
        let wide: Map<String, Value> = (0..30).map(|i| (format!("k{i}"), json!(i))).collect();
        let text = shape_of(&Value::Object(wide), 1000);
        assert!(text.ends_with("k11: number; ... }"), "{text}");
        assert!(shape_of(&json!({"a": "x".repeat(10)}), 5).chars().count() <= 5);
    }

    #[test]
    fn remarks_result_types_and_observed_results() {
        let remarks = [
            "needs approval".to_string(),
            "upstream name: \"get-sum\"".to_string(),
        ];
        let text = provider_declaration(
            "calc",
            None,
            &[ToolDeclaration {
                safe_name: "get_sum",
                description: Some("Adds."),
                input_schema: None,
                output_schema: None,
                errors: &[],
                remarks: &remarks,
                result_type: Some("unknown /* text */"),
                observed: Some("{ sum: number }"),
            }],
        );
        assert_eq!(
            text,
            "declare namespace calc {
  /**
   * Adds.
   * @remarks needs approval
   * @remarks upstream name: \"get-sum\"
   */
  // observed result: { sum: number }
  function get_sum(input?: unknown): Promise<unknown /* text */>;
}"
        );
    }

    #[test]
    fn provider_declarations_have_jsdoc_and_defaults() {
        let input = json!({"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}});
        let output = json!({"type": "object", "properties": {"words": {"type": "integer"}}});
        let text = provider_declaration(
            "text",
            Some("Text utilities"),
            &[
                ToolDeclaration {
                    safe_name: "word_count",
                    description: Some("Count words.\n\nSplits on */ whitespace."),
                    input_schema: Some(&input),
                    output_schema: Some(&output),
                    errors: &[],
                    remarks: &[],
                    result_type: None,
                    observed: None,
                },
                ToolDeclaration {
                    safe_name: "ping",
                    description: None,
                    input_schema: None,
                    output_schema: None,
                    errors: &[],
                    remarks: &[],
                    result_type: None,
                    observed: None,
                },
            ],
        );
        assert_eq!(
            text,
            "/** Text utilities */
declare namespace text {
  /**
   * Count words.
   *
   * Splits on *\\/ whitespace.
   */
  function word_count(input: {
    text: string;
  }): Promise<{
    /** @integer */
    words?: number;
  }>;
  function ping(input?: unknown): Promise<unknown>;
}"
        );
        assert_eq!(
            provider_declaration("empty", None, &[]),
            "declare namespace empty {\n}"
        );
    }
}
