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
//! - `crash`: says why on stderr and exits with status 3 at once;
//! - `offers` and `offers2`: resources (`note://ROLE/a`, one whose name and URI have odd
//!   characters, and `file:///shared.txt`, which both list; read as `ROLE read URI`; listed
//!   one per page), the template `note://ROLE/items/{id}`, subscriptions, the prompt `greet
//!   {name}`, logging (`logging/setLevel` marked `level LEVEL`), and the tools `log {level,
//!   text}`, `touch {uri}` (`notifications/resources/updated`), `change` (resources and
//!   prompts `list_changed`) and `ask {question}` (asks the client a form with one field
//!   `answer`, and answers with it, or `declined`).
//!
//! Every call is appended to the file named by [`MARKS_ENV`] (`called add`, `started slow`,
//! `cancelled slow`, and `traceparent VALUE` when the call's `_meta` carries one), so a test can
//! see what reached the server.

// Logging and resources/subscribe, which older clients still use, are deprecated by SEP-2577.
#![allow(deprecated)]

use std::io::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequestParams,
    ElicitationAction, ElicitationSchema, GetPromptRequestParams, GetPromptResponse,
    GetPromptResult, Implementation, JsonObject, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, LoggingLevel, LoggingMessageNotificationParam,
    PaginatedRequestParams, ProgressNotificationParam, Prompt, PromptArgument, PromptMessage,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ResourceTemplate, ResourceUpdatedNotificationParam, Role, ServerCapabilities,
    ServerConfig, SetLevelRequestParams, SubscribeRequestParams, Tool, UnsubscribeRequestParams,
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

fn text_result(text: &str) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text.to_owned())])
}

/// The resources of an `offers` role.
fn resources(role: &str) -> Vec<Resource> {
    vec![
        Resource::new(format!("note://{role}/a"), "a").with_mime_type("text/plain"),
        Resource::new(
            format!("note://{role}/odd dir/\u{e9}?q=1#frag"),
            "odd\u{202e}name with spaces/and.dots",
        ),
        Resource::new("file:///shared.txt", "shared"),
    ]
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
            "offers" | "offers2" => vec![
                tool(
                    "log",
                    "Sends a log message",
                    json!({"type": "object", "properties": {"level": {"type": "string"}, "text": {"type": "string"}}}),
                ),
                tool(
                    "touch",
                    "Says a resource changed",
                    json!({"type": "object", "properties": {"uri": {"type": "string"}}}),
                ),
                tool(
                    "change",
                    "Says the resources and prompts changed",
                    no_input(),
                ),
                tool(
                    "ask",
                    "Asks the user a question",
                    json!({"type": "object", "properties": {"question": {"type": "string"}}}),
                ),
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
            (_, "log") => {
                let level: LoggingLevel =
                    serde_json::from_value(args.get("level").cloned().unwrap_or(json!("info")))
                        .unwrap_or(LoggingLevel::Info);
                let text = args.get("text").cloned().unwrap_or(json!(""));
                let _ = context
                    .peer
                    .notify_logging_message(LoggingMessageNotificationParam::new(level, text))
                    .await;
                Ok(text_result("logged"))
            }
            (_, "touch") => {
                let uri = args.get("uri").and_then(Value::as_str).unwrap_or_default();
                let _ = context
                    .peer
                    .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                    .await;
                Ok(text_result("touched"))
            }
            (_, "change") => {
                let _ = context.peer.notify_resource_list_changed().await;
                let _ = context.peer.notify_prompt_list_changed().await;
                Ok(text_result("changed"))
            }
            (_, "ask") => {
                let question = args
                    .get("question")
                    .and_then(Value::as_str)
                    .unwrap_or("?")
                    .to_owned();
                let schema = ElicitationSchema::builder()
                    .required_string("answer")
                    .build()
                    .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
                let asked = context
                    .peer
                    .create_elicitation(ElicitRequestParams::FormElicitationParams {
                        meta: None,
                        message: question,
                        requested_schema: schema,
                    })
                    .await;
                match asked {
                    Ok(answer) if answer.action == ElicitationAction::Accept => {
                        let said = answer
                            .content
                            .as_ref()
                            .and_then(|c| c.get("answer"))
                            .cloned()
                            .unwrap_or(Value::Null);
                        Ok(text_result(&said.to_string()))
                    }
                    Ok(_) => Ok(text_result("\"declined\"")),
                    Err(e) => {
                        mark(&format!("ask failed: {e}"));
                        Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                            "could not ask: {e}"
                        ))]))
                    }
                }
            }
            ("mortal", "die") => {
                eprintln!("mortal: exiting as asked");
                std::process::exit(9);
            }
            (_, other) => Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        }
    }
}

#[allow(deprecated)] // logging and resources/subscribe, which older clients use
impl ServerHandler for Upstream {
    fn get_info(&self) -> ServerConfig {
        let capabilities = if self.role.starts_with("offers") {
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_logging()
                .enable_prompts()
                .enable_prompts_list_changed()
                .enable_resources()
                .enable_resources_subscribe()
                .enable_resources_list_changed()
                .build()
        } else {
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build()
        };
        let mut config = ServerConfig::new(capabilities);
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

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        // One per page, so every page must be read.
        let all = resources(&self.role);
        let at: usize = request
            .and_then(|r| r.cursor)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let mut page =
            ListResourcesResult::with_all_items(all.get(at).cloned().into_iter().collect());
        if at + 1 < all.len() {
            page.next_cursor = Some((at + 1).to_string());
        }
        Ok(page)
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new(format!("note://{}/items/{{id}}", self.role), "item"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri;
        mark(&format!("read {uri}"));
        let listed = resources(&self.role).iter().any(|r| r.uri == uri);
        let item = uri.starts_with(&format!("note://{}/items/", self.role));
        if !listed && !item {
            return Err(ErrorData::resource_not_found(
                format!("no resource {uri}"),
                None,
            ));
        }
        Ok(ReadResourceResult::new(vec![ResourceContents::text(
            format!("{} read {uri}", self.role),
            uri,
        )])
        .into())
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        mark(&format!("subscribe {}", request.uri));
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        mark(&format!("unsubscribe {}", request.uri));
        Ok(())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(ListPromptsResult::with_all_items(vec![Prompt::new(
            "greet",
            Some("Greets someone"),
            Some(vec![PromptArgument::new("name").with_required(true)]),
        )]))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        if request.name != "greet" {
            return Err(ErrorData::invalid_params(
                format!("no prompt {}", request.name),
                None,
            ));
        }
        let name = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("nobody");
        Ok(GetPromptResult::new(vec![PromptMessage::new_text(
            Role::User,
            format!("Hello {name} from {}", self.role),
        )])
        .into())
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let level = serde_json::to_value(request.level).unwrap_or_default();
        mark(&format!("level {}", level.as_str().unwrap_or("?")));
        Ok(())
    }
}
