//! Providers resolved for execution, and the dispatch of one `tool_call` to one `tool_result`.
//!
//! [`ToolSet::new`] does the work that can fail up front: it checks provider names,
//! sanitises tool names, compiles schemas and builds the manifests once. A deferred schema
//! ([`ToolSchema::deferred`], what an OpenAPI provider's operations have) is compiled at the
//! tool's first call instead, and a provider with one is declared (its TypeScript) only when
//! [`ToolSet::declarations`] is first asked for, so that a provider of a thousand generated
//! tools costs little until used; [`ToolSet::check_schemas`] compiles them all at once.
//! Afterwards [`ToolSet::dispatch`] cannot fail in any way other than producing a failing
//! `tool_result`.
//!
//! Every error message of a call names the tool as the guest called it, `provider.tool`
//! (the provider and the tool's safe name), and starts with it unless a handler's own
//! message already contains it: `weather.get_forecast: input.units must be one of "metric",
//! "imperial"; got "kelvin"`. The reader is usually a model fixing its program, so each
//! message also says what to fix.
//!
//! A call goes through these steps; the first that fails decides the error:
//!
//! 1. lookup by `providerName` and `safeToolName`: `tool_error`,
//!    `<p>.<t>: no such tool; the tools of <p> are a, b` (or `no such provider`);
//! 2. the execution is already cancelled: `timeout`, `<p>.<t>: Execution timed out`;
//! 3. the input is parsed (a missing input is JSON `null`; nesting deeper than
//!    [`MAX_NESTING_DEPTH`](execbox_protocol::MAX_NESTING_DEPTH) is a `serialization_error`)
//!    and validated against the input schema: `validation_error` with the path, what was
//!    expected and what was there ([`Schema::validate`]), saying the tool was called without
//!    an argument when it was;
//! 4. the handler runs until it returns or `ctx.cancel` fires (`timeout`,
//!    `<p>.<t>: Execution timed out`; the handler's future is dropped); its error keeps its
//!    code and message, prefixed with `<p>.<t>: ` unless the message names the tool already;
//!    a panic becomes `tool_error`;
//! 5. the output must be transport-safe (`serialization_error`,
//!    `<p>.<t>: Host value is not JSON-serializable: ...`) and match the output schema
//!    (`validation_error`, `<p>.<t>: the tool returned an output that does not match its
//!    output schema (...): output.x must be ...`), unless the tool's schema only describes
//!    its outputs ([`Tool::output_checked`]).
//!
//! The transport check comes before output validation (the reverse of what one might expect)
//! so that no validator ever walks a value deeper than the protocol allows.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use execbox_protocol::{
    check_transport_safe, ErrorBody, ErrorCode, ProviderManifest, RawValue, ToolCall, ToolManifest,
    ToolResult,
};
use futures_util::FutureExt as _;
use serde_json::{Map, Value};
use tracing::Instrument as _;

use crate::declarations::{provider_declaration, requirement_remarks, ToolDeclaration};
use crate::guard::{unguarded, CallGuard, GuardError, GuardedCall, MayAsk};
use crate::json::{
    drop_value, parse_json, value_depth, with_deep_stack, ParseJsonError, SHALLOW_DEPTH,
};
use crate::ledger::{Answer, Recorder, Step};
use crate::names::{assign_safe_names, check_provider_name};
use crate::schema::Schema;
use crate::tool::{Provider, Tool, ToolContext, ToolError, ToolSchema};
use crate::trace;

/// Why a set of providers cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ToolSetError {
    /// A provider name is not usable as a guest namespace.
    #[error("invalid provider name {name:?}: {reason}")]
    InvalidProviderName {
        /// The name as given.
        name: String,
        /// Why it is refused.
        reason: String,
    },
    /// Two providers have the same name.
    #[error("provider {name:?} is defined twice")]
    DuplicateProvider {
        /// The repeated name.
        name: String,
    },
    /// Two tools of one provider have the same (original) name.
    #[error("provider {provider:?} defines tool {tool:?} twice")]
    DuplicateTool {
        /// The provider.
        provider: String,
        /// The repeated tool name.
        tool: String,
    },
    /// A tool's input or output schema does not compile.
    #[error("invalid {which} schema of tool {provider}.{tool}: {message}")]
    InvalidSchema {
        /// The provider.
        provider: String,
        /// The tool's original name.
        tool: String,
        /// `"input"` or `"output"`.
        which: &'static str,
        /// What is wrong with it.
        message: String,
    },
}

/// Providers resolved for execution: names sanitised, schemas compiled, manifests and
/// TypeScript built once. Cheap to clone (shared).
#[derive(Clone)]
pub struct ToolSet(Arc<Inner>);

struct Inner {
    /// The providers as given, to build what a principal may see.
    providers: Vec<Provider>,
    /// The namespaces that cannot be used now, and why (see [`ToolSet::with_unavailable`]).
    unavailable: Vec<(String, String)>,
    /// A view that does not keep every tool: a call of any tool it does not have (hidden or
    /// missing alike) is refused as "permission denied".
    restricted: bool,
    /// Views already built, by which tools they keep (in provider, then tool order).
    views: std::sync::Mutex<HashMap<Vec<bool>, ToolSet>>,
    manifests: Vec<ProviderManifest>,
    /// Built when first asked for (see [`ToolSet::declarations`]).
    declarations: OnceLock<String>,
    /// The declarations with each tool's error codes, for prompts; built when first asked for.
    prompt_declarations: OnceLock<String>,
    /// provider name → safe tool name → tool.
    lookup: HashMap<String, HashMap<String, Arc<ResolvedTool>>>,
    /// provider name → (safe, original) in declaration order.
    names: HashMap<String, Vec<(String, String)>>,
    /// How the embedding attaches a policy, for the refusal of a guarded tool's call in an
    /// execution without one (see [`ToolSet::with_policy_hint`]).
    policy_hint: OnceLock<String>,
}

struct ResolvedTool {
    provider: String,
    safe_name: String,
    /// The tool as given, sharing its schemas and handler.
    tool: Tool,
}

impl ResolvedTool {
    /// `provider.safe_name`: the tool as the guest calls it.
    fn label(&self) -> String {
        format!("{}.{}", self.provider, self.safe_name)
    }

    /// The compiled input or output schema, if the tool has one, compiled now if it was
    /// deferred; `Err` (a `tool_error` with [`ToolSetError::InvalidSchema`]'s message) when
    /// it does not compile.
    fn schema(&self, which: &'static str) -> Result<Option<&Schema>, ToolError> {
        let schema = match which {
            "input" => self.tool.input_tool_schema(),
            // A schema that only describes outputs is not compiled for calls.
            _ if !self.tool.checks_output() => None,
            _ => self.tool.output_tool_schema(),
        };
        let Some(schema) = schema else {
            return Ok(None);
        };
        schema.compiled().map(Some).map_err(|message| {
            ToolError::tool(invalid_schema(&self.provider, &self.tool, which, message).to_string())
        })
    }
}

/// [`ToolSetError::InvalidSchema`] for `tool`'s `which` schema.
fn invalid_schema(provider: &str, tool: &Tool, which: &'static str, message: &str) -> ToolSetError {
    ToolSetError::InvalidSchema {
        provider: provider.to_string(),
        tool: tool.name().to_string(),
        which,
        message: message.to_string(),
    }
}

/// Whether a tool of `provider` has a deferred schema ([`ToolSchema::deferred`]).
fn has_deferred_schemas(provider: &Provider) -> bool {
    provider.tools().iter().any(|tool| {
        [tool.input_tool_schema(), tool.output_tool_schema()]
            .into_iter()
            .flatten()
            .any(ToolSchema::is_deferred)
    })
}

/// `provider`'s TypeScript declaration, its tools named `safe_names`; with `@throws` lines
/// when `with_errors`.
fn declare(provider: &Provider, safe_names: &[String], with_errors: bool) -> String {
    let tools = provider.tools();
    let errors: Vec<Vec<(&str, String)>> = if with_errors {
        tools.iter().map(error_codes).collect()
    } else {
        vec![Vec::new(); tools.len()]
    };
    let remarks: Vec<Vec<String>> = tools
        .iter()
        .map(|tool| requirement_remarks(tool.requirements()))
        .collect();
    let decls: Vec<ToolDeclaration<'_>> = tools
        .iter()
        .zip(safe_names)
        .zip(&errors)
        .zip(&remarks)
        .map(|(((tool, safe), errors), remarks)| ToolDeclaration {
            safe_name: safe,
            description: tool.get_description(),
            input_schema: tool.get_input_schema(),
            output_schema: tool.get_output_schema(),
            errors,
            remarks,
            result_type: None,
            observed: None,
        })
        .collect();
    provider_declaration(provider.name(), provider.get_description(), &decls)
}

impl std::fmt::Debug for ToolSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolSet")
            .field("providers", &self.0.manifests)
            .finish_non_exhaustive()
    }
}

impl ToolSet {
    /// Resolves `providers`; see [`ToolSetError`] for what can be refused.
    pub fn new(providers: Vec<Provider>) -> Result<ToolSet, ToolSetError> {
        Self::build(providers, Vec::new(), false, None)
    }

    /// Resolves `providers`, and marks namespaces as unavailable: `(name, why)`, where `why`
    /// says why and what to do. A name that is one of `providers` keeps its tools; any other
    /// becomes a namespace without tools. Each goes to the runner with
    /// [`ProviderManifest::unavailable`] set, so the namespace exists and every call on it
    /// fails with `tool_error` `<name> is unavailable: <why>` (here too, should one arrive).
    pub fn with_unavailable(
        providers: Vec<Provider>,
        unavailable: Vec<(String, String)>,
    ) -> Result<ToolSet, ToolSetError> {
        Self::build(providers, unavailable, false, None)
    }

    /// Resolves `providers`; a view (`restricted`) keeps the safe names of the full set
    /// (`pinned`, provider → (safe, original)), so hiding a tool never renames another: the
    /// name a listing shows is the tool a call reaches.
    fn build(
        providers: Vec<Provider>,
        unavailable: Vec<(String, String)>,
        restricted: bool,
        pinned: Option<&HashMap<String, Vec<(String, String)>>>,
    ) -> Result<ToolSet, ToolSetError> {
        let mut manifests = Vec::with_capacity(providers.len());
        let mut lookup = HashMap::new();
        let mut names = HashMap::new();
        for provider in &providers {
            let pname = provider.name().to_string();
            check_provider_name(&pname).map_err(|reason| ToolSetError::InvalidProviderName {
                name: pname.clone(),
                reason,
            })?;
            if lookup.contains_key(&pname) {
                return Err(ToolSetError::DuplicateProvider { name: pname });
            }
            let tools = provider.tools();
            let mut seen = std::collections::HashSet::new();
            for tool in tools {
                if !seen.insert(tool.name()) {
                    return Err(ToolSetError::DuplicateTool {
                        provider: pname,
                        tool: tool.name().to_string(),
                    });
                }
            }
            let pinned_names = pinned.and_then(|p| p.get(&pname)).and_then(|names| {
                tools
                    .iter()
                    .map(|t| {
                        names
                            .iter()
                            .find(|(_, original)| original == t.name())
                            .map(|(safe, _)| safe.clone())
                    })
                    .collect::<Option<Vec<String>>>()
            });
            let safe_names =
                pinned_names.unwrap_or_else(|| assign_safe_names(tools.iter().map(Tool::name)));
            let mut by_safe = HashMap::with_capacity(tools.len());
            let mut tool_manifests = Vec::with_capacity(tools.len());
            for (tool, safe) in tools.iter().zip(&safe_names) {
                // A schema given as a `Value` is compiled now; a deferred one at the first call.
                for (schema, which) in [
                    (tool.input_tool_schema(), "input"),
                    (tool.output_tool_schema(), "output"),
                ] {
                    if let Some(schema) = schema.filter(|s| !s.is_deferred()) {
                        schema
                            .compiled()
                            .map_err(|message| invalid_schema(&pname, tool, which, message))?;
                    }
                }
                tool_manifests.push(ToolManifest {
                    key: tool.name().to_string(),
                    safe_name: safe.clone(),
                    original_name: Some(tool.name().to_string()),
                    description: tool.get_description().map(str::to_string),
                    extra: Map::new(),
                });
                by_safe.insert(
                    safe.clone(),
                    Arc::new(ResolvedTool {
                        provider: pname.clone(),
                        safe_name: safe.clone(),
                        tool: tool.clone(),
                    }),
                );
            }
            // A provider with deferred schemas is declared when its declaration is asked for,
            // not in every `execute` (the runner does not read it).
            let types =
                (!has_deferred_schemas(provider)).then(|| declare(provider, &safe_names, false));
            manifests.push(ProviderManifest {
                name: pname.clone(),
                tools: tool_manifests,
                types,
                unavailable: why_unavailable(&unavailable, &pname),
            });
            names.insert(
                pname.clone(),
                safe_names
                    .into_iter()
                    .zip(tools.iter().map(|t| t.name().to_string()))
                    .collect(),
            );
            lookup.insert(pname, by_safe);
        }
        for (name, why) in &unavailable {
            if lookup.contains_key(name) {
                continue;
            }
            check_provider_name(name).map_err(|reason| ToolSetError::InvalidProviderName {
                name: name.clone(),
                reason,
            })?;
            manifests.push(ProviderManifest {
                name: name.clone(),
                tools: Vec::new(),
                types: Some(provider_declaration(
                    name,
                    Some(&format!("unavailable: {why}")),
                    &[],
                )),
                unavailable: Some(why.clone()),
            });
            names.insert(name.clone(), Vec::new());
            lookup.insert(name.clone(), HashMap::new());
        }
        Ok(ToolSet(Arc::new(Inner {
            providers,
            unavailable,
            restricted,
            views: std::sync::Mutex::new(HashMap::new()),
            manifests,
            declarations: OnceLock::new(),
            prompt_declarations: OnceLock::new(),
            lookup,
            names,
            policy_hint: OnceLock::new(),
        })))
    }

    /// Every provider's declaration, in manifest order, with or without each tool's error
    /// codes.
    fn declare_all(&self, with_errors: bool) -> String {
        let blocks: Vec<String> = self
            .0
            .manifests
            .iter()
            .map(|manifest| {
                let provider = self.0.providers.iter().find(|p| p.name() == manifest.name);
                match (provider, &manifest.types) {
                    (Some(provider), types) if with_errors || types.is_none() => {
                        let safe: Vec<String> = self.0.names[&manifest.name]
                            .iter()
                            .map(|(safe, _)| safe.clone())
                            .collect();
                        declare(provider, &safe, with_errors)
                    }
                    (_, types) => types.clone().unwrap_or_default(),
                }
            })
            .collect();
        blocks.join("\n\n")
    }

    /// Compiles every schema not compiled yet (the deferred ones, see [`ToolSchema`]), so
    /// that one that does not compile is found now rather than at a call: what `execbox
    /// check` does. `Err` names the first that does not compile.
    pub fn check_schemas(&self) -> Result<(), ToolSetError> {
        for provider in &self.0.providers {
            for tool in provider.tools() {
                for (schema, which) in [
                    (tool.input_tool_schema(), "input"),
                    (tool.output_tool_schema(), "output"),
                ] {
                    if let Some(schema) = schema {
                        schema.compiled().map_err(|message| {
                            invalid_schema(provider.name(), tool, which, message)
                        })?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Says how this embedding gives an execution a policy (`"give run() a policy=Policy(...)"`):
    /// a call of a tool with a rate limit or requiring approval, in an execution without a
    /// guard, is refused with this sentence as what to do, instead of the Rust library's
    /// (attach execbox-policy's `Enforcement`). The first hint set on a set stays; its views
    /// share it.
    pub fn with_policy_hint(self, hint: impl Into<String>) -> ToolSet {
        let _ = self.0.policy_hint.set(hint.into());
        self
    }

    /// The tools `guard` lets an execution see ([`CallGuard::may_call`]); see
    /// [`ToolSet::view`].
    pub fn visible_to(&self, guard: &dyn CallGuard) -> ToolSet {
        self.view(|tool| guard.may_call(tool.requirements()))
    }

    /// The tools `keep` accepts: the others are left out of the manifests, the declarations
    /// and every listing, and a call of one is refused as "permission denied", as a call of a
    /// tool that does not exist is. Every tool keeps its sandbox name, so hiding one never
    /// renames another. The same set when nothing is hidden; views are built once and kept.
    pub fn view(&self, keep: impl Fn(&Tool) -> bool) -> ToolSet {
        let keep: Vec<bool> = self
            .0
            .providers
            .iter()
            .flat_map(|p| p.tools())
            .map(keep)
            .collect();
        if keep.iter().all(|&k| k) {
            return self.clone();
        }
        let mut views = self
            .0
            .views
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(view) = views.get(&keep) {
            return view.clone();
        }
        let mut kept = keep.iter();
        let providers: Vec<Provider> = self
            .0
            .providers
            .iter()
            .filter_map(|provider| {
                let mut visible = Provider::new(provider.name());
                if let Some(description) = provider.get_description() {
                    visible = visible.description(description);
                }
                for tool in provider.tools() {
                    if *kept.next().expect("one flag per tool") {
                        visible = visible.tool(tool.clone());
                    }
                }
                (!visible.tools().is_empty()).then_some(visible)
            })
            .collect();
        // An unavailable namespace stays, unless it had tools and none is left.
        let unavailable = self
            .0
            .unavailable
            .iter()
            .filter(|(name, _)| {
                providers.iter().any(|p| p.name() == name)
                    || !self.0.providers.iter().any(|p| p.name() == name)
            })
            .cloned()
            .collect();
        // The providers were accepted once; a subset of them is accepted again.
        let view = Self::build(providers, unavailable, true, Some(&self.0.names))
            .unwrap_or_else(|_| ToolSet::empty());
        if let Some(hint) = self.0.policy_hint.get() {
            let _ = view.0.policy_hint.set(hint.clone());
        }
        views.insert(keep, view.clone());
        view
    }

    /// A set without providers.
    pub fn empty() -> ToolSet {
        ToolSet::new(Vec::new()).expect("no providers, nothing to refuse")
    }

    /// The manifests to send in `execute.providers`, in provider order. Tools are keyed by
    /// their original name and carry `safeName`, `originalName` and `description`; `types`
    /// is the provider's TypeScript declaration, except for a provider with deferred schemas
    /// ([`ToolSchema::deferred`]), whose declaration (megabytes for a large OpenAPI document,
    /// which the runner does not read) is left out: [`ToolSet::declarations`] has it.
    pub fn manifests(&self) -> &[ProviderManifest] {
        &self.0.manifests
    }

    /// Every provider's declaration, joined by a blank line; empty without providers.
    /// Built on the first call (it reads every tool's schemas, parsing deferred ones) and kept.
    pub fn declarations(&self) -> String {
        self.0
            .declarations
            .get_or_init(|| self.declare_all(false))
            .clone()
    }

    /// Like [`ToolSet::declarations`], with `@throws` lines in each tool's JSDoc: the error
    /// codes a call of it may reject with (`validation_error` when it has schemas,
    /// `tool_error`, `timeout` when its handler has a time limit), for prompts.
    pub fn prompt_declarations(&self) -> String {
        self.0
            .prompt_declarations
            .get_or_init(|| self.declare_all(true))
            .clone()
    }

    /// `(safe, original)` names of a provider's tools in declaration order; `None` for an
    /// unknown provider.
    pub fn tool_names(&self, provider: &str) -> Option<Vec<(String, String)>> {
        self.0.names.get(provider).cloned()
    }

    /// Whether a tool of the set requires approval: an execution with it may pause
    /// ([`ExecuteRequest::durable`](crate::ExecuteRequest::durable)).
    pub fn any_requires_approval(&self) -> bool {
        self.0
            .lookup
            .values()
            .flat_map(|tools| tools.values())
            .any(|tool| tool.tool.requirements().requires_approval)
    }

    /// Whether a call of a tool of the set may wait for an approval under `guard` (its rules
    /// may ask for calls of tools that do not require approval themselves): the most any
    /// tool may.
    pub fn may_ask(&self, guard: &dyn CallGuard) -> MayAsk {
        self.0
            .lookup
            .iter()
            .flat_map(|(provider, tools)| tools.iter().map(move |(name, t)| (provider, name, t)))
            .map(|(provider, name, tool)| {
                guard.may_ask(provider, name, tool.tool.name(), tool.tool.requirements())
            })
            .max()
            .unwrap_or(MayAsk::No)
    }

    /// Whether the set has no providers.
    pub fn is_empty(&self) -> bool {
        self.0.manifests.is_empty()
    }

    /// Handles one `tool_call` without a guard: lookup, input validation, the call with
    /// `ctx`, output checks (see the module docs for the order and the error of each step). A
    /// tool that declares a rate limit or an approval is refused: nothing here enforces them.
    ///
    /// Never panics (a panicking handler becomes `tool_error`) and always returns exactly
    /// one [`ToolResult`] for `call.call_id`, promptly once `ctx.cancel` fires.
    pub async fn dispatch(&self, call: &ToolCall, ctx: ToolContext) -> ToolResult {
        match self.dispatch_guarded(call, ctx, None).await {
            Ok(result) => result,
            Err(_) => unreachable!("only a guard fails fatally"),
        }
    }

    /// [`ToolSet::dispatch`] under `guard`: [`CallGuard::admit`] runs after the lookup and
    /// before input validation, and the admission is finished before the result is returned.
    /// `Err` (a [`GuardError::Fatal`]'s message) when the guard cannot do its duty: the
    /// result must not be sent, and the execution must end.
    pub async fn dispatch_guarded(
        &self,
        call: &ToolCall,
        ctx: ToolContext,
        guard: Option<&dyn CallGuard>,
    ) -> Result<ToolResult, String> {
        match self.dispatch_recorded(call, ctx, guard, None).await {
            Ok(result) => Ok(result),
            Err(Halt::Fatal(message) | Halt::Diverged(message)) => Err(message),
            Err(Halt::Pause) => unreachable!("only a durable execution pauses"),
        }
    }

    /// [`ToolSet::dispatch_guarded`] for call `index` of a durable execution whose ledger
    /// `recorder` keeps: answered from the ledger when it holds the answer, else run (the
    /// approved call without asking again) and its answer recorded; or the execution halts
    /// (the guard failed, the call diverged from the ledger, or it pauses for approval).
    pub(crate) async fn dispatch_recorded(
        &self,
        call: &ToolCall,
        ctx: ToolContext,
        guard: Option<&dyn CallGuard>,
        journal: Option<(&Recorder, u32)>,
    ) -> Result<ToolResult, Halt> {
        let started = Instant::now();
        let span = tracing::info_span!(
            target: trace::TARGET,
            "execbox.tool_call",
            otel.kind = "internal",
            execbox.tool = %format_args!("{}.{}", call.provider_name, call.safe_tool_name),
            execbox.call_id = %call.call_id,
            execbox.execution_id = %ctx.execution_id,
            execbox.principal = ctx.principal.as_deref(),
            execbox.outcome = tracing::field::Empty,
            execbox.duration_ms = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        let cancel = ctx.cancel.clone();
        let outcome = self
            .run(call, ctx, guard, journal)
            .instrument(span.clone())
            .await;
        let outcome = match outcome {
            Ok(outcome) => outcome,
            Err(Detour::Replayed(answer)) => {
                trace::record_outcome(&span, None, started.elapsed().as_millis() as u64);
                return Ok(ToolResult {
                    call_id: call.call_id.clone(),
                    outcome: match answer {
                        Answer::Result(raw) => Ok(Some(raw)),
                        Answer::Error(error) => Err(error),
                    },
                });
            }
            Err(Detour::Halt(halt)) => {
                trace::record_outcome(
                    &span,
                    Some(ErrorCode::InternalError.as_str()),
                    started.elapsed().as_millis() as u64,
                );
                return Err(halt);
            }
        };
        trace::record_outcome(
            &span,
            outcome.as_ref().err().map(|e| e.code.as_str()),
            started.elapsed().as_millis() as u64,
        );
        let outcome = outcome.map_err(|e| {
            named(
                &format!("{}.{}", call.provider_name, call.safe_tool_name),
                e,
            )
        });
        match &outcome {
            Ok(_) => tracing::debug!(
                call_id = %call.call_id,
                tool = %format_args!("{}.{}", call.provider_name, call.safe_tool_name),
                elapsed_ms = started.elapsed().as_millis() as u64,
                "tool call succeeded"
            ),
            Err(e) => tracing::debug!(
                call_id = %call.call_id,
                tool = %format_args!("{}.{}", call.provider_name, call.safe_tool_name),
                elapsed_ms = started.elapsed().as_millis() as u64,
                code = %e.code,
                message = %e.message,
                "tool call failed"
            ),
        }
        let outcome = outcome.map_err(ErrorBody::from);
        // A call cut short never answered the program: it runs again on replay.
        if let Some((recorder, index)) = journal {
            if !cancel.is_cancelled() {
                recorder.record(
                    index,
                    match &outcome {
                        Ok(raw) => Answer::Result(raw.clone()),
                        Err(error) => Answer::Error(error.clone()),
                    },
                );
            }
        }
        Ok(ToolResult {
            call_id: call.call_id.clone(),
            outcome: outcome.map(Some),
        })
    }

    /// One call: its own outcome, or a detour (answered from the ledger, or the execution
    /// halts).
    async fn run(
        &self,
        call: &ToolCall,
        ctx: ToolContext,
        guard: Option<&dyn CallGuard>,
        journal: Option<(&Recorder, u32)>,
    ) -> Result<Result<Box<RawValue>, ToolError>, Detour> {
        if let Some(why) = why_unavailable(&self.0.unavailable, &call.provider_name) {
            return Ok(Err(ToolError::tool(format!(
                "{} is unavailable: {why}",
                call.provider_name
            ))));
        }
        let tool = match self
            .0
            .lookup
            .get(&call.provider_name)
            .and_then(|tools| tools.get(&call.safe_tool_name))
        {
            Some(tool) => tool.clone(),
            None => return Ok(Err(self.unknown_tool(&call.provider_name))),
        };
        if ctx.cancel.is_cancelled() {
            return Ok(Err(ToolError::cancelled()));
        }
        let input = match &call.input {
            None => Value::Null,
            Some(raw) => match parse_json(raw.get()) {
                Ok(input) => input,
                Err(ParseJsonError::TooDeep) => {
                    return Ok(Err(ToolError::serialization(format!(
                        "tool input {}",
                        ParseJsonError::TooDeep
                    ))))
                }
                Err(ParseJsonError::Syntax(e)) => {
                    return Ok(Err(ToolError::validation(format!(
                        "the input is not valid JSON: {e}"
                    ))))
                }
            },
        };
        let requirements = tool.tool.requirements();
        let label = tool.label();
        let approved = match journal {
            None => false,
            Some((recorder, index)) => match recorder.before(index, &label, &input) {
                Step::Replayed(answer) => return Err(Detour::Replayed(answer)),
                Step::Diverged(message) => return Err(Detour::Halt(Halt::Diverged(message))),
                Step::Live { approved } => approved,
            },
        };
        let Some(guard) = guard else {
            if requirements.needs_guard() {
                let hint = self.0.policy_hint.get().map(String::as_str);
                return Ok(Err(unguarded(&label, requirements, hint)));
            }
            return Ok(self.run_admitted(call, ctx, &tool, input).await);
        };
        // Nobody is asked to approve a call its schema refuses anyway.
        if requirements.requires_approval {
            let schema = match tool.schema("input") {
                Ok(schema) => schema,
                Err(error) => return Ok(Err(error)),
            };
            if let Some(schema) = schema {
                if let Err(message) = validate(schema, &input, "input") {
                    return Ok(Err(ToolError::validation(message)));
                }
            }
        }
        let guarded = GuardedCall {
            execution_id: &ctx.execution_id,
            call_id: &call.call_id,
            tool: &label,
            original_name: tool.tool.name(),
            requirements,
            input: &input,
            approved,
            can_pause: journal.is_some(),
        };
        let admission = match guard.admit(guarded).await {
            Ok(admission) => admission,
            Err(GuardError::Refused(error)) => return Ok(Err(error)),
            Err(GuardError::Fatal(message)) => return Err(Detour::Halt(Halt::Fatal(message))),
            Err(GuardError::Pause(asked)) => {
                return match journal {
                    Some((recorder, index)) => {
                        recorder.pause(index, &label, &input, asked);
                        Err(Detour::Halt(Halt::Pause))
                    }
                    None => Ok(Err(ToolError::tool(format!("{label}: approval required"))
                        .with_reason("approval_required"))),
                };
            }
        };
        let result = self.run_admitted(call, ctx, &tool, input).await;
        match admission.finish(result.as_ref().map(|_| ())) {
            Ok(()) => Ok(result),
            Err(GuardError::Fatal(message)) => Err(Detour::Halt(Halt::Fatal(message))),
            Err(GuardError::Refused(error)) => Ok(Err(error)),
            Err(GuardError::Pause(_)) => Ok(result),
        }
    }

    /// A call past the policy's checks: input validation, the handler, output checks.
    async fn run_admitted(
        &self,
        call: &ToolCall,
        ctx: ToolContext,
        tool: &Arc<ResolvedTool>,
        input: Value,
    ) -> Result<Box<RawValue>, ToolError> {
        // Both schemas compile (a deferred one, now) before the handler may have effects.
        let (input_schema, output_schema) = match (tool.schema("input"), tool.schema("output")) {
            (Ok(input), Ok(output)) => (input, output),
            (Err(error), _) | (_, Err(error)) => {
                drop_value(input);
                return Err(error);
            }
        };
        if let Some(schema) = input_schema {
            if let Err(message) = validate(schema, &input, "input") {
                drop_value(input);
                let message = if call.input.is_none() {
                    format!("called without an argument: {message}")
                } else {
                    message
                };
                return Err(ToolError::validation(message));
            }
        }
        let cancel = ctx.cancel.clone();
        // Creating the future runs handler code too, so it is inside the unwind guard.
        let handler = tool.tool.handler().clone();
        let call_future = async move { handler.call(input, ctx).await };
        let guarded = AssertUnwindSafe(call_future).catch_unwind();
        let output = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(ToolError::cancelled()),
            result = guarded => match result {
                Ok(result) => result?,
                Err(panic) => {
                    let what = panic_message(panic.as_ref());
                    tracing::warn!(tool = %tool.label(), "tool handler panicked: {what}");
                    return Err(ToolError::tool(format!(
                        "{}: the tool panicked (a bug in the tool, not in your program): {what}",
                        tool.label()
                    )));
                }
            },
        };
        if let Err(e) = check_transport_safe(&output) {
            drop_value(output);
            return Err(ToolError::serialization(format!(
                "Host value is not JSON-serializable: {e}"
            )));
        }
        let deep = value_depth(&output) > SHALLOW_DEPTH;
        if let Some(schema) = output_schema {
            if let Err(message) = validate(schema, &output, "output") {
                drop_value(output);
                return Err(ToolError::validation(format!(
                    "the tool returned an output that does not match its output schema \
                     (a fault of the tool, not of your program): {message}"
                )));
            }
        }
        let encode = || serde_json::value::to_raw_value(&output);
        let encoded = if deep {
            with_deep_stack(encode)
        } else {
            encode()
        };
        drop_value(output);
        encoded.map_err(|e| {
            ToolError::serialization(format!("Host value is not JSON-serializable: {e}"))
        })
    }

    /// The error of a call to a tool that does not exist, listing what does; for a
    /// restricted view, "permission denied", whether the tool exists or not.
    fn unknown_tool(&self, provider: &str) -> ToolError {
        if self.0.restricted {
            return ToolError::tool("permission denied");
        }
        match self.0.names.get(provider) {
            Some(tools) if tools.is_empty() => {
                ToolError::tool(format!("no such tool; provider {provider} has no tools"))
            }
            Some(tools) => {
                let safe: Vec<&str> = tools.iter().map(|(s, _)| s.as_str()).collect();
                ToolError::tool(format!(
                    "no such tool; the tools of {provider} are {}",
                    few(&safe)
                ))
            }
            None => {
                let providers: Vec<&str> =
                    self.0.manifests.iter().map(|m| m.name.as_str()).collect();
                if providers.is_empty() {
                    ToolError::tool(format!("no such provider {provider}; there are no tools"))
                } else {
                    ToolError::tool(format!(
                        "no such provider {provider}; the providers are {}",
                        few(&providers)
                    ))
                }
            }
        }
    }
}

/// Why `provider` is unavailable, if it is.
fn why_unavailable(unavailable: &[(String, String)], provider: &str) -> Option<String> {
    unavailable
        .iter()
        .find(|(name, _)| name == provider)
        .map(|(_, why)| why.clone())
}

/// The error codes a call of `tool` may reject with, and when, for prompts.
fn error_codes(tool: &Tool) -> Vec<(&'static str, String)> {
    let mut codes = Vec::new();
    let checked_output = tool.get_output_schema().filter(|_| tool.checks_output());
    let when = match (tool.get_input_schema(), checked_output) {
        (Some(_), Some(_)) => Some("the input does not match its type, or the tool returned an output that does not match its return type"),
        (Some(_), None) => Some("the input does not match its type"),
        (None, Some(_)) => Some("the tool returned an output that does not match its return type"),
        (None, None) => None,
    };
    if let Some(when) = when {
        codes.push((ErrorCode::ValidationError.as_str(), when.to_string()));
    }
    codes.push((ErrorCode::ToolError.as_str(), "the tool failed".to_string()));
    if let Some(limit) = tool.handler().timeout() {
        codes.push((
            ErrorCode::Timeout.as_str(),
            format!("the tool ran longer than {}s", limit.as_secs_f64()),
        ));
    }
    codes
}

/// `error` with its message prefixed by `label: `, unless it names `label` already.
/// Why an execution must stop at a call.
#[derive(Debug)]
pub(crate) enum Halt {
    /// The guard cannot do its duty: its message.
    Fatal(String),
    /// The call needs an approval nobody can give now: the durable execution pauses.
    Pause,
    /// The call is not the one the ledger recorded at its number: the message.
    Diverged(String),
}

/// A call that does not run its tool.
enum Detour {
    /// Answered from the ledger.
    Replayed(Answer),
    /// The execution stops.
    Halt(Halt),
}

fn named(label: &str, error: ToolError) -> ToolError {
    if error.message.contains(label) {
        return error;
    }
    ToolError {
        message: format!("{label}: {}", error.message),
        ..error
    }
}

/// At most 20 names, comma-separated, then how many more.
fn few(names: &[&str]) -> String {
    const MAX: usize = 20;
    if names.len() <= MAX {
        return names.join(", ");
    }
    format!(
        "{}, … ({} more)",
        names[..MAX].join(", "),
        names.len() - MAX
    )
}

/// Validates on a large stack when the instance is deep.
fn validate(schema: &Schema, instance: &Value, what: &str) -> Result<(), String> {
    if value_depth(instance) > SHALLOW_DEPTH {
        with_deep_stack(|| schema.validate(instance, what))
    } else {
        schema.validate(instance, what)
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ping() -> Tool {
        Tool::new("ping", |_, _| async { Ok(json!("pong")) })
    }

    #[tokio::test]
    async fn unavailable_namespaces_exist_and_their_calls_say_why() {
        let set = ToolSet::with_unavailable(
            vec![
                Provider::new("up").tool(ping()),
                Provider::new("dead").tool(ping()),
            ],
            vec![
                ("dead".into(), "it exited; tell the user".into()),
                ("gone".into(), "it did not start; tell the user".into()),
            ],
        )
        .unwrap();
        let marks: Vec<(&str, Option<&str>, usize)> = set
            .manifests()
            .iter()
            .map(|m| (m.name.as_str(), m.unavailable.as_deref(), m.tools.len()))
            .collect();
        assert_eq!(
            marks,
            [
                ("up", None, 1),
                ("dead", Some("it exited; tell the user"), 1),
                ("gone", Some("it did not start; tell the user"), 0),
            ]
        );
        let call = |provider: &str| ToolCall {
            call_id: "c1".into(),
            provider_name: provider.into(),
            safe_tool_name: "ping".into(),
            input: None,
        };
        let ctx = || ToolContext::new("e1");
        let result = set.dispatch(&call("gone"), ctx()).await;
        let error = result.outcome.unwrap_err();
        assert_eq!(error.code, ErrorCode::ToolError);
        assert_eq!(
            error.message,
            "gone.ping: gone is unavailable: it did not start; tell the user"
        );
        let error = set
            .dispatch(&call("dead"), ctx())
            .await
            .outcome
            .unwrap_err();
        assert_eq!(
            error.message,
            "dead.ping: dead is unavailable: it exited; tell the user"
        );
        assert!(set.dispatch(&call("up"), ctx()).await.outcome.is_ok());
        // A view keeps a namespace without tools, and drops one whose tools are all hidden.
        let view = set.view(|_| false);
        let names: Vec<&str> = view.manifests().iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["gone"]);
    }

    fn call(provider: &str, tool: &str, input: Value) -> ToolCall {
        ToolCall {
            call_id: "c1".into(),
            provider_name: provider.into(),
            safe_tool_name: tool.into(),
            input: Some(serde_json::value::to_raw_value(&input).unwrap()),
        }
    }

    #[test]
    fn schemas_are_shared_not_copied_by_tool_sets_views_and_validators() {
        let tool = ping()
            .input_schema(json!({"type": "object"}))
            .output_schema(json!({"type": "string"}));
        let set = ToolSet::new(vec![Provider::new("p")
            .tool(tool.clone())
            .tool(Tool::new("other", |_, _| async { Ok(json!(null)) }).permissions(["x"]))])
        .unwrap();
        let view = set.view(|t| t.name() == "ping");
        for set in [&set, &view] {
            let resolved = &set.0.lookup["p"]["ping"];
            let given = tool.input_tool_schema().unwrap();
            let held = resolved.tool.input_tool_schema().unwrap();
            assert!(std::ptr::eq(given.value(), held.value()));
            assert!(std::ptr::eq(
                set.0.providers[0].tools()[0].get_input_schema().unwrap(),
                given.value()
            ));
            // The validator keeps the tool's schema as its source, not a copy; compiled once.
            let compiled = resolved.schema("input").unwrap().unwrap();
            assert!(std::ptr::eq(compiled.source().as_ref(), given.value()));
            assert!(std::ptr::eq(compiled, given.compiled().unwrap()));
        }
    }

    #[tokio::test]
    async fn deferred_schemas_compile_at_the_first_call() {
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
        let deferred = ToolSchema::deferred(schema.to_string()).unwrap();
        let tool = ping().input_schema(deferred.clone());
        let set = ToolSet::new(vec![Provider::new("p").tool(tool)]).unwrap();
        assert!(deferred.is_deferred() && !deferred.is_parsed() && !deferred.is_compiled());
        // Its provider is declared on demand, not in the manifests sent with every execute.
        assert_eq!(set.manifests()[0].types, None);
        assert!(!deferred.is_parsed());
        let error = set
            .dispatch(
                &call("p", "ping", json!({"n": "one"})),
                ToolContext::new("e"),
            )
            .await
            .outcome
            .unwrap_err();
        assert_eq!(error.code, ErrorCode::ValidationError);
        assert!(deferred.is_compiled());
        let ok = set
            .dispatch(&call("p", "ping", json!({"n": 1})), ToolContext::new("e"))
            .await;
        assert!(ok.outcome.is_ok());
        // The same schema as a `Value` declares the same TypeScript.
        let eager = ToolSet::new(vec![Provider::new("p").tool(ping().input_schema(schema))]);
        assert_eq!(set.declarations(), eager.unwrap().declarations());
    }

    #[tokio::test]
    async fn a_deferred_schema_that_does_not_compile_fails_its_calls_and_the_check() {
        let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = ran.clone();
        let tool = Tool::new("bad", move |_, _| {
            seen.store(true, std::sync::atomic::Ordering::SeqCst);
            async { Ok(json!(null)) }
        })
        .output_schema(ToolSchema::deferred(r#"{"type": "strin"}"#).unwrap());
        // Given as a `Value`, the set is refused at once, as always.
        let eager = ToolSet::new(vec![
            Provider::new("p").tool(ping().output_schema(json!({"type": "strin"})))
        ]);
        let refused = eager.unwrap_err().to_string();
        assert!(
            refused.starts_with("invalid output schema of tool p.ping: "),
            "{refused}"
        );
        let set = ToolSet::new(vec![Provider::new("p").tool(tool)]).unwrap();
        let error = set
            .dispatch(&call("p", "bad", json!({})), ToolContext::new("e"))
            .await
            .outcome
            .unwrap_err();
        assert_eq!(error.code, ErrorCode::ToolError);
        assert!(
            error
                .message
                .starts_with("invalid output schema of tool p.bad: "),
            "{}",
            error.message
        );
        // Its handler never ran: the schemas are checked before it may have effects.
        assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
        let checked = set.check_schemas().unwrap_err().to_string();
        assert!(
            checked.starts_with("invalid output schema of tool p.bad: "),
            "{checked}"
        );
    }
}
