//! [`NativeOpenApi`]: an OpenAPI provider (`execbox.OpenAPI`), built from the fields a tools file
//! would write, read as the tools file reads an `openapi:` provider, so errors say the same things
//! (`execbox-openapi`'s [`provider_from_json`], which the Node SDK calls too).

use std::path::PathBuf;

use execbox_host::Provider;
use execbox_openapi::{provider_from_json, EmbeddedProvider};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// An OpenAPI document's operations as tools, built once: the document and the secrets are
/// read when it is made, and every tool set given it shares its HTTP client.
#[pyclass(frozen, module = "execbox._native")]
pub struct NativeOpenApi {
    built: EmbeddedProvider,
}

impl NativeOpenApi {
    /// The provider, named `namespace` (the key it was given under in `tools`).
    pub fn provider(&self, namespace: &str) -> Provider {
        self.built.named(namespace)
    }
}

#[pymethods]
impl NativeOpenApi {
    /// `config_json`: the provider's configuration as JSON, with the tools file's fields;
    /// relative paths (the document, secret files) resolve against `base_dir`.
    #[new]
    fn new(py: Python<'_>, config_json: &str, base_dir: PathBuf) -> PyResult<Self> {
        // Reading the document and the secrets, building schemas: no Python in it.
        let built = py.detach(|| provider_from_json(config_json, &base_dir));
        let built = built.map_err(|m| PyValueError::new_err(format!("execbox.OpenAPI: {m}")))?;
        Ok(NativeOpenApi { built })
    }

    /// `(operation, reason)` of each operation that is not a tool.
    #[getter]
    fn skipped(&self) -> Vec<(String, String)> {
        self.built.skipped.clone()
    }

    /// The names of the tools, as the document names them (the guest's names are these,
    /// sanitised).
    #[getter]
    fn operations(&self) -> Vec<String> {
        self.built
            .provider
            .tools()
            .iter()
            .map(|t| t.name().to_owned())
            .collect()
    }
}
