//! The official MCP conformance suite (`@modelcontextprotocol/conformance` 0.1.9, the last that
//! runs on Node 20), the reference `everything` server and the official TypeScript SDK,
//! installed from `cli/tests/conformance/package.json` (locked) into
//! `target/tmp/conformance-tests` on first use.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

#[allow(clippy::duplicate_mod)] // each support file stands alone (mcp.rs includes them one by one)
#[path = "npm.rs"]
mod npm;

/// The folder of the locked `package.json`.
pub const PACKAGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/conformance");

/// The installed packages' folder (with `node_modules`), installing them on first use; `None`
/// (with a note on stderr) when npm is missing outside CI; under `CI=true` a missing npm fails.
pub fn installed() -> Option<&'static Path> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    npm::installed(
        &DIR,
        Path::new(PACKAGE),
        "conformance-tests",
        "the MCP conformance tests",
    )
}

/// The suite's command line (`conformance server|client|list ...`), run with `node`.
pub fn suite(dir: &Path) -> PathBuf {
    dir.join("node_modules/@modelcontextprotocol/conformance/dist/index.js")
}

/// The reference `everything` server (`node PATH stdio`).
pub fn everything_server(dir: &Path) -> PathBuf {
    dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
}
