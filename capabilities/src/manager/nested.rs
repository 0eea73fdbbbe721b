//! The `capabilities` namespace of a script: `capabilities.run` starts another capability as
//! a child of the running execution and waits for it.

use execbox_host::{Provider, Tool, ToolContext, ToolError};
use execbox_policy::Principal;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{err, CapabilityManager};
use crate::records::{CapabilityErrorCode, StartRequest};

impl CapabilityManager {
    /// The `capabilities` namespace of a script: `run({name, type, params, timeoutMs})`.
    pub(super) fn nested_provider(&self, principal: Option<Principal>) -> Provider {
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
        let manager = self.clone();
        let run = Tool::new("run", move |input: Value, ctx: ToolContext| {
            let manager = manager.clone();
            let principal = principal.clone();
            async move {
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
        .description(
            "Run another capability and wait for its result; this execution is its parent.",
        )
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
        Provider::new("capabilities")
            .description("Other capabilities of the registry, run as children of this one")
            .tool(run)
    }
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
