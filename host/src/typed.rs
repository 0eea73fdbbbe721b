//! Typed tools: Rust input and output types, with their JSON Schemas derived by `schemars`
//! (feature `typed`), in the manner of axum's `Json<T>` extractor.

use std::future::Future;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::tool::{Tool, ToolContext, ToolError};

impl Tool {
    /// A tool whose input is an `I` and whose output is an `O`: both schemas are derived
    /// from the types, so the host validates the guest's input before `handler` runs and the
    /// TypeScript declaration shows the fields.
    ///
    /// ```
    /// use execbox_host::{Tool, ToolContext, ToolError};
    /// use schemars::JsonSchema;
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Deserialize, JsonSchema)]
    /// struct Add { a: f64, b: f64 }
    ///
    /// #[derive(Serialize, JsonSchema)]
    /// struct Sum { sum: f64 }
    ///
    /// let add = Tool::typed("add", |input: Add, _ctx: ToolContext| async move {
    ///     Ok::<_, ToolError>(Sum { sum: input.a + input.b })
    /// });
    /// assert_eq!(add.get_input_schema().unwrap()["required"], serde_json::json!(["a", "b"]));
    /// ```
    pub fn typed<I, O, F, Fut>(name: impl Into<String>, handler: F) -> Tool
    where
        I: DeserializeOwned + JsonSchema + Send + 'static,
        O: Serialize + JsonSchema + 'static,
        F: Fn(I, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, ToolError>> + Send + 'static,
    {
        let handler = std::sync::Arc::new(handler);
        let tool = Tool::new(name, move |input: Value, ctx: ToolContext| {
            let handler = handler.clone();
            async move {
                let input: I = serde_json::from_value(input).map_err(|e| {
                    ToolError::validation(format!("input does not have the expected shape: {e}"))
                })?;
                let output = handler(input, ctx).await?;
                serde_json::to_value(output).map_err(|e| {
                    ToolError::serialization(format!("cannot encode the tool's output: {e}"))
                })
            }
        });
        tool.input_schema(schema_of::<I>())
            .output_schema(schema_of::<O>())
    }
}

/// The JSON Schema of `T`, without the `$schema` and `title` keys (noise in declarations).
fn schema_of<T: JsonSchema>() -> Value {
    let mut schema = serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Bool(true));
    if let Value::Object(map) = &mut schema {
        map.remove("$schema");
        map.remove("title");
    }
    schema
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Provider, ToolSet};
    use schemars::JsonSchema;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Deserialize, JsonSchema)]
    struct Lookup {
        /// The country to look up.
        country: String,
        #[serde(default)]
        limit: Option<u32>,
    }

    #[derive(Serialize, JsonSchema)]
    struct Capital {
        capital: String,
    }

    fn lookup() -> Tool {
        Tool::typed("lookup", |input: Lookup, _ctx| async move {
            if input.country == "Atlantis" {
                return Err(ToolError::tool("unknown country"));
            }
            Ok(Capital {
                capital: format!("capital of {} ({:?})", input.country, input.limit),
            })
        })
    }

    #[test]
    fn schemas_come_from_the_types() {
        let tool = lookup();
        let input = tool.get_input_schema().unwrap();
        assert_eq!(input["type"], "object");
        assert_eq!(input["required"], json!(["country"]));
        assert!(input.get("$schema").is_none());
        assert_eq!(
            tool.get_output_schema().unwrap()["required"],
            json!(["capital"])
        );
        let set = ToolSet::new(vec![Provider::new("geo").tool(tool)]).unwrap();
        let declarations = set.declarations();
        assert!(declarations.contains("country: string"), "{declarations}");
        assert!(
            declarations.contains("The country to look up."),
            "{declarations}"
        );
        // `u32`: what validation enforces of it, without schemars' `format: "uint32"`.
        assert!(
            declarations.contains(
                "    /**\n     * @integer\n     * @minimum 0\n     */\n    limit?: number | null;"
            ),
            "{declarations}"
        );
    }

    #[tokio::test]
    async fn inputs_arrive_typed_and_outputs_leave_as_json() {
        let tool = lookup();
        let ctx = ToolContext::new("exec-1");
        let out = tool
            .handler()
            .call(json!({"country": "France", "limit": 2}), ctx.clone())
            .await
            .unwrap();
        assert_eq!(out, json!({"capital": "capital of France (Some(2))"}));
        let err = tool
            .handler()
            .call(json!({"country": 7}), ctx.clone())
            .await
            .unwrap_err();
        assert_eq!(err.code, execbox_protocol::ErrorCode::ValidationError);
        let err = tool
            .handler()
            .call(json!({"country": "Atlantis"}), ctx)
            .await
            .unwrap_err();
        assert_eq!(err.message, "unknown country");
    }
}
