//! An upstream's `tools/call` result turned into the value the guest's promise resolves to.
//!
//! | upstream result | in the sandbox |
//! |---|---|
//! | `isError: true` | a `tool_error` whose message is the result's text |
//! | `structuredContent` (not `null`) | that value |
//! | one content block | its value (below) |
//! | several blocks | an array of their values |
//! | no content | `null` |
//! | text that parses as JSON | the parsed value |
//! | other text | the string |
//! | image, audio | `{type, mimeType, size}` (size in bytes, decoded) |
//! | embedded resource | `{type: "resource", uri, mimeType, size}`, plus `text` for a text resource of at most [`MAX_INLINE_RESOURCE_CHARS`] |
//! | resource link | `{type: "resource_link", uri, name, mimeType, size, description}` (those present) |
//!
//! The result is read as plain JSON, not as the SDK's types, so a block of a kind this
//! version does not know becomes `{type}` instead of failing the call.

use serde_json::{json, Map, Value};

pub use execbox_host::one_line;
use execbox_host::ToolError;

/// A text resource longer than this (in characters) is described without its text.
pub const MAX_INLINE_RESOURCE_CHARS: usize = 4096;
/// An upstream error's text is cut to this many characters.
const MAX_ERROR_CHARS: usize = 2000;

/// The guest's value for a `CallToolResult` given as JSON.
pub fn result_value(result: Value) -> Result<Value, ToolError> {
    let Value::Object(mut result) = result else {
        return Err(ToolError::tool(
            "the MCP server answered with a result that is not an object",
        ));
    };
    let content = match result.remove("content") {
        Some(Value::Array(blocks)) => blocks,
        _ => Vec::new(),
    };
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        return Err(ToolError::tool(error_text(
            &content,
            result.get("structuredContent"),
        )));
    }
    match result.remove("structuredContent") {
        Some(Value::Null) | None => {}
        Some(structured) => return Ok(structured),
    }
    let mut values: Vec<Value> = content.into_iter().map(block_value).collect();
    Ok(match values.len() {
        0 => Value::Null,
        1 => values.pop().unwrap_or(Value::Null),
        _ => Value::Array(values),
    })
}

/// The text of an error result: its text blocks joined, else its structured content, cut.
fn error_text(content: &[Value], structured: Option<&Value>) -> String {
    let texts: Vec<&str> = content
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect();
    let text = if !texts.is_empty() {
        texts.join("; ")
    } else if let Some(structured) = structured.filter(|v| !v.is_null()) {
        structured.to_string()
    } else {
        return "the MCP server reported an error without a message".into();
    };
    one_line(&text, MAX_ERROR_CHARS)
}

fn block_value(block: Value) -> Value {
    let Value::Object(mut block) = block else {
        return Value::Null;
    };
    let kind = block
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    match kind.as_str() {
        "text" => match block.remove("text") {
            Some(Value::String(text)) => parse_text(text),
            _ => Value::Null,
        },
        "image" | "audio" => {
            let mut out = Map::new();
            out.insert("type".into(), kind.clone().into());
            copy(&block, &mut out, "mimeType");
            if let Some(data) = block.get("data").and_then(Value::as_str) {
                out.insert("size".into(), base64_size(data).into());
            }
            Value::Object(out)
        }
        "resource" => {
            let resource = match block.remove("resource") {
                Some(Value::Object(r)) => r,
                _ => Map::new(),
            };
            let mut out = Map::new();
            out.insert("type".into(), "resource".into());
            copy(&resource, &mut out, "uri");
            copy(&resource, &mut out, "mimeType");
            if let Some(text) = resource.get("text").and_then(Value::as_str) {
                let chars = text.chars().count();
                out.insert("size".into(), text.len().into());
                if chars <= MAX_INLINE_RESOURCE_CHARS {
                    out.insert("text".into(), text.into());
                }
            } else if let Some(blob) = resource.get("blob").and_then(Value::as_str) {
                out.insert("size".into(), base64_size(blob).into());
            }
            Value::Object(out)
        }
        "resource_link" => {
            let mut out = Map::new();
            out.insert("type".into(), "resource_link".into());
            for key in ["uri", "name", "mimeType", "size", "description"] {
                copy(&block, &mut out, key);
            }
            Value::Object(out)
        }
        _ => json!({ "type": kind }),
    }
}

/// Text that is one JSON value becomes that value; any other text stays a string.
fn parse_text(text: String) -> Value {
    let trimmed = text.trim_start();
    let looks_like_json = trimmed.starts_with(['{', '[', '"', '-'])
        || trimmed.starts_with(|c: char| c.is_ascii_digit())
        || ["true", "false", "null"]
            .iter()
            .any(|w| trimmed.trim_end() == *w);
    if looks_like_json {
        if let Ok(value) = execbox_host::json::parse_json(&text) {
            return value;
        }
    }
    Value::String(text)
}

fn copy(from: &Map<String, Value>, to: &mut Map<String, Value>, key: &str) {
    if let Some(value) = from.get(key) {
        to.insert(key.to_owned(), value.clone());
    }
}

/// The decoded size of base64 `data`, without decoding it.
fn base64_size(data: &str) -> usize {
    let significant = data
        .bytes()
        .filter(|b| !b.is_ascii_whitespace() && *b != b'=')
        .count();
    significant * 3 / 4
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structured_content_wins_over_text() {
        let result = json!({
            "content": [{"type": "text", "text": "{\"sum\": 3}"}],
            "structuredContent": {"sum": 3}
        });
        assert_eq!(result_value(result).unwrap(), json!({"sum": 3}));
    }

    #[test]
    fn text_is_parsed_when_it_is_json() {
        let one = |text: &str| result_value(json!({"content": [{"type": "text", "text": text}]}));
        assert_eq!(one("{\"a\": [1, 2]}").unwrap(), json!({"a": [1, 2]}));
        assert_eq!(one("42").unwrap(), json!(42));
        assert_eq!(one("true").unwrap(), json!(true));
        assert_eq!(one("hello").unwrap(), json!("hello"));
        assert_eq!(one("42 apples").unwrap(), json!("42 apples"));
        assert_eq!(one("{not json").unwrap(), json!("{not json"));
        assert_eq!(result_value(json!({"content": []})).unwrap(), Value::Null);
    }

    #[test]
    fn binary_content_is_described_not_copied() {
        let result = json!({"content": [
            {"type": "text", "text": "see"},
            {"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "file:///a.txt", "mimeType": "text/plain", "text": "hi"}},
            {"type": "resource", "resource": {"uri": "file:///b.bin", "blob": "AAAA"}},
            {"type": "resource_link", "uri": "file:///c", "name": "c", "size": 10},
            {"type": "hologram"}
        ]});
        assert_eq!(
            result_value(result).unwrap(),
            json!([
                "see",
                {"type": "image", "mimeType": "image/png", "size": 5},
                {"type": "resource", "uri": "file:///a.txt", "mimeType": "text/plain", "size": 2, "text": "hi"},
                {"type": "resource", "uri": "file:///b.bin", "size": 3},
                {"type": "resource_link", "uri": "file:///c", "name": "c", "size": 10},
                {"type": "hologram"}
            ])
        );
    }

    #[test]
    fn an_error_result_is_a_tool_error_with_its_text() {
        let error = result_value(json!({
            "isError": true,
            "content": [{"type": "text", "text": "repository\nnot found"}]
        }))
        .unwrap_err();
        assert_eq!(error, ToolError::tool("repository not found"));
        let error = result_value(json!({"isError": true, "content": []})).unwrap_err();
        assert_eq!(
            error.message,
            "the MCP server reported an error without a message"
        );
        let error =
            result_value(json!({"isError": true, "structuredContent": {"why": "x"}})).unwrap_err();
        assert_eq!(error.message, "{\"why\":\"x\"}");
    }
}
