//! Tools whose handlers are JavaScript functions: a tool set whose every call goes to one
//! JavaScript dispatcher and waits for the answer JavaScript sends back through `complete`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use execbox_host::json::parse_json;
use execbox_host::{model_prompt, Provider, RuntimeOptions, Tool, ToolError, ToolSet};
use napi::bindgen_prelude::{FnArgs, Unknown};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{Error, Result, Status};
use napi_derive::napi;
use serde_json::Value;
use tokio::sync::oneshot;

use crate::executor::{runtime_options, RunLimits};

/// The dispatcher's arguments: the call's id, the tool's index in the specs, the input as JSON.
type DispatchArgs = FnArgs<(i64, u32, String)>;

/// The JavaScript dispatcher, weak: it never keeps the Node event loop alive by itself (an
/// execution in flight does, through its Promise).
type Dispatcher =
    ThreadsafeFunction<DispatchArgs, Unknown<'static>, DispatchArgs, Status, false, true>;

/// How JavaScript answers a call (`complete`'s `kind`).
const ANSWER_OK: u32 = 0;
const ANSWER_TOOL_ERROR: u32 = 1;
const ANSWER_SERIALIZATION_ERROR: u32 = 2;

/// Where a call's answer goes.
type Answer = oneshot::Sender<std::result::Result<Value, ToolError>>;

/// Every call waiting for JavaScript, in this process, by call id. One table for all tool
/// sets, so the dispatcher (held by Node-API as a GC root) needs no reference back to its
/// tool set, and a tool set nobody holds can be collected.
static PENDING: LazyLock<Mutex<HashMap<i64, Answer>>> = LazyLock::new(Default::default);

/// The id of the next call (process-wide).
static NEXT_CALL: AtomicI64 = AtomicI64::new(1);

/// How to reach the JavaScript dispatcher of one tool set.
struct Dispatch {
    dispatcher: Dispatcher,
}

/// Removes a call from the pending ones when its future ends or is dropped (the execution
/// ended first: its time limit, a cancel); a late answer then finds nothing and is ignored.
struct PendingCall {
    id: i64,
}

impl Drop for PendingCall {
    fn drop(&mut self) {
        if let Ok(mut pending) = PENDING.lock() {
            pending.remove(&self.id);
        }
    }
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
        let id = NEXT_CALL.fetch_add(1, Ordering::Relaxed);
        let (sender, receiver) = oneshot::channel();
        PENDING
            .lock()
            .map_err(|_| ToolError::tool(format!("{label}: the SDK's call table is broken")))?
            .insert(id, sender);
        let _pending = PendingCall { id };
        let status = self.dispatcher.call(
            FnArgs::from((id, index, input)),
            ThreadsafeFunctionCallMode::NonBlocking,
        );
        if status != Status::Ok {
            return Err(ToolError::tool(format!(
                "{label}: the Node.js side cannot take calls any more ({status})"
            )));
        }
        match receiver.await {
            Ok(answer) => answer,
            Err(_) => Err(ToolError::tool(format!(
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
}

/// The specs of one namespace.
struct NamespaceSpec {
    namespace: String,
    tools: Vec<ToolSpec>,
}

/// Reads the specs JSON: `[{namespace, tools: [{name, description?, inputSchema?, outputSchema?}]}]`.
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
    /// name is refused.
    #[napi(constructor)]
    pub fn new(specs_json: String, dispatcher: Dispatcher) -> Result<Self> {
        let specs = parse_specs(&specs_json)?;
        let dispatch = Arc::new(Dispatch { dispatcher });
        let mut providers = Vec::with_capacity(specs.len());
        let mut index = 0u32;
        for ns in specs {
            let mut provider = Provider::new(ns.namespace.clone());
            for spec in ns.tools {
                let label = format!("{}.{}", ns.namespace, spec.name);
                let shared = dispatch.clone();
                let me = index;
                index += 1;
                let label = Arc::<str>::from(label);
                let mut tool = Tool::new(spec.name, move |input, _ctx| {
                    let shared = shared.clone();
                    let label = label.clone();
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
                provider = provider.tool(tool);
            }
            providers.push(provider);
        }
        let tools =
            ToolSet::new(providers).map_err(|e| Error::new(Status::InvalidArg, e.to_string()))?;
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
    let sender = match PENDING.lock() {
        Ok(mut pending) => pending.remove(&call_id),
        Err(_) => None,
    };
    let Some(sender) = sender else {
        return false;
    };
    let answer = match kind {
        ANSWER_OK => parse_json(&text).map_err(|e| {
            ToolError::serialization(format!("the tool's output cannot be read: {e}"))
        }),
        ANSWER_SERIALIZATION_ERROR => Err(ToolError::serialization(text)),
        ANSWER_TOOL_ERROR => Err(ToolError::tool(text)),
        _ => Err(ToolError::tool(text)),
    };
    sender.send(answer).is_ok()
}
