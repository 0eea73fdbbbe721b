//! The `capabilities` namespace of a script: `capabilities.run` starts another capability as
//! a child of the running execution and waits for it.
//!
//! The namespace is the same for every execution of a manager, so it is built once
//! ([`NestedTools`]): its input schema compiled and its declaration written once, not at
//! every run. The caller of a nested start is the principal of the execution that calls it,
//! read from the table of live executions by the call's execution id.

use std::sync::{Arc, Weak};

use execbox_host::{Provider, Tool, ToolContext, ToolError, ToolSet};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{err, CapabilityManager, Inner};
use crate::records::{CapabilityErrorCode, StartRequest};

/// The `capabilities` namespace, built once per manager: the provider (for a script with a
/// tools file of its own, added to its providers) and the tool set of that provider alone
/// (for a script without one, used as it is).
pub(crate) struct NestedTools {
    pub(crate) provider: Provider,
    pub(crate) alone: ToolSet,
}

impl CapabilityManager {
    /// The `capabilities` namespace of a script: `run({name, type, params, timeoutMs})`.
    pub(crate) fn nested_tools(&self) -> &NestedTools {
        self.0
            .nested
            .get_or_init(|| nested_tools(Arc::downgrade(&self.0)))
    }
}

/// Builds the namespace. It holds its manager weakly: the manager holds it.
fn nested_tools(manager: Weak<Inner>) -> NestedTools {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct RunInput {
        name: String,
        #[serde(default, rename = "type")]
        capability_type: Option<String>,
        #[serde(default)]
        params: Value,
        #[serde(default)]
        timeout_ms: Option<u64>,
    }
    let run = Tool::new("run", move |input: Value, ctx: ToolContext| {
        let manager = manager.upgrade().map(CapabilityManager);
        async move {
            let Some(manager) = manager else {
                return Err(ToolError::tool(
                    "capabilities.run: the server is shutting down; start the capability again once it is back",
                ));
            };
            // The caller is whoever started the calling execution, as the live table says;
            // a call from an execution that is not live here is refused, never run as the
            // default principal.
            let principal = match manager.live().get(&ctx.execution_id) {
                Some(live) => live.principal.clone(),
                None => {
                    return Err(ToolError::tool(format!(
                        "capabilities.run: the calling execution {} is not running in this server, so it cannot start capabilities; start the capability from a running execution",
                        ctx.execution_id
                    )))
                }
            };
            let input: RunInput = serde_json::from_value(input)
                .map_err(|e| ToolError::validation(format!("input: {e}")))?;
            let request = StartRequest {
                capability: input.name.clone(),
                capability_type: input.capability_type,
                params: input.params,
                timeout_ms: input.timeout_ms,
                parent_id: Some(ctx.execution_id.clone()),
            };
            let id = manager
                .start(request, principal)
                .await
                .map_err(|e| ToolError::tool(format!("{}: {}", e.code, e.message)))?;
            // Stops the child if this call is cancelled or dropped (the parent ended).
            let mut guard = StopOnDrop(Some((manager.clone(), id.clone())));
            let outcome = tokio::select! {
                outcome = manager.wait(&id, None) => outcome,
                _ = ctx.cancel.cancelled() => return Err(ToolError::cancelled()),
            };
            guard.0 = None;
            let outcome = outcome
                .map_err(|e| ToolError::tool(format!("{}: {}", e.code, e.message)))?
                .ok_or_else(|| ToolError::tool("the nested capability did not end"))?;
            if outcome.success {
                Ok(outcome.result.unwrap_or(Value::Null))
            } else {
                let e = outcome
                    .error
                    .unwrap_or_else(|| err(CapabilityErrorCode::ExecutionFailed, "failed"));
                Err(ToolError::tool(format!(
                    "capability `{}` ({id}) ended {}: {}: {}",
                    input.name, outcome.status, e.code, e.message
                )))
            }
        }
    })
    .description("Run another capability and wait for its result; this execution is its parent.")
    .input_schema(json!({
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": {"type": "string", "description": "The capability's name"},
            "type": {"type": "string", "description": "Its type, if it must be this one"},
            "params": {"description": "Its params, checked against its input_schema"},
            "timeoutMs": {"type": "integer", "minimum": 1, "description": "Its time limit"}
        },
        "additionalProperties": false
    }));
    let provider = Provider::new("capabilities")
        .description("Other capabilities of the registry, run as children of this one")
        .tool(run);
    let alone = ToolSet::new(vec![provider.clone()])
        .expect("the capabilities namespace is a valid tool set");
    NestedTools { provider, alone }
}

/// Stops a nested execution when its caller goes away.
struct StopOnDrop(Option<(CapabilityManager, String)>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Some((manager, id)) = self.0.take() {
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                handle.spawn(async move {
                    let _ = manager.stop(&id).await;
                });
            }
        }
    }
}
