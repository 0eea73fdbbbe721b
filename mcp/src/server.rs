//! The MCP server an MCP client sees: `execute_code` and `search_tools` over the catalog, and,
//! when programs can pause durably, `execution_result`.
//!
//! `execute_code {code}` runs the program in the sandbox against every namespace and answers
//! with the JSON of `{ok, result | error, logs}` as text (cut at
//! [`CodeModeOptions::max_output_chars`], with a marker) and as `structuredContent`,
//! `isError` when not ok. Its description carries the rules of the program and a compact
//! index of the namespaces and tools. `search_tools {query, limit}` answers with the TypeScript
//! declarations of the matching tools, so a client learns a large API on demand.
//! `execution_result {id}` tells where a program `execute_code` kept paused is now (waiting,
//! running, done, denied, failed) and, once done, gives its answer as `execute_code` would.
//!
//! The client's `notifications/cancelled` cancels the execution (and so every upstream call
//! in flight, which are cancelled upstream in turn); progress of upstream calls is forwarded
//! when the client gave a progress token. When an upstream's tools change, every connected
//! client is sent `notifications/tools/list_changed` (the description changed).
//!
//! What the upstreams offer besides tools passes through: resources (`resources.rs`), prompts
//! (`prompts.rs`), logging (`logging.rs`), and their questions during a call
//! (`elicitation.rs`).

// `logging/setLevel` and `resources/subscribe` are deprecated by newer protocols, which
// clients still speak.
#![allow(deprecated)]

use std::collections::HashSet;
use std::sync::{Arc, Weak};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequest,
    ElicitResult, GetPromptRequestParams, GetPromptResponse, Implementation, InputRequest,
    InputRequiredResult, InputResponses, JsonObject, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities,
    ServerConfig, SetLevelRequestParams, SubscribeRequestParams, ToolAnnotations,
    UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler};
use serde_json::{json, Map, Value};
use tracing::Instrument as _;

use execbox_host::{trace, Decision, ExecuteRequest, Executor, Ledger, MayAsk, PausedProgram};
use execbox_protocol::RuntimeOptions;

use execbox_policy::{ApprovalRequest, AuditEvent, Enforcement};

use super::approvals::{approval_form, approves, ElicitationApprover, NobodyNow};
use super::catalog::Catalog;
use super::elicitation::Asker;
use super::logging::Sessions;
use super::offers::Notice;
use super::pauses::{
    no_execution, paused_answer, result_answer as answer, state_answer, DurablePauses,
    PausedExecution, EXECUTION_RESULT,
};
use super::resources::Subscriptions;
use super::rounds::{Parked, Rounds, APPROVAL_INPUT};
use super::upstream::Upstreams;
use super::{prompts, resources};

/// The name of the tool that runs a program.
pub const EXECUTE_CODE: &str = "execute_code";
/// The name of the tool that searches the tools.
pub const SEARCH_TOOLS: &str = "search_tools";

/// How `execute_code` and `search_tools` behave.
#[derive(Debug, Clone)]
pub struct CodeModeOptions {
    /// The limits of each execution (the CLI's default timeout is 30 s).
    pub runtime: RuntimeOptions,
    /// `execute_code`'s text is cut at this many characters, with a marker; default 24,000.
    pub max_output_chars: usize,
    /// `search_tools` returns at most this many tools unless asked for fewer; default 10
    /// (a client may ask for up to 50).
    pub default_search_limit: usize,
    /// The policy of the programs' tool calls: who runs them (the tools it may not call are
    /// absent from the index, `search_tools` and the sandbox), rate limits, audit; approvals
    /// are asked of the client's user through elicitation unless it approves every call.
    pub enforcement: Enforcement,
    /// Where a program is kept that reaches a call needing approval when its client can be
    /// asked neither in the answer (MCP 2026-07-28) nor through elicitation: it pauses there,
    /// and the model is told it waits for an operator. `None`: such a call is refused
    /// ("approval required").
    pub pauses: Option<Arc<dyn DurablePauses>>,
}

impl Default for CodeModeOptions {
    fn default() -> Self {
        CodeModeOptions {
            runtime: RuntimeOptions::default(),
            max_output_chars: 24_000,
            default_search_limit: 10,
            enforcement: Enforcement::unrestricted(),
            pauses: None,
        }
    }
}

/// The most tools one `search_tools` call returns.
const MAX_SEARCH_LIMIT: usize = 50;

/// The longest execution id `execution_result` looks up.
const MAX_ID_CHARS: usize = 100;

/// The MCP server: a [`ServerHandler`] to serve over stdio or streamable HTTP (one clone per
/// session). Cheap to clone.
#[derive(Clone)]
pub struct CodeModeServer(Arc<Inner>);

struct Inner {
    upstreams: Upstreams,
    executor: Arc<dyn Executor>,
    options: CodeModeOptions,
    /// The client sessions: whom to tell when the tools change, and their log levels.
    sessions: Sessions,
    /// The clients' resource subscriptions.
    subscriptions: Subscriptions,
    /// Programs waiting for a client's retry with an approval (MCP 2026-07-28).
    rounds: Rounds,
}

impl CodeModeServer {
    /// A server running programs with `executor` against `upstreams`' tools. Must be called
    /// inside a Tokio runtime (it watches the tools for changes).
    pub fn new(
        upstreams: Upstreams,
        executor: Arc<dyn Executor>,
        mut options: CodeModeOptions,
    ) -> CodeModeServer {
        // A grant naming an upstream tool by its name in the index holds its permission.
        options.enforcement = options
            .enforcement
            .with_permission_aliases(upstreams.permission_aliases());
        let inner = Arc::new(Inner {
            upstreams,
            executor,
            options,
            sessions: Sessions::default(),
            subscriptions: Subscriptions::default(),
            rounds: Rounds::default(),
        });
        let weak: Weak<Inner> = Arc::downgrade(&inner);
        let mut changed = inner.upstreams.changed();
        tokio::spawn(async move {
            while changed.changed().await.is_ok() {
                let Some(inner) = weak.upgrade() else { return };
                for peer in inner.sessions.peers() {
                    let _ = peer.notify_tool_list_changed().await;
                }
            }
        });
        let weak: Weak<Inner> = Arc::downgrade(&inner);
        let mut notices = inner.upstreams.notices();
        tokio::spawn(async move {
            loop {
                let notice = match notices.recv().await {
                    Ok(notice) => notice,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!("{n} notices of the upstreams were dropped");
                        continue;
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                };
                let Some(inner) = weak.upgrade() else { return };
                inner.forward(notice).await;
            }
        });
        CodeModeServer(inner)
    }

    /// The upstreams it serves.
    pub fn upstreams(&self) -> &Upstreams {
        &self.0.upstreams
    }

    /// `execute_code`'s description: the rules of a program, then the index of the tools.
    pub fn execute_code_description(&self) -> String {
        describe(&self.catalog(), &self.0.options)
    }

    /// The catalog as the principal sees it: the tools it may not call do not exist.
    fn catalog(&self) -> Arc<Catalog> {
        self.0
            .upstreams
            .catalog()
            .visible_to(&self.0.options.enforcement)
    }

    /// The tools, as `tools/list` answers: `execute_code`, `search_tools`, and, when programs
    /// can pause durably, `execution_result`.
    pub fn tool_definitions(&self) -> Vec<rmcp::model::Tool> {
        let execute_input = json!({
            "type": "object",
            "properties": {
                "code": {
                    "type": "string",
                    "description": "The program: the body of an async function (JavaScript, or TypeScript with type annotations). Use top-level await; return a value or end with an expression."
                }
            },
            "required": ["code"],
            "additionalProperties": false
        });
        let search_input = json!({
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "description": "A tool's name (`namespace.tool`, or its name upstream) for its declaration; words to look for in tool names, then descriptions (e.g. \"create issue\"); a namespace's name to list its tools; or \"*\" for every tool."
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_SEARCH_LIMIT,
                    "description": format!("At most this many declarations (default {}); the answer also stops growing past a few thousand characters and names the other matches.", self.0.options.default_search_limit)
                }
            },
            "required": ["query"],
            "additionalProperties": false
        });
        let mut execute = rmcp::model::Tool::new(
            EXECUTE_CODE,
            self.execute_code_description(),
            object(execute_input),
        );
        execute.output_schema = Some(Arc::new(object(execute_output_schema())));
        execute.annotations = Some(ToolAnnotations::with_title("Run code against the tools"));
        let mut search = rmcp::model::Tool::new(
            SEARCH_TOOLS,
            "Search the tools available to execute_code and get their TypeScript declarations \
             (parameters and result types, with descriptions). Use it before calling a tool \
             whose input you do not know.",
            object(search_input),
        );
        search.annotations = Some(
            ToolAnnotations::with_title("Search the tools")
                .read_only(true)
                .open_world(false),
        );
        if self.0.options.pauses.is_none() {
            return vec![execute, search];
        }
        let result_input = json!({
            "type": "object",
            "properties": {
                "id": {
                    "type": "string",
                    "description": "The executionId of an execute_code answer with status \"awaiting_approval\"."
                }
            },
            "required": ["id"],
            "additionalProperties": false
        });
        let mut result = rmcp::model::Tool::new(
            EXECUTION_RESULT,
            "Where a program that execute_code paused for a person's approval is now: \
             waiting for approval, running, done, denied or failed; once done, its answer, \
             exactly as execute_code gives one. You cannot approve it here.",
            object(result_input),
        );
        result.annotations = Some(
            ToolAnnotations::with_title("Get a paused program's result")
                .read_only(true)
                .open_world(false),
        );
        vec![execute, search, result]
    }

    /// Runs `execute_code` with `arguments`; `context` carries the client's cancellation
    /// and progress token. A client on MCP 2026-07-28 that can answer a form is asked for
    /// approvals in the answer (an `InputRequiredResult`, see `rounds.rs`), and its retry
    /// carries `request_state` and the `responses`; an older client with form elicitation is
    /// asked during the call; any other is refused ("approval required").
    async fn execute_code(
        &self,
        arguments: Option<JsonObject>,
        request_state: Option<String>,
        responses: Option<InputResponses>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResponse {
        let code = match arguments.as_ref().and_then(|a| a.get("code")) {
            Some(Value::String(code)) => code.clone(),
            Some(_) => return input_error("`code` must be a string: the program to run").into(),
            None => return input_error("missing `code`: the program to run").into(),
        };
        let enforcement = &self.0.options.enforcement;
        let principal = enforcement.principal().name().map(str::to_owned);
        let in_rounds = asks_in_rounds(context);
        // A retry resumes the parked program; a new program on 2026-07-28 is durable, so
        // that a call needing approval pauses it.
        let (id, durable) = match request_state {
            Some(handle) => {
                let parked = match self.0.rounds.take(&handle, principal.as_deref(), &code) {
                    Ok(parked) => parked,
                    Err(message) => return input_error(&message).into(),
                };
                let Some(answer) = responses.as_ref().and_then(|r| r.get(APPROVAL_INPUT)) else {
                    // The retry does not answer: ask again.
                    return self.park(parked);
                };
                let Ok(answer) = serde_json::from_value::<ElicitResult>(answer.clone()) else {
                    // Not an answer to the form: ask again rather than guess.
                    return self.park(parked);
                };
                let approved = approves(&answer.action, answer.content.as_ref());
                if let Some(audit) = enforcement.audit() {
                    let event = AuditEvent::approval_decided(
                        &parked.execution_id,
                        principal.as_deref(),
                        &parked.call.tool,
                        approved,
                    );
                    if let Err(e) = audit.record(&event) {
                        return input_error(&format!(
                            "the approval of {} cannot be recorded in the audit log, so the \
                             program was not resumed: {e}; the call has not run (run the \
                             program again once the audit log can be written)",
                            parked.call.tool
                        ))
                        .into();
                    }
                }
                // The one decision path: the form answered was asked for this very call.
                let decision = match approved {
                    true => Decision::Approve,
                    false => Decision::Deny { reason: None },
                };
                let decided = PausedProgram::new(
                    parked.execution_id.clone(),
                    parked.principal.clone(),
                    parked.call,
                    parked.ledger,
                    Vec::new(),
                )
                .decided(&decision);
                let (ledger, approved) = (decided.ledger, decided.approved);
                (parked.execution_id, Some((ledger, approved)))
            }
            None if in_rounds => (super::next_execution_id(), Some((Ledger::new(), None))),
            None => (super::next_execution_id(), None),
        };
        self.0.upstreams.settled().await;
        let catalog = self.catalog();
        // A client that cannot be asked at all, or a call only approvers a policy rule names
        // may decide: with somewhere to keep it, a program that may reach such a call
        // pauses there durably.
        let may_ask = catalog.tools().may_ask(enforcement);
        let keeps = match &self.0.options.pauses {
            Some(pauses)
                if durable.is_none()
                    && !in_rounds
                    && (may_ask == MayAsk::Named
                        || (may_ask == MayAsk::Anyone && !can_elicit(context))) =>
            {
                Some(pauses.clone())
            }
            _ => None,
        };
        let durable = match (durable, &keeps) {
            (None, Some(_)) => Some((Ledger::new(), None)),
            (durable, _) => durable,
        };
        // Questions of the upstreams during this execution's calls go to this client, while
        // it can be asked during a call and the execution has time left.
        let modes = if context
            .protocol_version()
            .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28)
        {
            HashSet::new()
        } else {
            context.peer.supported_elicitation_modes()
        };
        let _asking = self.0.upstreams.askers().register(
            &id,
            Asker {
                peer: context.peer.clone(),
                request: context.id.clone(),
                modes,
                deadline: tokio::time::Instant::now()
                    + Duration::from_millis(self.0.options.runtime.timeout_ms),
            },
        );
        let _progress = context.meta.get_progress_token().map(|token| {
            self.0
                .upstreams
                .forward_progress(&id, context.peer.clone(), token)
        });
        let span = tracing::info_span!(
            target: trace::TARGET,
            "execbox.mcp.execute_code",
            otel.kind = "server",
            execbox.execution_id = %id,
            execbox.principal = principal.as_deref(),
        );
        if let Some(parent) = traceparent(context) {
            trace::set_parent(&span, parent);
        }
        let mut request = ExecuteRequest::new(code.clone())
            .id(id.clone())
            .tools(catalog.tools())
            .options(self.0.options.runtime)
            .cancel_on(context.ct.clone());
        if let Some((ledger, approved)) = durable {
            request = request.durable(ledger, approved);
        }
        let guard = if in_rounds {
            enforcement.clone().asking(Arc::new(NobodyNow))
        } else {
            enforcement
                .clone()
                .asking(Arc::new(ElicitationApprover::new(context.peer.clone())))
        };
        let request = request.guard(Arc::new(guard));
        let result = self.0.executor.execute(request).instrument(span).await;
        // In rounds, a call for named approvers is kept for them, not asked of the client.
        let keeps = keeps.or_else(|| {
            result
                .paused
                .as_ref()
                .filter(|call| !call.asked.approvers.is_empty())
                .and(self.0.options.pauses.clone())
        });
        if let (Some(call), Some(ledger), Some(pauses)) =
            (result.paused.clone(), result.ledger.clone(), keeps)
        {
            let paused = PausedExecution {
                code,
                timeout_ms: self.0.options.runtime.timeout_ms,
                program: PausedProgram::new(
                    id.clone(),
                    principal,
                    call.clone(),
                    ledger,
                    result.logs.clone(),
                ),
            };
            return match pauses.pause(paused).await {
                Ok(kept) => {
                    paused_answer(&kept, &call, &result.logs, &pauses.how_to_decide(&kept)).into()
                }
                Err(why) => input_error(&format!(
                    "{} needs approval and nobody can give it now; the program could not be \
                     kept waiting for one ({why}), so it stopped before that call, which did \
                     not run",
                    call.tool
                ))
                .into(),
            };
        }
        if let (Some(call), Some(ledger)) = (result.paused.clone(), result.ledger.clone()) {
            if !call.asked.approvers.is_empty() {
                // The rule reserves the decision for named approvers; the client's user is
                // not known to be one, and nothing here keeps the program for them.
                return input_error(&format!(
                    "{} needs approval from {} (policy {}), who are not asked here; the call \
                     did not run. Serve without --no-pause so that the program waits for \
                     their decision",
                    call.tool,
                    call.asked.approvers.join(", "),
                    call.asked.rule.as_deref().unwrap_or("rule")
                ))
                .into();
            }
            let asked = ApprovalRequest::new(
                id.clone(),
                principal.as_deref(),
                call.tool.clone(),
                call.input.clone(),
            )
            .asked_by(&call.asked);
            let parked = approval_form(&asked)
                .and_then(|form| Parked::new(id, principal, code, ledger, call, form));
            return match parked {
                Ok(parked) => self.park(parked),
                Err(message) => input_error(&message).into(),
            };
        }
        answer(&result, self.0.options.max_output_chars).into()
    }

    /// Parks a paused program and asks the client for the approval it waits on.
    fn park(&self, parked: Parked) -> CallToolResponse {
        let form = parked.form.clone();
        match self.0.rounds.park(parked) {
            Ok(handle) => {
                let asks = [(
                    APPROVAL_INPUT.to_owned(),
                    InputRequest::Elicitation(ElicitRequest::new(form)),
                )];
                InputRequiredResult::new(Some(asks.into_iter().collect()), Some(handle)).into()
            }
            Err(message) => input_error(&message).into(),
        }
    }

    /// Runs `execution_result` with `arguments`: the state of a program `execute_code` kept
    /// paused for this principal; an unknown id and another principal's are answered alike.
    async fn execution_result(&self, arguments: Option<JsonObject>) -> CallToolResult {
        let Some(pauses) = &self.0.options.pauses else {
            return input_error(&format!(
                "{EXECUTION_RESULT} is not available: programs do not pause for approval here"
            ));
        };
        let id = match arguments.as_ref().and_then(|a| a.get("id")) {
            Some(Value::String(id)) => id.clone(),
            Some(_) => {
                return input_error(
                    "`id` must be a string: the executionId of an execute_code answer",
                )
            }
            None => return input_error("missing `id`: the executionId of an execute_code answer"),
        };
        // Ids are short: anything longer names nothing, and is not echoed whole.
        if id.chars().count() > MAX_ID_CHARS {
            return no_execution(&execbox_host::one_line(&id, MAX_ID_CHARS));
        }
        let principal = self.0.options.enforcement.principal().name();
        match pauses.state(&id, principal).await {
            Ok(Some(state)) => state_answer(&id, state, self.0.options.max_output_chars),
            Ok(None) => no_execution(&id),
            Err(why) => input_error(&format!(
                "execution {id} cannot be read now ({why}); try again later"
            )),
        }
    }

    async fn search_tools(&self, arguments: Option<JsonObject>) -> CallToolResult {
        let query = match arguments.as_ref().and_then(|a| a.get("query")) {
            Some(Value::String(q)) => q.clone(),
            Some(_) => return input_error("`query` must be a string"),
            None => return input_error("missing `query`: words to look for, or \"*\""),
        };
        let limit = match arguments.as_ref().and_then(|a| a.get("limit")) {
            None | Some(Value::Null) => self.0.options.default_search_limit,
            Some(Value::Number(n)) => match n.as_u64() {
                Some(n) if n >= 1 => (n as usize).min(MAX_SEARCH_LIMIT),
                _ => return input_error("`limit` must be a positive integer"),
            },
            Some(_) => return input_error("`limit` must be a positive integer"),
        };
        self.0.upstreams.settled().await;
        let found = self.catalog().search(&query, limit);
        let mut result = CallToolResult::success(vec![ContentBlock::text(found.text)]);
        result.structured_content = Some(json!({ "tools": found.tools, "more": found.more }));
        result
    }
}

/// Whether approvals are asked in the answer (the multi round-trip requests of MCP
/// 2026-07-28, where a server may not send requests of its own): the request names that
/// protocol or a later one, and the client can answer a form.
fn asks_in_rounds(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28)
        && context
            .client_capabilities()
            .and_then(|c| c.elicitation)
            // A capability naming neither mode means form, as the specification says.
            .is_some_and(|e| e.form.is_some() || e.url.is_none())
}

/// Whether the client can answer a form elicitation during the call (before 2026-07-28).
fn can_elicit(context: &RequestContext<RoleServer>) -> bool {
    context
        .peer
        .supported_elicitation_modes()
        .contains(&rmcp::service::ElicitationMode::Form)
}

/// The caller's W3C `traceparent`: the request's `_meta.traceparent`, else (over streamable
/// HTTP) the `traceparent` header of the HTTP request that carried it.
fn traceparent(context: &RequestContext<RoleServer>) -> Option<&str> {
    context.meta.get_traceparent().or_else(|| {
        context
            .extensions
            .get::<axum::http::request::Parts>()?
            .headers
            .get("traceparent")?
            .to_str()
            .ok()
    })
}

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// A tool-level error about the arguments: the model reads it and fixes its call.
fn input_error(message: &str) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.to_owned())])
}

/// The rules of a program and the index of the tools.
fn describe(catalog: &Catalog, options: &CodeModeOptions) -> String {
    let limits = &options.runtime;
    format!(
        "Run a JavaScript program in a sandbox. Each namespace below is a global object whose \
         properties are async functions, one per tool: `const r = await ns.tool({{ ... }})`.\n\
         \n\
         Rules:\n\
         - The program is the body of an async function: use top-level `await`; `return` a \
         value, or end with an expression statement, whose value is the result. The result \
         must be JSON-serializable.\n\
         - Plain JavaScript, or TypeScript with type annotations (erased before running; no \
         enums or namespaces of your own). A markdown code fence is stripped.\n\
         - Run independent calls at once: `const [a, b] = await Promise.all([ns.f({{...}}), \
         other.g({{...}})])`.\n\
         - A failed call rejects with an Error that has `code` (\"validation_error\", \
         \"tool_error\", \"timeout\", \"serialization_error\") and `message`; catch it with \
         try/catch, or let it fail the program.\n\
         - Tool inputs are JSON objects; results are JSON values. Call `search_tools` to get \
         the TypeScript declaration (parameters and result type) of the tools you need before \
         calling them.\n\
         - An MCP tool's result: its `structuredContent` if it has one (typed by its output \
         schema); else one text block → the text's JSON value if it parses, else the string.\n\
         - Several content blocks → an array of their values; none → null; image or audio → \
         {{type, mimeType, size}}; a tool reporting an error rejects with \"tool_error\".\n\
         - `console.log` lines come back as `logs`. JavaScript has no modules, timers, or \
         network, file or process access here: only the tools below.\n\
         - Limits: {} s for the whole program (waiting for tools included), {} MiB of memory.\n\
         \n\
         The answer is JSON: {{\"ok\": true, \"result\": ..., \"logs\": [...]}} or \
         {{\"ok\": false, \"error\": {{\"code\": ..., \"message\": ...}}, \"logs\": [...]}}, \
         cut at {} characters (return only what you need).\n\
         \n\
         Namespaces and tools:\n{}",
        limits.timeout_ms as f64 / 1000.0,
        limits.memory_limit_bytes / (1024 * 1024),
        options.max_output_chars,
        catalog.index()
    )
}

impl Inner {
    /// Tells the clients what an upstream announced.
    async fn forward(&self, notice: Notice) {
        match notice {
            Notice::ResourcesChanged => {
                for peer in self.sessions.peers() {
                    let _ = peer.notify_resource_list_changed().await;
                }
            }
            Notice::PromptsChanged => {
                for peer in self.sessions.peers() {
                    let _ = peer.notify_prompt_list_changed().await;
                }
            }
            Notice::ResourceUpdated { namespace, uri } => {
                self.subscriptions.updated(&namespace, &uri).await;
            }
            Notice::Log { namespace, message } => self.sessions.log(&namespace, &message).await,
        }
    }
}

impl ServerHandler for CodeModeServer {
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        // Resources, prompts and logging pass through to the upstream servers; a tools file
        // alone has none of them.
        if self.0.upstreams.has_servers() {
            let passed = ServerCapabilities::builder()
                .enable_logging()
                .enable_prompts()
                .enable_prompts_list_changed()
                .enable_resources()
                .enable_resources_subscribe()
                .enable_resources_list_changed()
                .build();
            capabilities.logging = passed.logging;
            capabilities.prompts = passed.prompts;
            capabilities.resources = passed.resources;
        }
        let mut config = ServerConfig::new(capabilities).with_instructions(
            "Code mode: write one short program that calls many tools (execute_code) instead of \
             calling tools one by one. Use search_tools to learn the tools' parameters.",
        );
        config.server_info = Implementation::new("execbox", env!("CARGO_PKG_VERSION"));
        config
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        // The description lists the upstreams: wait until each has started or failed.
        self.0.upstreams.settled().await;
        Ok(ListToolsResult::with_all_items(self.tool_definitions()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let result = match request.name.as_ref() {
            EXECUTE_CODE => {
                // Boxed: the execution's future is large, and rmcp moves the handler's
                // future (as big as its largest arm) into a task of its own per request.
                return Ok(Box::pin(self.execute_code(
                    request.arguments,
                    request.request_state,
                    request.input_responses,
                    &context,
                ))
                .await);
            }
            SEARCH_TOOLS => self.search_tools(request.arguments).await,
            EXECUTION_RESULT if self.0.options.pauses.is_some() => {
                self.execution_result(request.arguments).await
            }
            other => {
                let tools: Vec<String> = self
                    .tool_definitions()
                    .into_iter()
                    .map(|t| t.name.to_string())
                    .collect();
                return Err(ErrorData::invalid_params(
                    format!("no tool {other:?}; the tools are {}", tools.join(", ")),
                    None,
                ));
            }
        };
        Ok(result.into())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.0.sessions.add(context.peer);
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.0.upstreams.settled().await;
        Ok(resources::list(&self.0.upstreams.offers()).await)
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.0.upstreams.settled().await;
        Ok(resources::templates(&self.0.upstreams.offers()).await)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        // Boxed, as are the other pass-through requests: rmcp moves the handler's future (as
        // large as its largest arm) into a task per request, `execute_code`'s included.
        Box::pin(async {
            self.0.upstreams.settled().await;
            resources::read(&self.0.upstreams.offers(), &request.uri).await
        })
        .await
        .map(Into::into)
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Box::pin(async {
            self.0.upstreams.settled().await;
            self.0
                .subscriptions
                .subscribe(&self.0.upstreams.offers(), &context.peer, &request.uri)
                .await
        })
        .await
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Box::pin(self.0.subscriptions.unsubscribe(
            &self.0.upstreams.offers(),
            &context.peer,
            &request.uri,
        ))
        .await
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.0.upstreams.settled().await;
        Ok(prompts::list(&self.0.upstreams.offers()).await)
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        Box::pin(async {
            self.0.upstreams.settled().await;
            prompts::get(&self.0.upstreams.offers(), request).await
        })
        .await
        .map(Into::into)
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        // Every server that has started is set; one starting later is set as it starts.
        self.0.upstreams.settled().await;
        let level = self.0.sessions.set_level(&context.peer, request.level);
        self.0.upstreams.set_log_level(level).await;
        Ok(())
    }
}

/// The output schema of `execute_code`. It names its dialect, JSON Schema draft 7, which is
/// all it uses: a client that checks every answer against the schema checks the schema first,
/// and without `$schema` it would be read as 2020-12, whose metaschema is far slower to check
/// against (the Python MCP SDK's `call_tool`: about 5.5 ms an answer, against about 1 ms).
fn execute_output_schema() -> Value {
    json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {
            "ok": {"type": "boolean"},
            "result": {"description": "the program's result (absent when it is undefined)"},
            "error": {
                "type": "object",
                "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
                "required": ["code", "message"]
            },
            "logs": {"type": "array", "items": {"type": "string"}},
            "truncated": {
                "type": "object",
                "description": "present when the answer was cut; the result is then left out",
                "properties": {"chars": {"type": "integer"}, "limit": {"type": "integer"}}
            },
            "status": {
                "type": "string",
                "description": "\"awaiting_approval\": the program paused before a call that needs a person's approval (not a failure; `message` says what to tell the user)"
            },
            "executionId": {"type": "string", "description": "the paused execution, as an operator approves it"},
            "waitingFor": {
                "type": "object",
                "properties": {"tool": {"type": "string"}, "input": {}}
            },
            "message": {"type": "string"}
        },
        "required": ["ok"]
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use execbox_host::ExecuteResult;
    use execbox_protocol::ErrorCode;

    fn ok(raw: &str, logs: &[&str]) -> ExecuteResult {
        ExecuteResult {
            id: "x".into(),
            outcome: Ok(Some(
                serde_json::value::RawValue::from_string(raw.into()).unwrap(),
            )),
            logs: logs.iter().map(|s| s.to_string()).collect(),
            logs_truncated: None,
            duration_ms: 1,
            cancelled: false,
            ledger: None,
            paused: None,
        }
    }

    fn text(result: &CallToolResult) -> &str {
        &result.content[0].as_text().unwrap().text
    }

    #[test]
    fn every_answer_fits_the_output_schema_in_the_draft_it_names() {
        let schema = execute_output_schema();
        assert_eq!(schema["$schema"], "http://json-schema.org/draft-07/schema#");
        let schema = execbox_host::Schema::compile(&schema).unwrap();
        let failed = ExecuteResult::failed(ErrorCode::RuntimeError, "boom");
        for result in [ok("1", &[]), ok("{\"a\":[1]}", &["line"]), failed] {
            let answer = answer(&result, 1000);
            let structured = answer.structured_content.unwrap();
            schema.validate(&structured, "answer").unwrap();
        }
        let cut = answer(&ok(&format!("\"{}\"", "x".repeat(5000)), &[]), 100);
        schema
            .validate(&cut.structured_content.unwrap(), "answer")
            .unwrap();
    }

    #[test]
    fn an_error_answer_is_a_tool_error() {
        let failed = ExecuteResult::failed(ErrorCode::RuntimeError, "boom");
        let answer = answer(&failed, 1000);
        assert_eq!(
            text(&answer),
            "{\"ok\":false,\"error\":{\"code\":\"runtime_error\",\"message\":\"boom\"},\"logs\":[]}"
        );
        assert_eq!(answer.is_error, Some(true));
        let answer = super::answer(&ok("1", &[]), 1000);
        assert_ne!(answer.is_error, Some(true));
        assert_eq!(
            answer.structured_content,
            Some(json!({"ok": true, "result": 1, "logs": []}))
        );
    }
}
