//! Code mode over MCP for execbox: upstream MCP servers become providers, and an MCP
//! server offers any MCP client `execute_code` and `search_tools` over them (and
//! `execution_result`, for programs kept paused for an operator's approval).
//!
//! - [`McpConfig`] reads an `mcp.json` (`{"mcpServers": {...}}`, the shape MCP clients use);
//! - [`Upstreams::start`] connects every server (stdio child processes, streamable HTTP) and
//!   keeps one [`ToolSet`](execbox_host::ToolSet) of their tools, one namespace per server, next to
//!   local providers (a tools file's): each upstream tool is an ordinary [`Tool`](execbox_host::Tool)
//!   with the server's `inputSchema` and `outputSchema`, so everything that applies to a tool
//!   set (schema checks, dispatch, and any policy layered on dispatch) applies to them;
//! - [`CodeModeServer`] is the MCP server (an `rmcp` [`ServerHandler`](rmcp::ServerHandler))
//!   that runs programs with any [`Executor`](execbox_host::Executor); serve it over stdio with
//!   [`serve_stdio`] or over streamable HTTP with [`serve_http`].
//!
//! ```no_run
//! use std::sync::Arc;
//! use execbox_host::{PooledExecutor, RunnerCommand};
//! use execbox_mcp::{CodeModeOptions, CodeModeServer, McpConfig, UpstreamOptions, Upstreams};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let config = McpConfig::load("mcp.json")?;
//! let upstreams = Upstreams::start(&config, Vec::new(), UpstreamOptions::default()).await?;
//! let executor = PooledExecutor::new(RunnerCommand::find()?, Default::default())?;
//! let server = CodeModeServer::new(upstreams.clone(), Arc::new(executor), CodeModeOptions::default());
//! execbox_mcp::serve_stdio(server).await?;
//! upstreams.shutdown().await;
//! # Ok(())
//! # }
//! ```

mod approvals;
mod catalog;
mod config;
mod content;
mod elicitation;
mod http_client;
mod logging;
mod names;
pub mod oauth;
mod offers;
mod pauses;
mod plain;
mod prompts;
mod resources;
mod rounds;
mod serve_http;
mod server;
mod upstream;
mod upstream_process;

use std::sync::atomic::{AtomicU64, Ordering};

pub use approvals::ElicitationApprover;
pub use catalog::NamespaceStatus;
pub use config::{McpConfig, McpConfigError, UpstreamConfig, UpstreamPolicy, UpstreamTransport};
pub use content::MAX_INLINE_RESOURCE_CHARS;
pub use pauses::{DurablePauses, KeptState, PausedExecution, EXECUTION_RESULT};
pub use serve_http::{
    check_exposure, serve_http, HttpError, HttpOptions, MAX_REQUEST_BODY_BYTES, MCP_PATH,
};
pub use server::{CodeModeOptions, CodeModeServer, EXECUTE_CODE, SEARCH_TOOLS};
pub use upstream::{UpstreamOptions, UpstreamStatus, Upstreams, UpstreamsError};

/// Serves `server` on this process's stdin and stdout until the client closes them (or the
/// connection fails).
pub async fn serve_stdio(server: CodeModeServer) -> std::io::Result<()> {
    use rmcp::ServiceExt as _;
    let running = server
        .serve(rmcp::transport::stdio_pipes())
        .await
        .map_err(|e| std::io::Error::other(format!("the MCP client did not initialize: {e}")))?;
    running
        .waiting()
        .await
        .map_err(|e| std::io::Error::other(format!("the MCP session failed: {e}")))?;
    Ok(())
}

static NEXT: AtomicU64 = AtomicU64::new(1);

/// A process-unique execution id for `execute_code`, so upstream calls can be tied to it.
fn next_execution_id() -> String {
    format!(
        "mcp-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}
