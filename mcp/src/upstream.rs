//! The upstream MCP servers: connected at start, their tools turned into ordinary [`Tool`]s of
//! one namespace each, called with cancellation and progress, refreshed on `list_changed`,
//! and stopped (process groups killed) on [`Upstreams::shutdown`].
//!
//! An upstream that fails to start, or dies later, is reported on stderr and in the catalog's
//! index; the others keep working. A dead upstream's tools stay declared, and a call of one
//! fails with `tool_error` saying why, so a program learns what happened instead of finding
//! a function missing.

// Upstream servers still send `notifications/message` (logging), which SEP-2577 deprecates.
#![allow(deprecated)]

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use futures_util::StreamExt as _;
use rmcp::handler::client::progress::ProgressDispatcher;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, CancelledNotificationParam, ClientCapabilities,
    ClientConfig, ClientRequest, ElicitRequestParams, ElicitResult, ElicitationCapability,
    FormElicitationCapability, Implementation, InputRequest, InputRequests, InputResponses,
    LoggingLevel, LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken,
    Request, RequestId, RequestMetaObject, ResourceUpdatedNotificationParam, ServerResult,
    SetLevelRequestParams, UrlElicitationCapability,
};
use rmcp::service::{
    NotificationContext, Peer, PeerRequestOptions, RequestContext, RoleClient, RoleServer,
    RunningService, RunningServiceCancellationToken, ServiceError,
};
use rmcp::{ClientHandler, ErrorData, ServiceExt as _};
use serde_json::Value;
use tokio::sync::{broadcast, mpsc, watch};
use tracing::Instrument as _;

use execbox_host::declarations::shape_of;
use execbox_host::supervisor::ProcessGroup;
use execbox_host::trace;
use execbox_host::{BoxFuture, Provider, Schema, Tool, ToolContext, ToolError, ToolHandler};
use execbox_policy::{ObservedResults, PermissionAliases, Policy};

use super::catalog::{Catalog, NamespaceStatus};
use super::config::{McpConfig, UpstreamConfig, UpstreamPolicy, UpstreamTransport};
use super::content::{one_line, result_value};
use super::elicitation::{ask, ask_upstream_question, Askers, InFlight};
use super::names::ToolNames;
use super::offers::{Notice, Offer};
use super::plain::plain_error;

use super::upstream_process;

/// How long upstreams may take; see [`Upstreams::start`].
#[derive(Debug, Clone)]
pub struct UpstreamOptions {
    /// From starting a server (or connecting to one) to the end of its MCP handshake and
    /// its first `tools/list`. Default 60 s (a first `npx` run downloads the server).
    pub startup_timeout: Duration,
    /// For one refresh of a server's tools after `notifications/tools/list_changed`.
    /// Default 30 s.
    pub list_timeout: Duration,
    /// The policy whose grants name upstream tools (`github:delete_all__2`): each grant of a
    /// server's namespace must name exactly one of its tools, by the name the server lists or
    /// the name `execute_code`'s index shows, else the server is unavailable, saying why.
    pub policy: Option<Policy>,
    /// Where the shape of each tool's last result is kept (in memory by default; in the state
    /// file with [`ObservedResults::open`]), for the declarations `search_tools` shows.
    pub observed: Arc<ObservedResults>,
}

impl Default for UpstreamOptions {
    fn default() -> Self {
        UpstreamOptions {
            startup_timeout: Duration::from_secs(60),
            list_timeout: Duration::from_secs(30),
            policy: None,
            observed: Arc::new(ObservedResults::in_memory()),
        }
    }
}

/// Why the upstreams and the local providers cannot be put together.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamsError {
    /// A local provider has the namespace of an upstream server.
    #[error(
        "the namespace {namespace:?} is both a provider of the tools file and the MCP server \
         {server:?}; rename one"
    )]
    NamespaceTaken {
        /// The namespace.
        namespace: String,
        /// The server's key in the config.
        server: String,
    },
    /// The local providers do not resolve (duplicate names, bad schemas).
    #[error(transparent)]
    Tools(#[from] execbox_host::ToolSetError),
}

/// The state of one upstream server, as [`Upstreams::status`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamStatus {
    /// Its key in the config.
    pub name: String,
    /// Its namespace in the guest.
    pub namespace: String,
    /// How many tools it has (0 when it never started).
    pub tools: usize,
    /// `None` while it works; why it does not otherwise (failed to start, exited...).
    pub unavailable: Option<String>,
}

/// The upstream servers of a config, and the local providers beside them: one catalog of
/// tools that stays current. Cheap to clone (shared).
#[derive(Clone)]
pub struct Upstreams(Arc<Hub>);

struct Hub {
    slots: Vec<Slot>,
    local: Vec<Provider>,
    catalog: RwLock<Arc<Catalog>>,
    changed: watch::Sender<u64>,
    sinks: Arc<ProgressSinks>,
    options: UpstreamOptions,
    /// How many servers have settled (connected or failed) and been published.
    settled: AtomicUsize,
    /// The grants that name an upstream tool by its name in the index.
    aliases: PermissionAliases,
    /// Cancelled by [`Upstreams::shutdown`]: a server still starting then is stopped (its
    /// process group killed) and reported as nothing, for execbox stopped it.
    stopping: tokio_util::sync::CancellationToken,
    /// What the pass-through of resources, prompts, logging and questions shares with every
    /// connection.
    passthrough: Passthrough,
}

/// What every upstream connection shares for the pass-through to the clients of
/// `execbox mcp`: where its announcements go, who answers its questions, the log level.
#[derive(Clone)]
struct Passthrough {
    notices: broadcast::Sender<Notice>,
    askers: Arc<Askers>,
    /// The level the clients asked for, given to each server that declares logging.
    log_level: Arc<Mutex<Option<LoggingLevel>>>,
}

struct Slot {
    config: UpstreamConfig,
    /// `None` while it starts; then connected, or why not.
    link: RwLock<Option<Result<Arc<Link>, String>>>,
}

impl Slot {
    fn link(&self) -> Option<Result<Arc<Link>, String>> {
        self.link.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn ready(&self) -> Option<Arc<Link>> {
        self.link().and_then(Result::ok)
    }
}

enum Event {
    Settled,
    ToolsChanged(usize),
    Died,
}

impl Upstreams {
    /// Connects every server of `config` at once (each within
    /// [`UpstreamOptions::startup_timeout`]) and resolves their tools with `local` providers
    /// (a tools file's); returns once every server is connected or has failed. A server that
    /// cannot be started or reached is reported on stderr and listed as unavailable; it is
    /// not an error. Must be called inside a Tokio runtime.
    pub async fn start(
        config: &McpConfig,
        local: Vec<Provider>,
        options: UpstreamOptions,
    ) -> Result<Upstreams, UpstreamsError> {
        let upstreams = Upstreams::launch(config, local, options)?;
        upstreams.settled().await;
        Ok(upstreams)
    }

    /// Like [`Upstreams::start`], but returns at once, while the servers start: the catalog
    /// lists them as starting until each is connected or has failed (every change is
    /// announced by [`Upstreams::changed`]); [`Upstreams::settled`] waits for all of them.
    /// An MCP server uses it to answer its client's `initialize` without waiting for slow
    /// upstreams.
    pub fn launch(
        config: &McpConfig,
        local: Vec<Provider>,
        options: UpstreamOptions,
    ) -> Result<Upstreams, UpstreamsError> {
        for provider in &local {
            if let Some(server) = config
                .servers
                .iter()
                .find(|s| s.namespace == provider.name())
            {
                return Err(UpstreamsError::NamespaceTaken {
                    namespace: provider.name().to_owned(),
                    server: server.name.clone(),
                });
            }
        }
        let (events, mut event_rx) = mpsc::unbounded_channel();
        let (changed, _) = watch::channel(0);
        let hub = Hub {
            slots: config
                .servers
                .iter()
                .map(|server| Slot {
                    config: server.clone(),
                    link: RwLock::new(None),
                })
                .collect(),
            local,
            catalog: RwLock::new(Arc::new(Catalog::build(
                Vec::new(),
                Vec::new(),
                options.observed.clone(),
            )?)),
            changed,
            sinks: Arc::new(ProgressSinks::default()),
            options,
            settled: AtomicUsize::new(0),
            aliases: PermissionAliases::new(),
            stopping: tokio_util::sync::CancellationToken::new(),
            passthrough: Passthrough {
                notices: broadcast::channel(256).0,
                askers: Arc::new(Askers::default()),
                log_level: Arc::new(Mutex::new(None)),
            },
        };
        let catalog = hub.build()?;
        *hub.catalog.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(catalog);
        let hub = Arc::new(hub);
        for (index, slot) in hub.slots.iter().enumerate() {
            let server = slot.config.clone();
            let events = events.clone();
            let sinks = hub.sinks.clone();
            let options = hub.options.clone();
            let aliases = hub.aliases.clone();
            let weak: Weak<Hub> = Arc::downgrade(&hub);
            let stopping = hub.stopping.clone();
            let passthrough = hub.passthrough.clone();
            tokio::spawn(async move {
                // A shutdown drops a start in progress: its process group is killed with it,
                // and what that does to the start is ours, not the server's failure.
                let link = tokio::select! {
                    link = connect(index, &server, events.clone(), sinks, &options, aliases, stopping.clone(), passthrough) => link,
                    () = stopping.cancelled() => Err("execbox mcp stopped before it started".into()),
                };
                let Some(hub) = weak.upgrade() else { return };
                {
                    let mut slot = hub.slots[index]
                        .link
                        .write()
                        .unwrap_or_else(|e| e.into_inner());
                    match &link {
                        // Started as the shutdown began: stopped here, under the slot's lock,
                        // unless the shutdown found it (it reads the slots after cancelling).
                        Ok(link) if stopping.is_cancelled() => link.abandon(),
                        Ok(_) => {}
                        Err(why) if stopping.is_cancelled() => {
                            tracing::debug!(server = %server.name, "stopped while starting: {why}");
                        }
                        Err(why) => eprintln!(
                            "execbox mcp: upstream {:?} is unavailable: {why}; the other servers \
                             keep working",
                            server.name
                        ),
                    }
                    *slot = Some(link);
                }
                let _ = events.send(Event::Settled);
            });
        }
        let weak: Weak<Hub> = Arc::downgrade(&hub);
        tokio::spawn(async move {
            while let Some(event) = event_rx.recv().await {
                let Some(hub) = weak.upgrade() else { return };
                hub.handle(event).await;
            }
        });
        Ok(Upstreams(hub))
    }

    /// Waits until every server is connected or has failed (at most about the startup
    /// timeout after [`Upstreams::launch`]).
    pub async fn settled(&self) {
        let mut changed = self.changed();
        while self.0.settled.load(Ordering::SeqCst) < self.0.slots.len() {
            if changed.changed().await.is_err() {
                return;
            }
        }
    }

    /// The current tools and their index.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.0
            .catalog
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The grants of [`UpstreamOptions::policy`] that name an upstream tool by its name in
    /// the index rather than the server's: give them to the enforcement
    /// ([`Enforcement::with_permission_aliases`](execbox_policy::Enforcement::with_permission_aliases))
    /// so that they hold the tool's permission. Kept current as tools change.
    pub fn permission_aliases(&self) -> PermissionAliases {
        self.0.aliases.clone()
    }

    /// The current tool set (upstream namespaces and local providers).
    pub fn tools(&self) -> execbox_host::ToolSet {
        self.catalog().tools().clone()
    }

    /// Every upstream server's state, in config order.
    pub fn status(&self) -> Vec<UpstreamStatus> {
        self.0
            .slots
            .iter()
            .map(|slot| {
                let (tools, unavailable) = match slot.link() {
                    Some(Ok(link)) => (link.tool_count(), link.dead_reason()),
                    Some(Err(why)) => (0, Some(why)),
                    None => (0, Some("still starting".into())),
                };
                UpstreamStatus {
                    name: slot.config.name.clone(),
                    namespace: slot.config.namespace.clone(),
                    tools,
                    unavailable,
                }
            })
            .collect()
    }

    /// Changes (its value counts them) whenever the tools or an upstream's state change.
    pub fn changed(&self) -> watch::Receiver<u64> {
        self.0.changed.subscribe()
    }

    /// Stops every upstream: closes its connection, gives a process a second to exit, then
    /// kills its process group; one still starting is stopped at once. Calls in flight fail.
    /// Nothing it stops is reported as having failed.
    pub async fn shutdown(&self) {
        // First: a server that finishes starting from now on stops itself (see `launch`).
        self.0.stopping.cancel();
        let links: Vec<Arc<Link>> = self.0.slots.iter().filter_map(Slot::ready).collect();
        for link in &links {
            link.stopping.store(true, Ordering::SeqCst);
            if let Some(stop) = lock(&link.stop).take() {
                stop.cancel();
            }
        }
        let waits = links
            .iter()
            .filter_map(|link| link.exit.clone())
            .map(|mut exit| async move {
                let _ =
                    tokio::time::timeout(Duration::from_secs(1), exit.wait_for(Option::is_some))
                        .await;
            });
        futures_util::future::join_all(waits).await;
        for link in &links {
            if let Some(group) = &link.group {
                group.kill();
            }
        }
    }

    /// Every upstream connected and alive, for the pass-through of resources and prompts.
    pub(crate) fn offers(&self) -> Vec<Offer> {
        self.0
            .slots
            .iter()
            .filter_map(Slot::ready)
            .filter(|link| link.dead_reason().is_none())
            .map(|link| Offer {
                namespace: link.namespace.clone(),
                name: link.name.clone(),
                capabilities: link
                    .peer
                    .peer_info()
                    .map(|info| info.capabilities.clone())
                    .unwrap_or_default(),
                peer: link.peer.clone(),
            })
            .collect()
    }

    /// Whether any upstream MCP server is configured (a tools file alone has none).
    pub(crate) fn has_servers(&self) -> bool {
        !self.0.slots.is_empty()
    }

    /// What the upstreams announce: list changes, resource updates, log messages.
    pub(crate) fn notices(&self) -> broadcast::Receiver<Notice> {
        self.0.passthrough.notices.subscribe()
    }

    /// Where the questions of executions' upstream calls go.
    pub(crate) fn askers(&self) -> Arc<Askers> {
        self.0.passthrough.askers.clone()
    }

    /// Sets the log level of every server that declares logging, now and when one starts
    /// later; a server that refuses is named on stderr.
    pub(crate) async fn set_log_level(&self, level: LoggingLevel) {
        *lock(&self.0.passthrough.log_level) = Some(level);
        let sets = self
            .offers()
            .into_iter()
            .filter(Offer::logging)
            .map(|offer| async move {
                let set = offer.peer.set_level(SetLevelRequestParams::new(level));
                match tokio::time::timeout(Duration::from_secs(10), set).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        eprintln!("execbox mcp: {}", offer.failed("logging/setLevel", &e))
                    }
                    Err(_) => eprintln!(
                        "execbox mcp: upstream {:?} did not answer logging/setLevel within 10s",
                        offer.name
                    ),
                }
            });
        futures_util::future::join_all(sets).await;
    }

    /// Registers where the progress of execution `execution_id`'s upstream calls goes: the
    /// MCP client that asked for it, under its progress token. Unregistered when the guard
    /// drops.
    pub(crate) fn forward_progress(
        &self,
        execution_id: &str,
        peer: Peer<RoleServer>,
        token: ProgressToken,
    ) -> ProgressRegistration {
        let sink = Arc::new(ProgressSink {
            peer,
            token,
            sent: AtomicU64::new(0),
        });
        lock(&self.0.sinks.0).insert(execution_id.to_owned(), sink);
        ProgressRegistration {
            sinks: self.0.sinks.clone(),
            execution_id: execution_id.to_owned(),
        }
    }
}

impl Hub {
    fn build(&self) -> Result<Catalog, execbox_host::ToolSetError> {
        let mut providers = Vec::new();
        let mut unavailable = Vec::new();
        for slot in &self.slots {
            let source = format!("MCP server {:?}", slot.config.name);
            match slot.link() {
                Some(Ok(link)) => providers.push((
                    link.provider(),
                    NamespaceStatus {
                        namespace: slot.config.namespace.clone(),
                        source,
                        unavailable: link.dead_reason(),
                        starting: false,
                        upstream: true,
                    },
                )),
                Some(Err(why)) => unavailable.push(NamespaceStatus {
                    namespace: slot.config.namespace.clone(),
                    source,
                    unavailable: Some(why),
                    starting: false,
                    upstream: true,
                }),
                None => unavailable.push(NamespaceStatus {
                    namespace: slot.config.namespace.clone(),
                    source,
                    unavailable: Some("still starting".into()),
                    starting: true,
                    upstream: true,
                }),
            }
        }
        for provider in &self.local {
            providers.push((
                provider.clone(),
                NamespaceStatus {
                    namespace: provider.name().to_owned(),
                    source: "tools file".into(),
                    unavailable: None,
                    starting: false,
                    upstream: false,
                },
            ));
        }
        Catalog::build(providers, unavailable, self.options.observed.clone())
    }

    /// Rebuilds the catalog and announces it.
    fn publish(&self) {
        self.rebuild();
        self.changed.send_modify(|n| *n += 1);
    }

    /// Rebuilds the catalog, or keeps the previous one (saying why) if it cannot be built.
    fn rebuild(&self) {
        match self.build() {
            Ok(catalog) => {
                *self.catalog.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(catalog);
            }
            Err(e) => eprintln!("execbox mcp: keeping the previous tool list: {e}"),
        }
    }

    async fn handle(&self, event: Event) {
        match event {
            Event::ToolsChanged(index) => {
                let Some(link) = self.slots.get(index).and_then(Slot::ready) else {
                    return;
                };
                match tokio::time::timeout(self.options.list_timeout, link.list_tools()).await {
                    Ok(Ok(count)) => {
                        tracing::info!(server = %link.name, tools = count, "tools changed");
                    }
                    Ok(Err(why)) => {
                        eprintln!(
                            "execbox mcp: upstream {:?} said its tools changed, but listing \
                             them failed: {why}; keeping the previous list",
                            link.name
                        );
                        return;
                    }
                    Err(_) => {
                        eprintln!(
                            "execbox mcp: upstream {:?} said its tools changed, but did not list \
                             them within {}s; keeping the previous list",
                            link.name,
                            self.options.list_timeout.as_secs()
                        );
                        return;
                    }
                }
                self.publish();
            }
            Event::Died => self.publish(),
            Event::Settled => {
                // Counted only once its catalog is in place, and announced after: a waiter of
                // `settled` that sees the count sees the catalog.
                self.rebuild();
                self.settled.fetch_add(1, Ordering::SeqCst);
                self.changed.send_modify(|n| *n += 1);
            }
        }
    }
}

/// A connected upstream server.
struct Link {
    name: String,
    /// The `mcp.json` it comes from (named in what to do about a sign-in).
    source: std::path::PathBuf,
    namespace: String,
    /// What the policy adds to each tool (`mcp.json`'s `rateLimit`, `requireApproval`).
    policy: UpstreamPolicy,
    /// The policy file's policy, whose grants may name this server's tools.
    grants: Option<Policy>,
    aliases: PermissionAliases,
    peer: Peer<RoleClient>,
    progress: ProgressDispatcher,
    description: Option<String>,
    tools: Mutex<Vec<Tool>>,
    dead: Mutex<Option<String>>,
    stopping: AtomicBool,
    stop: Mutex<Option<RunningServiceCancellationToken>>,
    group: Option<Arc<ProcessGroup>>,
    exit: Option<watch::Receiver<Option<String>>>,
    sinks: Arc<ProgressSinks>,
    /// Where the shape of each result goes.
    observed: Arc<ObservedResults>,
    /// Its tool calls in flight, to which its questions belong.
    inflight: Arc<InFlight>,
    /// Who answers the questions of each execution's calls.
    askers: Arc<Askers>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Link {
    fn dead_reason(&self) -> Option<String> {
        lock(&self.dead).clone()
    }

    fn tool_count(&self) -> usize {
        lock(&self.tools).len()
    }

    fn provider(&self) -> Provider {
        let mut provider = Provider::new(&self.namespace);
        if let Some(description) = &self.description {
            provider = provider.description(description);
        }
        for tool in lock(&self.tools).iter() {
            provider = provider.tool(tool.clone());
        }
        provider
    }

    /// Lists every page of the server's tools and keeps them as [`Tool`]s; returns how many.
    async fn list_tools(self: &Arc<Self>) -> Result<usize, String> {
        let listed =
            self.peer
                .list_all_tools()
                .await
                .map_err(|e| match self.sign_in_advice(&e) {
                    Some(advice) => advice,
                    None => format!("tools/list failed: {}", service_error_text(&e)),
                })?;
        let mut seen = HashSet::new();
        let mut kept = Vec::with_capacity(listed.len());
        for t in listed {
            let name = t.name.to_string();
            if !seen.insert(name.clone()) {
                eprintln!(
                    "execbox mcp: upstream {:?} lists the tool {name:?} twice; keeping the first",
                    self.name
                );
                continue;
            }
            kept.push(t);
        }
        // `requireApproval` and the policy's grants each reach exactly one tool, by the name
        // the server lists or the name the index shows; anything else fails the listing.
        let names = ToolNames::new(kept.iter().map(|t| t.name.to_string()).collect());
        let approvals = names.approvals(&self.policy.require_approval)?;
        let aliases = match &self.grants {
            Some(policy) => names.grant_aliases(&self.namespace, policy.exact_grants())?,
            None => Vec::new(),
        };
        let tools: Vec<Tool> = kept
            .into_iter()
            .zip(approvals)
            .map(|(t, approval)| self.tool(t, approval))
            .collect();
        self.aliases.replace_group(&self.namespace, aliases);
        let count = tools.len();
        *lock(&self.tools) = tools;
        Ok(count)
    }

    /// One upstream tool as a [`Tool`]: its schemas (when they compile), its description;
    /// `approval`: whether `requireApproval` names it.
    fn tool(self: &Arc<Self>, t: rmcp::model::Tool, approval: bool) -> Tool {
        let name = t.name.to_string();
        let handler = UpstreamTool {
            link: self.clone(),
            name: name.clone(),
        };
        // Policy: the tool needs `namespace:tool`; the server's limits and approvals apply.
        let mut tool = Tool::from_handler(name.clone(), handler)
            .permissions([format!("{}:{name}", self.namespace)])
            .requires_approval(approval);
        if let Some(limit) = self.policy.rate_limit {
            tool = tool.rate_limit(limit);
        }
        let description = t
            .description
            .as_deref()
            .map(str::to_owned)
            .or_else(|| t.title.clone())
            .or_else(|| t.annotations.as_ref().and_then(|a| a.title.clone()));
        if let Some(description) = description.filter(|d| !d.trim().is_empty()) {
            tool = tool.description(description);
        }
        let checked = |schema: Value, which: &str| match Schema::compile(&schema) {
            Ok(_) => Some(schema),
            Err(why) => {
                eprintln!(
                    "execbox mcp: upstream {:?}, tool {name:?}: its {which} schema does not \
                     compile ({why}); it is not checked by execbox",
                    self.name
                );
                None
            }
        };
        if let Some(schema) = checked(optional_input(&t.input_schema), "input") {
            tool = tool.input_schema(schema);
        }
        if let Some(output) = t.output_schema {
            if let Some(schema) = checked(Value::Object((*output).clone()), "output") {
                tool = tool.output_schema(schema);
            }
        }
        tool
    }

    fn mark_dead(&self, reason: String) {
        let mut dead = lock(&self.dead);
        if dead.is_none() {
            *dead = Some(reason);
        }
    }

    /// Gives up on a server that connected but cannot be used: stops its client and kills
    /// its process group.
    fn abandon(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        if let Some(stop) = lock(&self.stop).take() {
            stop.cancel();
        }
        if let Some(group) = &self.group {
            group.kill();
        }
    }

    fn unavailable(&self, why: &str) -> ToolError {
        ToolError::tool(format!(
            "the MCP server {:?} is unavailable: {why}",
            self.name
        ))
    }
}

/// An input schema that requires no property also accepts no input (`await ns.tool()`, sent
/// upstream without arguments): its `"type": "object"` becomes `["object", "null"]`.
fn optional_input(schema: &rmcp::model::JsonObject) -> Value {
    let mut schema = schema.clone();
    let requires = schema
        .get("required")
        .and_then(Value::as_array)
        .is_some_and(|r| !r.is_empty());
    if !requires && schema.get("type").and_then(Value::as_str) == Some("object") {
        schema.insert("type".into(), serde_json::json!(["object", "null"]));
    }
    Value::Object(schema)
}

/// What an upstream tool's handler holds: the link and the tool's name upstream.
struct UpstreamTool {
    link: Arc<Link>,
    name: String,
}

impl ToolHandler for UpstreamTool {
    fn call(&self, input: Value, ctx: ToolContext) -> BoxFuture<Result<Value, ToolError>> {
        let span = tracing::info_span!(
            target: trace::TARGET,
            "execbox.mcp.upstream_call",
            otel.kind = "client",
            execbox.upstream = %self.link.namespace,
            execbox.tool = %format_args!("{}.{}", self.link.namespace, self.name),
            execbox.execution_id = %ctx.execution_id,
            execbox.principal = ctx.principal.as_deref(),
            execbox.outcome = tracing::field::Empty,
            execbox.duration_ms = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        let (link, name) = (self.link.clone(), self.name.clone());
        Box::pin(
            async move {
                let started = std::time::Instant::now();
                // Made here, not captured: a future captured and then awaited would be laid
                // out twice in this one.
                let result = call(link, name, input, ctx).await;
                trace::record_outcome(
                    &tracing::Span::current(),
                    result.as_ref().err().map(|e| e.code.as_str()),
                    started.elapsed().as_millis() as u64,
                );
                result
            }
            .instrument(span),
        )
    }
}

async fn call(
    link: Arc<Link>,
    name: String,
    input: Value,
    ctx: ToolContext,
) -> Result<Value, ToolError> {
    if let Some(why) = link.dead_reason() {
        return Err(link.unavailable(&format!("it {why}")));
    }
    let arguments = match input {
        Value::Object(map) => Some(map),
        Value::Null => None,
        other => {
            return Err(ToolError::validation(format!(
                "the input of an MCP tool must be an object; got {}",
                one_line(&other.to_string(), 80)
            )))
        }
    };
    let mut params = CallToolRequestParams::new(name.clone());
    params.arguments = arguments;
    let label = format!("{}.{}", link.namespace, name);
    let sink = lock(&link.sinks.0).get(&ctx.execution_id).cloned();
    let mut rounds = 0;
    let value = loop {
        match call_once(&link, params.clone(), &ctx, &label, sink.as_deref()).await? {
            ServerResult::CallToolResult(result) => break call_result_value(result)?,
            // MCP 2026-07-28: the server asks in its answer, and is called again with the
            // answers.
            ServerResult::InputRequiredResult(asked) => {
                rounds += 1;
                if rounds > MAX_INPUT_ROUNDS {
                    return Err(ToolError::tool(format!(
                        "the MCP server {:?} asked for more input {MAX_INPUT_ROUNDS} times in \
                         one call; execbox gave up",
                        link.name
                    )));
                }
                // Boxed, as is every path a plain call does not take: the call's future is
                // moved into a task of its own, so its size is paid on each call.
                params.input_responses =
                    Some(Box::pin(answer_input_requests(&link, &ctx, asked.input_requests)).await?);
                params.request_state = asked.request_state;
            }
            ServerResult::CreateTaskResult(_) => {
                return Err(ToolError::tool(
                    "the MCP server started a task instead of answering, which execbox does \
                     not support yet",
                ))
            }
            other => break result_value(result_json(other)?)?,
        }
    };
    let shape = shape_of(&value, MAX_OBSERVED_SHAPE_CHARS);
    if let Err(e) = link.observed.record(&link.namespace, &name, &shape) {
        tracing::warn!(tool = %label, "cannot keep the shape of the result: {e}");
    }
    Ok(value)
}

/// The guest's value for a `CallToolResult`: its structured content as it is, when it has
/// some and is not an error (what [`result_value`] gives, without turning the whole result into
/// JSON first); else [`result_value`] of its JSON.
fn call_result_value(mut result: CallToolResult) -> Result<Value, ToolError> {
    if result.is_error != Some(true) {
        if let Some(structured) = result.structured_content.take().filter(|v| !v.is_null()) {
            return Ok(structured);
        }
    }
    result_value(result_json(result)?)
}

/// An upstream's result as JSON.
fn result_json(result: impl serde::Serialize) -> Result<Value, ToolError> {
    serde_json::to_value(result).map_err(|e| {
        ToolError::tool(format!(
            "the MCP server's result cannot be read as JSON: {e}"
        ))
    })
}

/// The most rounds of questions an upstream may ask in its answers to one call.
const MAX_INPUT_ROUNDS: usize = 8;

/// One `tools/call` request of a call: its answer, with progress forwarded to `sink`. A call
/// that failed after one of its questions was refused fails saying why.
async fn call_once(
    link: &Arc<Link>,
    params: CallToolRequestParams,
    ctx: &ToolContext,
    label: &str,
    sink: Option<&ProgressSink>,
) -> Result<ServerResult, ToolError> {
    // Boxed: the SDK's future is large, and would be laid out beside the wait below.
    let handle = Box::pin(link.peer.send_request_with_option(
        ClientRequest::CallToolRequest(Request::new(params)),
        request_options(),
    ))
    .await
    .map_err(|e| link.call_error(&e))?;
    // From here on, being dropped (the execution was cancelled, or ended without awaiting
    // this call) tells the server to stop.
    let mut guard = CancelOnDrop {
        peer: Some(link.peer.clone()),
        id: handle.id.clone(),
    };
    // Its questions go to the client of this execution until it ends.
    let asking = link.inflight.start(handle.id.clone(), &ctx.execution_id);
    let mut progress = link.progress.subscribe(handle.progress_token.clone()).await;
    let response = {
        // Boxed too: the SDK's wait for the answer is as large as the request's future.
        let mut wait = Box::pin(handle.await_response());
        loop {
            tokio::select! {
                response = &mut wait => break response,
                Some(update) = progress.next() => {
                    if let Some(sink) = sink {
                        Box::pin(sink.forward(label, &update)).await;
                    }
                }
            }
        }
    };
    guard.peer = None;
    let refused = |e: ToolError| match asking.refusal() {
        Some(why) => ToolError::tool(why),
        None => e,
    };
    let response = response.map_err(|e| refused(link.call_error(&e)))?;
    if let (ServerResult::CallToolResult(result), Some(why)) = (&response, asking.refusal()) {
        if result.is_error == Some(true) {
            return Err(ToolError::tool(why));
        }
    }
    Ok(response)
}

/// Answers the questions of an upstream's `InputRequiredResult` by asking the client of the
/// execution, one by one; a question it cannot answer fails the call saying why.
async fn answer_input_requests(
    link: &Link,
    ctx: &ToolContext,
    requests: Option<InputRequests>,
) -> Result<InputResponses, ToolError> {
    let asker = link.askers.get(&ctx.execution_id);
    let mut responses = InputResponses::new();
    for (key, request) in requests.unwrap_or_default() {
        let InputRequest::Elicitation(request) = request else {
            return Err(ToolError::tool(format!(
                "the MCP server {:?} asked for input other than a question (sampling or \
                 roots), which execbox does not offer",
                link.name
            )));
        };
        let Some(asker) = &asker else {
            return Err(ToolError::tool(format!(
                "the MCP server {:?} asked a question, and nobody can answer it here",
                link.name
            )));
        };
        let answer = ask(
            &link.name,
            asker,
            request.params,
            Vec::new(),
            tokio_util::sync::CancellationToken::new(),
        )
        .await
        .map_err(|refusal| ToolError::tool(refusal.text()))?;
        let answer = serde_json::to_value(answer)
            .map_err(|e| ToolError::tool(format!("the client's answer cannot be sent: {e}")))?;
        responses.insert(key, answer);
    }
    Ok(responses)
}

/// The options of a tool call upstream: our `traceparent` in `_meta` when traces are
/// exported, so that the server's spans join our trace.
fn request_options() -> PeerRequestOptions {
    let options = PeerRequestOptions::no_options();
    match trace::current() {
        Some(traceparent) => {
            let mut meta = RequestMetaObject::new();
            meta.set_traceparent(traceparent);
            options.with_meta(meta)
        }
        None => options,
    }
}

/// The longest observed result shape kept for a tool, in characters.
const MAX_OBSERVED_SHAPE_CHARS: usize = 300;

impl Link {
    fn call_error(&self, error: &ServiceError) -> ToolError {
        match error {
            ServiceError::McpError(e) => ToolError::tool(format!(
                "the MCP server {:?} answered with error {}: {}",
                self.name,
                e.code.0,
                one_line(&e.message, 500)
            )),
            ServiceError::TransportClosed => match self.dead_reason() {
                Some(why) => self.unavailable(&format!("it {why}")),
                None => self.unavailable("its connection closed"),
            },
            other => match self.sign_in_advice(other) {
                Some(advice) => ToolError::tool(advice),
                None => self.unavailable(&service_error_text(other)),
            },
        }
    }

    /// What to do when a request failed for want of a sign-in or scope (see `oauth`).
    fn sign_in_advice(&self, error: &ServiceError) -> Option<String> {
        crate::oauth::session::explain(error, &self.name, &self.source)
    }
}

fn service_error_text(error: &ServiceError) -> String {
    match error {
        ServiceError::McpError(e) => format!("error {}: {}", e.code.0, one_line(&e.message, 500)),
        other => plain_error(other, 500),
    }
}

/// Sends `notifications/cancelled` for a request when dropped while armed.
struct CancelOnDrop {
    peer: Option<Peer<RoleClient>>,
    id: RequestId,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(peer) = self.peer.take() else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let id = self.id.clone();
        runtime.spawn(async move {
            let cancelled = CancelledNotificationParam::new(
                Some(id),
                Some("the execution that made this call was cancelled".into()),
            );
            let _ = peer.notify_cancelled(cancelled).await;
        });
    }
}

/// Where each execution's progress goes, by execution id.
#[derive(Default)]
pub(crate) struct ProgressSinks(Mutex<HashMap<String, Arc<ProgressSink>>>);

pub(crate) struct ProgressSink {
    peer: Peer<RoleServer>,
    token: ProgressToken,
    sent: AtomicU64,
}

impl ProgressSink {
    /// Forwards one upstream progress update: the client's progress counts updates (it must
    /// increase, and several calls may report at once), the message says which tool and how
    /// far it is.
    async fn forward(&self, label: &str, update: &ProgressNotificationParam) {
        let n = self.sent.fetch_add(1, Ordering::SeqCst) + 1;
        let how_far = match update.total {
            Some(total) => format!("{}/{}", update.progress, total),
            None => format!("{}", update.progress),
        };
        let message = match &update.message {
            Some(m) => format!("{label}: {} ({how_far})", one_line(m, 200)),
            None => format!("{label}: {how_far}"),
        };
        let param =
            ProgressNotificationParam::new(self.token.clone(), n as f64).with_message(message);
        let _ = self.peer.notify_progress(param).await;
    }
}

/// Removes an execution's progress sink when dropped.
pub(crate) struct ProgressRegistration {
    sinks: Arc<ProgressSinks>,
    execution_id: String,
}

impl Drop for ProgressRegistration {
    fn drop(&mut self) {
        lock(&self.sinks.0).remove(&self.execution_id);
    }
}

/// The client side of one upstream connection.
#[derive(Clone)]
struct UpstreamClient {
    index: usize,
    name: String,
    namespace: String,
    events: mpsc::UnboundedSender<Event>,
    progress: ProgressDispatcher,
    passthrough: Passthrough,
    inflight: Arc<InFlight>,
}

impl ClientHandler for UpstreamClient {
    fn get_info(&self) -> ClientConfig {
        // Questions during a call are taken to the client whose program made it.
        let mut capabilities = ClientCapabilities::default();
        let mut elicitation = ElicitationCapability::new();
        elicitation.form = Some(FormElicitationCapability::default());
        elicitation.url = Some(UrlElicitationCapability::new());
        capabilities.elicitation = Some(elicitation);
        // The newest version with an `initialize` handshake, the one the official TypeScript
        // SDK (most servers) speaks; the Rust SDK's default, 2026-07-28, is a revision without
        // the handshake, which clients and servers of 2025 do not know.
        ClientConfig::new(
            capabilities,
            Implementation::new("execbox", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(rmcp::model::ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        ask_upstream_question(
            &self.name,
            &self.inflight,
            &self.passthrough.askers,
            request,
            context,
        )
        .await
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.passthrough.notices.send(Notice::ResourcesChanged);
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.passthrough.notices.send(Notice::PromptsChanged);
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.passthrough.notices.send(Notice::ResourceUpdated {
            namespace: self.namespace.clone(),
            uri: params.uri,
        });
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.handle_notification(params).await;
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.events.send(Event::ToolsChanged(self.index));
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let data = match &params.data {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        eprintln!(
            "[{}] {:?}: {}",
            self.name,
            params.level,
            one_line(&data, 2000)
        );
        let _ = self.passthrough.notices.send(Notice::Log {
            namespace: self.namespace.clone(),
            message: params,
        });
    }
}

/// Connects to one server and lists its tools; `Err` says why not, for a person.
#[allow(clippy::too_many_arguments)]
async fn connect(
    index: usize,
    config: &UpstreamConfig,
    events: mpsc::UnboundedSender<Event>,
    sinks: Arc<ProgressSinks>,
    options: &UpstreamOptions,
    aliases: PermissionAliases,
    stopping: tokio_util::sync::CancellationToken,
    passthrough: Passthrough,
) -> Result<Arc<Link>, String> {
    let inflight = Arc::new(InFlight::default());
    let log_level = passthrough.log_level.clone();
    let askers = passthrough.askers.clone();
    let client = UpstreamClient {
        index,
        name: config.name.clone(),
        namespace: config.namespace.clone(),
        events: events.clone(),
        progress: ProgressDispatcher::new(),
        passthrough,
        inflight: inflight.clone(),
    };
    let progress = client.progress.clone();
    let timeout = options.startup_timeout;
    let deadline = tokio::time::Instant::now() + timeout;
    let Connected {
        running,
        group,
        exit,
    } = match &config.transport {
        UpstreamTransport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let spawned =
                upstream_process::spawn(&config.name, command, args, env, cwd.as_deref()).await?;
            handshake_stdio(client, spawned, deadline, timeout).await?
        }
        UpstreamTransport::Http {
            url,
            headers,
            oauth,
        } => {
            let http = HttpUpstream {
                name: &config.name,
                source: &config.source,
                url,
                headers,
                oauth: oauth.as_ref(),
            };
            connect_http(client, http, deadline, timeout).await?
        }
    };
    let link = Arc::new(Link {
        name: config.name.clone(),
        source: config.source.clone(),
        namespace: config.namespace.clone(),
        policy: config.policy.clone(),
        grants: options.policy.clone(),
        aliases,
        peer: running.peer().clone(),
        progress,
        description: server_description(running.peer()),
        tools: Mutex::new(Vec::new()),
        dead: Mutex::new(None),
        stopping: AtomicBool::new(false),
        stop: Mutex::new(Some(running.cancellation_token())),
        group,
        exit,
        sinks,
        observed: options.observed.clone(),
        inflight,
        askers,
    });
    let listed = tokio::time::timeout_at(deadline, link.list_tools()).await;
    let failure = match listed {
        Ok(Ok(_)) => None,
        Ok(Err(why)) => Some(why),
        Err(_) => Some(too_slow(timeout)),
    };
    if let Some(why) = failure {
        link.abandon();
        return Err(why);
    }
    // A level the clients set before this server started.
    let logs = link
        .peer
        .peer_info()
        .is_some_and(|info| info.capabilities.logging.is_some());
    let level = *lock(&log_level);
    if let (Some(level), true) = (level, logs) {
        let set = link.peer.set_level(SetLevelRequestParams::new(level));
        let _ = tokio::time::timeout_at(deadline, set).await;
    }
    watch_connection(running, &link, events, stopping);
    Ok(link)
}

/// A server whose MCP handshake is done: the running client, and for a stdio server its
/// process group and how it exited (once it has).
struct Connected {
    running: RunningService<RoleClient, UpstreamClient>,
    group: Option<Arc<ProcessGroup>>,
    exit: Option<watch::Receiver<Option<String>>>,
}

/// Why a server that did not get going within `timeout` is given up.
fn too_slow(timeout: Duration) -> String {
    format!(
        "did not complete the MCP handshake and tools/list within {}s",
        timeout.as_secs_f64()
    )
}

/// The MCP handshake over the stdio of a server just started, by `deadline`. On failure its
/// group is killed, and the error says why, by how it exited when it did, and names a line
/// it printed on stdout that is not JSON-RPC.
async fn handshake_stdio(
    client: UpstreamClient,
    spawned: upstream_process::Spawned,
    deadline: tokio::time::Instant,
    timeout: Duration,
) -> Result<Connected, String> {
    let mut exit = spawned.exit.clone();
    let garbage = spawned.garbage.clone();
    let group = spawned.group.clone();
    let served =
        tokio::time::timeout_at(deadline, client.serve((spawned.stdout, spawned.stdin))).await;
    let explain = |why: String| {
        let garbage = lock(&garbage).clone();
        match garbage {
            Some(line) => format!(
                "{why}; it printed {line:?} on stdout, which is not JSON-RPC (an MCP \
                 server must log to stderr)"
            ),
            None => why,
        }
    };
    match served {
        Ok(Ok(running)) => Ok(Connected {
            running,
            group: Some(group),
            exit: Some(spawned.exit),
        }),
        failed => {
            // An exit explains a failed handshake best.
            let _ =
                tokio::time::timeout(Duration::from_millis(500), exit.wait_for(Option::is_some))
                    .await;
            group.kill();
            let exited = exit.borrow().clone();
            Err(explain(match (exited, failed) {
                (Some(how), _) => format!("{how} before completing the MCP handshake"),
                (None, Ok(Err(e))) => {
                    format!("the MCP handshake failed: {}", initialize_error(&e))
                }
                (None, _) => too_slow(timeout),
            }))
        }
    }
}

/// What [`connect_http`] needs of an HTTP server's configuration.
struct HttpUpstream<'a> {
    name: &'a str,
    source: &'a std::path::Path,
    url: &'a str,
    headers: &'a [(String, String)],
    oauth: Option<&'a crate::oauth::OAuthConfig>,
}

/// The MCP handshake with a streamable HTTP server, by `deadline`: signed with its tokens
/// when it has a sign-in or client credentials (see `oauth`).
async fn connect_http(
    client: UpstreamClient,
    server: HttpUpstream<'_>,
    deadline: tokio::time::Instant,
    timeout: Duration,
) -> Result<Connected, String> {
    use crate::http_client::Tolerant;
    use crate::oauth::session::{self, Signed};
    let url = server.url;
    let auth = tokio::time::timeout_at(deadline, session::prepare(url, server.oauth))
        .await
        .map_err(|_| too_slow(timeout))?
        .map_err(|why| format!("cannot sign in to {url}: {why}"))?;
    let http = Tolerant(crate::http_client::reqwest_client()?);
    let config = http_config(url, server.headers)?;
    let served = match auth {
        Some(auth) => {
            let transport = rmcp::transport::StreamableHttpClientTransport::with_client(
                Signed::new(http, auth),
                config,
            );
            tokio::time::timeout_at(deadline, client.serve(transport)).await
        }
        None => {
            let transport =
                rmcp::transport::StreamableHttpClientTransport::with_client(http, config);
            tokio::time::timeout_at(deadline, client.serve(transport)).await
        }
    };
    match served {
        Ok(Ok(running)) => Ok(Connected {
            running,
            group: None,
            exit: None,
        }),
        Ok(Err(e)) => Err(auth_error(&e, &server)
            .unwrap_or_else(|| format!("cannot connect to {url}: {}", initialize_error(&e)))),
        Err(_) => Err(too_slow(timeout)),
    }
}

/// What to do when the handshake failed for want of a sign-in or scope.
fn auth_error(
    error: &rmcp::service::ClientInitializeError,
    server: &HttpUpstream<'_>,
) -> Option<String> {
    match error {
        rmcp::service::ClientInitializeError::TransportError { error, .. } => {
            crate::oauth::session::explain(error.error.as_ref(), server.name, server.source)
        }
        _ => None,
    }
}

/// Why the MCP handshake failed, in plain words: for a transport failure, its cause
/// (`tcp connect error: Connection refused (os error 111)`), which the SDK's own message
/// leaves out.
fn initialize_error(error: &rmcp::service::ClientInitializeError) -> String {
    match error {
        rmcp::service::ClientInitializeError::TransportError { error, .. } => {
            use rmcp::transport::streamable_http_client::StreamableHttpError;
            // The HTTP client's error is not the transport error's source: reach it here.
            match error
                .error
                .downcast_ref::<StreamableHttpError<reqwest::Error>>()
            {
                Some(StreamableHttpError::Client(e)) => plain_error(e, 500),
                _ => plain_error(error.error.as_ref(), 500),
            }
        }
        other => plain_error(other, 500),
    }
}

/// What a server says about itself, for its namespace's description: its instructions,
/// else its name (or title) and version.
fn server_description(peer: &Peer<RoleClient>) -> Option<String> {
    peer.peer_info().and_then(|info| {
        let instructions = info
            .instructions
            .as_deref()
            .map(str::trim)
            .filter(|i| !i.is_empty())
            .map(|i| one_line(i, 500));
        instructions.or_else(|| {
            info.server_info.as_ref().map(|s| {
                format!(
                    "{} {}",
                    s.title.clone().unwrap_or_else(|| s.name.clone()),
                    s.version
                )
            })
        })
    })
}

/// Watches a server's connection: its end (the process exited, the connection closed)
/// makes the server unavailable, unless execbox is stopping it or every server (`stopping`,
/// the hub's: a server that ends while execbox shuts down is one it stopped, whichever way
/// the shutdown reached it first).
fn watch_connection(
    running: RunningService<RoleClient, UpstreamClient>,
    link: &Arc<Link>,
    events: mpsc::UnboundedSender<Event>,
    stopping: tokio_util::sync::CancellationToken,
) {
    let watched = Arc::downgrade(link);
    tokio::spawn(async move {
        let _ = running.waiting().await;
        let Some(link) = watched.upgrade() else {
            return;
        };
        let stopped = || link.stopping.load(Ordering::SeqCst) || stopping.is_cancelled();
        if stopped() {
            return;
        }
        let reason = match link.exit.clone() {
            Some(mut exit) => {
                let _ =
                    tokio::time::timeout(Duration::from_secs(1), exit.wait_for(Option::is_some))
                        .await;
                let how = exit.borrow().clone();
                how.unwrap_or_else(|| "closed its stdout".into())
            }
            None => "closed the connection".into(),
        };
        if stopped() {
            return;
        }
        if let Some(group) = &link.group {
            group.kill();
        }
        eprintln!(
            "execbox mcp: upstream {:?} {reason}; its tools fail until execbox mcp restarts",
            link.name
        );
        link.mark_dead(reason);
        let _ = events.send(Event::Died);
    });
}

/// The streamable HTTP transport's configuration for `url`: `headers` on every request.
fn http_config(
    url: &str,
    headers: &[(String, String)],
) -> Result<rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig, String> {
    use reqwest::header::{HeaderName, HeaderValue};
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let mut map = HashMap::new();
    for (name, value) in headers {
        let name =
            HeaderName::from_bytes(name.as_bytes()).map_err(|e| format!("header {name:?}: {e}"))?;
        let value =
            HeaderValue::from_str(value).map_err(|e| format!("the value of header {name}: {e}"))?;
        map.insert(name, value);
    }
    Ok(StreamableHttpClientTransportConfig::with_uri(url.to_owned()).custom_headers(map))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(value: Value) -> rmcp::model::JsonObject {
        match value {
            Value::Object(map) => map,
            _ => unreachable!(),
        }
    }

    #[test]
    fn an_input_that_requires_nothing_may_be_left_out() {
        let open = object(json!({"type": "object", "properties": {"q": {"type": "string"}}}));
        assert_eq!(optional_input(&open)["type"], json!(["object", "null"]));
        let empty = object(json!({"type": "object", "required": []}));
        assert_eq!(optional_input(&empty)["type"], json!(["object", "null"]));
        let strict = object(json!({"type": "object", "required": ["q"]}));
        assert_eq!(optional_input(&strict)["type"], json!("object"));
    }
}
