//! The capability manager: its options, its shared state and the table of executions live in
//! this process; each of its jobs is a module of its own: admitting a start (`admission`),
//! running an execution to its end or pause (`running`), the nested `capabilities.run` tool
//! (`nested`), waiting (`waiting`), stopping (`stopping`), hearing other replicas
//! (`replicas`) and approvals (`approvals`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use execbox_host::Executor;
use execbox_policy::{AuditEvent, Enforcement, Policy, Principal};
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

use super::config::MAX_CAPABILITY_TIMEOUT_MS;
use super::programs::ProgramTools;
use super::records::{
    now_ms, CapabilityError, CapabilityErrorCode, ExecutionEvent, ExecutionEventKind,
    ExecutionFilter, ExecutionOutcome, ExecutionRecord, ExecutionStatus, StatusChange,
};
use super::registry::{Registry, RegistryRoots};
use super::store::ExecutionStore;

mod admission;
mod approvals;
mod nested;
mod replicas;
mod running;
mod stopping;
mod waiting;

pub use approvals::{
    DEFAULT_PAUSE_EXPIRY, MAX_PAUSED_BYTES_PER_PRINCIPAL, MAX_PAUSED_PER_PRINCIPAL,
};
pub use execbox_host::{CallRef, Decision};
pub(crate) use nested::NestedTools;
pub(crate) use running::{ProgramRun, Run};

/// The default bound on nested capabilities (a top-level execution is depth 1).
pub const DEFAULT_MAX_DEPTH: u32 = 4;

/// The default bound on executions running at once in one manager.
pub const DEFAULT_MAX_LIVE: usize = 1024;

/// The default bound on executions one principal runs at once (nested ones included): a
/// sixteenth of [`DEFAULT_MAX_LIVE`], so one principal cannot take the whole server.
pub const DEFAULT_MAX_LIVE_PER_PRINCIPAL: usize = 64;

/// The default bound on executions one tree runs at once: an execution started without a
/// running parent and every capability it starts, down the whole tree.
pub const DEFAULT_MAX_LIVE_PER_TREE: usize = 16;

/// How many events a slow subscriber may fall behind before it misses some.
pub const EVENT_CAPACITY: usize = 4096;

/// How the manager runs executions.
#[derive(Clone)]
pub struct ManagerOptions {
    /// The deepest nesting allowed: a capability started by a capability started by ... is
    /// refused (`INVALID_REQUEST`) past this depth. Default [`DEFAULT_MAX_DEPTH`].
    pub max_depth: u32,
    /// The most executions running at once in this manager (nested ones included); a start
    /// past it is refused (`TOO_MANY_EXECUTIONS`), so a program fanning out
    /// `capabilities.run` cannot grow without bound. Default [`DEFAULT_MAX_LIVE`].
    pub max_live: usize,
    /// The most executions one principal runs at once (nested ones included; anonymous
    /// callers are one principal); a start past it is refused (`TOO_MANY_EXECUTIONS`), so
    /// one caller cannot take all of [`ManagerOptions::max_live`] from the others. Default
    /// [`DEFAULT_MAX_LIVE_PER_PRINCIPAL`].
    pub max_live_per_principal: usize,
    /// The most executions one tree runs at once: an execution started without a running
    /// parent, and the capabilities it starts, and theirs. A start past it is refused
    /// (`TOO_MANY_EXECUTIONS`; to a script, an error of `capabilities.run`). As each nested
    /// script runs in a runner of its own, this also bounds the runner processes one request
    /// can start. Default [`DEFAULT_MAX_LIVE_PER_TREE`].
    pub max_live_per_tree: usize,
    /// The longest time limit an execution may ask for (`timeoutMs`), in milliseconds: a
    /// longer one is refused (`INVALID_REQUEST`), and a capability whose own `timeout_ms` is
    /// longer runs with this one. Default [`MAX_CAPABILITY_TIMEOUT_MS`] (24 hours).
    pub max_timeout_ms: u64,
    /// The policy: who holds which permissions (starting a capability needs every
    /// permission it lists; without a policy file, any caller may start any capability), the
    /// rate-limit counters and approver of scripts' tool calls, and the audit log where
    /// starts, stop requests, ends and the tool calls of scripts are recorded.
    pub enforcement: Enforcement,
    /// Runs nested script capabilities (those with a running execution as parent); the
    /// manager's executor when `None`. A parent holds its runner while it waits for its
    /// child, so an executor whose children wait for a runner (a
    /// [`PooledExecutor`](execbox_host::PooledExecutor) of N runners) could leave N waiting
    /// parents with no runner for their children: give nested runs one that never waits,
    /// such as [`PooledExecutor::overflowing`](execbox_host::PooledExecutor::overflowing)
    /// of the same pool (a free pooled runner, else an extra one), as the CLI does, or a
    /// [`ProcessExecutor`](execbox_host::ProcessExecutor). How many run at once is bounded
    /// by [`ManagerOptions::max_live_per_tree`].
    pub nested_executor: Option<Arc<dyn Executor>>,
    /// Builds the tools of paused programs that are not capabilities (`execute_code` of
    /// `execbox mcp`, see [`CapabilityManager::pause_program`]) when they are approved; a
    /// manager without it refuses to approve them, and they stay paused.
    pub programs: Option<Arc<dyn ProgramTools>>,
    /// How long an execution may wait for a decision: past it, its call is denied with
    /// reason `expired` ([`CapabilityManager::expire_paused`]). Default
    /// [`DEFAULT_PAUSE_EXPIRY`] (7 days).
    pub pause_expiry: Duration,
    /// The most executions one principal may have waiting for approval at once; a pause
    /// past it fails the execution saying why. Default [`MAX_PAUSED_PER_PRINCIPAL`]. Their
    /// ledgers are bounded too, by [`MAX_PAUSED_BYTES_PER_PRINCIPAL`].
    pub max_paused_per_principal: u64,
}

impl std::fmt::Debug for ManagerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagerOptions")
            .field("max_depth", &self.max_depth)
            .field("max_live", &self.max_live)
            .field("max_live_per_principal", &self.max_live_per_principal)
            .field("max_live_per_tree", &self.max_live_per_tree)
            .field("max_timeout_ms", &self.max_timeout_ms)
            .field("enforcement", &self.enforcement)
            .field("nested_executor", &self.nested_executor.is_some())
            .field("programs", &self.programs.is_some())
            .field("pause_expiry", &self.pause_expiry)
            .field("max_paused_per_principal", &self.max_paused_per_principal)
            .finish()
    }
}

impl Default for ManagerOptions {
    fn default() -> Self {
        ManagerOptions {
            max_depth: DEFAULT_MAX_DEPTH,
            max_live: DEFAULT_MAX_LIVE,
            max_live_per_principal: DEFAULT_MAX_LIVE_PER_PRINCIPAL,
            max_live_per_tree: DEFAULT_MAX_LIVE_PER_TREE,
            max_timeout_ms: MAX_CAPABILITY_TIMEOUT_MS,
            enforcement: Enforcement::unrestricted(),
            nested_executor: None,
            programs: None,
            pause_expiry: DEFAULT_PAUSE_EXPIRY,
            max_paused_per_principal: MAX_PAUSED_PER_PRINCIPAL,
        }
    }
}

/// Runs capabilities and tracks their executions. Cheap to clone (one shared state); every
/// method takes `&self`, so an HTTP layer can hold one in its state.
///
/// ```no_run
/// use std::sync::Arc;
/// use execbox_capabilities::{CapabilityManager, ExecutionStore, ManagerOptions, Registry,
///     RegistryRoots, StartRequest};
/// use execbox_host::{PooledExecutor, RunnerCommand};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let roots = RegistryRoots::discover(&std::env::current_dir()?, None);
/// let store = ExecutionStore::open(".execbox/state.db")?;
/// let executor = Arc::new(PooledExecutor::new(RunnerCommand::find()?, Default::default())?);
/// let manager = CapabilityManager::new(Registry::load(roots), store, executor, ManagerOptions::default());
/// let id = manager.start(StartRequest::new("triage-issues", serde_json::json!({"repo": "a/b"})), None).await?;
/// let outcome = manager.wait(&id, None).await?.expect("no wait timeout");
/// println!("{}", outcome.success);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct CapabilityManager(Arc<Inner>);

impl std::fmt::Debug for CapabilityManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CapabilityManager").finish_non_exhaustive()
    }
}

struct Inner {
    registry: RwLock<Arc<Registry>>,
    store: Arc<ExecutionStore>,
    executor: Arc<dyn Executor>,
    options: ManagerOptions,
    live: Mutex<HashMap<String, Live>>,
    events: broadcast::Sender<ExecutionEvent>,
    /// Bumped whenever notifications may have been missed (the listening connection was
    /// lost): waiters on executions of other replicas read the store again.
    changed: watch::Sender<u64>,
    /// Stops the task that hears the other replicas (shared stores only): set once the
    /// manager exists, since the task reaches it through a weak reference.
    signals_task: std::sync::OnceLock<tokio::task::AbortHandle>,
    /// The `capabilities` namespace of scripts, built at the first run.
    nested: std::sync::OnceLock<nested::NestedTools>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(task) = self.signals_task.get() {
            task.abort();
        }
    }
}

/// An execution running in this process.
pub(super) struct Live {
    pub(super) capability: String,
    pub(super) parent: Option<String>,
    /// The root of its tree: itself, or its running parent's root.
    pub(super) tree: String,
    pub(super) depth: u32,
    pub(super) principal: Option<Principal>,
    pub(super) cancel: CancellationToken,
    pub(super) done: watch::Receiver<Option<ExecutionOutcome>>,
    pub(super) stop_requested: bool,
}

/// A fresh execution id: `cap_<unix-ms>_<8 hex>`.
pub(super) fn new_id() -> String {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 4];
    if ring::rand::SystemRandom::new().fill(&mut bytes).is_err() {
        // Never expected; a counter keeps ids unique within the process anyway.
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        bytes = N
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .to_be_bytes();
    }
    format!(
        "cap_{}_{:02x}{:02x}{:02x}{:02x}",
        now_ms(),
        bytes[0],
        bytes[1],
        bytes[2],
        bytes[3]
    )
}

pub(super) fn err(code: CapabilityErrorCode, message: impl Into<String>) -> CapabilityError {
    CapabilityError::new(code, message)
}

impl CapabilityManager {
    /// A manager over `registry`, recording in `store`, running scripts through `executor`.
    pub fn new(
        registry: Registry,
        store: ExecutionStore,
        executor: Arc<dyn Executor>,
        options: ManagerOptions,
    ) -> CapabilityManager {
        let (events, _) = broadcast::channel(EVENT_CAPACITY);
        let signals = store.signals();
        let manager = CapabilityManager(Arc::new(Inner {
            registry: RwLock::new(Arc::new(registry)),
            store: Arc::new(store),
            executor,
            options,
            live: Mutex::new(HashMap::new()),
            events,
            changed: watch::channel(0).0,
            signals_task: std::sync::OnceLock::new(),
            nested: std::sync::OnceLock::new(),
        }));
        // Started only now that the manager exists: a task started while it was being built
        // (inside `Arc::new_cyclic`) could hear a notification first, find no manager behind
        // its weak reference, take it for gone, and end, leaving this replica deaf for good
        // (no stop asked by another replica ever reached it).
        if let Some(signals) = signals {
            let task = replicas::hear_replicas(Arc::downgrade(&manager.0), signals);
            let task = match tokio::runtime::Handle::try_current() {
                Ok(runtime) => runtime.spawn(task),
                Err(_) => manager.0.store.spawn(task),
            };
            let _ = manager.0.signals_task.set(task.abort_handle());
        }
        manager
    }

    pub(super) fn live(&self) -> std::sync::MutexGuard<'_, HashMap<String, Live>> {
        self.0
            .live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The registry in use.
    pub fn registry(&self) -> Arc<Registry> {
        self.0
            .registry
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Discovers the registry's roots again; running executions keep what they started with.
    pub fn reload(&self, roots: RegistryRoots) {
        let registry = Arc::new(Registry::load(roots));
        *self
            .0
            .registry
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = registry;
    }

    /// The store.
    pub fn store(&self) -> &ExecutionStore {
        &self.0.store
    }

    /// The policy, if any.
    pub fn policy(&self) -> Option<&Policy> {
        self.0.options.enforcement.policy()
    }

    /// Every event from now on: `started`, `completed`, `failed`, `timeout`, `stopped`, each
    /// sent after the database has it.
    pub fn subscribe(&self) -> broadcast::Receiver<ExecutionEvent> {
        self.0.events.subscribe()
    }

    pub(super) fn audit(&self, event: AuditEvent<'_>) -> Result<(), CapabilityError> {
        match self.0.options.enforcement.audit() {
            None => Ok(()),
            Some(log) => log
                .record(&event)
                .map_err(|e| err(CapabilityErrorCode::ExecutionFailed, format!("{e}"))),
        }
    }

    pub(super) fn emit(
        &self,
        kind: ExecutionEventKind,
        record: &ExecutionRecord,
        status: ExecutionStatus,
        error: Option<CapabilityError>,
    ) {
        let _ = self.0.events.send(ExecutionEvent {
            event: kind,
            execution_id: record.execution_id.clone(),
            capability: record.capability.clone(),
            parent_id: record.parent_id.clone(),
            principal: record.principal.clone(),
            status,
            error,
            logs: record.logs.clone(),
            at_ms: now_ms(),
        });
    }

    /// One execution, as recorded.
    pub async fn get(&self, id: &str) -> Result<ExecutionRecord, CapabilityError> {
        self.0.store.get(id).await?.ok_or_else(|| not_found(id))
    }

    /// An execution's status changes, oldest first.
    pub async fn history(&self, id: &str) -> Result<Vec<StatusChange>, CapabilityError> {
        self.0.store.history(id).await
    }

    /// Executions matching `filter`, newest first.
    pub async fn list(
        &self,
        filter: &ExecutionFilter,
    ) -> Result<Vec<ExecutionRecord>, CapabilityError> {
        self.0.store.list(filter).await
    }
    /// The owner (principal name) of an execution live in this process, `None` when it is
    /// not live here: who may see it, without reading the store.
    #[cfg(feature = "serve")]
    pub(crate) fn live_owner(&self, id: &str) -> Option<Option<String>> {
        self.live().get(id).map(|l| {
            l.principal
                .as_ref()
                .and_then(Principal::name)
                .map(str::to_owned)
        })
    }

    /// How many executions run in this process now.
    pub fn running(&self) -> usize {
        self.live().len()
    }
}

pub(super) fn not_found(id: &str) -> CapabilityError {
    err(
        CapabilityErrorCode::ExecutionNotFound,
        format!("no execution `{id}` in the store; `execbox executions list` shows the known ones"),
    )
}
