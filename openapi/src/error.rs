//! Why an OpenAPI provider cannot be built: the configuration, or the document.

use std::path::PathBuf;

/// Why an OpenAPI provider cannot be built. Every message names the field, file or JSON
/// pointer at fault and says what was expected.
#[derive(Debug, thiserror::Error)]
pub enum OpenApiError {
    /// A field of the provider's configuration is wrong (`auth.bearer`, `timeout_ms`, ...).
    #[error("{field}: {message}")]
    Config {
        /// The field, as the tools file spells it.
        field: String,
        /// What is wrong and what to do.
        message: String,
    },
    /// The document cannot be read.
    #[error("cannot read the OpenAPI document {}: {source}", path.display())]
    Read {
        /// The document's path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The document is not an OpenAPI 3.0 or 3.1 description execbox can use.
    #[error("the OpenAPI document {source_name}: {message}")]
    Document {
        /// The document's path or URL.
        source_name: String,
        /// What is wrong, with its JSON pointer when there is one.
        message: String,
    },
}

impl OpenApiError {
    pub(crate) fn config(field: impl Into<String>, message: impl Into<String>) -> Self {
        OpenApiError::Config {
            field: field.into(),
            message: message.into(),
        }
    }

    pub(crate) fn document(source_name: impl Into<String>, message: impl Into<String>) -> Self {
        OpenApiError::Document {
            source_name: source_name.into(),
            message: message.into(),
        }
    }
}
