//! The capability manager: starts executions, tracks them live and in the store, waits for
//! them, stops them (a whole tree at once), publishes their events and audits them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use execbox_host::{trace, Executor, Provider, Schema, Tool, ToolContext, ToolError};
use execbox_policy::{AuditEvent, AuditOutcome, Enforcement, Policy, Principal};
use futures_util::future::join_all;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::config::{
    CapabilityConfig, CapabilityDef, ExecutorConfig, ExecutorKind, MAX_CAPABILITY_TIMEOUT_MS,
};
use super::external_executor::{self as external, ExternalRun};
use super::outcome::RunOutcome;
use super::programs::{ProgramToolSet, ProgramTools};
use super::records::{
    now_ms, CapabilityError, CapabilityErrorCode, ExecutionEvent, ExecutionEventKind,
    ExecutionFilter, ExecutionOutcome, ExecutionRecord, ExecutionStatus, StartRequest,
    StatusChange,
};
use super::registry::{Capability, ExecutorEntry, Registry, RegistryRoots};
use super::script_executor::{self as script, Durability, ScriptRun};
use super::store::{ExecutionStore, StoreSignal};

mod approvals;

pub use approvals::Decision;

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

/// How long a stop of another replica's execution waits for it to end before returning it
/// as it then is (a replica that died has its executions failed within its timeout).
const REMOTE_STOP_WAIT: Duration = Duration::from_secs(60);

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
    /// Stops the task that hears the other replicas (shared stores only).
    signals_task: Option<tokio::task::AbortHandle>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(task) = &self.signals_task {
            task.abort();
        }
    }
}

/// An execution running in this process.
struct Live {
    capability: String,
    parent: Option<String>,
    /// The root of its tree: itself, or its running parent's root.
    tree: String,
    depth: u32,
    principal: Option<Principal>,
    cancel: CancellationToken,
    done: watch::Receiver<Option<ExecutionOutcome>>,
    stop_requested: bool,
}

/// What [`CapabilityManager::drive`] runs: the capability on its executor, for its
/// principal, within its time limit.
pub(crate) struct Run {
    pub(crate) capability: Capability,
    pub(crate) executor: ExecutorEntry,
    pub(crate) principal: Option<Principal>,
    /// When its time limit started.
    pub(crate) accepted: Instant,
    pub(crate) timeout_ms: u64,
    pub(crate) cancel: CancellationToken,
    pub(crate) durable: Durability,
    /// Resumed after an approval: its status is `running` already.
    pub(crate) resumed: bool,
    /// A program that is not a capability (resumed after an approval): its code and tools.
    pub(crate) program: Option<ProgramRun>,
}

/// The code and tools of a program that is not a capability.
pub(crate) struct ProgramRun {
    pub(crate) code: String,
    pub(crate) tools: ProgramToolSet,
}

/// A fresh execution id: `cap_<unix-ms>_<8 hex>`.
fn new_id() -> String {
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

fn err(code: CapabilityErrorCode, message: impl Into<String>) -> CapabilityError {
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
        let manager = Arc::new_cyclic(|weak: &std::sync::Weak<Inner>| {
            let signals_task = signals.map(|signals| {
                let task = hear_replicas(weak.clone(), signals);
                match tokio::runtime::Handle::try_current() {
                    Ok(runtime) => runtime.spawn(task).abort_handle(),
                    Err(_) => store.spawn(task).abort_handle(),
                }
            });
            Inner {
                registry: RwLock::new(Arc::new(registry)),
                store: Arc::new(store),
                executor,
                options,
                live: Mutex::new(HashMap::new()),
                events,
                changed: watch::channel(0).0,
                signals_task,
            }
        });
        CapabilityManager(manager)
    }

    fn live(&self) -> std::sync::MutexGuard<'_, HashMap<String, Live>> {
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

    fn audit(&self, event: AuditEvent<'_>) -> Result<(), CapabilityError> {
        match self.0.options.enforcement.audit() {
            None => Ok(()),
            Some(log) => log
                .record(&event)
                .map_err(|e| err(CapabilityErrorCode::ExecutionFailed, format!("{e}"))),
        }
    }

    /// Starts a capability and returns its execution id at once, after the execution is
    /// recorded as `starting`. `principal` is the caller (from [`Policy::principal`] or
    /// [`Policy::principal_for_token`]); without one, the policy's default permissions apply.
    ///
    /// Fails before anything runs with `CAPABILITY_NOT_FOUND`, `EXECUTOR_NOT_FOUND`,
    /// `PERMISSION_DENIED`, `INVALID_REQUEST` (params failing `input_schema`, a bad time
    /// limit or one above [`ManagerOptions::max_timeout_ms`], nesting deeper than
    /// [`ManagerOptions::max_depth`]), or `TOO_MANY_EXECUTIONS` (a bound on executions running
    /// at once: [`ManagerOptions::max_live`], `max_live_per_principal`, `max_live_per_tree`).
    ///
    /// The time limit runs from here: time the execution then spends waiting for a runner
    /// counts, and one that waits past it ends `timeout` without having run.
    pub async fn start(
        &self,
        request: StartRequest,
        principal: Option<Principal>,
    ) -> Result<String, CapabilityError> {
        let accepted = Instant::now();
        let registry = self.registry();
        let (capability, executor) =
            registry.resolve(&request.capability, request.capability_type.as_deref())?;
        let capability = capability.clone();
        let executor = executor.clone();
        drop(registry);
        let def = &capability.config.def;

        // Who is asking, and may they?
        let principal = self.principal_or_default(principal)?;
        if let Some(p) = &principal {
            self.check_permissions(p, def)?;
        }
        let depth = self.depth_of(def, request.parent_id.as_deref())?;
        let params = checked_params(def, request.params)?;
        let timeout_ms = time_limit(
            request.timeout_ms,
            self.0.options.max_timeout_ms,
            &capability.config,
            &executor.config,
        )?;

        let id = new_id();
        let record = starting_record(
            &id,
            &capability.config,
            &executor.config,
            request.parent_id.clone(),
            principal.as_ref(),
            params,
        );
        // Checked again when it is taken (`register`), under the same lock as the taking;
        // checked here too so that a refusal is audited as one, not as a start.
        let room = room_for(
            &self.live(),
            &self.0.options,
            &id,
            principal.as_ref(),
            request.parent_id.as_deref(),
            &def.name,
        );
        if let Err(e) = room {
            self.audit(
                AuditEvent::capability_started("-", record.principal.as_deref(), &def.name)
                    .refused(AuditOutcome::RateLimited)
                    .error(&e.message),
            )?;
            return Err(e);
        }
        self.audit(AuditEvent::capability_started(
            &id,
            record.principal.as_deref(),
            &def.name,
        ))?;
        let cancel = CancellationToken::new();
        let (done_tx, done_rx) = watch::channel(None);
        self.register(
            &record,
            Live {
                capability: def.name.clone(),
                parent: request.parent_id.clone(),
                tree: id.clone(),
                depth,
                principal: principal.clone(),
                cancel: cancel.clone(),
                done: done_rx,
                stop_requested: false,
            },
        )
        .await?;
        self.emit(
            ExecutionEventKind::Started,
            &record,
            ExecutionStatus::Starting,
            None,
        );
        // A child of the caller's span (the HTTP request, the parent's tool call), ending when
        // the execution does.
        let span = tracing::info_span!(
            target: trace::TARGET,
            "execbox.capability",
            otel.kind = "internal",
            execbox.capability = %def.name,
            execbox.execution_id = %id,
            execbox.parent_id = record.parent_id.as_deref(),
            execbox.principal = record.principal.as_deref(),
            execbox.outcome = tracing::field::Empty,
            execbox.duration_ms = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        // A nested execution cannot pause: its parent waits on it.
        let durable = match &request.parent_id {
            Some(parent) if self.live().contains_key(parent) => Durability::None,
            _ => Durability::IfApprovalNeeded,
        };
        let manager = self.clone();
        tokio::spawn(
            async move {
                manager
                    .drive(
                        record,
                        Run {
                            capability,
                            executor,
                            principal,
                            accepted,
                            timeout_ms,
                            cancel,
                            durable,
                            resumed: false,
                            program: None,
                        },
                        done_tx,
                    )
                    .await;
            }
            .instrument(span),
        );
        Ok(id)
    }

    /// The caller: the one given, else the policy's default principal (none without a policy).
    fn principal_or_default(
        &self,
        principal: Option<Principal>,
    ) -> Result<Option<Principal>, CapabilityError> {
        Ok(match (principal, self.0.options.enforcement.policy()) {
            (Some(p), _) => Some(p),
            (None, Some(policy)) => Some(
                policy
                    .principal(None)
                    .map_err(|e| err(CapabilityErrorCode::PermissionDenied, e.to_string()))?,
            ),
            (None, None) => None,
        })
    }

    /// Refuses (and audits the refusal) when `principal` lacks a permission the capability
    /// lists.
    fn check_permissions(
        &self,
        principal: &Principal,
        def: &CapabilityDef,
    ) -> Result<(), CapabilityError> {
        let missing: Vec<&str> = def
            .permissions
            .iter()
            .filter(|perm| !principal.holds(perm))
            .map(String::as_str)
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let message = format!(
            "starting capability `{}` needs the permission{} {}, which {} does not hold; grant {} in the policy",
            def.name,
            if missing.len() == 1 { "" } else { "s" },
            missing.join(", "),
            principal.name().map(|n| format!("principal `{n}`")).unwrap_or_else(|| "a caller without a principal".into()),
            if missing.len() == 1 { "it" } else { "them" },
        );
        self.audit(
            AuditEvent::capability_started("-", principal.name(), &def.name)
                .refused(AuditOutcome::Denied)
                .error(&message),
        )?;
        Err(err(CapabilityErrorCode::PermissionDenied, message))
    }

    /// How deep a new execution would run under `parent` (1 at the top, and for a parent
    /// this process does not run), refused past [`ManagerOptions::max_depth`].
    fn depth_of(&self, def: &CapabilityDef, parent: Option<&str>) -> Result<u32, CapabilityError> {
        let depth = match parent {
            None => 1,
            Some(parent) => self.live().get(parent).map(|l| l.depth + 1).unwrap_or(1),
        };
        if depth > self.0.options.max_depth {
            return Err(err(
                CapabilityErrorCode::InvalidRequest,
                format!(
                    "capability `{}` would run {depth} levels deep (started by {}); nested capabilities may go at most {} levels deep",
                    def.name,
                    parent.unwrap_or("-"),
                    self.0.options.max_depth
                ),
            ));
        }
        Ok(depth)
    }

    /// Makes a recorded execution live: written to the store, then visible. Refused when this
    /// process runs [`ManagerOptions::max_live`] executions, its principal
    /// [`ManagerOptions::max_live_per_principal`], or its tree
    /// [`ManagerOptions::max_live_per_tree`], or when its parent is being stopped; all are
    /// checked and the execution taken under one lock, so a child cannot slip in under a
    /// parent being stopped (the tree stop would miss it), nor past a bound.
    async fn register(
        &self,
        record: &ExecutionRecord,
        mut entry: Live,
    ) -> Result<(), CapabilityError> {
        self.take_room(record, &mut entry)?;
        self.live().insert(record.execution_id.clone(), entry);
        // Recorded before anyone hears of it: its id is returned, and its events sent, after.
        // A stop that comes meanwhile is seen by `drive`, which then ends it `stopped`.
        if let Err(e) = self.0.store.insert(record).await {
            self.live().remove(&record.execution_id);
            return Err(e);
        }
        Ok(())
    }

    /// [`CapabilityManager::register`]'s checks, under the lock of the live executions.
    fn take_room(&self, record: &ExecutionRecord, entry: &mut Live) -> Result<(), CapabilityError> {
        let live = self.live();
        entry.tree = room_for(
            &live,
            &self.0.options,
            &record.execution_id,
            entry.principal.as_ref(),
            record.parent_id.as_deref(),
            &record.capability,
        )?;
        if let Some(parent) = record.parent_id.as_deref().and_then(|p| live.get(p)) {
            if parent.stop_requested {
                return Err(err(
                    CapabilityErrorCode::ExecutionStopped,
                    format!(
                        "capability `{}` was not started: its parent {} is being stopped",
                        record.capability,
                        record.parent_id.as_deref().unwrap_or_default()
                    ),
                ));
            }
        }
        Ok(())
    }

    fn emit(
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

    /// Runs a started (or resumed) execution to its end or its pause, then records it and
    /// reports it.
    pub(crate) async fn drive(
        &self,
        record: ExecutionRecord,
        run: Run,
        done: watch::Sender<Option<ExecutionOutcome>>,
    ) {
        let Run {
            capability,
            executor,
            principal,
            accepted,
            timeout_ms,
            cancel,
            durable,
            resumed,
            program,
        } = run;
        let started = accepted;
        let id_owned = record.execution_id.clone();
        let id = id_owned.as_str();
        // A resumed execution is `running` already: the resume took it.
        let running = match resumed {
            true => Ok(()),
            false => {
                self.0
                    .store
                    .set_status(id, ExecutionStatus::Running, None)
                    .await
            }
        };
        let (outcome, logs) = match running {
            Err(e) => (RunOutcome::Failed(e.message), Vec::new()),
            Ok(()) if cancel.is_cancelled() => (RunOutcome::Stopped, Vec::new()),
            Ok(()) => {
                let limit = TimeLimit {
                    accepted,
                    limit: Duration::from_millis(timeout_ms),
                };
                self.run(
                    &record,
                    &capability,
                    &executor,
                    &principal,
                    limit,
                    &cancel,
                    durable,
                    program.as_ref(),
                )
                .await
            }
        };
        // A stop was asked for: whatever failure followed (a child stopped first, the run
        // cancelled) is the stop. A run that completed meanwhile keeps its result.
        let stop_requested = self.live().get(id).is_some_and(|l| l.stop_requested);
        let outcome = match outcome {
            RunOutcome::Failed(_) | RunOutcome::TimedOut(_) | RunOutcome::Paused { .. }
                if stop_requested =>
            {
                RunOutcome::Stopped
            }
            other => other,
        };
        let outcome = match outcome {
            RunOutcome::Paused { call, ledger } => {
                if let Err(e) = self.stop_all_for_parent(id).await {
                    tracing::error!(execution = %id, "cannot stop the children of the execution: {e}");
                }
                match self
                    .record_pause(&record, &call, &ledger, &logs, &done)
                    .await
                {
                    Ok(()) => {
                        trace::record_outcome(
                            &tracing::Span::current(),
                            Some(ExecutionStatus::AwaitingApproval.as_str()),
                            started.elapsed().as_millis() as u64,
                        );
                        return;
                    }
                    Err(e) => RunOutcome::Failed(e),
                }
            }
            other => other,
        };
        let ending = Ending {
            logs,
            ..Ending::of(outcome, &capability.config.def)
        };
        trace::record_outcome(
            &tracing::Span::current(),
            (ending.status != ExecutionStatus::Completed).then(|| ending.status.as_str()),
            started.elapsed().as_millis() as u64,
        );
        // No child outlives its parent's end: children it did not wait for are stopped (and
        // have ended) before the parent's terminal status is written.
        if let Err(e) = self.stop_all_for_parent(id).await {
            tracing::error!(execution = %id, "cannot stop the children of the execution: {e}");
        }
        self.record_end(record, ending, started, &done).await;
    }

    /// Runs the execution on its executor: a script in a runner (nested capabilities
    /// available, tool calls under the caller's policy), or an external command. Returns
    /// the end and the logs (a script's; none for an external command).
    #[allow(clippy::too_many_arguments)]
    async fn run(
        &self,
        record: &ExecutionRecord,
        capability: &Capability,
        executor: &ExecutorEntry,
        principal: &Option<Principal>,
        limit: TimeLimit,
        cancel: &CancellationToken,
        durable: Durability,
        program: Option<&ProgramRun>,
    ) -> (RunOutcome, Vec<String>) {
        let id = record.execution_id.as_str();
        match &executor.config.kind {
            ExecutorKind::Script => {
                // Always there: a run past the depth bound is refused with a clear error. A
                // program (`execute_code`) has the tools it was written for, and no more.
                let nested = match program {
                    Some(_) => None,
                    None => Some(self.nested_provider(principal.clone())),
                };
                let executor = match (&record.parent_id, &self.0.options.nested_executor) {
                    (Some(parent), Some(nested)) if self.live().contains_key(parent) => nested,
                    _ => &self.0.executor,
                };
                script::run(ScriptRun {
                    executor,
                    capability: &capability.config,
                    params: &record.params,
                    execution_id: id,
                    time_limit: limit.limit,
                    timeout: limit.left(),
                    cancel: cancel.clone(),
                    nested,
                    guard: Arc::new(match principal {
                        Some(p) => self.0.options.enforcement.for_principal(p.clone()),
                        None => self.0.options.enforcement.clone(),
                    }),
                    durable,
                    program: program.map(|p| (p.code.as_str(), &p.tools.tools)),
                })
                .await
            }
            ExecutorKind::External { .. } => {
                let store = self.0.store.clone();
                let outcome = external::run(
                    ExternalRun {
                        executor: &executor.config,
                        capability: &capability.config,
                        params: &record.params,
                        execution_id: id,
                        parent_id: record.parent_id.as_deref(),
                        // Started at once (nothing to wait for), with its whole limit, as
                        // its envelope says.
                        timeout: limit.limit,
                        cancel: cancel.clone(),
                    },
                    |pgid| {
                        let (store, id) = (store.clone(), id.to_string());
                        tokio::spawn(async move {
                            if let Err(e) = store.set_pgid(&id, Some(pgid)).await {
                                tracing::warn!(execution = %id, "cannot record the executor's process group: {e}");
                            }
                        });
                    },
                )
                .await;
                (outcome, Vec::new())
            }
        }
    }

    /// Writes the end of an execution, audits it, and tells its waiters and the subscribers.
    /// When another process ended it first (recovered it as interrupted), that end stands
    /// and is what they are told.
    async fn record_end(
        &self,
        record: ExecutionRecord,
        ending: Ending,
        started: Instant,
        done: &watch::Sender<Option<ExecutionOutcome>>,
    ) {
        let id_owned = record.execution_id.clone();
        let id = id_owned.as_str();
        let Ending {
            status,
            result,
            additional_context: context,
            error,
            logs,
        } = ending;
        let ended = match self
            .0
            .store
            .finish(
                id,
                status,
                result.as_ref(),
                context.as_ref(),
                error.as_ref(),
                &logs,
            )
            .await
        {
            Ok(Some(t)) => t,
            Ok(None) => {
                let stored = self.0.store.get(id).await.ok().flatten();
                self.live().remove(id);
                if let Some(stored) = stored {
                    let _ = done.send(Some(stored.outcome()));
                    let status = stored.status;
                    let error = stored.error.clone();
                    self.emit(ExecutionEventKind::Failed, &stored, status, error);
                }
                return;
            }
            Err(e) => {
                // The end cannot be written: it is still reported (waiters must not hang),
                // and the next open of the store marks the row interrupted.
                tracing::error!(execution = %id, "cannot record the end of the execution: {e}");
                now_ms()
            }
        };
        if let Err(e) = self.audit(AuditEvent::capability_finished(
            id,
            record.principal.as_deref(),
            &record.capability,
            status.as_str(),
            started.elapsed(),
        )) {
            tracing::error!(execution = %id, "{e}");
        }
        let finished = ExecutionRecord {
            status,
            result,
            additional_context: context,
            error: error.clone(),
            logs,
            updated_ms: ended,
            ended_ms: Some(ended),
            pending_approval: None,
            ..record
        };
        self.live().remove(id);
        let _ = done.send(Some(finished.outcome()));
        let kind = match status {
            ExecutionStatus::Completed => ExecutionEventKind::Completed,
            ExecutionStatus::Timeout => ExecutionEventKind::Timeout,
            ExecutionStatus::Stopped => ExecutionEventKind::Stopped,
            _ => ExecutionEventKind::Failed,
        };
        self.emit(kind, &finished, status, error);
    }

    /// The `capabilities` namespace of a script: `run({name, type, params, timeoutMs})`.
    fn nested_provider(&self, principal: Option<Principal>) -> Provider {
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

    /// Waits for an execution to end or to pause for approval: `Ok(Some(outcome))` once it
    /// has (its status says which), `Ok(None)` when `timeout` passed first. Works for executions of other processes too (by polling the
    /// store) and for executions that ended long ago.
    pub async fn wait(
        &self,
        id: &str,
        timeout: Option<Duration>,
    ) -> Result<Option<ExecutionOutcome>, CapabilityError> {
        let live = self.live().get(id).map(|l| l.done.clone());
        // Another replica's execution: read again when its event arrives (relayed from the
        // replica's notification), after a resync, and every 2 s in case one was lost; another
        // process's on a SQLite file, which sends none: every 50 ms.
        let mut events = self.0.events.subscribe();
        let mut resyncs = self.0.changed.subscribe();
        let pause = if self.0.signals_task.is_some() {
            Duration::from_secs(2)
        } else {
            Duration::from_millis(50)
        };
        let waiting = async {
            if let Some(mut done) = live {
                if let Ok(outcome) = done.wait_for(Option::is_some).await {
                    return Ok(outcome.clone());
                }
            }
            loop {
                match self.0.store.get(id).await? {
                    None => return Err(not_found(id)),
                    Some(r)
                        if r.status.is_terminal()
                            || r.status == ExecutionStatus::AwaitingApproval =>
                    {
                        return Ok(Some(r.outcome()))
                    }
                    Some(_) => {
                        tokio::select! {
                            () = event_of(&mut events, id) => {}
                            _ = resyncs.changed() => {}
                            () = tokio::time::sleep(pause) => {}
                        }
                    }
                }
            }
        };
        match timeout {
            None => waiting.await,
            Some(t) => match tokio::time::timeout(t, waiting).await {
                Ok(r) => r,
                Err(_) => {
                    if self.0.store.get(id).await?.is_none() {
                        return Err(not_found(id));
                    }
                    Ok(None)
                }
            },
        }
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

    /// Stops an execution of this process and its children, and returns it once it ended
    /// (`stopped`, or whatever it ended with first). An execution that already ended is
    /// returned as it is.
    pub async fn stop(&self, id: &str) -> Result<ExecutionRecord, CapabilityError> {
        self.stop_inner(id.to_string()).await
    }

    fn stop_inner(
        &self,
        id: String,
    ) -> futures_util::future::BoxFuture<'_, Result<ExecutionRecord, CapabilityError>> {
        Box::pin(async move {
            let found = {
                let mut live = self.live();
                live.get_mut(&id).map(|l| {
                    let first = !l.stop_requested;
                    l.stop_requested = true;
                    (
                        first,
                        l.cancel.clone(),
                        l.done.clone(),
                        l.capability.clone(),
                        l.principal.clone(),
                    )
                })
            };
            let Some((first, cancel, mut done, capability, principal)) = found else {
                // Paused: nothing runs it; it ends here.
                if let Some(stopped) = self.stop_paused(&id).await? {
                    return Ok(stopped);
                }
                // Another replica's: its owner is asked (and stops it promptly), or, when that
                // replica died, the others mark it failed within the replica timeout.
                if self.0.store.request_stop(&id).await? {
                    let _ = self.wait(&id, Some(REMOTE_STOP_WAIT)).await?;
                }
                return self.get(&id).await;
            };
            if first {
                // Stopping matters more than recording it: a failed write does not keep the
                // execution running (and later stops waiting on it forever).
                if let Err(e) = self
                    .0
                    .store
                    .set_status(&id, ExecutionStatus::Stopping, Some("stop requested"))
                    .await
                {
                    tracing::error!(execution = %id, "cannot record the stop request: {e}");
                }
                if let Err(e) = self.audit(AuditEvent::capability_stop_requested(
                    &id,
                    principal.as_ref().and_then(Principal::name),
                    &capability,
                )) {
                    tracing::error!(execution = %id, "{e}");
                }
                // The parent first, so it ends `stopped` rather than failing on a child's
                // stop; its children are stopped too, and have ended before the parent's own
                // end is written (`drive`), so none is left running under it.
                cancel.cancel();
                self.stop_all_for_parent(&id).await?;
            }
            let _ = done.wait_for(Option::is_some).await;
            self.get(&id).await
        })
    }

    /// Stops every execution of this process whose parent is `parent_id`, and their
    /// children, down the whole tree; returns the executions stopped (direct children).
    pub async fn stop_all_for_parent(
        &self,
        parent_id: &str,
    ) -> Result<Vec<ExecutionRecord>, CapabilityError> {
        let children: Vec<String> = self
            .live()
            .iter()
            .filter(|(_, l)| l.parent.as_deref() == Some(parent_id))
            .map(|(id, _)| id.clone())
            .collect();
        let stopped = join_all(children.into_iter().map(|id| self.stop_inner(id))).await;
        stopped.into_iter().collect()
    }

    /// Stops every execution of this process (before a server exits).
    pub async fn stop_all(&self) {
        let roots: Vec<String> = self.live().keys().cloned().collect();
        let _ = join_all(roots.into_iter().map(|id| self.stop_inner(id))).await;
    }

    /// How many executions run in this process now.
    pub fn running(&self) -> usize {
        self.live().len()
    }
}

/// Returns at the next event of execution `id` (or when events were missed).
async fn event_of(events: &mut broadcast::Receiver<ExecutionEvent>, id: &str) {
    loop {
        match events.recv().await {
            Ok(event) if event.execution_id == id => return,
            Ok(_) => {}
            Err(broadcast::error::RecvError::Lagged(_)) => return,
            Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
        }
    }
}

/// Hears the other replicas of a shared store for as long as the manager lives: their status
/// changes become this manager's events (so subscribers see every replica's executions) and
/// wake its waiters; a stop asked of one of ours stops it.
async fn hear_replicas(
    manager: std::sync::Weak<Inner>,
    mut signals: broadcast::Receiver<StoreSignal>,
) {
    loop {
        let signal = match signals.recv().await {
            Ok(signal) => signal,
            Err(broadcast::error::RecvError::Lagged(_)) => StoreSignal::Resync,
            Err(broadcast::error::RecvError::Closed) => return,
        };
        let Some(inner) = manager.upgrade() else {
            return;
        };
        let manager = CapabilityManager(inner);
        match signal {
            StoreSignal::Resync => {
                manager.0.changed.send_modify(|n| *n += 1);
            }
            StoreSignal::Changed(id) => {
                if let Ok(Some(record)) = manager.0.store.get(&id).await {
                    let kind = match record.status {
                        ExecutionStatus::Starting => Some(ExecutionEventKind::Started),
                        ExecutionStatus::AwaitingApproval => {
                            Some(ExecutionEventKind::AwaitingApproval)
                        }
                        ExecutionStatus::Completed => Some(ExecutionEventKind::Completed),
                        ExecutionStatus::Timeout => Some(ExecutionEventKind::Timeout),
                        ExecutionStatus::Stopped => Some(ExecutionEventKind::Stopped),
                        ExecutionStatus::Failed => Some(ExecutionEventKind::Failed),
                        _ => None,
                    };
                    if let Some(kind) = kind {
                        let (status, error) = (record.status, record.error.clone());
                        manager.emit(kind, &record, status, error);
                    }
                }
            }
            StoreSignal::Resumed(id) => {
                if let Ok(Some(record)) = manager.0.store.get(&id).await {
                    let (status, error) = (record.status, record.error.clone());
                    manager.emit(ExecutionEventKind::Resumed, &record, status, error);
                }
            }
            StoreSignal::Stop(id) => {
                if manager.live().contains_key(&id) {
                    tokio::spawn(async move {
                        tracing::info!(execution = %id, "stopping it: another replica asked");
                        if let Err(e) = manager.stop(&id).await {
                            tracing::warn!(execution = %id, "cannot stop it: {e}");
                        }
                    });
                }
            }
        }
    }
}

/// Whether a new execution `id` of `principal` under `parent` fits the bounds on executions
/// running at once (the manager's, the principal's, the tree's): the root of its tree (its
/// running parent's root, else itself) if it does, `TOO_MANY_EXECUTIONS` naming the bound,
/// the count and the flag if not.
fn room_for(
    live: &HashMap<String, Live>,
    options: &ManagerOptions,
    id: &str,
    principal: Option<&Principal>,
    parent: Option<&str>,
    name: &str,
) -> Result<String, CapabilityError> {
    let too_many = |message: String| Err(err(CapabilityErrorCode::TooManyExecutions, message));
    if live.len() >= options.max_live {
        return too_many(format!(
            "{} executions are running, the most this server runs at once (`execbox serve --max-live`); wait for some to end (or stop some), then start `{name}` again",
            live.len(),
        ));
    }
    let owner = principal.and_then(Principal::name);
    let owned = live
        .values()
        .filter(|l| l.principal.as_ref().and_then(Principal::name) == owner)
        .count();
    if owned >= options.max_live_per_principal {
        let who = match owner {
            Some(name) => format!("principal `{name}` runs"),
            None => "anonymous callers run".to_string(),
        };
        return too_many(format!(
            "{who} {owned} executions, the most one principal may run at once ({}, `execbox serve --max-live-per-principal`); wait for one of them to end (or stop one: POST /v1/executions/ID/stop), then start `{name}` again",
            options.max_live_per_principal,
        ));
    }
    let tree = match parent.and_then(|p| live.get(p)) {
        Some(parent) => parent.tree.clone(),
        None => id.to_string(),
    };
    let in_tree = live.values().filter(|l| l.tree == tree).count();
    if in_tree >= options.max_live_per_tree {
        return too_many(format!(
            "the tree of execution {tree} runs {in_tree} executions (it and the capabilities started under it), the most one tree may run at once ({}, `execbox serve --max-live-per-tree`); wait for a nested capability to end before starting `{name}`, or start fewer at once",
            options.max_live_per_tree,
        ));
    }
    Ok(tree)
}

/// The params of a start (`{}` for none), checked against the capability's `input_schema`.
fn checked_params(def: &CapabilityDef, params: Value) -> Result<Value, CapabilityError> {
    let params = if params.is_null() { json!({}) } else { params };
    if let Some(schema) = &def.input_schema {
        let schema = Schema::compile(schema).map_err(|e| {
            err(
                CapabilityErrorCode::InvalidRequest,
                format!(
                    "capability `{}`: its input_schema is unusable: {e}",
                    def.name
                ),
            )
        })?;
        schema.validate(&params, "params").map_err(|e| {
            err(
                CapabilityErrorCode::InvalidRequest,
                format!(
                    "capability `{}`: {e}; see its input_schema (`execbox capabilities show {}`)",
                    def.name, def.name
                ),
            )
        })?;
    }
    Ok(params)
}

/// The time limit in ms: the request's (refused above `cap`), else the capability's (cut to
/// `cap`), never above the executor's.
fn time_limit(
    requested: Option<u64>,
    cap: u64,
    capability: &CapabilityConfig,
    executor: &ExecutorConfig,
) -> Result<u64, CapabilityError> {
    let cap = cap.min(MAX_CAPABILITY_TIMEOUT_MS);
    let mut timeout_ms = match requested {
        Some(0) => {
            return Err(err(
                CapabilityErrorCode::InvalidRequest,
                format!("timeoutMs must be above 0 and at most {cap} (ms), got 0"),
            ))
        }
        Some(ms) if ms > cap => {
            return Err(err(
                CapabilityErrorCode::InvalidRequest,
                format!(
                    "timeoutMs {ms} is above the longest time limit this server allows, {cap} ms (`execbox serve --max-timeout`); ask for at most {cap}"
                ),
            ))
        }
        Some(ms) => ms,
        None => capability.timeout_ms.min(cap),
    };
    if let Some(secs) = executor.def.timeout_seconds {
        timeout_ms = timeout_ms.min(secs.saturating_mul(1000));
    }
    Ok(timeout_ms)
}

/// An execution's time limit, counted from when it was accepted.
#[derive(Clone, Copy)]
struct TimeLimit {
    accepted: Instant,
    limit: Duration,
}

impl TimeLimit {
    /// What is left of it now.
    fn left(&self) -> Duration {
        self.limit.saturating_sub(self.accepted.elapsed())
    }
}

/// The record of an execution about to start: `starting`, with nothing ended yet.
fn starting_record(
    id: &str,
    capability: &CapabilityConfig,
    executor: &ExecutorConfig,
    parent_id: Option<String>,
    principal: Option<&Principal>,
    params: Value,
) -> ExecutionRecord {
    let now = now_ms();
    ExecutionRecord {
        execution_id: id.to_string(),
        capability: capability.def.name.clone(),
        capability_type: capability.def.capability_type.clone(),
        executor: executor.def.name.clone(),
        capability_path: capability.dir.display().to_string(),
        parent_id,
        principal: principal.and_then(|p| p.name().map(str::to_string)),
        status: ExecutionStatus::Starting,
        params,
        result: None,
        additional_context: None,
        error: None,
        logs: Vec::new(),
        created_ms: now,
        updated_ms: now,
        ended_ms: None,
        replica: None,
        pending_approval: None,
    }
}

/// How an execution ends, as its record says.
struct Ending {
    status: ExecutionStatus,
    result: Option<Value>,
    additional_context: Option<Value>,
    error: Option<CapabilityError>,
    /// The run's logs (a script's console lines and the host's notes).
    logs: Vec<String>,
}

impl Ending {
    /// The end of a run of the capability `def`: a result that does not match its
    /// `output_schema` is a failure (a fault of the capability).
    fn of(outcome: RunOutcome, def: &CapabilityDef) -> Ending {
        let name = &def.name;
        let failed = |status, code, message| Ending {
            status,
            result: None,
            additional_context: None,
            error: Some(err(code, message)),
            logs: Vec::new(),
        };
        match outcome {
            RunOutcome::Completed {
                result,
                additional_context,
            } => match output_mismatch(def, result.as_ref()) {
                None => Ending {
                    status: ExecutionStatus::Completed,
                    result,
                    additional_context,
                    error: None,
                    logs: Vec::new(),
                },
                Some(why) => failed(
                    ExecutionStatus::Failed,
                    CapabilityErrorCode::ExecutionFailed,
                    format!("capability `{name}` returned a result that does not match its output_schema (a fault of the capability): {why}"),
                ),
            },
            RunOutcome::Failed(message) => failed(
                ExecutionStatus::Failed,
                CapabilityErrorCode::ExecutionFailed,
                message,
            ),
            RunOutcome::TimedOut(message) => failed(
                ExecutionStatus::Timeout,
                CapabilityErrorCode::ExecutionTimeout,
                message,
            ),
            RunOutcome::Stopped => failed(
                ExecutionStatus::Stopped,
                CapabilityErrorCode::ExecutionStopped,
                format!("capability `{name}` was stopped on request"),
            ),
            RunOutcome::Diverged(message) => failed(
                ExecutionStatus::Failed,
                CapabilityErrorCode::ReplayDiverged,
                message,
            ),
            // `drive` records a pause before it comes to an end.
            RunOutcome::Paused { call, .. } => failed(
                ExecutionStatus::Failed,
                CapabilityErrorCode::ExecutionFailed,
                format!("capability `{name}` paused for approval of {} and could not be kept paused", call.tool),
            ),
        }
    }
}

/// Why `result` (null when `None`) does not match the capability's `output_schema`, if it
/// has one and it does not.
fn output_mismatch(def: &CapabilityDef, result: Option<&Value>) -> Option<String> {
    def.output_schema.as_ref().and_then(|schema| {
        let value = result.cloned().unwrap_or(Value::Null);
        match Schema::compile(schema) {
            Err(e) => Some(format!("its output_schema is unusable: {e}")),
            Ok(s) => s.validate(&value, "result").err(),
        }
    })
}

fn not_found(id: &str) -> CapabilityError {
    err(
        CapabilityErrorCode::ExecutionNotFound,
        format!("no execution `{id}` in the store; `execbox executions list` shows the known ones"),
    )
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
