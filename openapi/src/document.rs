//! Reading an OpenAPI document: JSON or YAML, 3.0 or 3.1, kept as one `serde_json::Value`.
//!
//! The document is walked in place, never modelled in full: only what becomes tools is read,
//! and `$ref`s are looked up by JSON pointer when a schema is built (`schema.rs`).

use std::path::Path;

use serde_json::Value;

use crate::error::OpenApiError;

/// The largest document read: 64 MiB (GitHub's description is 13 MB).
pub const MAX_DOCUMENT_BYTES: u64 = 64 * 1024 * 1024;

/// An OpenAPI 3.0 or 3.1 document.
#[derive(Debug)]
pub struct Document {
    root: Value,
    source: String,
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
            execbox_host::json::parse_json(text)
                .map_err(|e| invalid(format!("is not valid JSON: {e}")))?
        } else {
            serde_saphyr::from_str_with_options(text, yaml_options())
                .map_err(|e| invalid(format!("is neither JSON nor valid YAML: {e}")))?
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
    budget.max_depth = 256;
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
}
