//! OpenAPI documents as execbox providers: each operation a tool, credentials kept on the host.
//!
//! [`OpenApiProvider::load`] reads an [`OpenApiConfig`] (the provider as a tools file writes
//! it), reads its OpenAPI 3.0 or 3.1 document (JSON or YAML), resolves its credentials, and
//! builds an [`execbox_host::Provider`] with one [`execbox_host::Tool`] per operation:
//!
//! ```no_run
//! use execbox_openapi::{OpenApiConfig, OpenApiProvider};
//! use std::path::Path;
//!
//! let mut config = OpenApiConfig::new("api.github.com.json");
//! config.base_url = Some("https://api.github.com".into());
//! let github = OpenApiProvider::load("github", &config, Path::new(".")).unwrap();
//! for skipped in github.skipped() {
//!     eprintln!("left out: {}: {}", skipped.operation, skipped.reason);
//! }
//! let provider = github.into_provider();
//! ```
//!
//! - `config.rs`: the configuration and its secrets (`{env}`, `{file}`), redacted in `Debug`;
//! - `document.rs`: reading and checking the document, local `$ref` lookups;
//! - `schema.rs`: self-contained JSON Schemas, `$ref`s inlined within bounds;
//! - `operations.rs`: operations read into tools (names, the input object, the collision rule,
//!   include/exclude);
//! - `auth.rs`: credentials applied per request, OAuth2 tokens cached, the [`Redactor`];
//! - `call.rs`: one call: URL, query styles, body, limits, redirects, answers and errors;
//! - `fetch.rs`: documents given by URL, fetched once within bounds;
//! - `embed.rs`: [`provider_from_json`], a provider as an embedding (the SDKs) configures it;
//! - `kind.rs`: [`OpenApiKind`], the tools file's `openapi:` providers.
//!
//! The guide, with the naming and collision rules and what is not supported yet, is
//! docs/openapi.md.

mod auth;
mod call;
mod config;
mod document;
mod embed;
mod error;
mod fetch;
mod http;
mod kind;
mod operations;
mod schema;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use execbox_host::{Provider, Tool};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

pub use auth::Redactor;
pub use config::{
    ApiKey, ApiKeyLocation, AuthConfig, Basic, ClientCredentials, OpenApiConfig, Operations,
    Secret, SecretValue, DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_TIMEOUT_MS,
    MAX_RESPONSE_BYTES_CEILING, MAX_TIMEOUT_MS,
};
pub use document::{Document, MAX_DOCUMENT_BYTES};
pub use embed::{provider_from_json, EmbeddedProvider};
pub use error::OpenApiError;
pub use http::{MAX_REDIRECTS, QUOTED_BODY_BYTES};
pub use kind::{config_from_json, OpenApiKind, FIELDS};
pub use operations::Skipped;
pub use schema::{
    MAX_DEPTH, MAX_DOCUMENT_SCHEMA_BYTES, MAX_RECURSION, MAX_REF_NESTING, MAX_SCHEMA_BYTES,
    MAX_SCHEMA_NODES,
};

/// An OpenAPI provider, built: the host's [`Provider`] and the operations left out.
#[derive(Debug)]
pub struct OpenApiProvider {
    provider: Provider,
    skipped: Vec<Skipped>,
}

impl OpenApiProvider {
    /// Builds provider `name` from `config`; relative paths (the document, secret files)
    /// resolve against `base_dir`, the tools file's folder.
    pub fn load(name: &str, config: &OpenApiConfig, base_dir: &Path) -> Result<Self, OpenApiError> {
        config.check()?;
        let source = config.openapi.as_str();
        if fetch::is_url(source) && config.auth.is_some() && config.base_url.is_none() {
            // The document's servers would decide where the credential goes.
            return Err(OpenApiError::config(
                "base_url",
                "is required with `auth` when the document is fetched from a URL: its `servers` \
                 would decide where the credential is sent; set base_url to the API's URL",
            ));
        }
        let document = if fetch::is_url(source) {
            fetch::fetch_document(source, Duration::from_millis(config.timeout_ms))?
        } else {
            // `./api.json` is named as `<folder>/api.json`.
            let relative = Path::new(source);
            let relative = relative.strip_prefix("./").unwrap_or(relative);
            Document::from_path(&base_dir.join(relative))?
        };
        Self::from_document(name, &document, config, base_dir)
    }

    /// Builds provider `name` from a document already read (`config.openapi` is not read).
    pub fn from_document(
        name: &str,
        document: &Document,
        config: &OpenApiConfig,
        base_dir: &Path,
    ) -> Result<Self, OpenApiError> {
        config.check()?;
        let base = match &config.base_url {
            Some(base) => base.clone(),
            None => match document.server_url() {
                Some(url) => {
                    http::check_base_url(&url).map_err(|m| {
                        OpenApiError::config(
                            "base_url",
                            format!(
                                "is not set, and the document's first server cannot be used ({m}); \
                                 set base_url to the API's absolute URL"
                            ),
                        )
                    })?;
                    url
                }
                None => return Err(OpenApiError::config(
                    "base_url",
                    "is not set and the document names no `servers`; set base_url to the API's URL",
                )),
            },
        };
        let base = base.trim_end_matches('/').to_string();
        let timeout = Duration::from_millis(config.timeout_ms);
        let client = client(timeout)?;
        let redactor = Redactor::default();
        let auth =
            auth::Auth::resolve(config.auth.as_ref(), base_dir, &redactor, &client, timeout)?;
        if auth.is_some() {
            http::check_credentials_transport(&base)
                .map_err(|m| OpenApiError::config("base_url", m))?;
        }
        if let auth::Auth::OAuth2(_) = &auth {
            if let Some(config::AuthConfig::Oauth2ClientCredentials(cc)) = &config.auth {
                http::check_credentials_transport(&cc.token_url).map_err(|m| {
                    OpenApiError::config("auth.oauth2_client_credentials.token_url", m)
                })?;
            }
        }
        let mut headers = HeaderMap::new();
        for (k, v) in &config.headers {
            let name = HeaderName::from_bytes(k.as_bytes()).map_err(|_| {
                OpenApiError::config("headers", format!("{k:?} is not a valid HTTP header name"))
            })?;
            let value = HeaderValue::from_str(v).map_err(|_| {
                OpenApiError::config(
                    format!("headers.{k}"),
                    "holds characters a header cannot carry",
                )
            })?;
            headers.insert(name, value);
        }
        let shared = Arc::new(call::Shared {
            client,
            base,
            headers,
            auth,
            timeout,
            max_response_bytes: config.max_response_bytes,
            redactor,
        });

        let (operations, skipped) = operations::read_operations(document, &config.operations);
        if operations.is_empty() && !config.operations.include.is_empty() {
            // A namespace without tools is never what was meant: a glob that matches nothing.
            return Err(OpenApiError::config(
                "operations.include",
                format!(
                    "{:?} matches no operation of the document; the globs match an operation's \
                     operationId, its tool name (`issues_create_comment`) or a tag, not its \
                     method and path",
                    config.operations.include
                ),
            ));
        }
        let mut provider = Provider::new(name);
        if let Some(description) = describe(document.root()) {
            provider = provider.description(description);
        }
        for op in operations {
            let mut description = op.description.clone().unwrap_or_default();
            if !description.is_empty() {
                description.push_str("\n\n");
            }
            description.push_str(&format!("`{} {}`", op.method, op.path));
            let mut op = op;
            let input_schema = std::mem::take(&mut op.input_schema);
            let output_schema = op.output_schema.take();
            let handler = call::OperationTool {
                shared: shared.clone(),
                op: Arc::new(op),
            };
            let mut tool = Tool::from_handler(handler.op.name.clone(), handler)
                .description(description)
                .input_schema(input_schema);
            if let Some(schema) = output_schema {
                // The document describes the API's answers; the API's answer is the truth a
                // program needs, so it is not refused for differing (GitHub's own answers
                // match several members of some `oneOf`s).
                tool = tool.output_schema(schema).output_checked(false);
            }
            provider = provider.tool(tool);
        }
        Ok(OpenApiProvider { provider, skipped })
    }

    /// The provider, to give to a [`ToolSet`](execbox_host::ToolSet).
    pub fn provider(&self) -> &Provider {
        &self.provider
    }

    /// The provider, taken.
    pub fn into_provider(self) -> Provider {
        self.provider
    }

    /// The operations that are not tools, and why (an unsupported body, a broken `$ref`).
    pub fn skipped(&self) -> &[Skipped] {
        &self.skipped
    }

    /// `(safe, original)` name of each tool, as the guest calls it and as the document names
    /// it.
    pub fn tool_names(&self) -> Vec<(String, String)> {
        let originals: Vec<&str> = self.provider.tools().iter().map(Tool::name).collect();
        execbox_host::assign_safe_names(originals.iter().copied())
            .into_iter()
            .zip(originals.into_iter().map(String::from))
            .collect()
    }
}

/// The namespace's description: the document's title and description.
fn describe(root: &Value) -> Option<String> {
    let info = root.get("info")?;
    let title = info
        .get("title")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|t| !t.is_empty());
    let text = info
        .get("description")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|t| !t.is_empty());
    match (title, text) {
        (Some(t), Some(d)) => Some(format!("{t}: {d}")),
        (Some(t), None) => Some(t.to_string()),
        (None, d) => d.map(String::from),
    }
}

/// The HTTP client of one provider: rustls with the ring provider and the webpki roots,
/// same-origin redirects, the connect timeout.
fn client(timeout: Duration) -> Result<reqwest::Client, OpenApiError> {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| OpenApiError::config("base_url", format!("cannot configure TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .redirect(call::redirect_policy())
        .connect_timeout(timeout)
        .user_agent(concat!("execbox/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| OpenApiError::config("base_url", format!("cannot build the HTTP client: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_shows_no_secret() {
        let key = "planted-debug-secret-1234";
        let dir =
            std::env::temp_dir().join(format!("execbox-openapi-debug-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("key"), key).unwrap();
        let doc = Document::from_value(
            serde_json::json!({"openapi": "3.1.0", "paths": {"/a": {"get": {"operationId": "a"}}}}),
            "t",
        )
        .unwrap();
        let mut config = OpenApiConfig::new("unused");
        config.base_url = Some("http://127.0.0.1:9".into());
        config.auth = Some(AuthConfig::ApiKey(ApiKey {
            location: ApiKeyLocation::Header,
            name: "X-Key".into(),
            env: None,
            file: Some("key".into()),
        }));
        let built = OpenApiProvider::from_document("api", &doc, &config, &dir).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let shown = format!("{built:?} {:?}", built.provider());
        assert!(!shown.contains(key), "{shown}");
        assert_eq!(built.tool_names(), [("a".to_string(), "a".to_string())]);
    }
}
