//! Small MCP servers (built with `rmcp`) for the `execbox mcp` tests and benchmark: the test or
//! bench binary runs one on its stdio instead of its own main when [`ROLE_ENV`] is set.
//!
//! Roles:
//! - `alpha`: `add {a, b}` (structured content, output schema), `echo {text}` (plain text),
//!   `fail {message}` (`isError`), `slow` (waits until cancelled), `media` (image, JSON text
//!   and an embedded resource), `progress {steps}` (progress notifications);
//! - `beta`: `lookup {key}` (JSON text) and more tools, listed two per page; `grow {name}`
//!   adds a tool and sends `notifications/tools/list_changed`;
//! - `calc`: `get-sum {a, b}` (JSON text `{"sum": ...}`, no output schema), `get-greeting`
//!   (plain text), `echo-back {message}`, `sleep-a-while` (no input): names with hyphens, as
//!   the reference `everything` server has;
//! - `mortal`: `die` exits the process with status 9;
//! - `twins`: `delete-all` and `delete_all` (in that order: the index shows them as
//!   `delete_all` and `delete_all__2`), each answering with its own name;
//! - `garbage`: prints non-JSON lines on stdout and never answers;
//! - `crash`: says why on stderr and exits with status 3 at once.
//!
//! Every call is appended to the file named by [`MARKS_ENV`] (`called add`, `started slow`,
//! `cancelled slow`, and `traceparent VALUE` when the call's `_meta` carries one), so a test can
//! see what reached the server.

use std::io::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt as _};
use serde_json::{json, Value};

/// Set to a role to make the binary serve it.
pub const ROLE_ENV: &str = "EXECBOX_TEST_UPSTREAM";
/// A file the server appends one line per event to.
pub const MARKS_ENV: &str = "EXECBOX_TEST_MARKS";

/// Serves the role [`ROLE_ENV`] names on stdio and returns `true` once the client is gone;
/// `false` when the variable is not set (the binary is then a test binary as usual).
pub fn serve_if_asked() -> bool {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return false;
    };
    match role.as_str() {
        "crash" => {
            eprintln!("crash: fatal error: no configuration found");
            std::process::exit(3);
        }
        // Started, but never answers the handshake: it is still starting when stopped.
        "mute" => {
            eprintln!("mute: never answering");
            std::thread::sleep(Duration::from_secs(600));
            return true;
        }
        "garbage" => {
            println!("Starting the garbage server on port 8080...");
            println!("ready.");
            std::thread::sleep(Duration::from_secs(600));
            return true;
        }
        _ => {}
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let server = Upstream {
            role: role.clone(),
            grown: Arc::new(Mutex::new(Vec::new())),
        };
        eprintln!("{role}: serving");
        match server.serve(rmcp::transport::stdio()).await {
            Ok(running) => {
                let _ = running.waiting().await;
            }
            Err(e) => eprintln!("{role}: {e}"),
        }
    });
    // Stdin's blocking reader would keep the runtime's shutdown waiting.
    std::process::exit(0);
}

fn mark(line: &str) {
    if let Ok(path) = std::env::var(MARKS_ENV) {
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(file, "{line}");
        }
    }
}

#[derive(Clone)]
struct Upstream {
    role: String,
    grown: Arc<Mutex<Vec<String>>>,
}

fn object(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

fn tool(name: &str, description: &str, input: Value) -> Tool {
    Tool::new(name.to_owned(), description.to_owned(), object(input))
}

fn no_input() -> Value {
    json!({"type": "object", "properties": {}})
}

impl Upstream {
    fn tools(&self) -> Vec<Tool> {
        match self.role.as_str() {
            "alpha" => {
                let mut add = tool(
                    "add",
                    "Add two numbers. Returns their sum.",
                    json!({
                        "type": "object",
                        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                        "required": ["a", "b"]
                    }),
                );
                add.output_schema = Some(object(json!({
                    "type": "object",
                    "properties": {"sum": {"type": "number"}},
                    "required": ["sum"]
                })));
                vec![
                    add,
                    tool(
                        "echo",
                        "Echo a text back",
                        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
                    ),
                    tool(
                        "fail",
                        "Always fails with the message given",
                        json!({"type": "object", "properties": {"message": {"type": "string"}}}),
                    ),
                    tool("slow", "Waits until cancelled", no_input()),
                    tool(
                        "media",
                        "Returns an image, JSON text and a resource",
                        no_input(),
                    ),
                    tool(
                        "progress",
                        "Reports progress, then finishes",
                        json!({"type": "object", "properties": {"steps": {"type": "integer"}}}),
                    ),
                ]
            }
            "beta" => {
                let mut tools = vec![
                    tool(
                        "lookup",
                        "Look up a key in the directory",
                        json!({"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}),
                    ),
                    tool("list-keys", "List every key", no_input()),
                    tool("count", "Count the keys", no_input()),
                    tool(
                        "grow",
                        "Add a tool named NAME",
                        json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
                    ),
                ];
                for name in self.grown.lock().unwrap().iter() {
                    tools.push(tool(name, "A tool added at run time", no_input()));
                }
                tools
            }
            "mortal" => vec![tool("die", "Exits the server", no_input())],
            "calc" => vec![
                tool(
                    "get-sum",
                    "Adds two numbers and returns their sum",
                    json!({
                        "type": "object",
                        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                        "required": ["a", "b"]
                    }),
                ),
                tool(
                    "get-greeting",
                    "Returns a greeting as plain text",
                    no_input(),
                ),
                tool(
                    "echo-back",
                    "Echoes the message back",
                    json!({"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}),
                ),
                tool("sleep-a-while", "Sleeps briefly, then answers", no_input()),
            ],
            "twins" => vec![
                tool("delete-all", "Deletes everything (dashed)", no_input()),
                tool("delete_all", "Deletes everything (underscored)", no_input()),
            ],
            _ => Vec::new(),
        }
    }

    async fn call(
        &self,
        name: &str,
        args: JsonObject,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let text = |t: String| CallToolResult::success(vec![ContentBlock::text(t)]);
        match (self.role.as_str(), name) {
            ("alpha", "add") => {
                let a = args.get("a").and_then(Value::as_f64).unwrap_or(0.0);
                let b = args.get("b").and_then(Value::as_f64).unwrap_or(0.0);
                Ok(CallToolResult::structured(json!({"sum": a + b})))
            }
            ("alpha", "echo") => Ok(text(
                args.get("text")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            )),
            ("alpha", "fail") => {
                let message = args
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("failed")
                    .to_owned();
                Ok(CallToolResult::error(vec![ContentBlock::text(message)]))
            }
            ("alpha", "slow") => {
                mark("started slow");
                tokio::select! {
                    () = context.ct.cancelled() => {
                        mark("cancelled slow");
                        Err(ErrorData::internal_error("cancelled", None))
                    }
                    () = tokio::time::sleep(Duration::from_secs(30)) => Ok(text("slept".into())),
                }
            }
            ("alpha", "media") => Ok(CallToolResult::success(vec![
                ContentBlock::image("AAAAAAAAAAAAAA==", "image/png"),
                ContentBlock::text("{\"a\": 1}"),
                ContentBlock::embedded_text("file:///notes.txt", "some notes"),
            ])),
            ("alpha", "progress") => {
                let steps = args.get("steps").and_then(Value::as_u64).unwrap_or(3);
                if let Some(token) = context.meta.get_progress_token() {
                    for step in 1..=steps {
                        let _ = context
                            .peer
                            .notify_progress(
                                ProgressNotificationParam::new(token.clone(), step as f64)
                                    .with_total(steps as f64)
                                    .with_message(format!("step {step}")),
                            )
                            .await;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
                Ok(text("done".into()))
            }
            ("beta", "lookup") => {
                let key = args.get("key").and_then(Value::as_str).unwrap_or_default();
                Ok(text(
                    json!({"key": key, "value": key.to_uppercase()}).to_string(),
                ))
            }
            ("beta", "list-keys") => Ok(text("[\"a\",\"b\"]".into())),
            ("beta", "count") => Ok(text("2".into())),
            ("beta", "grow") => {
                let name = args
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("grown")
                    .to_owned();
                self.grown.lock().unwrap().push(name.clone());
                let _ = context.peer.notify_tool_list_changed().await;
                Ok(text(format!("added {name}")))
            }
            ("beta", grown) if self.grown.lock().unwrap().iter().any(|g| g == grown) => {
                Ok(text(format!("hello from {grown}")))
            }
            ("twins", twin @ ("delete-all" | "delete_all")) => Ok(text(format!("\"{twin}\""))),
            ("calc", "get-sum") => {
                let a = args.get("a").and_then(Value::as_f64).unwrap_or(0.0);
                let b = args.get("b").and_then(Value::as_f64).unwrap_or(0.0);
                Ok(text(json!({"sum": a + b}).to_string()))
            }
            ("calc", "get-greeting") => Ok(text("hello".into())),
            ("calc", "echo-back") => Ok(text(
                args.get("message")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            )),
            ("calc", "sleep-a-while") => Ok(text("slept".into())),
            ("mortal", "die") => {
                eprintln!("mortal: exiting as asked");
                std::process::exit(9);
            }
            (_, other) => Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        }
    }
}

impl ServerHandler for Upstream {
    fn get_info(&self) -> ServerConfig {
        let mut config = ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        );
        config.server_info = Implementation::new(format!("test-{}", self.role), "1.0.0");
        config
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let all = self.tools();
        if self.role != "beta" {
            return Ok(ListToolsResult::with_all_items(all));
        }
        // Two per page, so every page must be read.
        let start: usize = request
            .and_then(|r| r.cursor)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let end = (start + 2).min(all.len());
        let mut page = ListToolsResult::with_all_items(all[start.min(end)..end].to_vec());
        if end < all.len() {
            page.next_cursor = Some(end.to_string());
        }
        Ok(page)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        mark(&format!("called {}", request.name));
        if let Some(traceparent) = context.meta.get_traceparent() {
            mark(&format!("traceparent {traceparent}"));
        }
        let args = request.arguments.clone().unwrap_or_default();
        self.call(&request.name, args, context)
            .await
            .map(Into::into)
    }
}
