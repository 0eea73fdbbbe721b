//! [`NativeOpenApi`]: an OpenAPI provider (`openapi({...})`), built from the fields a tools file
//! would write, read as the tools file reads an `openapi:` provider, so errors say the same things
//! (`execbox-openapi`'s [`provider_from_json`], which the Python SDK calls too).

use std::path::PathBuf;

use execbox_host::Provider;
use execbox_openapi::{provider_from_json, EmbeddedProvider};
use napi::{Error, Result, Status};
use napi_derive::napi;

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
    built: EmbeddedProvider,
}

#[napi]
impl NativeOpenApi {
    /// `config_json`: the provider's configuration as JSON, with the tools file's fields;
    /// relative paths (the document, secret files) resolve against `base_dir`. Fails with a
    /// message naming the field.
    #[napi(constructor)]
    pub fn new(config_json: String, base_dir: String) -> Result<Self> {
        let built = provider_from_json(&config_json, &PathBuf::from(base_dir))
            .map_err(|m| Error::new(Status::InvalidArg, m))?;
        Ok(NativeOpenApi { built })
    }

    /// The operations that are not tools.
    #[napi(getter)]
    pub fn skipped(&self) -> Vec<SkippedOperation> {
        self.built
            .skipped
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
        self.built
            .provider
            .tools()
            .iter()
            .map(|t| t.name().to_owned())
            .collect()
    }
}

impl NativeOpenApi {
    /// The provider, named `namespace` (the key it was given under in `tools`).
    pub(crate) fn provider(&self, namespace: &str) -> Provider {
        self.built.named(namespace)
    }
}
