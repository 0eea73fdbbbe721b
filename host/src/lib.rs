//! Trusted host for execbox: tools, schemas, runner sessions, pools and the `execbox` CLI.
//!
//! The host owns everything the guest must not: tool implementations, their credentials and
//! side effects. It hands model-written code to a runner and answers the runner's tool calls.
//!
//! The core types and how they relate:
//! - a [`Tool`] (name, JSON Schemas, async implementation) lives in a [`Provider`], a named
//!   namespace; tools can also come from a YAML [`ToolsFile`] as external [`CommandTool`]s;
//! - a [`ToolSet`] resolves providers once: sanitised names, compiled schemas, the provider
//!   manifests and TypeScript declarations, and [`ToolSet::dispatch`] for tool calls;
//!   [`model_prompt`] turns it into a prompt-ready description of the sandbox for a model;
//! - an [`Executor`] runs code against a tool set and returns an [`ExecuteResult`]:
//!   [`ProcessExecutor`] (a fresh runner process each time), [`PooledExecutor`] (warm runner
//!   processes), [`WsExecutor`] (a runner behind `execbox-runner --listen`) and
//!   [`InProcessExecutor`] (engine threads in this process, feature `runner`; trusted code only);
//! - underneath, a [`Connection`] speaks the protocol's host side over any transport;
//! - a [`Policy`] says which [`Principal`] holds which permissions; an [`ExecutionGuard`]
//!   applies it to one execution's calls (permissions, [`RateLimits`], an [`Approver`], the
//!   [`AuditLog`]), applied to every execution that names a principal or an audit log;
//! - with the `mcp` feature, `Upstreams` turns MCP servers into providers and
//!   `CodeModeServer` offers any MCP client `execute_code` and `search_tools` over them
//!   (`execbox mcp`);
//! - a [`CapabilityManager`] runs saved programs (capabilities, found by a [`Registry`]) with
//!   their executors, tracks each execution in an [`ExecutionStore`] (SQLite), and can wait
//!   for, list and stop them; [`capabilities_router`] (feature `serve`) is its HTTP API.
//!
//! ```no_run
//! use execbox_host::{ExecuteRequest, Executor, PooledExecutor, Provider, RunnerCommand, Tool, ToolSet};
//! use serde_json::json;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let add = Tool::new("add", |input, _ctx| async move {
//!     Ok(json!({ "sum": input["x"].as_f64().unwrap_or(0.0) + 2.0 }))
//! });
//! let tools = ToolSet::new(vec![Provider::new("math").tool(add)])?;
//! let executor = PooledExecutor::new(RunnerCommand::find()?, Default::default())?;
//! let result = executor
//!     .execute(ExecuteRequest::new("(await math.add({ x: 2 })).sum").tools(&tools))
//!     .await;
//! assert_eq!(result.value(), Some(json!(4.0)));
//! # Ok(())
//! # }
//! ```

mod capabilities;
mod connection;
mod executor;
mod external;
#[cfg(feature = "inprocess")]
mod inprocess;
mod json;
#[cfg(feature = "mcp")]
mod mcp;
mod names;
mod policy;
mod pool;
mod process;
mod prompt;
mod schema;
mod tool;
mod tools_file;
mod toolset;
#[cfg(feature = "typed")]
mod typed;
mod types;
mod ws;
mod yaml;

#[cfg(feature = "serve")]
pub use capabilities::{capabilities_router, ServeAuth, ADMIN_PERMISSION, MAX_REQUEST_BODY_BYTES};
pub use capabilities::{
    CapabilityError, CapabilityErrorCode, CapabilityInfo, CapabilityManager, ConfigIssue,
    ExecutionEvent, ExecutionEventKind, ExecutionFilter, ExecutionOutcome, ExecutionRecord,
    ExecutionStatus, ExecutionStore, ExecutorInfo, ManagerOptions, Registry, RegistryRoots, Source,
    StartRequest, StatusChange, DEFAULT_CAPABILITY_TIMEOUT_MS, DEFAULT_MAX_DEPTH, EVENT_CAPACITY,
    INTERRUPTED_MESSAGE, MAX_CAPABILITY_TIMEOUT_MS, MAX_EXECUTOR_STDERR_BYTES,
    MAX_EXECUTOR_STDOUT_BYTES, STOP_GRACE,
};
pub use connection::{
    Connection, RunnerEvent, SessionTimings, Terminate, DEFAULT_MAX_CONCURRENT_TOOL_CALLS,
    MAX_QUEUED_TOOL_CALLS, MAX_QUEUED_TOOL_INPUT_BYTES,
};
pub use executor::{ExecuteFuture, ExecuteRequest, ExecuteResult, Executor};
pub use external::CommandTool;
#[cfg(feature = "inprocess")]
pub use inprocess::InProcessExecutor;
#[cfg(feature = "mcp")]
pub use mcp::{
    check_exposure, kill_all_upstreams, serve_http, serve_stdio, CodeModeOptions, CodeModeServer,
    HttpError, HttpOptions, McpAccess, McpConfig, McpConfigError, NamespaceStatus, UpstreamConfig,
    UpstreamOptions, UpstreamPolicy, UpstreamStatus, UpstreamTransport, Upstreams, UpstreamsError,
    EXECUTE_CODE, MAX_INLINE_RESOURCE_CHARS, MCP_PATH, SEARCH_TOOLS,
};
pub use policy::{
    Admitted, Approval, ApprovalRequest, ApproveAll, Approver, AuditEvent, AuditLog, AuditOutcome,
    DenyAll, ExecutionGuard, GuardError, Policy, PolicyBuilder, PolicyError, Principal, RateLimit,
    RateLimits, TerminalApprover, ToolPolicy,
};
pub use pool::{PoolOptions, PooledExecutor, Spawner};
pub use process::{ProcessExecutor, RunnerCommand, RunnerNotFound};
pub use prompt::model_prompt;
pub use tool::{BoxFuture, Provider, Tool, ToolContext, ToolError, ToolHandler};
pub use tools_file::{ToolsFile, ToolsFileError, TOOLS_FILE_VERSION};
pub use toolset::{ToolSet, ToolSetError};
pub use ws::{RetryPolicy, WsExecutor};

// The types a caller must name, so one `use execbox_host::…` line is enough.
pub use execbox_protocol::{ErrorBody, ErrorCode, RuntimeOptions};
pub use tokio_util::sync::CancellationToken;
pub use yaml::YamlError;
