//! Reading an OpenAPI document: JSON or YAML, 3.0 or 3.1, kept as one `serde_json::Value`.
//!
//! The document is walked in place, never modelled in full: only what becomes tools is read,
//! and `$ref`s are looked up by JSON pointer when a schema is built (`schema.rs`).
//!
//! What no tool uses is left out while reading, never held: `example` and `examples` (a
//! quarter of GitHub's description) and `x-*` extensions, wherever they are keywords. Keys
//! that are names are kept whatever they are: a property, a schema, a header or a parameter
//! called `example` or `x-rate-limit` (the keys of `properties`, `components.schemas`,
//! `headers`, ...: `NAME_MAPS`), and values that are data (`default`, `enum`, `const`) are
//! kept whole.

use std::fmt;
use std::path::Path;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::OpenApiError;

/// The largest document read: 64 MiB (GitHub's description is 13 MB).
pub const MAX_DOCUMENT_BYTES: u64 = 64 * 1024 * 1024;

/// An OpenAPI 3.0 or 3.1 document.
#[derive(Debug)]
pub struct Document {
    root: Value,
    source: String,
    /// Bytes of values copied into the tools' schemas so far (`schema.rs`'s provider budget).
    pub(crate) copied: std::sync::atomic::AtomicUsize,
}

/// The OpenAPI versions read: 3.0.x and 3.1.x.
fn supported(version: &str) -> bool {
    version.starts_with("3.0") || version.starts_with("3.1")
}

impl Document {
    /// Reads a document from a file; JSON or YAML, told from its first character.
    pub fn from_path(path: &Path) -> Result<Document, OpenApiError> {
        let read_error = |source| OpenApiError::Read {
            path: path.to_path_buf(),
            source,
        };
        let size = std::fs::metadata(path).map_err(read_error)?.len();
        if size > MAX_DOCUMENT_BYTES {
            return Err(read_error(std::io::Error::other(format!(
                "the file is {size} bytes, more than the {MAX_DOCUMENT_BYTES} a document may have"
            ))));
        }
        let bytes = std::fs::read(path).map_err(read_error)?;
        Document::from_slice(&bytes, &path.display().to_string())
    }

    /// Reads a document from its bytes (a file's, or an HTTP answer's later); `source` names
    /// it in errors.
    pub fn from_slice(bytes: &[u8], source: &str) -> Result<Document, OpenApiError> {
        let invalid = |message: String| OpenApiError::document(source, message);
        let text =
            std::str::from_utf8(bytes).map_err(|e| invalid(format!("is not UTF-8 text ({e})")))?;
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let root: Value = if text.trim_start().starts_with('{') {
            parse_json(text).map_err(|e| invalid(format!("is not valid JSON: {e}")))?
        } else {
            serde_saphyr::from_str_with_options::<Pruned>(text, yaml_options())
                .map_err(|e| invalid(format!("is neither JSON nor valid YAML: {e}")))?
                .0
        };
        Document::from_value(root, source)
    }

    /// Takes a document already parsed.
    pub fn from_value(root: Value, source: &str) -> Result<Document, OpenApiError> {
        let invalid = |message: String| OpenApiError::document(source, message);
        let Some(object) = root.as_object() else {
            return Err(invalid("is not an object at its top level".into()));
        };
        if let Some(swagger) = object.get("swagger") {
            return Err(invalid(format!(
                "is Swagger {}, which execbox does not read; convert it to OpenAPI 3 first \
                 (for example with swagger2openapi, or the converter at converter.swagger.io)",
                plain(swagger)
            )));
        }
        match object.get("openapi") {
            Some(Value::String(version)) if supported(version) => {}
            Some(version) => {
                return Err(invalid(format!(
                    "says `openapi: {}`; execbox reads OpenAPI 3.0 and 3.1 documents",
                    plain(version)
                )))
            }
            None => {
                return Err(invalid(
                    "has no `openapi` field: it does not look like an OpenAPI 3 document".into(),
                ))
            }
        }
        match object.get("paths") {
            None | Some(Value::Object(_)) => {}
            Some(_) => return Err(invalid("`paths` is not an object".into())),
        }
        Ok(Document {
            root,
            source: source.to_string(),
            copied: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// The whole document.
    pub fn root(&self) -> &Value {
        &self.root
    }

    /// The path or URL the document came from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// `openapi`: `3.0.3`, `3.1.0`, ...
    pub fn version(&self) -> &str {
        self.root["openapi"].as_str().unwrap_or_default()
    }

    /// Whether `nullable` and the boolean `exclusiveMinimum` of OpenAPI 3.0 schemas apply.
    pub fn is_3_0(&self) -> bool {
        self.version().starts_with("3.0")
    }

    /// The value a local `$ref` (`#/components/schemas/Pet`) points at, if any.
    pub fn resolve(&self, reference: &str) -> Option<&Value> {
        let pointer = reference.strip_prefix('#')?;
        if pointer.is_empty() {
            return Some(&self.root);
        }
        // JSON pointers in a URI fragment may be percent-encoded (`%7B` for `{`).
        if pointer.contains('%') {
            let decoded = percent_encoding::percent_decode_str(pointer)
                .decode_utf8()
                .ok()?;
            return self.root.pointer(&decoded);
        }
        self.root.pointer(pointer)
    }

    /// `value`, or what its `$ref` points at (following chains of refs, at most 32).
    pub fn deref<'a>(&'a self, mut value: &'a Value) -> Result<&'a Value, String> {
        for _ in 0..32 {
            match value.get("$ref").and_then(Value::as_str) {
                Some(reference) => {
                    value = self
                        .resolve(reference)
                        .ok_or_else(|| unresolved(reference))?;
                }
                None => return Ok(value),
            }
        }
        Err("a chain of more than 32 `$ref`s".into())
    }

    /// The URL of the first of the document's `servers`, its variables set to their defaults.
    pub fn server_url(&self) -> Option<String> {
        let server = self.root.get("servers")?.as_array()?.first()?;
        let mut url = server.get("url")?.as_str()?.to_string();
        if let Some(variables) = server.get("variables").and_then(Value::as_object) {
            for (name, variable) in variables {
                if let Some(default) = variable.get("default").and_then(Value::as_str) {
                    url = url.replace(&format!("{{{name}}}"), default);
                }
            }
        }
        Some(url)
    }
}

/// How deeply a document's arrays and objects may nest, JSON or YAML.
const MAX_NESTING: usize = 256;

/// Parses a JSON document, leaving out what no tool uses (see the module docs); the depth is
/// checked before parsing, so no document can exhaust the stack.
fn parse_json(text: &str) -> Result<Value, String> {
    let depth = execbox_host::json::json_depth(text);
    if depth > MAX_NESTING {
        return Err(format!("it nests deeper than {MAX_NESTING} levels"));
    }
    let parse = || -> Result<Value, serde_json::Error> {
        let mut de = serde_json::Deserializer::from_str(text);
        de.disable_recursion_limit();
        let value = Pruned::deserialize(&mut de)?.0;
        de.end()?;
        Ok(value)
    };
    let parsed = if depth > execbox_host::json::SHALLOW_DEPTH {
        execbox_host::json::with_deep_stack(parse)
    } else {
        parse()
    };
    parsed.map_err(|e| e.to_string())
}

/// Keys whose value maps names (not keywords) to things: its keys are kept whatever they are.
const NAME_MAPS: &[&str] = &[
    "paths",
    "webhooks",
    "schemas",
    "parameters",
    "responses",
    "requestBodies",
    "headers",
    "securitySchemes",
    "links",
    "callbacks",
    "pathItems",
    "properties",
    "patternProperties",
    "dependentSchemas",
    "$defs",
    "definitions",
    "content",
    "encoding",
    "variables",
    "mapping",
    "scopes",
];

/// Keys whose value is data, kept as it is.
const DATA: &[&str] = &["default", "enum", "const"];

/// A document read without what no tool uses.
struct Pruned(Value);

impl<'de> Deserialize<'de> for Pruned {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Prune::Keywords.deserialize(deserializer).map(Pruned)
    }
}

/// What the keys of the object being read are.
#[derive(Clone, Copy)]
enum Prune {
    /// Keywords: `example`, `examples` and `x-*` are left out.
    Keywords,
    /// Names: every one is kept.
    Names,
    /// Data: kept whole.
    Data,
}

impl Prune {
    /// What the keys of the value under `key` are.
    fn under(self, key: &str) -> Prune {
        match self {
            Prune::Names => Prune::Keywords,
            _ if DATA.contains(&key) => Prune::Data,
            _ if NAME_MAPS.contains(&key) => Prune::Names,
            _ => Prune::Keywords,
        }
    }
}

impl<'de> DeserializeSeed<'de> for Prune {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        match self {
            Prune::Data => Value::deserialize(deserializer),
            _ => deserializer.deserialize_any(self),
        }
    }
}

impl<'de> Visitor<'de> for Prune {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(item) = seq.next_element_seed(Prune::Keywords)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let unused = matches!(self, Prune::Keywords)
                && (key == "example" || key == "examples" || key.starts_with("x-"));
            if unused {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let value = map.next_value_seed(self.under(&key))?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

/// The message of a `$ref` that points nowhere.
pub(crate) fn unresolved(reference: &str) -> String {
    if reference.starts_with('#') {
        format!("`$ref: {reference}` points at nothing in the document")
    } else {
        format!(
            "`$ref: {reference}` points outside the document; execbox resolves only local \
             references (`#/components/...`): bundle the document first (for example with \
             `redocly bundle`)"
        )
    }
}

/// A scalar as YAML would show it, for messages.
fn plain(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// YAML documents are data, not configuration: larger budgets than the tools file's, the
/// same refusal of duplicate keys and alias bombs.
fn yaml_options() -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_reader_input_bytes = Some(MAX_DOCUMENT_BYTES as usize);
    budget.max_events = 50_000_000;
    budget.max_nodes = 20_000_000;
    budget.max_depth = MAX_NESTING;
    budget.max_documents = 1;
    budget.max_total_scalar_bytes = MAX_DOCUMENT_BYTES as usize;
    let mut aliases = serde_saphyr::options::AliasLimits::default();
    aliases.max_total_replayed_events = 1_000_000;
    aliases.max_replay_stack_depth = 16;
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    options.alias_limits = aliases;
    options.duplicate_keys = serde_saphyr::options::DuplicateKeyPolicy::Error;
    options.strict_booleans = true;
    options.with_snippet = false;
    options
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_and_yaml_documents_load() {
        let json = br#"{"openapi": "3.0.3", "info": {"title": "t", "version": "1"}, "paths": {}}"#;
        assert!(Document::from_slice(json, "a.json").unwrap().is_3_0());
        let yaml = b"openapi: 3.1.0\ninfo: {title: t, version: '1'}\npaths: {}\n";
        let doc = Document::from_slice(yaml, "a.yaml").unwrap();
        assert_eq!(doc.version(), "3.1.0");
        assert!(!doc.is_3_0());
        // Unquoted status codes are keys like any other.
        let yaml = b"openapi: 3.0.0\npaths:\n  /a:\n    get:\n      responses:\n        200: {description: ok}\n";
        let doc = Document::from_slice(yaml, "a.yaml").unwrap();
        assert!(doc.root().pointer("/paths/~1a/get/responses/200").is_some());
    }

    #[test]
    fn swagger_and_other_versions_are_refused_clearly() {
        let err = Document::from_slice(br#"{"swagger": "2.0", "paths": {}}"#, "old.json")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("old.json") && err.contains("Swagger 2.0"),
            "{err}"
        );
        assert!(err.contains("convert it to OpenAPI 3"), "{err}");
        let err = Document::from_slice(b"openapi: 4.0.0\npaths: {}\n", "new.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("`openapi: 4.0.0`"), "{err}");
        let err = Document::from_slice(b"{\"paths\": {}}", "x.json")
            .unwrap_err()
            .to_string();
        assert!(err.contains("no `openapi` field"), "{err}");
        let err = Document::from_slice(b"{nope", "x.json")
            .unwrap_err()
            .to_string();
        assert!(err.contains("not valid JSON"), "{err}");
    }

    #[test]
    fn refs_resolve_by_pointer_and_servers_take_their_defaults() {
        let doc = Document::from_value(
            serde_json::json!({
                "openapi": "3.1.0",
                "servers": [{"url": "https://{region}.example.com/v1", "variables": {"region": {"default": "eu"}}}],
                "components": {"schemas": {"A": {"$ref": "#/components/schemas/B"}, "B": {"type": "string"}, "a/b": {"type": "integer"}}}
            }),
            "x",
        )
        .unwrap();
        assert_eq!(doc.server_url().unwrap(), "https://eu.example.com/v1");
        let a = doc.resolve("#/components/schemas/A").unwrap();
        assert_eq!(doc.deref(a).unwrap()["type"], "string");
        assert_eq!(
            doc.resolve("#/components/schemas/a~1b").unwrap()["type"],
            "integer"
        );
        assert!(doc.resolve("other.json#/x").is_none());
        assert!(unresolved("other.json#/x").contains("bundle"));
    }

    #[test]
    fn examples_and_extensions_are_left_out_but_names_and_data_are_kept() {
        let text = r##"{
            "openapi": "3.1.0", "x-webhooks": {"a": 1}, "x-logo": "l.png",
            "paths": {"/x": {"get": {
                "x-github": {"category": "issues"},
                "parameters": [{"name": "n", "in": "query", "example": 3, "x-multi": true}],
                "responses": {"200": {
                    "headers": {"x-rate-limit": {"schema": {"type": "integer"}}},
                    "content": {"application/json": {
                        "schema": {"$ref": "#/components/schemas/x-thing"},
                        "examples": {"default": {"value": {"big": "example"}}}
                    }}
                }}
            }}},
            "components": {
                "examples": {"one": {"value": 1}},
                "schemas": {"x-thing": {
                    "type": "object",
                    "example": {"example": 1},
                    "properties": {
                        "example": {"type": "string", "examples": ["a"]},
                        "x-note": {"type": "object", "default": {"example": 1, "x-y": 2}}
                    }
                }}
            }
        }"##;
        let pruned = |text: &str| Document::from_slice(text.as_bytes(), "t").unwrap().root;
        let expected = serde_json::json!({
            "openapi": "3.1.0",
            "paths": {"/x": {"get": {
                "parameters": [{"name": "n", "in": "query"}],
                "responses": {"200": {
                    "headers": {"x-rate-limit": {"schema": {"type": "integer"}}},
                    "content": {"application/json": {
                        "schema": {"$ref": "#/components/schemas/x-thing"}
                    }}
                }}
            }}},
            "components": {
                "schemas": {"x-thing": {
                    "type": "object",
                    "properties": {
                        "example": {"type": "string"},
                        "x-note": {"type": "object", "default": {"example": 1, "x-y": 2}}
                    }
                }}
            }
        });
        assert_eq!(pruned(text), expected);
        // YAML alike (JSON is YAML; `---` makes it read as YAML).
        assert_eq!(pruned(&format!("---\n{text}")), expected);
    }
}
