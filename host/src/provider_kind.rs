//! Kinds of providers a tools file declares beside commands (`openapi:`), built by crates the
//! host does not depend on.
//!
//! A tools file provider is either `tools:` (commands, read by the host itself) or the fields
//! of a kind, recognised by its marker field: `openapi: ./api.json` is an OpenAPI provider,
//! built by `execbox-openapi`'s kind. The host reads the YAML, checks the fields every
//! provider shares (`description`, `permissions`, `rate_limit`, `requires_approval`), and
//! hands the kind the rest as JSON; the kind builds the [`Provider`] and says which field is
//! wrong when it cannot. So the core stays free of an HTTP client, and the tools file stays
//! one strict format with one kind of error: `tools.yaml:4:5: providers.github.auth.bearer:
//! the environment variable GITHUB_TOKEN is not set; ...`.

use std::path::Path;

use serde_json::Value;

use crate::tool::Provider;

/// A kind of provider: see the [module docs](self).
pub trait ProviderKind: Send + Sync {
    /// The field that marks a provider of this kind (`"openapi"`); no two kinds share one.
    fn marker(&self) -> &'static str;

    /// Every field this kind reads, the marker included: named in "did you mean" hints, and
    /// a field of another kind's list is refused naming the kind it belongs to.
    fn fields(&self) -> &'static [&'static str];

    /// Builds provider `name` from its fields (a JSON object of the provider's mapping without
    /// the shared fields); relative paths resolve against `base_dir`, the tools file's folder.
    /// May block (it reads files): callers on an async runtime run it on a blocking thread.
    fn build(&self, name: &str, fields: Value, base_dir: &Path) -> Result<Provider, KindError>;
}

/// Why a kind cannot build a provider: the field, as a path under the provider
/// (`auth.bearer`; empty for the provider as a whole), and what is wrong and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindError {
    /// The field's path under the provider, dot-separated; empty for the whole provider.
    pub at: String,
    /// What is wrong, and what to do.
    pub message: String,
}

impl KindError {
    /// An error at `at` (a dot-separated path under the provider, or empty).
    pub fn new(at: impl Into<String>, message: impl Into<String>) -> Self {
        KindError {
            at: at.into(),
            message: message.into(),
        }
    }
}
