//! Provider manifests: the metadata that becomes guest-visible tool namespaces.

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

/// One provider as sent in `execute.providers`: metadata only, never a capability.
///
/// Wire shape: `{"name": string, "tools": {KEY: ToolManifest, ...}, "types"?: string,
/// "unavailable"?: string}`.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderManifest {
    /// The global namespace name the guest sees (`name.tool(...)`).
    pub name: String,
    /// The tools, in wire order.
    pub tools: Vec<ToolManifest>,
    /// TypeScript declarations for prompts; the runner does not read them.
    pub types: Option<String>,
    /// Set when the provider cannot be used now (an upstream that did not start, say), with
    /// why and what to do: the namespace still exists, and every call on it fails with
    /// `tool_error` saying this, instead of the name being unknown.
    pub unavailable: Option<String>,
}

/// One entry of `ProviderManifest.tools`.
///
/// Wire shape: `{"safeName": string, "originalName"?: string, "description"?: string, ...}`;
/// unknown fields are kept in `extra` and sent back unchanged (additive evolution).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolManifest {
    /// The key of this tool in the `tools` object.
    pub key: String,
    /// The property name under the provider's namespace, and `tool_call.safeToolName`.
    pub safe_name: String,
    /// The tool's name before sanitisation, for humans.
    pub original_name: Option<String>,
    /// What the tool does, for humans and prompts.
    pub description: Option<String>,
    /// Fields this version does not know.
    pub extra: Map<String, Value>,
}

impl ToolManifest {
    /// A manifest entry whose key, safe name and original name are all `name`.
    pub fn named(name: impl Into<String>) -> Self {
        let name = name.into();
        ToolManifest {
            key: name.clone(),
            safe_name: name.clone(),
            original_name: Some(name),
            description: None,
            extra: Map::new(),
        }
    }
}

impl ProviderManifest {
    /// The wire form of this manifest.
    pub fn to_value(&self) -> Value {
        let mut tools = Map::new();
        for tool in &self.tools {
            let mut entry = Map::new();
            entry.insert("safeName".into(), Value::String(tool.safe_name.clone()));
            if let Some(original) = &tool.original_name {
                entry.insert("originalName".into(), Value::String(original.clone()));
            }
            if let Some(description) = &tool.description {
                entry.insert("description".into(), Value::String(description.clone()));
            }
            for (k, v) in &tool.extra {
                entry.entry(k.clone()).or_insert_with(|| v.clone());
            }
            tools.insert(tool.key.clone(), Value::Object(entry));
        }
        let mut out = Map::new();
        out.insert("name".into(), Value::String(self.name.clone()));
        out.insert("tools".into(), Value::Object(tools));
        if let Some(types) = &self.types {
            out.insert("types".into(), Value::String(types.clone()));
        }
        if let Some(why) = &self.unavailable {
            out.insert("unavailable".into(), Value::String(why.clone()));
        }
        Value::Object(out)
    }

    /// Whether every tool has its own key: the wire form is then written without building
    /// a [`Value`] first (two tools under one key leave the last one, as [`Self::to_value`]).
    fn keys_are_distinct(&self) -> bool {
        let keys: std::collections::HashSet<&str> =
            self.tools.iter().map(|t| t.key.as_str()).collect();
        keys.len() == self.tools.len()
    }

    /// Reads a manifest from its wire form. `path` names the value in error messages
    /// (e.g. `providers[0]`); the error is the path of the offending field and what is wrong.
    pub fn from_value(value: &Value, path: &str) -> Result<Self, (String, String)> {
        let obj = value
            .as_object()
            .ok_or_else(|| (path.to_string(), expected("an object", value)))?;
        let name = match obj.get("name") {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            Some(Value::String(_)) => {
                return Err((format!("{path}.name"), "must be a non-empty string".into()))
            }
            Some(other) => return Err((format!("{path}.name"), expected("a string", other))),
            None => return Err((format!("{path}.name"), "is required".into())),
        };
        let types = match obj.get("types") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => return Err((format!("{path}.types"), expected("a string", other))),
        };
        let unavailable = match obj.get("unavailable") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                return Err((format!("{path}.unavailable"), expected("a string", other)))
            }
        };
        let tools_value = obj
            .get("tools")
            .ok_or_else(|| (format!("{path}.tools"), "is required".to_string()))?;
        let tools_obj = tools_value
            .as_object()
            .ok_or_else(|| (format!("{path}.tools"), expected("an object", tools_value)))?;
        let mut tools = Vec::with_capacity(tools_obj.len());
        for (key, entry) in tools_obj {
            let tpath = format!("{path}.tools.{key}");
            let entry_obj = entry
                .as_object()
                .ok_or_else(|| (tpath.clone(), expected("an object", entry)))?;
            let safe_name = match entry_obj.get("safeName") {
                Some(Value::String(s)) if !s.is_empty() => s.clone(),
                Some(Value::String(_)) => {
                    return Err((
                        format!("{tpath}.safeName"),
                        "must be a non-empty string".into(),
                    ))
                }
                Some(other) => {
                    return Err((format!("{tpath}.safeName"), expected("a string", other)))
                }
                None => return Err((format!("{tpath}.safeName"), "is required".into())),
            };
            let optional_string = |field: &str| match entry_obj.get(field) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(other) => Err((format!("{tpath}.{field}"), expected("a string", other))),
            };
            let original_name = optional_string("originalName")?;
            let description = optional_string("description")?;
            let extra = entry_obj
                .iter()
                .filter(|(k, _)| !matches!(k.as_str(), "safeName" | "originalName" | "description"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            tools.push(ToolManifest {
                key: key.clone(),
                safe_name,
                original_name,
                description,
                extra,
            });
        }
        Ok(ProviderManifest {
            name,
            tools,
            types,
            unavailable,
        })
    }
}

/// The wire form, written as [`ProviderManifest::to_value`] builds it, field for field and in
/// the same order, without the intermediate tree: `execute` carries every manifest each time.
impl Serialize for ProviderManifest {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if !self.keys_are_distinct() {
            return self.to_value().serialize(serializer);
        }
        let fields =
            2 + usize::from(self.types.is_some()) + usize::from(self.unavailable.is_some());
        let mut out = serializer.serialize_map(Some(fields))?;
        out.serialize_entry("name", &self.name)?;
        out.serialize_entry("tools", &Tools(&self.tools))?;
        if let Some(types) = &self.types {
            out.serialize_entry("types", types)?;
        }
        if let Some(why) = &self.unavailable {
            out.serialize_entry("unavailable", why)?;
        }
        out.end()
    }
}

/// `ProviderManifest.tools` on the wire: an object keyed by each tool's key.
struct Tools<'a>(&'a [ToolManifest]);

impl Serialize for Tools<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut out = serializer.serialize_map(Some(self.0.len()))?;
        for tool in self.0 {
            out.serialize_entry(&tool.key, &Entry(tool))?;
        }
        out.end()
    }
}

/// One tool's entry: the known fields, then the unknown ones that do not repeat them.
struct Entry<'a>(&'a ToolManifest);

impl Serialize for Entry<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let tool = self.0;
        let known = |k: &str| match k {
            "safeName" => true,
            "originalName" => tool.original_name.is_some(),
            "description" => tool.description.is_some(),
            _ => false,
        };
        let mut out = serializer.serialize_map(None)?;
        out.serialize_entry("safeName", &tool.safe_name)?;
        if let Some(original) = &tool.original_name {
            out.serialize_entry("originalName", original)?;
        }
        if let Some(description) = &tool.description {
            out.serialize_entry("description", description)?;
        }
        for (k, v) in tool.extra.iter().filter(|(k, _)| !known(k)) {
            out.serialize_entry(k, v)?;
        }
        out.end()
    }
}

/// `"must be T, got K"` where K is the JSON kind of `value`.
pub(crate) fn expected(what: &str, value: &Value) -> String {
    format!("must be {what}, got {}", json_kind(value))
}

/// The JSON kind of a value, for error messages.
pub(crate) fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn manifest_round_trips_and_keeps_unknown_fields() {
        let wire = json!({
            "name": "tools",
            "tools": {"echo-it": {"safeName": "echo_it", "originalName": "echo-it",
                                  "description": "Echo", "inputSchema": {"type": "object"}}},
            "types": "declare namespace tools {}"
        });
        let m = ProviderManifest::from_value(&wire, "providers[0]").unwrap();
        assert_eq!(m.tools[0].safe_name, "echo_it");
        assert_eq!(m.tools[0].key, "echo-it");
        assert_eq!(m.to_value(), wire);
    }

    #[test]
    fn an_unavailable_provider_says_why() {
        let wire =
            json!({"name": "github", "tools": {}, "unavailable": "the upstream did not start"});
        let m = ProviderManifest::from_value(&wire, "providers[0]").unwrap();
        assert_eq!(m.unavailable.as_deref(), Some("the upstream did not start"));
        assert_eq!(m.to_value(), wire);
    }

    #[test]
    fn the_wire_form_is_written_as_to_value_builds_it() {
        let mut m = ProviderManifest::from_value(
            &json!({
                "name": "tools",
                "tools": {
                    "b": {"safeName": "b", "inputSchema": {"type": "object"}, "x": [1, "é\n"]},
                    "a-1": {"safeName": "a_1", "originalName": "a-1", "description": "A \"q\""}
                },
                "types": "declare namespace tools {}",
                "unavailable": "why"
            }),
            "providers[0]",
        )
        .unwrap();
        let direct = |m: &ProviderManifest| serde_json::to_string(m).unwrap();
        assert_eq!(direct(&m), m.to_value().to_string());
        // Unknown fields that repeat a known one are left out, as `to_value` does; one that
        // names a field the tool does not have is kept.
        m.tools[0]
            .extra
            .insert("safeName".into(), json!("not this"));
        m.tools[0].extra.insert("description".into(), json!("kept"));
        assert_eq!(direct(&m), m.to_value().to_string());
        // Two tools under one key: the last one, in the first one's place.
        m.tools.push(ToolManifest::named("b"));
        assert_eq!(direct(&m), m.to_value().to_string());
    }

    #[test]
    fn missing_safe_name_names_the_field() {
        let wire = json!({"name": "t", "tools": {"a": {"originalName": "a"}}});
        let (field, why) = ProviderManifest::from_value(&wire, "providers[2]").unwrap_err();
        assert_eq!(field, "providers[2].tools.a.safeName");
        assert_eq!(why, "is required");
    }
}
