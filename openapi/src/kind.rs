//! The tools file's `openapi:` providers: [`OpenApiKind`], the host's [`ProviderKind`] that
//! reads the provider's fields into an [`OpenApiConfig`] and builds it.

use std::path::Path;

use execbox_host::{yaml, KindError, Provider, ProviderKind};
use serde_json::Value;

use crate::config::OpenApiConfig;
use crate::error::OpenApiError;
use crate::OpenApiProvider;

/// Every field of an `openapi:` provider in a tools file.
pub const FIELDS: &[&str] = &[
    "openapi",
    "base_url",
    "auth",
    "operations",
    "headers",
    "timeout_ms",
    "max_response_bytes",
];

/// Reads `openapi:` providers of a tools file: give it to
/// [`ToolsFile::load_with`](execbox_host::ToolsFile::load_with).
///
/// Operations left out of a provider (an unsupported body, a broken `$ref`) are reported on
/// stderr through `tracing`, each with why.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenApiKind;

impl ProviderKind for OpenApiKind {
    fn marker(&self) -> &'static str {
        "openapi"
    }

    fn fields(&self) -> &'static [&'static str] {
        FIELDS
    }

    fn build(&self, name: &str, fields: Value, base_dir: &Path) -> Result<Provider, KindError> {
        let config = config_from_json(fields)?;
        let built = OpenApiProvider::load(name, &config, base_dir).map_err(kind_error)?;
        for skipped in built.skipped() {
            tracing::warn!(
                provider = name,
                "left out {}: {}",
                skipped.operation.escape_debug(),
                skipped.reason.escape_debug()
            );
        }
        Ok(built.into_provider())
    }
}

/// An [`OpenApiConfig`] from JSON shaped as the tools file writes it (what the SDKs give
/// too); an error names the field's path (`auth.bearer`) and what was expected.
pub fn config_from_json(fields: Value) -> Result<OpenApiConfig, KindError> {
    let written = fields.clone();
    serde_path_to_error::deserialize::<_, OpenApiConfig>(fields).map_err(|e| {
        let at = e.path().to_string();
        let at = if at == "." { String::new() } else { at };
        let message = e.into_inner().to_string();
        // Under `auth`, a value written where a secret is named may be the secret itself: the
        // error never quotes it (a key, such as a misspelt `baerer`, is shown).
        let pointer = format!("/{}", at.replace('.', "/"));
        let scalar = written
            .pointer(&pointer)
            .is_some_and(|v| !v.is_object() && !v.is_array());
        if (at == "auth" || at.starts_with("auth.")) && scalar {
            let what = if at.contains('.') {
                "a secret is named here, never written: give `{env: NAME}` or `{file: PATH}`"
            } else {
                "expected a mapping naming the kind of authentication and its secrets \
                 (`bearer: {env: NAME}`, see docs/openapi.md)"
            };
            return KindError::new(at, format!("{what} (what is written is not shown)"));
        }
        KindError::new(at, plain(&message))
    })
}

/// An [`OpenApiError`] as the field it names and the message.
pub fn kind_error(e: OpenApiError) -> KindError {
    match e {
        OpenApiError::Config { field, message } => KindError::new(field, message),
        other => KindError::new("openapi", other.to_string()),
    }
}

/// serde's message, in the tools file's words: an unknown field or kind gets a "did you
/// mean", and no Rust type is named.
fn plain(message: &str) -> String {
    for (prefix, what) in [("unknown field `", "field"), ("unknown variant `", "kind")] {
        let Some(rest) = message.strip_prefix(prefix) else {
            continue;
        };
        let Some((given, rest)) = rest.split_once('`') else {
            break;
        };
        let expected: Vec<&str> = rest.split('`').skip(1).step_by(2).collect();
        let message = yaml::unknown_field_message(given, &expected);
        return message.replacen("unknown field", &format!("unknown {what}"), 1);
    }
    let message = message
        .replace("expected u64", "expected a whole number")
        .replace("expected u16", "expected a whole number")
        .replace("expected a map", "expected a mapping")
        .replace("expected a sequence", "expected a list")
        .replace("variant", "kind");
    no_rust_types(&message)
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn error(fields: Value) -> KindError {
        config_from_json(fields).unwrap_err()
    }

    #[test]
    fn config_errors_name_the_field_and_suggest_the_spelling() {
        let e = error(json!({"openapi": "a.json", "auth": {"baerer": {"env": "T"}}}));
        assert_eq!(e.at, "auth");
        assert!(
            e.message
                .starts_with("unknown kind `baerer`; did you mean `bearer`?"),
            "{}",
            e.message
        );
        let e = error(json!({"openapi": "a.json", "auth": {"bearer": {"envv": "T"}}}));
        assert_eq!(e.at, "auth.bearer");
        assert!(e.message.contains("did you mean `env`?"), "{}", e.message);
        // A secret written where one is named is never quoted back.
        for auth in [
            json!({"bearer": "ghp_PLANTED"}),
            json!({"basic": {"username": "me", "password": "ghp_PLANTED"}}),
            json!({"oauth2_client_credentials": {"token_url": "https://t", "client_id": "a", "client_secret": "ghp_PLANTED"}}),
            json!("ghp_PLANTED"),
        ] {
            let e = error(json!({"openapi": "a.json", "auth": auth}));
            assert!(!e.message.contains("PLANTED"), "{}", e.message);
            assert!(
                e.message.ends_with("(what is written is not shown)"),
                "{}",
                e.message
            );
        }
        let e = error(json!({"openapi": "a.json", "auth": {"bearer": "ghp_PLANTED"}}));
        assert_eq!(e.at, "auth.bearer");
        assert!(
            e.message
                .starts_with("a secret is named here, never written"),
            "{}",
            e.message
        );
        // A secret pasted where a variable's name goes is not shown either (it is caught when
        // the provider is built).
        let config = config_from_json(
            json!({"openapi": "a.json", "auth": {"bearer": {"env": "ghp_PLANTED-token"}}}),
        )
        .unwrap();
        let Some(crate::AuthConfig::Bearer(secret)) = &config.auth else {
            panic!("{config:?}")
        };
        let e = secret
            .resolve("auth.bearer", Path::new("."))
            .unwrap_err()
            .to_string();
        assert!(
            !e.contains("PLANTED") && e.contains("not the secret itself"),
            "{e}"
        );
        let e = error(json!({"openapi": "a.json", "timeout_ms": "fast"}));
        assert_eq!(e.at, "timeout_ms");
        assert_eq!(
            e.message,
            "invalid type: string \"fast\", expected a whole number"
        );
        let e = error(json!({"base_url": "https://x"}));
        assert_eq!(e.at, "");
        assert_eq!(e.message, "missing field `openapi`");
    }

    #[test]
    fn config_errors_name_no_rust_type() {
        let e = error(json!({"openapi": "a.json", "operations": "getPet"}));
        assert_eq!(e.at, "operations");
        assert_eq!(
            e.message,
            "invalid type: string \"getPet\", expected a mapping"
        );
        let e = error(json!({"openapi": "a.json", "auth": ["bearer"]}));
        assert_eq!(e.at, "auth");
        assert!(!e.message.contains("enum"), "{}", e.message);
        assert_eq!(
            no_rust_types("expected struct Operations, or expected enum AuthConfig here"),
            "expected a mapping, or expected a mapping with one key here"
        );
    }
}
