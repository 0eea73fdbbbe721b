//! Tools whose handlers are JavaScript functions: a tool set whose every call goes to one
//! JavaScript dispatcher and waits for the answer JavaScript sends back through `complete`.

use std::sync::Arc;

use execbox_host::json::parse_json;
use execbox_host::{
    code_tool_description, model_prompt, Provider, RateLimit, RuntimeOptions, Tool, ToolError,
    ToolSet,
};
use napi::bindgen_prelude::{FnArgs, Unknown};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{Error, Result, Status};
use napi_derive::napi;
use serde_json::Value;

use crate::limits::{runtime_options, RunLimits};
use crate::openapi::NativeOpenApi;
use crate::pending::Pending;

/// The dispatcher's arguments: the call's id, the tool's index in the specs, the input as JSON.
type DispatchArgs = FnArgs<(i64, u32, String)>;

/// The JavaScript dispatcher, weak: it never keeps the Node event loop alive by itself (an
/// execution in flight does, through its Promise).
type Dispatcher =
    ThreadsafeFunction<DispatchArgs, Unknown<'static>, DispatchArgs, Status, false, true>;

/// How JavaScript answers a call (`complete`'s `kind`).
/// What to do when a tool with a rate limit or requiring approval is called without a policy.
const POLICY_HINT: &str =
    "pass run() or new Sandbox() a policy: { policy: new Policy({ approve }) } \
                           (approve decides the calls of tools that require approval)";

const ANSWER_OK: u32 = 0;
const ANSWER_TOOL_ERROR: u32 = 1;
const ANSWER_SERIALIZATION_ERROR: u32 = 2;

/// Every tool call waiting for JavaScript, in this process.
static CALLS: Pending<std::result::Result<Value, ToolError>> = Pending::new();

/// How to reach the JavaScript dispatcher of one tool set.
struct Dispatch {
    dispatcher: Dispatcher,
}

impl Dispatch {
    /// Sends one call of tool `index` to JavaScript and waits for its answer.
    async fn call(
        &self,
        index: u32,
        label: &str,
        input: Value,
    ) -> std::result::Result<Value, ToolError> {
        let input = serde_json::to_string(&input).map_err(|e| {
            ToolError::serialization(format!("{label}: the input cannot be encoded: {e}"))
        })?;
        let waiting = CALLS
            .open()
            .ok_or_else(|| ToolError::tool(format!("{label}: the SDK's call table is broken")))?;
        let status = self.dispatcher.call(
            FnArgs::from((waiting.id(), index, input)),
            ThreadsafeFunctionCallMode::NonBlocking,
        );
        if status != Status::Ok {
            return Err(ToolError::tool(format!(
                "{label}: the Node.js side cannot take calls any more ({status})"
            )));
        }
        match waiting.answer().await {
            Some(answer) => answer,
            None => Err(ToolError::tool(format!(
                "{label}: the call was never answered"
            ))),
        }
    }
}

/// One tool as the JavaScript layer describes it (after checking it).
struct ToolSpec {
    name: String,
    description: Option<String>,
    input_schema: Option<Value>,
    output_schema: Option<Value>,
    permissions: Vec<String>,
    rate_limit: Option<String>,
    requires_approval: bool,
}

/// The specs of one namespace.
struct NamespaceSpec {
    namespace: String,
    tools: Vec<ToolSpec>,
}

/// Reads the specs JSON: `[{namespace, tools: [{name, description?, inputSchema?,
/// outputSchema?, permissions?, rateLimit?, requiresApproval?}]}]`.
fn parse_specs(json: &str) -> Result<Vec<NamespaceSpec>> {
    let bad = |what: &str| Error::new(Status::InvalidArg, format!("tool specs: {what}"));
    let value: Value = serde_json::from_str(json).map_err(|e| bad(&e.to_string()))?;
    let Value::Array(namespaces) = value else {
        return Err(bad("expected an array of namespaces"));
    };
    let text = |v: &Value, field: &str| -> Result<Option<String>> {
        match v.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(bad(&format!("{field} must be a string"))),
        }
    };
    let schema = |v: &Value, field: &str| v.get(field).filter(|s| !s.is_null()).cloned();
    let mut specs = Vec::with_capacity(namespaces.len());
    for ns in &namespaces {
        let namespace = text(ns, "namespace")?.ok_or_else(|| bad("a namespace has no name"))?;
        let Some(Value::Array(tools)) = ns.get("tools") else {
            return Err(bad(&format!("namespace {namespace} has no tools array")));
        };
        let mut list = Vec::with_capacity(tools.len());
        for tool in tools {
            list.push(ToolSpec {
                name: text(tool, "name")?.ok_or_else(|| bad("a tool has no name"))?,
                description: text(tool, "description")?,
                input_schema: schema(tool, "inputSchema"),
                output_schema: schema(tool, "outputSchema"),
                permissions: match tool.get("permissions") {
                    None | Some(Value::Null) => Vec::new(),
                    Some(Value::Array(list)) => list
                        .iter()
                        .map(|p| p.as_str().map(str::to_owned))
                        .collect::<Option<_>>()
                        .ok_or_else(|| bad("permissions must be strings"))?,
                    Some(_) => return Err(bad("permissions must be an array")),
                },
                rate_limit: text(tool, "rateLimit")?,
                requires_approval: tool
                    .get("requiresApproval")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
            });
        }
        specs.push(NamespaceSpec {
            namespace,
            tools: list,
        });
    }
    Ok(specs)
}

/// A tool set whose handlers are JavaScript functions. Tool `i` (counting through the
/// namespaces in order, then their tools) is called as `dispatch(callId, i, inputJson)`; the
/// JavaScript answers with [`complete`].
#[napi]
pub struct NativeTools {
    tools: ToolSet,
}

#[napi]
impl NativeTools {
    /// Builds the tool set; fails with the host's words when a schema does not compile or a
    /// name is refused. `openapi_names[i]` is the namespace of the OpenAPI provider
    /// `openapi[i]`, after the JavaScript tools.
    #[napi(constructor)]
    pub fn new(
        specs_json: String,
        dispatcher: Dispatcher,
        openapi_names: Option<Vec<String>>,
        openapi: Option<Vec<&NativeOpenApi>>,
    ) -> Result<Self> {
        let specs = parse_specs(&specs_json)?;
        let dispatch = Arc::new(Dispatch { dispatcher });
        let mut providers = Vec::with_capacity(specs.len());
        let mut index = 0u32;
        for ns in specs {
            let mut provider = Provider::new(ns.namespace.clone());
            for spec in ns.tools {
                let label = Arc::<str>::from(format!("{}.{}", ns.namespace, spec.name));
                let shared = dispatch.clone();
                let me = index;
                index += 1;
                let call_label = label.clone();
                let mut tool = Tool::new(spec.name, move |input, _ctx| {
                    let shared = shared.clone();
                    let label = call_label.clone();
                    async move { shared.call(me, &label, input).await }
                });
                if let Some(d) = spec.description {
                    tool = tool.description(d);
                }
                if let Some(s) = spec.input_schema {
                    tool = tool.input_schema(s);
                }
                if let Some(s) = spec.output_schema {
                    tool = tool.output_schema(s);
                }
                if !spec.permissions.is_empty() {
                    tool = tool.permissions(spec.permissions);
                }
                if let Some(limit) = spec.rate_limit {
                    let limit = limit.parse::<RateLimit>().map_err(|e| {
                        Error::new(Status::InvalidArg, format!("tools.{label}.rateLimit: {e}"))
                    })?;
                    tool = tool.rate_limit(limit);
                }
                tool = tool.requires_approval(spec.requires_approval);
                provider = provider.tool(tool);
            }
            providers.push(provider);
        }
        let (names, apis) = (
            openapi_names.unwrap_or_default(),
            openapi.unwrap_or_default(),
        );
        if names.len() != apis.len() {
            return Err(Error::new(
                Status::InvalidArg,
                "tool specs: one namespace per OpenAPI provider",
            ));
        }
        providers.extend(names.iter().zip(apis).map(|(ns, api)| api.provider(ns)));
        let tools = ToolSet::new(providers)
            .map_err(|e| Error::new(Status::InvalidArg, e.to_string()))?
            .with_policy_hint(POLICY_HINT);
        Ok(NativeTools { tools })
    }

    /// The TypeScript declarations of the tools, as the guest sees them.
    #[napi]
    pub fn declarations(&self) -> String {
        self.tools.declarations()
    }

    /// The model prompt for these tools under `limits` (defaults where unset).
    #[napi]
    pub fn prompt(&self, limits: Option<RunLimits>) -> String {
        let options = limits
            .map(|l| runtime_options(&l, RuntimeOptions::default()))
            .unwrap_or_default();
        model_prompt(&self.tools, &options)
    }

    /// The description of a tool running programs with these tools under `limits`: the
    /// prompt, with the answer's shape and its limit of `max_answer_chars`.
    #[napi]
    pub fn code_tool_description(
        &self,
        limits: Option<RunLimits>,
        max_answer_chars: u32,
    ) -> String {
        let options = limits
            .map(|l| runtime_options(&l, RuntimeOptions::default()))
            .unwrap_or_default();
        code_tool_description(&self.tools, &options, max_answer_chars as usize)
    }
}

impl NativeTools {
    /// The tool set, for an execution.
    pub(crate) fn tool_set(&self) -> &ToolSet {
        &self.tools
    }
}

/// Answers call `call_id`: `kind` 0 with the output as JSON text, 1 with a tool error's
/// message, 2 with why the output cannot be sent. Returns false when the call is no longer
/// waiting (its execution ended).
#[napi]
pub fn complete(call_id: i64, kind: u32, text: String) -> bool {
    let answer = match kind {
        ANSWER_OK => parse_json(&text).map_err(|e| {
            ToolError::serialization(format!("the tool's output cannot be read: {e}"))
        }),
        ANSWER_SERIALIZATION_ERROR => Err(ToolError::serialization(text)),
        ANSWER_TOOL_ERROR => Err(ToolError::tool(text)),
        _ => Err(ToolError::tool(text)),
    };
    CALLS.answer(call_id, answer)
}
