//! The trusted core of execbox: tools, schemas, the tools file, executors and runner sessions.
//!
//! The host owns everything the guest must not: tool implementations, their credentials and
//! side effects. It hands model-written code to a runner and answers the runner's tool calls.
//! It knows no policy: it calls a [`CallGuard`] that the embedder (or `execbox-policy`) gives
//! it.
//!
//! The core types and how they relate:
//! - a [`Tool`] (name, JSON Schemas, [`ToolRequirements`], async implementation) lives in a
//!   [`Provider`], a named namespace; tools can also come from a YAML [`ToolsFile`] as
//!   external [`CommandTool`]s;
//! - a [`ToolSet`] resolves providers once: sanitised names, compiled schemas, the provider
//!   manifests and TypeScript declarations, and [`ToolSet::dispatch`] for tool calls;
//!   [`model_prompt`] turns it into a prompt-ready description of the sandbox for a model;
//! - an [`Executor`] runs an [`ExecuteRequest`] against a tool set and returns an
//!   [`ExecuteResult`]: [`ProcessExecutor`] (a fresh runner process each time),
//!   [`PooledExecutor`] (warm runner processes), [`WsExecutor`] (a runner behind
//!   `execbox-runner --listen`) and `InProcessExecutor` (engine threads in this process,
//!   feature `inprocess`; trusted code only); tool calls the program did not await finish
//!   before the result by default, or are cancelled ([`Unawaited`]), and the result's logs
//!   end with the host's `[execbox]` notes on them and on what log truncation took;
//! - underneath, a [`Connection`] speaks the protocol's host side over any transport, and asks
//!   the request's [`CallGuard`] (if any) what the execution may see and whether each call
//!   may run;
//! - the [`supervisor`] starts and stops every process a tool, an executor or an upstream
//!   server runs, descendants that left their group included.
//! - [`trace`] names the `tracing` target of the spans of executions and tool calls, and holds
//!   the hook through which a binary that exports traces reads and writes W3C `traceparent`s.
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

mod answer;
mod command_tool;
mod connection;
pub mod declarations;
mod eager;
mod executor;
mod guard;
#[cfg(feature = "inprocess")]
mod inprocess;
pub mod json;
mod ledger;
mod names;
mod notes;
mod paused;
#[cfg(unix)]
mod pipe_writer;
mod pool;
pub mod process_output;
pub mod program;
mod prompt;
mod provider_kind;
mod requirements;
mod runner_process;
mod schema;
pub mod supervisor;
mod tool;
mod tools_file;
mod toolset;
pub mod trace;
#[cfg(feature = "typed")]
mod typed;
mod ws;
pub mod yaml;

pub use answer::{answer_of, model_answer, one_line, AnswerParts, ModelAnswer, MAX_ANSWER_CHARS};
pub use command_tool::CommandTool;
pub use connection::{
    Connection, RunnerEvent, SessionTimings, Terminate, DEFAULT_MAX_CONCURRENT_TOOL_CALLS,
    MAX_QUEUED_TOOL_CALLS, MAX_QUEUED_TOOL_INPUT_BYTES, REPLAY_DIVERGED,
};
pub use eager::spawn_eager;
pub use executor::{ExecuteFuture, ExecuteRequest, ExecuteResult, Executor, Unawaited};
pub use guard::{
    Admission, Admitted, ApprovalAsk, CallGuard, ExecutionEnd, GuardError, GuardFuture,
    GuardedCall, MayAsk,
};
#[cfg(feature = "inprocess")]
pub use inprocess::InProcessExecutor;
pub use json::{canonical_json, input_sha256};
pub use ledger::{Answer, Ledger, LedgerCall, PausedCall};
pub use names::{assign_safe_names, check_provider_name, sanitize_tool_name};
pub use paused::{
    approval_denied, check_named, CallRef, Decided, Decision, Mismatch, PausedProgram,
    APPROVAL_DENIED,
};
pub use pool::{PoolOptions, PooledExecutor, Spawner};
pub use prompt::{code_tool_description, model_prompt};
pub use provider_kind::{KindError, ProviderKind};
pub use requirements::{
    check_permission, parse_window, RateLimit, RateLimitError, ToolRequirements, MAX_WINDOW,
};
pub use runner_process::{ProcessExecutor, RunnerCommand, RunnerNotFound};
pub use schema::Schema;
pub use tool::{BoxFuture, Provider, Tool, ToolContext, ToolError, ToolHandler, ToolSchema};
pub use tools_file::{
    check_command, resolve_command, ToolsFile, ToolsFileError, TOOLS_FILE_VERSION,
};
pub use toolset::{ToolSet, ToolSetError};
pub use ws::{RetryPolicy, WsExecutor};

// The types a caller must name, so one `use execbox_host::…` line is enough.
pub use execbox_protocol::{ErrorBody, ErrorCode, LogsTruncated, RuntimeOptions};
pub use tokio_util::sync::CancellationToken;
pub use yaml::YamlError;
