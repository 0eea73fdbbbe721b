//! What upstream servers offer besides tools, passed through `execbox mcp` to its client:
//! resources (listed, read, templates, subscriptions), prompts, logging, list changes, and an
//! upstream's question during a call (elicitation), with the `offers` roles of
//! `support/mcp_upstream.rs` behind it.

#![allow(deprecated)] // logging and resources/subscribe, which older clients use

use super::*;

use rmcp::model::{
    GetPromptRequestParams, LoggingLevel, LoggingMessageNotificationParam,
    ReadResourceRequestParams, ResourceContents, ResourceUpdatedNotificationParam,
    SetLevelRequestParams, SubscribeRequestParams,
};
use rmcp::service::ServiceError;

/// A client that records what `execbox mcp` tells it and answers questions `answer` (`None`:
/// it declares no elicitation).
#[derive(Clone, Default)]
pub struct Watcher {
    answer: Option<String>,
    questions: Arc<Mutex<Vec<String>>>,
    logs: Arc<Mutex<Vec<(String, String)>>>,
    updated: Arc<Mutex<Vec<String>>>,
    resources_changed: Arc<AtomicUsize>,
    prompts_changed: Arc<AtomicUsize>,
}

impl ClientHandler for Watcher {
    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::default();
        if self.answer.is_some() {
            info.capabilities.elicitation = Some(ElicitationCapability::default());
        }
        info
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        if let ElicitRequestParams::FormElicitationParams { message, .. } = &request {
            self.questions.lock().unwrap().push(message.clone());
        }
        let mut result = ElicitResult::new(ElicitationAction::Accept);
        result.content = Some(json!({ "answer": self.answer.clone().unwrap_or_default() }));
        Ok(result)
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.logs.lock().unwrap().push((
            params.logger.unwrap_or_default(),
            params.data.as_str().unwrap_or_default().to_owned(),
        ));
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.updated.lock().unwrap().push(params.uri);
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.resources_changed.fetch_add(1, Ordering::SeqCst);
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.prompts_changed.fetch_add(1, Ordering::SeqCst);
    }
}

struct Watched {
    client: RunningService<RoleClient, Watcher>,
    _child: Child,
    watcher: Watcher,
}

impl Watched {
    async fn exec(&self, code: &str) -> Result<Answer, String> {
        let params = CallToolRequestParams::new("execute_code")
            .with_arguments(args(json!({ "code": code })));
        let result = tokio::time::timeout(WAIT, self.client.call_tool(params))
            .await
            .map_err(|_| format!("{code}: no answer in time"))?
            .map_err(|e| format!("{code}: {e}"))?;
        Ok(answer(result))
    }

    async fn read(&self, uri: &str) -> Result<Result<String, String>, String> {
        let read = tokio::time::timeout(
            WAIT,
            self.client
                .read_resource(ReadResourceRequestParams::new(uri.to_owned())),
        )
        .await
        .map_err(|_| format!("resources/read {uri}: no answer in time"))?;
        Ok(match read {
            Ok(result) => Ok(match result.contents.first() {
                Some(ResourceContents::TextResourceContents { text, uri, .. }) => {
                    format!("{uri} => {text}")
                }
                other => format!("{other:?}"),
            }),
            Err(ServiceError::McpError(e)) => Err(e.message.to_string()),
            Err(e) => Err(e.to_string()),
        })
    }
}

async fn start_watched(h: &Harness, config: &Path, watcher: Watcher) -> Result<Watched, String> {
    let mut child = h
        .command(&["--config", config.to_str().unwrap()])
        .spawn()
        .map_err(|e| format!("cannot start execbox: {e}"))?;
    let stdout = child.stdout.take().unwrap();
    let stdin = child.stdin.take().unwrap();
    let client = tokio::time::timeout(WAIT, watcher.clone().serve((stdout, stdin)))
        .await
        .map_err(|_| "execbox mcp did not initialize in time".to_string())?
        .map_err(|e| format!("cannot initialize: {e}"))?;
    Ok(Watched {
        client,
        _child: child,
        watcher,
    })
}

use std::path::Path;

pub async fn resources_of_two_upstreams_are_listed_read_and_routed(
    h: Harness,
) -> Result<(), String> {
    let config =
        h.config(json!({"offers": h.upstream("offers"), "offers2": h.upstream("offers2")}));
    let mcp = start_watched(&h, &config, Watcher::default()).await?;
    let caps = mcp.client.peer_info().map(|i| i.capabilities.clone());
    let resources_cap = caps.as_ref().and_then(|c| c.resources.clone());
    check!(
        resources_cap.as_ref().and_then(|r| r.subscribe) == Some(true)
            && resources_cap.as_ref().and_then(|r| r.list_changed) == Some(true),
        "{caps:?}"
    );
    let listed = mcp
        .client
        .list_all_resources()
        .await
        .map_err(|e| format!("resources/list: {e}"))?;
    let pairs: Vec<(String, String)> = listed
        .iter()
        .map(|r| (r.name.clone(), r.uri.clone()))
        .collect();
    // Every page of both servers, each name prefixed; unique URIs as they are, the shared one
    // qualified by each server.
    for (name, uri) in [
        ("offers.a", "note://offers/a"),
        ("offers2.a", "note://offers2/a"),
        ("offers.shared", "execbox://offers/file:///shared.txt"),
        ("offers2.shared", "execbox://offers2/file:///shared.txt"),
        (
            "offers.odd\u{202e}name with spaces/and.dots",
            "note://offers/odd dir/\u{e9}?q=1#frag",
        ),
    ] {
        check!(
            pairs.iter().any(|(n, u)| n == name && u == uri),
            "{name} {uri} in {pairs:?}"
        );
    }
    check!(pairs.len() == 6, "{pairs:?}");
    // Reads go to the server that lists the URI.
    let read = mcp.read("note://offers2/a").await?;
    check!(
        read == Ok("note://offers2/a => offers2 read note://offers2/a".into()),
        "{read:?}"
    );
    let read = mcp.read("note://offers/odd dir/\u{e9}?q=1#frag").await?;
    check!(
        read.as_ref()
            .is_ok_and(|r| r.ends_with("offers read note://offers/odd dir/\u{e9}?q=1#frag")),
        "{read:?}"
    );
    let read = mcp.read("execbox://offers2/file:///shared.txt").await?;
    check!(
        read == Ok(
            "execbox://offers2/file:///shared.txt => offers2 read file:///shared.txt".into()
        ),
        "{read:?}"
    );
    // A URI two servers list, one nobody lists, a namespace nobody has: errors naming them.
    let read = mcp.read("file:///shared.txt").await?;
    check!(
        read.as_ref().is_err_and(
            |e| e.contains("\"file:///shared.txt\" belongs to 2 MCP servers")
                && e.contains("execbox://offers/file:///shared.txt (offers)")
        ),
        "{read:?}"
    );
    let read = mcp.read("nope://x").await?;
    check!(
        read.as_ref()
            .is_err_and(|e| e.contains("no MCP server lists the resource \"nope://x\"")),
        "{read:?}"
    );
    let read = mcp.read("execbox://ghost/note://offers/a").await?;
    check!(
        read.as_ref()
            .is_err_and(|e| e.contains("namespace \"ghost\"") && e.contains("offers, offers2")),
        "{read:?}"
    );
    // Templates: listed with prefixed names; a URI one of them matches goes to its server.
    let templates = mcp
        .client
        .list_all_resource_templates()
        .await
        .map_err(|e| format!("resources/templates/list: {e}"))?;
    check!(
        templates
            .iter()
            .any(|t| t.name == "offers2.item" && t.uri_template == "note://offers2/items/{id}"),
        "{templates:?}"
    );
    let read = mcp.read("note://offers2/items/7").await?;
    check!(
        read == Ok("note://offers2/items/7 => offers2 read note://offers2/items/7".into()),
        "{read:?}"
    );
    Ok(())
}

pub async fn prompts_are_prefixed_and_routed_by_namespace(h: Harness) -> Result<(), String> {
    let config =
        h.config(json!({"offers": h.upstream("offers"), "offers2": h.upstream("offers2")}));
    let mcp = start_watched(&h, &config, Watcher::default()).await?;
    let prompts = mcp
        .client
        .list_all_prompts()
        .await
        .map_err(|e| format!("prompts/list: {e}"))?;
    let names: Vec<&str> = prompts.iter().map(|p| p.name.as_str()).collect();
    check!(
        names.contains(&"offers.greet") && names.contains(&"offers2.greet") && names.len() == 2,
        "{names:?}"
    );
    let mut get = GetPromptRequestParams::new("offers2.greet");
    get.arguments = Some(args(json!({"name": "Ada"})));
    let got = mcp
        .client
        .get_prompt(get)
        .await
        .map_err(|e| format!("prompts/get: {e}"))?;
    let text = serde_json::to_string(&got.messages).unwrap();
    check!(text.contains("Hello Ada from offers2"), "{text}");
    for (name, expected) in [
        ("greet", "the prompt name \"greet\" has no namespace"),
        (
            "ghost.greet",
            "no MCP server with prompts has the namespace \"ghost\"",
        ),
    ] {
        match mcp
            .client
            .get_prompt(GetPromptRequestParams::new(name))
            .await
        {
            Err(ServiceError::McpError(e)) => {
                check!(e.message.contains(expected), "{name}: {}", e.message)
            }
            other => return Err(format!("{name}: {other:?}")),
        }
    }
    Ok(())
}

pub async fn the_log_level_is_applied_and_upstream_messages_forwarded(
    h: Harness,
) -> Result<(), String> {
    let config = h.config(json!({"offers": h.upstream("offers")}));
    let mcp = start_watched(&h, &config, Watcher::default()).await?;
    check!(
        mcp.client
            .peer_info()
            .is_some_and(|i| i.capabilities.logging.is_some()),
        "no logging capability"
    );
    mcp.client
        .set_level(SetLevelRequestParams::new(LoggingLevel::Warning))
        .await
        .map_err(|e| format!("logging/setLevel: {e}"))?;
    check!(
        h.wait_for(|h| h.marks().contains("level warning")).await,
        "{}",
        h.marks()
    );
    mcp.exec("await offers.log({level: 'info', text: 'quiet'}); await offers.log({level: 'error', text: 'loud'})")
        .await?;
    let logs = mcp.watcher.logs.clone();
    check!(
        h.wait_for(|_| !logs.lock().unwrap().is_empty()).await,
        "no log message"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let got = logs.lock().unwrap().clone();
    check!(
        got == vec![("offers".to_owned(), "loud".to_owned())],
        "{got:?}"
    );
    Ok(())
}

pub async fn subscriptions_and_list_changes_reach_the_client(h: Harness) -> Result<(), String> {
    let config = h.config(json!({"offers": h.upstream("offers")}));
    let mcp = start_watched(&h, &config, Watcher::default()).await?;
    mcp.client
        .subscribe(SubscribeRequestParams::new("note://offers/a"))
        .await
        .map_err(|e| format!("resources/subscribe: {e}"))?;
    check!(
        h.marks().contains("subscribe note://offers/a"),
        "{}",
        h.marks()
    );
    mcp.exec("await offers.touch({uri: 'note://offers/a'}); await offers.change()")
        .await?;
    let w = mcp.watcher.clone();
    check!(
        h.wait_for(|_| !w.updated.lock().unwrap().is_empty()
            && w.resources_changed.load(Ordering::SeqCst) > 0
            && w.prompts_changed.load(Ordering::SeqCst) > 0)
            .await,
        "updated {:?}, resources changed {}, prompts changed {}",
        w.updated.lock().unwrap(),
        w.resources_changed.load(Ordering::SeqCst),
        w.prompts_changed.load(Ordering::SeqCst)
    );
    check!(
        *w.updated.lock().unwrap() == vec!["note://offers/a".to_owned()],
        "{:?}",
        w.updated.lock().unwrap()
    );
    Ok(())
}

pub async fn an_upstream_question_reaches_the_client_and_its_answer_goes_back(
    h: Harness,
) -> Result<(), String> {
    let config = h.config(json!({"offers": h.upstream("offers")}));
    let watcher = Watcher {
        answer: Some("blue".into()),
        ..Watcher::default()
    };
    let mcp = start_watched(&h, &config, watcher).await?;
    let answer = mcp
        .exec("return await offers.ask({question: 'Favourite colour?\\u200b'})")
        .await?;
    check!(
        !answer.is_error && answer.result() == &json!("blue"),
        "{} / marks {}",
        answer.text,
        h.marks()
    );
    let questions = mcp.watcher.questions.lock().unwrap().clone();
    check!(
        questions == vec!["[offers] Favourite colour?\\u{200b}".to_owned()],
        "{questions:?}"
    );
    Ok(())
}

pub async fn without_elicitation_an_upstream_question_fails_the_call_saying_so(
    h: Harness,
) -> Result<(), String> {
    let config = h.config(json!({"offers": h.upstream("offers")}));
    let mcp = start_watched(&h, &config, Watcher::default()).await?;
    let answer = mcp
        .exec(
            "try { await offers.ask({question: 'Favourite colour?'}); return 'answered' } \
             catch (e) { return [e.code, e.message] }",
        )
        .await?;
    let result = answer.result().clone();
    check!(result[0] == "tool_error", "{}", answer.text);
    let message = result[1].as_str().unwrap_or_default();
    check!(
        message.contains("\"offers\" asked a question (\"Favourite colour?\")")
            && message.contains("this MCP client cannot answer questions"),
        "{message}"
    );
    Ok(())
}
