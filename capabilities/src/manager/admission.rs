//! Admission: a start checked (the capability, the caller's permissions, the depth, the
//! params, the time limit, the bounds on executions running at once), recorded and handed to
//! `running`.

use std::collections::HashMap;
use std::time::Instant;

use execbox_host::{trace, Schema};
use execbox_policy::{AuditEvent, AuditOutcome, Principal};
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::{err, new_id, CapabilityManager, Live, ManagerOptions, Run};
use crate::config::{CapabilityConfig, CapabilityDef, ExecutorConfig, MAX_CAPABILITY_TIMEOUT_MS};
use crate::records::{
    now_ms, CapabilityError, CapabilityErrorCode, ExecutionEventKind, ExecutionRecord,
    ExecutionStatus, StartRequest,
};
use crate::script_executor::Durability;

impl CapabilityManager {
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
        // Boxed: the future of a whole run is large (several kB: the executor's, the
        // store's), and spawning moves it several times; boxed, it is moved once.
        tokio::spawn(Box::pin(
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
        ));
        Ok(id)
    }

    /// The caller: the one given, else the policy's default principal (none without a policy).
    pub(super) fn principal_or_default(
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
    pub(super) async fn register(
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
}

/// Whether a new execution `id` of `principal` under `parent` fits the bounds on executions
/// running at once (the manager's, the principal's, the tree's): the root of its tree (its
/// running parent's root, else itself) if it does, `TOO_MANY_EXECUTIONS` naming the bound,
/// the count and the flag if not.
pub(super) fn room_for(
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
pub(super) fn checked_params(def: &CapabilityDef, params: Value) -> Result<Value, CapabilityError> {
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
pub(super) fn time_limit(
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

/// The record of an execution about to start: `starting`, with nothing ended yet.
pub(super) fn starting_record(
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
        decisions: Vec::new(),
    }
}
