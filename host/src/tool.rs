//! Tools and providers as the host defines them: a name, schemas and an async handler.
//!
//! A [`Tool`] is trusted host code the guest may call by name; a [`Provider`] groups tools
//! under one guest-visible namespace. Neither is sent to the runner: a
//! [`ToolSet`](crate::ToolSet) resolves them into manifests (metadata only) and keeps the
//! handlers on the host side, where [`ToolSet::dispatch`](crate::ToolSet::dispatch) calls them.
//!
//! ```
//! use execbox_host::{Provider, Tool, ToolError};
//! use serde_json::{json, Value};
//!
//! let add = Tool::new("add", |input, _ctx| async move {
//!     let a = input["a"].as_f64().ok_or_else(|| ToolError::tool("a must be a number"))?;
//!     let b = input["b"].as_f64().ok_or_else(|| ToolError::tool("b must be a number"))?;
//!     Ok(json!(a + b))
//! })
//! .description("Adds two numbers")
//! .input_schema(json!({
//!     "type": "object",
//!     "required": ["a", "b"],
//!     "properties": {"a": {"type": "number"}, "b": {"type": "number"}}
//! }))
//! .output_schema(json!({"type": "number"}));
//! let math = Provider::new("math").tool(add);
//! assert_eq!(math.tools()[0].name(), "add");
//! ```

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use execbox_protocol::{ErrorBody, ErrorCode};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::requirements::{RateLimit, ToolRequirements};

/// A boxed, sendable future: what a [`ToolHandler`] returns.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Passed to every tool call.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The `execute.id` of the execution whose guest made the call.
    pub execution_id: String,
    /// The principal the execution runs as, when its guard names one
    /// ([`CallGuard::principal`](crate::CallGuard::principal)); for traces and logs.
    pub principal: Option<String>,
    /// Cancelled when the execution ends early (timeout, cancel, session loss). A handler
    /// should stop work when it fires; [`ToolSet::dispatch`](crate::ToolSet::dispatch) stops
    /// waiting for it and drops the handler's future at that point anyway.
    pub cancel: CancellationToken,
}

impl ToolContext {
    /// A context with a fresh, uncancelled token.
    pub fn new(execution_id: impl Into<String>) -> Self {
        ToolContext {
            execution_id: execution_id.into(),
            principal: None,
            cancel: CancellationToken::new(),
        }
    }
}

/// A failure of a tool call, with its wire code.
///
/// Tool implementations normally fail with [`ToolError::tool`] (`tool_error`); the other
/// codes are used by the host itself (input/output validation, timeouts, serialization).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ToolError {
    /// The wire code the guest sees as `error.code`.
    pub code: ErrorCode,
    /// The text the guest sees as `error.message`.
    pub message: String,
    /// Why a trusted layer refused the call, in a word code can test (`"rate_limited"`,
    /// `"approval_denied"`, ...): `error.reason` on the wire and in the guest. `None` for a
    /// call that ran and failed.
    pub reason: Option<String>,
    /// With a `reason` of `"rate_limited"`: milliseconds until the same call may be admitted
    /// (`error.retryAfterMs`).
    pub retry_after_ms: Option<u64>,
    /// With a `reason` of `"http_status"`: the HTTP status an upstream answered
    /// (`error.status`).
    pub status: Option<u16>,
}

impl ToolError {
    /// An error with any code.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ToolError {
            code,
            message: message.into(),
            reason: None,
            retry_after_ms: None,
            status: None,
        }
    }

    /// The same error, refused for `reason` (see [`ToolError::reason`]).
    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    /// The same error, with the time after which a retry may be admitted.
    pub fn with_retry_after_ms(mut self, ms: u64) -> Self {
        self.retry_after_ms = Some(ms);
        self
    }

    /// The same error, with the HTTP status an upstream answered (see [`ToolError::status`]).
    pub fn with_status(mut self, status: u16) -> Self {
        self.status = Some(status);
        self
    }

    /// A failure of the tool's implementation (`tool_error`).
    pub fn tool(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::ToolError, message)
    }

    /// The tool (or the execution) ran out of time (`timeout`).
    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Timeout, message)
    }

    /// The input or output does not have the expected shape (`validation_error`).
    pub fn validation(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::ValidationError, message)
    }

    /// A value cannot cross the host/runner boundary (`serialization_error`).
    pub fn serialization(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::SerializationError, message)
    }

    /// The execution was cancelled while the call was pending: `timeout`,
    /// [`TIMEOUT_MESSAGE`](execbox_protocol::TIMEOUT_MESSAGE), as the guest sees any aborted
    /// execution.
    pub fn cancelled() -> Self {
        Self::timeout(execbox_protocol::TIMEOUT_MESSAGE)
    }
}

impl From<ToolError> for ErrorBody {
    fn from(e: ToolError) -> Self {
        let mut body = ErrorBody::new(e.code, e.message);
        body.reason = e.reason;
        body.retry_after_ms = e.retry_after_ms;
        body.status = e.status;
        body
    }
}

impl From<ErrorBody> for ToolError {
    fn from(e: ErrorBody) -> Self {
        ToolError {
            code: e.code,
            message: e.message,
            reason: e.reason,
            retry_after_ms: e.retry_after_ms,
            status: e.status,
        }
    }
}

/// The implementation of a tool.
///
/// Implemented for every `Fn(Value, ToolContext) -> impl Future<Output = Result<Value, ToolError>>`
/// closure that is `Send + Sync + 'static`, and by [`CommandTool`](crate::CommandTool).
/// The input has already been validated against the tool's input schema; the output is
/// validated against its output schema after the call.
pub trait ToolHandler: Send + Sync + 'static {
    /// Runs one call. `input` is JSON `null` when the guest passed nothing.
    fn call(&self, input: Value, ctx: ToolContext) -> BoxFuture<Result<Value, ToolError>>;

    /// The handler's own time limit per call, if it has one (it then fails with `timeout`
    /// past it); said in prompts. `None` by default.
    fn timeout(&self) -> Option<std::time::Duration> {
        None
    }
}

impl<F, Fut> ToolHandler for F
where
    F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
{
    fn call(&self, input: Value, ctx: ToolContext) -> BoxFuture<Result<Value, ToolError>> {
        Box::pin(self(input, ctx))
    }
}

/// One tool: a name, optional description and schemas, and a handler.
///
/// Without an input schema any input is accepted (and the TypeScript signature is
/// `input?: unknown`); without an output schema any transport-safe output is accepted.
#[derive(Clone)]
pub struct Tool {
    name: String,
    description: Option<String>,
    input_schema: Option<Value>,
    output_schema: Option<Value>,
    requirements: ToolRequirements,
    handler: Arc<dyn ToolHandler>,
}

impl Tool {
    /// A tool called `name` (any string; it is sanitised for the guest) run by the async
    /// closure `handler`, which takes the input and a [`ToolContext`].
    pub fn new<F, Fut>(name: impl Into<String>, handler: F) -> Tool
    where
        F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
    {
        Self::from_handler(name, handler)
    }

    /// A tool run by any [`ToolHandler`], such as a [`CommandTool`](crate::CommandTool).
    pub fn from_handler(name: impl Into<String>, handler: impl ToolHandler) -> Tool {
        Self::from_arc(name, Arc::new(handler))
    }

    /// Like [`Tool::from_handler`], sharing a handler that is already behind an `Arc`.
    pub fn from_arc(name: impl Into<String>, handler: Arc<dyn ToolHandler>) -> Tool {
        Tool {
            name: name.into(),
            description: None,
            input_schema: None,
            output_schema: None,
            requirements: ToolRequirements::default(),
            handler,
        }
    }

    /// Sets what the tool does, for humans, prompts and the TypeScript declaration.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Sets the JSON Schema every input must match before the handler runs.
    pub fn input_schema(mut self, schema: Value) -> Self {
        self.input_schema = Some(schema);
        self
    }

    /// Sets the JSON Schema every output must match before it reaches the guest.
    pub fn output_schema(mut self, schema: Value) -> Self {
        self.output_schema = Some(schema);
        self
    }

    /// Sets the permissions a caller must hold, every one (`weather:read`); a principal
    /// lacking one does not see the tool at all.
    pub fn permissions(mut self, permissions: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.requirements.permissions = permissions.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the rate limit, counted per principal and tool.
    pub fn rate_limit(mut self, limit: RateLimit) -> Self {
        self.requirements.rate_limit = Some(limit);
        self
    }

    /// Sets whether each call waits for an approver's decision (the execution's
    /// [`CallGuard`](crate::CallGuard) decides how one is asked).
    pub fn requires_approval(mut self, required: bool) -> Self {
        self.requirements.requires_approval = required;
        self
    }

    /// What the tool declares it needs: permissions, rate limit, approval.
    pub fn requirements(&self) -> &ToolRequirements {
        &self.requirements
    }

    /// The name as given (before sanitising).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The description, if any.
    pub fn get_description(&self) -> Option<&str> {
        self.description.as_deref()
    }

    /// The input schema, if any.
    pub fn get_input_schema(&self) -> Option<&Value> {
        self.input_schema.as_ref()
    }

    /// The output schema, if any.
    pub fn get_output_schema(&self) -> Option<&Value> {
        self.output_schema.as_ref()
    }

    /// The handler.
    pub fn handler(&self) -> &Arc<dyn ToolHandler> {
        &self.handler
    }
}

impl fmt::Debug for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tool")
            .field("name", &self.name)
            .field("description", &self.description)
            .field("input_schema", &self.input_schema)
            .field("output_schema", &self.output_schema)
            .field("requirements", &self.requirements)
            .finish_non_exhaustive()
    }
}

/// A named group of tools: one global namespace in the guest.
#[derive(Clone, Debug)]
pub struct Provider {
    name: String,
    description: Option<String>,
    tools: Vec<Tool>,
}

impl Provider {
    /// An empty provider. `name` must be a JavaScript identifier (checked by
    /// [`ToolSet::new`](crate::ToolSet::new), see [`check_provider_name`](crate::names::check_provider_name)).
    pub fn new(name: impl Into<String>) -> Provider {
        Provider {
            name: name.into(),
            description: None,
            tools: Vec::new(),
        }
    }

    /// Adds a tool; declaration order decides who keeps a contested safe name.
    pub fn tool(mut self, tool: Tool) -> Self {
        self.tools.push(tool);
        self
    }

    /// Sets what the provider is for; it becomes the namespace's JSDoc.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// The namespace name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The description, if any.
    pub fn get_description(&self) -> Option<&str> {
        self.description.as_deref()
    }

    /// The tools, in declaration order.
    pub fn tools(&self) -> &[Tool] {
        &self.tools
    }
}
