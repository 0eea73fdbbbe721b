//! [`NativeOpenApi`]: an OpenAPI provider (`openapi({...})`), built from the fields a tools file
//! would write, read as the tools file reads an `openapi:` provider, so errors say the same things.

use std::path::{Path, PathBuf};

use execbox_host::yaml::unknown_field_message;
use execbox_host::{check_permission, parse_window, KindError, Provider, RateLimit};
use execbox_openapi::{config_from_json, OpenApiError, OpenApiProvider, FIELDS};
use napi::{Error, Result, Status};
use napi_derive::napi;
use serde_json::Value;

/// An operation that is not a tool, and why.
#[napi(object)]
pub struct SkippedOperation {
    /// `METHOD /path`.
    pub operation: String,
    /// Why it is not a tool (an unsupported body, a broken `$ref`).
    pub reason: String,
}

/// An OpenAPI document's operations as tools, built once: the document and the secrets are
/// read when it is made, and every tool set given it shares its HTTP client.
#[napi]
pub struct NativeOpenApi {
    provider: Provider,
    skipped: Vec<(String, String)>,
}

#[napi]
impl NativeOpenApi {
    /// `config_json`: the provider's configuration as JSON, with the tools file's fields;
    /// relative paths (the document, secret files) resolve against `base_dir`. Fails with a
    /// message naming the field.
    #[napi(constructor)]
    pub fn new(config_json: String, base_dir: String) -> Result<Self> {
        let Built { provider, skipped } = build(&config_json, &PathBuf::from(base_dir))
            .map_err(|m| Error::new(Status::InvalidArg, m))?;
        Ok(NativeOpenApi { provider, skipped })
    }

    /// The operations that are not tools.
    #[napi(getter)]
    pub fn skipped(&self) -> Vec<SkippedOperation> {
        self.skipped
            .iter()
            .map(|(operation, reason)| SkippedOperation {
                operation: operation.clone(),
                reason: reason.clone(),
            })
            .collect()
    }

    /// The operations that are tools, named as the document names them.
    #[napi(getter)]
    pub fn operations(&self) -> Vec<String> {
        self.provider
            .tools()
            .iter()
            .map(|t| t.name().to_owned())
            .collect()
    }
}

impl NativeOpenApi {
    /// The provider, named `namespace` (the key it was given under in `tools`).
    pub(crate) fn provider(&self, namespace: &str) -> Provider {
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

// What follows is the Python SDK's sdk/python/src/openapi.rs, word for word: both SDKs read a
// configuration as the tools file does.

/// An OpenAPI provider as the tools file builds an `openapi:` provider: its own fields read by
/// `execbox-openapi` ([`config_from_json`]), the fields every provider shares (`description`,
/// `permissions`, `rate_limit`, `requires_approval`) applied to each of its tools. `json` is
/// the provider's mapping; relative paths resolve against `base_dir`. Returns the provider
/// (named `openapi` until it is given a namespace) and the operations left out, or an error
/// naming the field (`auth.bearer: ...`).
fn build(json: &str, base_dir: &Path) -> std::result::Result<Built, String> {
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
    Ok(Built { provider, skipped })
}

/// The fields every provider of a tools file has, beside its kind's.
const SHARED_FIELDS: [&str; 4] = [
    "description",
    "permissions",
    "rate_limit",
    "requires_approval",
];

/// What [`build`] makes.
struct Built {
    provider: Provider,
    skipped: Vec<(String, String)>,
}

/// `"100 per 1h"` (as a tool's `rate_limit` in this SDK) or `{requests: 100, window: 1h}` (as
/// the tools file writes it).
fn rate_limit(value: &Value) -> std::result::Result<RateLimit, String> {
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
/// An unknown field is named in the message, so the path is its mapping's, as `yaml.rs` gives
/// it (`operations: unknown field `includes`...`, not `operations.includes: ...`).
fn words(e: KindError) -> String {
    let message = no_rust_types(&e.message);
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

/// serde names the Rust type it expected (`expected struct Operations`); the person or model
/// writing the configuration knows mappings, not our types.
fn no_rust_types(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    loop {
        let found = [
            ("expected struct ", "expected a mapping"),
            ("expected enum ", "expected a mapping with one key"),
        ]
        .into_iter()
        .filter_map(|(rust, plain)| rest.find(rust).map(|i| (i, rust.len(), plain)))
        .min_by_key(|(i, _, _)| *i);
        let Some((i, skip, plain)) = found else {
            break;
        };
        out.push_str(&rest[..i]);
        out.push_str(plain);
        let after = &rest[i + skip..];
        let end = after
            .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .unwrap_or(after.len());
        rest = &after[end..];
    }
    out.push_str(rest);
    out
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
/// reads it: its error would quote the value (``unknown variant `ghp_...` ``).
fn check_secrets(config: &Value) -> std::result::Result<(), String> {
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
