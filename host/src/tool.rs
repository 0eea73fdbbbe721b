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
use std::sync::{Arc, OnceLock};

use execbox_protocol::{ErrorBody, ErrorCode, RawValue, MAX_NESTING_DEPTH};
use serde::Deserialize as _;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::json::{json_depth, with_deep_stack, ParseJsonError, SHALLOW_DEPTH};
use crate::requirements::{RateLimit, ToolRequirements};
use crate::schema::Schema;

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

/// A tool's JSON Schema, shared: cloning a [`Tool`], its [`Provider`] or a
/// [`ToolSet`](crate::ToolSet) built from them never copies it, and it is compiled at most
/// once, however many tool sets (and views of them) hold it.
///
/// **When it is compiled** (and a schema that does not compile is found):
/// - made from a [`Value`] (`Tool::input_schema(json!(...))`, [`ToolSchema::new`]): when a
///   `ToolSet` is built, which refuses the set with
///   [`ToolSetError::InvalidSchema`](crate::ToolSetError::InvalidSchema), as for every tool
///   written by hand, in a tools file or typed;
/// - made from JSON text with [`ToolSchema::deferred`] (what a provider of generated tools,
///   such as an OpenAPI provider's thousand operations, makes): kept as that text, parsed
///   into a `Value` when first read ([`ToolSchema::value`], the TypeScript declaration) and
///   compiled at the tool's first call; a schema that does not compile then fails that
///   tool's calls with the `InvalidSchema` message, and
///   [`ToolSet::check_schemas`](crate::ToolSet::check_schemas) compiles them all at once
///   (`execbox check`).
#[derive(Clone)]
pub struct ToolSchema(Arc<SchemaCell>);

struct SchemaCell {
    /// The JSON text of a deferred schema.
    text: Option<Box<RawValue>>,
    value: OnceLock<Arc<Value>>,
    compiled: OnceLock<Result<Schema, String>>,
}

impl ToolSchema {
    /// A schema compiled when a [`ToolSet`](crate::ToolSet) is built.
    pub fn new(schema: Value) -> ToolSchema {
        let value = OnceLock::new();
        let _ = value.set(Arc::new(schema));
        ToolSchema(Arc::new(SchemaCell {
            text: None,
            value,
            compiled: OnceLock::new(),
        }))
    }

    /// A schema kept as its JSON `text` (a few bytes per byte of text, where a parsed
    /// `Value` takes ten): parsed when first read and compiled at the tool's first call.
    /// `Err` when `text` is not JSON or nests deeper than
    /// [`MAX_NESTING_DEPTH`](execbox_protocol::MAX_NESTING_DEPTH).
    pub fn deferred(text: impl Into<String>) -> Result<ToolSchema, ParseJsonError> {
        let text = text.into();
        if json_depth(&text) > MAX_NESTING_DEPTH {
            return Err(ParseJsonError::TooDeep);
        }
        let text = RawValue::from_string(text).map_err(ParseJsonError::Syntax)?;
        Ok(ToolSchema(Arc::new(SchemaCell {
            text: Some(text),
            value: OnceLock::new(),
            compiled: OnceLock::new(),
        })))
    }

    /// The schema, parsed from its text on the first call if it is deferred.
    pub fn value(&self) -> &Value {
        self.shared_value()
    }

    fn shared_value(&self) -> &Arc<Value> {
        self.0.value.get_or_init(|| {
            let text = self.0.text.as_deref().map(RawValue::get).unwrap_or("{}");
            let parse = || -> Value {
                let mut de = serde_json::Deserializer::from_str(text);
                de.disable_recursion_limit();
                // Checked when made: JSON, and no deeper than the protocol allows.
                Value::deserialize(&mut de).unwrap_or_default()
            };
            Arc::new(if json_depth(text) > SHALLOW_DEPTH {
                with_deep_stack(parse)
            } else {
                parse()
            })
        })
    }

    /// Whether it was made with [`ToolSchema::deferred`] (compiled at the first call).
    pub fn is_deferred(&self) -> bool {
        self.0.text.is_some()
    }

    /// Whether it has been parsed into a `Value` (always, unless it is deferred).
    pub fn is_parsed(&self) -> bool {
        self.0.value.get().is_some()
    }

    /// Whether it has been compiled.
    pub fn is_compiled(&self) -> bool {
        self.0.compiled.get().is_some()
    }

    /// The compiled schema, compiling it on the first call; `Err` says why it does not
    /// compile ([`Schema::compile`]).
    pub(crate) fn compiled(&self) -> Result<&Schema, &str> {
        self.0
            .compiled
            .get_or_init(|| Schema::compile_shared(self.shared_value().clone()))
            .as_ref()
            .map_err(String::as_str)
    }
}

impl From<Value> for ToolSchema {
    fn from(schema: Value) -> ToolSchema {
        ToolSchema::new(schema)
    }
}

impl Default for ToolSchema {
    /// `{}`: any value.
    fn default() -> ToolSchema {
        ToolSchema::new(Value::Object(serde_json::Map::new()))
    }
}

impl fmt::Debug for ToolSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.0.value.get(), &self.0.text) {
            (Some(value), _) => fmt::Debug::fmt(value, f),
            (None, Some(text)) => f.write_str(text.get()),
            (None, None) => f.write_str("{}"),
        }
    }
}

/// One tool: a name, optional description and schemas, and a handler.
///
/// Without an input schema any input is accepted (and the TypeScript signature is
/// `input?: unknown`); without an output schema any transport-safe output is accepted.
/// Cheap to clone: the schemas ([`ToolSchema`]) and the handler are shared.
#[derive(Clone)]
pub struct Tool {
    name: String,
    description: Option<String>,
    input_schema: Option<ToolSchema>,
    output_schema: Option<ToolSchema>,
    /// Whether outputs are checked against `output_schema` (else it only gives the type).
    output_checked: bool,
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
            output_checked: true,
            requirements: ToolRequirements::default(),
            handler,
        }
    }

    /// Sets what the tool does, for humans, prompts and the TypeScript declaration.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Sets the JSON Schema every input must match before the handler runs: a [`Value`]
    /// (compiled when a [`ToolSet`](crate::ToolSet) is built) or a [`ToolSchema`].
    pub fn input_schema(mut self, schema: impl Into<ToolSchema>) -> Self {
        self.input_schema = Some(schema.into());
        self
    }

    /// Sets the JSON Schema every output must match before it reaches the guest: a
    /// [`Value`] or a [`ToolSchema`].
    pub fn output_schema(mut self, schema: impl Into<ToolSchema>) -> Self {
        self.output_schema = Some(schema.into());
        self
    }

    /// Sets whether every output must match the output schema (the default), or the schema
    /// only describes outputs, for the TypeScript declaration: `false` for a tool answering
    /// what an upstream the host does not control says, whose published schema is
    /// documentation (an OpenAPI document's responses are often looser or stricter than the
    /// API's real answers, and the API's answer is the truth a program needs).
    pub fn output_checked(mut self, checked: bool) -> Self {
        self.output_checked = checked;
        self
    }

    /// Whether outputs are checked against the output schema ([`Tool::output_checked`]).
    pub fn checks_output(&self) -> bool {
        self.output_checked
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

    /// The input schema, if any (parsed now if it is deferred).
    pub fn get_input_schema(&self) -> Option<&Value> {
        self.input_schema.as_ref().map(ToolSchema::value)
    }

    /// The output schema, if any (parsed now if it is deferred).
    pub fn get_output_schema(&self) -> Option<&Value> {
        self.output_schema.as_ref().map(ToolSchema::value)
    }

    /// The input schema as it is kept, shared, if any.
    pub fn input_tool_schema(&self) -> Option<&ToolSchema> {
        self.input_schema.as_ref()
    }

    /// The output schema as it is kept, shared, if any.
    pub fn output_tool_schema(&self) -> Option<&ToolSchema> {
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
