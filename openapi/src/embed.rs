//! An OpenAPI provider as an embedding (the SDKs) configures it: [`provider_from_json`] reads
//! the provider's fields as a tools file writes them, as JSON, the way the tools file reads an
//! `openapi:` provider, so both SDKs' errors say what the tools file's say.

use std::path::Path;

use execbox_host::yaml::unknown_field_message;
use execbox_host::{check_permission, parse_window, KindError, Provider, RateLimit};
use serde_json::Value;

use crate::error::OpenApiError;
use crate::kind::{config_from_json, FIELDS};
use crate::OpenApiProvider;

/// The fields every provider of a tools file has, beside its kind's.
const SHARED_FIELDS: [&str; 4] = [
    "description",
    "permissions",
    "rate_limit",
    "requires_approval",
];

/// An OpenAPI provider built from an embedding's configuration ([`provider_from_json`]).
#[derive(Debug)]
pub struct EmbeddedProvider {
    /// The provider, named `openapi` until [`named`](Self::named) gives it a namespace.
    pub provider: Provider,
    /// `(operation, reason)` of each operation that is not a tool (`POST /upload`, why).
    pub skipped: Vec<(String, String)>,
}

impl EmbeddedProvider {
    /// The provider, named `namespace` (the key it was given under in a tool set).
    pub fn named(&self, namespace: &str) -> Provider {
        let mut provider = Provider::new(namespace);
        if let Some(description) = self.provider.get_description() {
            provider = provider.description(description);
        }
        self.provider
            .tools()
            .iter()
            .cloned()
            .fold(provider, Provider::tool)
    }
}

/// An OpenAPI provider as the tools file builds an `openapi:` provider: its own fields read by
/// [`config_from_json`], the fields every provider shares (`description`, `permissions`,
/// `rate_limit`, also as `"100 per 1h"`, `requires_approval`) applied to each of its tools.
/// `json` is the provider's mapping; relative paths (the document, secret files) resolve
/// against `base_dir`. Returns the provider and the operations left out, or an error naming
/// the field (`auth.bearer: ...`), which never quotes a secret written in place of its name.
pub fn provider_from_json(json: &str, base_dir: &Path) -> Result<EmbeddedProvider, String> {
    let value: Value = serde_json::from_str(json).map_err(|e| e.to_string())?;
    check_secrets(&value)?;
    let Value::Object(mut fields) = value else {
        return Err("expected a mapping of the provider's fields".into());
    };
    let bad = |field: &str, message: &str| format!("{field}: {message}");
    let description = match fields.remove("description") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(text),
        Some(_) => return Err(bad("description", "expected a string")),
    };
    let permissions = match fields.remove("permissions") {
        None | Some(Value::Null) => Vec::new(),
        Some(list) => serde_json::from_value::<Vec<String>>(list)
            .map_err(|_| bad("permissions", "expected a list of permissions"))?,
    };
    for permission in &permissions {
        check_permission(permission).map_err(|m| bad("permissions", &m))?;
    }
    let rate_limit = match fields.remove("rate_limit") {
        None | Some(Value::Null) => None,
        Some(limit) => Some(rate_limit(&limit).map_err(|m| bad("rate_limit", &m))?),
    };
    let requires_approval = match fields.remove("requires_approval") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(required)) => required,
        Some(_) => return Err(bad("requires_approval", "expected true or false")),
    };
    if let Some(unknown) = fields.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        let expected: Vec<&str> = FIELDS.iter().chain(&SHARED_FIELDS).copied().collect();
        return Err(unknown_field_message(unknown, &expected));
    }
    let config = config_from_json(Value::Object(fields)).map_err(words)?;
    let built = OpenApiProvider::load("openapi", &config, base_dir).map_err(|e| match e {
        OpenApiError::Config { .. } => e.to_string(),
        other => format!("openapi: {other}"),
    })?;
    let skipped = built
        .skipped()
        .iter()
        .map(|s| (s.operation.clone(), s.reason.clone()))
        .collect();
    let built = built.into_provider();
    let mut provider = Provider::new(built.name());
    if let Some(text) = description.as_deref().or(built.get_description()) {
        provider = provider.description(text);
    }
    for tool in built.tools() {
        let mut tool = tool.clone().requires_approval(requires_approval);
        if !permissions.is_empty() {
            tool = tool.permissions(permissions.clone());
        }
        if let Some(limit) = rate_limit {
            tool = tool.rate_limit(limit);
        }
        provider = provider.tool(tool);
    }
    Ok(EmbeddedProvider { provider, skipped })
}

/// `"100 per 1h"` (as an SDK writes a tool's `rate_limit`) or `{requests: 100, window: 1h}`
/// (as the tools file writes it).
fn rate_limit(value: &Value) -> Result<RateLimit, String> {
    if let Value::String(text) = value {
        return text.parse::<RateLimit>().map_err(|e| e.to_string());
    }
    let expected = || "expected `100 per 1h` or a mapping like `{ requests: 100, window: 1h }`";
    let Value::Object(def) = value else {
        return Err(expected().into());
    };
    if def.keys().any(|k| k != "requests" && k != "window") {
        return Err(expected().into());
    }
    let requests = def.get("requests").and_then(Value::as_u64);
    let window = def.get("window").and_then(Value::as_str);
    let (Some(requests), Some(window)) = (requests, window) else {
        return Err(expected().into());
    };
    let requests =
        u32::try_from(requests).map_err(|_| format!("{requests} requests is too many"))?;
    RateLimit::new(requests, parse_window(window)?).map_err(|e| e.to_string())
}

/// A [`KindError`] in the tools file's words, less its `providers.NAME.` prefix.
/// An unknown field is named in the message, so the path is its mapping's, as the host's
/// `yaml.rs` gives it (`operations: unknown field `includes`...`, not
/// `operations.includes: ...`).
fn words(e: KindError) -> String {
    let message = e.message;
    let mut at = e.at.as_str();
    for unknown in ["unknown field `", "unknown kind `"] {
        let named = message
            .strip_prefix(unknown)
            .and_then(|rest| rest.split_once('`'))
            .map(|(field, _)| field);
        if let Some(field) = named {
            if at == field {
                at = "";
            } else if let Some(parent) = at.strip_suffix(field).and_then(|a| a.strip_suffix('.')) {
                at = parent;
            }
        }
    }
    if at.is_empty() {
        message
    } else {
        format!("{at}: {message}")
    }
}

/// Where `auth` holds secrets, each `{env: NAME}` or `{file: PATH}`.
const SECRETS: [(&str, &str); 5] = [
    ("bearer", ""),
    ("basic", "username"),
    ("basic", "password"),
    ("oauth2_client_credentials", "client_secret"),
    ("api_key", ""),
];

/// Refuses a secret written as a value (`bearer: "ghp_..."`, `{value: ...}`) before serde
/// reads it, saying how an embedding names one. [`config_from_json`] refuses a scalar too,
/// without quoting it; `{value: ...}` it would read as an unknown field or kind.
fn check_secrets(config: &Value) -> Result<(), String> {
    let Some(auth) = config.get("auth") else {
        return Ok(());
    };
    for (kind, field) in SECRETS {
        let (place, secret) = if field.is_empty() {
            (format!("auth.{kind}"), auth.get(kind))
        } else {
            (
                format!("auth.{kind}.{field}"),
                auth.get(kind).and_then(|k| k.get(field)),
            )
        };
        let written = match secret {
            Some(Value::String(_) | Value::Number(_)) => kind != "api_key",
            Some(Value::Object(map)) => map.contains_key("value"),
            _ => false,
        };
        if written {
            let how = if kind == "api_key" {
                "env: NAME or file: PATH beside `in` and `name`"
            } else {
                "{env: NAME} or {file: PATH}"
            };
            return Err(format!(
                "{place}: a secret is named here, never written: give {how} (NAME a variable of \
                 this process, which may be set from code)"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use serde_json::json;

    use super::*;

    /// A folder holding `pets.json`, a document of two operations, one left out.
    fn folder(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("execbox-embed-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let document = json!({
            "openapi": "3.0.3",
            "info": {"title": "Pets", "version": "1", "description": "A small pet store."},
            "paths": {
                "/pets": {"get": {"operationId": "listPets"}},
                "/upload": {"post": {
                    "operationId": "upload",
                    "requestBody": {"content": {"multipart/form-data": {"schema": {"type": "object"}}}}
                }}
            }
        });
        std::fs::write(dir.join("pets.json"), document.to_string()).unwrap();
        dir
    }

    fn error(config: Value) -> String {
        provider_from_json(&config.to_string(), Path::new("/nonexistent")).unwrap_err()
    }

    #[test]
    fn shared_fields_apply_to_every_tool() {
        let dir = folder("shared");
        let config = json!({
            "openapi": "pets.json",
            "base_url": "http://127.0.0.1:9",
            "description": "Our pets.",
            "permissions": ["pets:read"],
            "rate_limit": "100 per 1h",
            "requires_approval": true,
        });
        let built = provider_from_json(&config.to_string(), &dir).unwrap();
        let names: Vec<&str> = built.provider.tools().iter().map(|t| t.name()).collect();
        assert_eq!(names, ["listPets"]);
        assert_eq!(built.skipped.len(), 1);
        assert_eq!(built.skipped[0].0, "POST /upload");
        let requirements = built.provider.tools()[0].requirements();
        assert_eq!(requirements.permissions, ["pets:read"]);
        assert!(requirements.requires_approval);
        let limit = requirements.rate_limit.unwrap();
        assert_eq!(
            (limit.requests(), limit.window()),
            (100, Duration::from_secs(3600))
        );
        let named = built.named("pets");
        assert_eq!(named.name(), "pets");
        assert_eq!(named.get_description(), Some("Our pets."));
        assert_eq!(named.tools().len(), 1);

        // Without them: the document's description, nothing required; the mapping form of
        // `rate_limit` as the tools file writes it.
        let config = json!({"openapi": "pets.json", "base_url": "http://127.0.0.1:9"});
        let built = provider_from_json(&config.to_string(), &dir).unwrap();
        assert_eq!(
            built.provider.get_description(),
            Some("Pets: A small pet store.")
        );
        assert!(built.provider.tools()[0].requirements().is_empty());
        let config = json!({
            "openapi": "pets.json",
            "base_url": "http://127.0.0.1:9",
            "rate_limit": {"requests": 5, "window": "1m"},
        });
        let built = provider_from_json(&config.to_string(), &dir).unwrap();
        let limit = built.provider.tools()[0].requirements().rate_limit.unwrap();
        assert_eq!(
            (limit.requests(), limit.window()),
            (5, Duration::from_secs(60))
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn errors_name_the_field_in_the_tools_files_words() {
        assert_eq!(
            error(json!({"openapi": "a.json", "timeout": 5})),
            "unknown field `timeout`; did you mean `timeout_ms`? (expected one of `openapi`, \
             `base_url`, `auth`, `operations`, `headers`, `timeout_ms`, `max_response_bytes`, \
             `description`, `permissions`, `rate_limit`, `requires_approval`)"
        );
        assert_eq!(
            error(json!({"openapi": "a.json", "auth": {"bearer": {"environment": "X"}}})),
            "auth.bearer: unknown kind `environment` (expected one of `env`, `file`)"
        );
        let message = error(json!({"openapi": "a.json", "operations": {"includes": ["x"]}}));
        assert!(
            message.starts_with("operations: unknown field `includes`; did you mean `include`?"),
            "{message}"
        );
        assert_eq!(
            error(json!({"openapi": "a.json", "operations": "getPet"})),
            "operations: invalid type: string \"getPet\", expected a mapping"
        );
        assert!(
            error(json!({"openapi": "a.json", "rate_limit": "often"})).starts_with("rate_limit: ")
        );
        assert!(
            error(json!({"openapi": "a.json", "permissions": ["has space"]}))
                .starts_with("permissions: ")
        );
        assert_eq!(
            error(json!({"openapi": "a.json", "requires_approval": "yes"})),
            "requires_approval: expected true or false"
        );
        assert_eq!(
            error(json!(["a.json"])),
            "expected a mapping of the provider's fields"
        );
        let message = error(json!({"openapi": "missing.json", "base_url": "http://127.0.0.1:9"}));
        assert!(
            message.contains("cannot read the OpenAPI document"),
            "{message}"
        );
    }

    #[test]
    fn a_secret_written_in_place_is_refused_unquoted() {
        for auth in [
            json!({"bearer": "PLANTED"}),
            json!({"bearer": {"value": "PLANTED"}}),
            json!({"basic": {"username": {"env": "U"}, "password": "PLANTED"}}),
            json!({"api_key": {"in": "header", "name": "X-Key", "value": "PLANTED"}}),
            json!({"api_key": "PLANTED"}),
            json!({"oauth2_client_credentials": {"token_url": "https://t", "client_id": "a", "client_secret": "PLANTED"}}),
        ] {
            let message = error(json!({"openapi": "a.json", "auth": auth}));
            assert!(message.starts_with("auth."), "{message}");
            assert!(
                message.contains("a secret is named here, never written"),
                "{message}"
            );
            assert!(!message.contains("PLANTED"), "{message}");
        }
    }
}
