//! The execution store in PostgreSQL, shared by `execbox serve` replicas.
//!
//! Schema (component `capabilities` of `execbox_schema`, version 2, migrated at open):
//! - `replicas`: one row per replica that ever joined (id, name, host, pid, start, heartbeat,
//!   `lease_until`, `stopped_at`);
//! - `executions`: as in SQLite (docs/capabilities.md), `pending_approval` included, plus
//!   `owner_replica` (the replica that runs it; NULL while it is `awaiting_approval`, since
//!   version 2) and `stop_requested_ms` (another replica asked its owner to stop it);
//! - `status_history`: one row per status change, in order (`seq`);
//! - `ledgers` (version 2): the replay ledger of an execution `awaiting_approval` (as in
//!   SQLite), deleted when it resumes or ends.
//!
//! An execution `awaiting_approval` has no owner, so the reaper never fails it: any replica
//! may resume it, and [`RESUME`] lets exactly one of them.
//!
//! Replicas: each holds a lease (half of [`ReplicaOptions::timeout`]) that it renews every
//! sixth of the timeout. Every replica, on the same beat, marks stopped the replicas whose
//! lease ran out and fails their live executions ("interrupted: replica NAME stopped") in one
//! statement, so a killed replica's executions are failed within the timeout whichever
//! replicas are left. A replica that finds itself marked stopped (it was paused past its
//! lease) joins again and stops what it still ran of the executions failed under it.
//!
//! Notifications (sent in the transaction of the write, so only what committed is heard):
//! `execbox_events` `{"r": replica, "id": execution}` after every status change (with
//! `"e": "resumed"` when the change is a resume), and
//! `execbox_stop` `{"owner": replica, "id": execution}` to ask an owner to stop one. Each
//! replica listens on a connection of its own; when it was lost, what was missed is recovered
//! by reading again (waiters re-read, stop requests are also in `stop_requested_ms`, which
//! each replica reads every second: notifications are hints, the tables are the truth).
//!
//! The database away: an end that cannot be written is kept and written again until it lands
//! (`ends.rs`); every other call fails at once with "the state database is unavailable" (the
//! detail, URL masked, goes to the log: callers over HTTP and models never see the URL).

mod ends;

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use execbox_pg::{Migrations, Pg, PgError, PgUrl, Row};
use serde_json::{json, Value};
use tokio::sync::broadcast;

use super::sqlite::{pause_detail, RESUMED_DETAIL};
use super::Take;
use super::{ReplicaOptions, StoreSignal, EXECUTION_ID_ENV, MAX_LIST};
use crate::records::{
    now_ms, CapabilityError, CapabilityErrorCode, ExecutionFilter, ExecutionRecord,
    ExecutionStatus, PendingApproval, StatusChange,
};
use ends::{End, KeptEnds};

const MIGRATIONS: Migrations = Migrations {
    component: "capabilities",
    steps: &[
        "CREATE TABLE replicas (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            host TEXT NOT NULL,
            pid INTEGER NOT NULL,
            started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
            heartbeat_at TIMESTAMPTZ NOT NULL DEFAULT now(),
            lease_until TIMESTAMPTZ NOT NULL,
            stopped_at TIMESTAMPTZ
        );
        CREATE INDEX replicas_live ON replicas (lease_until) WHERE stopped_at IS NULL;
        CREATE TABLE executions (
            id TEXT PRIMARY KEY,
            capability TEXT NOT NULL,
            type TEXT NOT NULL,
            executor TEXT NOT NULL,
            capability_path TEXT NOT NULL,
            parent_id TEXT,
            principal TEXT,
            status TEXT NOT NULL,
            params TEXT NOT NULL,
            result TEXT,
            additional_context TEXT,
            error_code TEXT,
            error_message TEXT,
            created_ms BIGINT NOT NULL,
            updated_ms BIGINT NOT NULL,
            ended_ms BIGINT,
            logs TEXT,
            owner_replica TEXT NOT NULL REFERENCES replicas (id),
            pgid INTEGER,
            stop_requested_ms BIGINT
        );
        CREATE INDEX executions_created ON executions (created_ms DESC, id DESC);
        CREATE INDEX executions_parent ON executions (parent_id);
        CREATE INDEX executions_live ON executions (owner_replica)
            WHERE status IN ('starting', 'running', 'stopping');
        CREATE TABLE status_history (
            seq BIGSERIAL PRIMARY KEY,
            execution_id TEXT NOT NULL,
            status TEXT NOT NULL,
            at_ms BIGINT NOT NULL,
            detail TEXT
        );
        CREATE INDEX status_history_execution ON status_history (execution_id, seq);",
        // 2: durable executions: the call a paused execution waits on, no owner while it
        // waits, and its replay ledger.
        "ALTER TABLE executions ADD COLUMN pending_approval TEXT;
        ALTER TABLE executions ALTER COLUMN owner_replica DROP NOT NULL;
        CREATE TABLE ledgers (
            execution_id TEXT PRIMARY KEY REFERENCES executions (id) ON DELETE CASCADE,
            ledger TEXT NOT NULL,
            bytes INTEGER NOT NULL,
            updated_ms BIGINT NOT NULL
        );",
        // 3: the decisions taken on a paused execution's calls (a retried decision is
        // answered from them).
        "ALTER TABLE executions ADD COLUMN decisions TEXT;",
    ],
};

/// How long closing waits for the ends still kept to land.
const CLOSE_SETTLE: Duration = Duration::from_secs(10);

const EVENTS: &str = "execbox_events";
const STOPS: &str = "execbox_stop";

const COLUMNS: &str = "e.id, e.capability, e.type, e.executor, e.capability_path, e.parent_id, e.principal, e.status, e.params, e.result, e.additional_context, e.error_code, e.error_message, e.created_ms, e.updated_ms, e.ended_ms, e.logs, r.name, e.pending_approval, e.decisions";
const SUMMARY_COLUMNS: &str = "e.id, e.capability, e.type, e.executor, e.capability_path, e.parent_id, e.principal, e.status, NULL, NULL, NULL, e.error_code, e.error_message, e.created_ms, e.updated_ms, e.ended_ms, NULL, r.name, e.pending_approval, e.decisions";
const FROM: &str = "executions e LEFT JOIN replicas r ON r.id = e.owner_replica";

// Each write is one statement (the row, its history row and its notification, which is sent
// when the statement commits), prepared once per connection: one round trip.

/// A new execution (`starting`), its first history row, and its notification ($12).
const INSERT: &str = "WITH e AS (
        INSERT INTO executions (id, capability, type, executor, capability_path, parent_id, principal, status, params, created_ms, updated_ms, owner_replica)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10, $11)
        RETURNING id
    ), h AS (
        INSERT INTO status_history (execution_id, status, at_ms) SELECT id, $8, $10 FROM e
    )
    SELECT pg_notify('execbox_events', $12) FROM e";

/// `running` only from `starting`, `stopping` from `starting` or `running`; with its history
/// row and notification ($5) when it moved.
const SET_STATUS: &str = "WITH u AS (
        UPDATE executions SET status = $2, updated_ms = $3
        WHERE id = $1 AND (status = 'starting' OR (status = 'running' AND $2 = 'stopping'))
        RETURNING id
    ), h AS (
        INSERT INTO status_history (execution_id, status, at_ms, detail) SELECT id, $2, $3, $4 FROM u
    )
    SELECT pg_notify('execbox_events', $5) FROM u";

/// The end, written only over a live or `awaiting_approval` status (one terminal status per
/// execution: one the reaper wrote first stands), clearing the pending approval and deleting
/// the ledger (no logs, $8 NULL, keep those recorded); a row back when it was written.
const FINISH: &str = "WITH u AS (
        UPDATE executions SET status = $2, result = $3, additional_context = $4, error_code = $5,
            error_message = $6, updated_ms = $7, ended_ms = $7, logs = COALESCE($8, logs),
            pgid = NULL, pending_approval = NULL
        WHERE id = $1 AND status IN ('starting', 'running', 'stopping', 'awaiting_approval')
        RETURNING id
    ), h AS (
        INSERT INTO status_history (execution_id, status, at_ms, detail) SELECT id, $2, $7, $6 FROM u
    ), d AS (
        DELETE FROM ledgers WHERE execution_id IN (SELECT id FROM u)
    )
    SELECT pg_notify('execbox_events', $9)::text FROM u";

/// A pause for approval, only of a `starting` or `running` execution no stop was asked of:
/// the pending call ($2), the logs so far ($3), no owner; the ledger ($5, $6 bytes), the
/// history row ($7) and the notification ($8); a row back when it paused.
const PAUSE: &str = "WITH u AS (
        UPDATE executions SET status = 'awaiting_approval', pending_approval = $2, logs = $3,
            updated_ms = $4, owner_replica = NULL, pgid = NULL
        WHERE id = $1 AND status IN ('starting', 'running') AND stop_requested_ms IS NULL
        RETURNING id
    ), l AS (
        INSERT INTO ledgers (execution_id, ledger, bytes, updated_ms) SELECT id, $5, $6, $4 FROM u
        ON CONFLICT (execution_id) DO UPDATE
            SET ledger = EXCLUDED.ledger, bytes = EXCLUDED.bytes, updated_ms = EXCLUDED.updated_ms
    ), h AS (
        INSERT INTO status_history (execution_id, status, at_ms, detail)
        SELECT id, 'awaiting_approval', $4, $7 FROM u
    )
    SELECT pg_notify('execbox_events', $8)::text FROM u";

/// One execution by id ($1).
static GET: LazyLock<String> =
    LazyLock::new(|| format!("SELECT {COLUMNS} FROM {FROM} WHERE e.id = $1"));

/// The one statement that decides who resumes an execution awaiting approval: it locks the
/// row (`FOR UPDATE`: a concurrent resume waits, then finds it `running` and gets no row),
/// reads it as it was and its ledger, makes it `running` under this replica ($3) with no
/// pending approval, deletes the ledger, and writes the history row ($4) and notification
/// ($5). A decision ($7, JSON) takes it only while the call it names ($6) is the one waiting,
/// and is appended to its `decisions`; a stop ($6 and $7 NULL) takes it whatever it waits on.
/// Returns the old record's [`COLUMNS`], then the ledger.
static RESUME: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH old AS (
        SELECT {COLUMNS}, l.ledger
        FROM executions e
            LEFT JOIN replicas r ON r.id = e.owner_replica
            LEFT JOIN ledgers l ON l.execution_id = e.id
        WHERE e.id = $1 AND e.status = 'awaiting_approval'
            AND ($6::bigint IS NULL OR (e.pending_approval::jsonb ->> 'call')::bigint = $6)
        FOR UPDATE OF e
    ), u AS (
        UPDATE executions e SET status = 'running', pending_approval = NULL, updated_ms = $2,
            owner_replica = $3, pgid = NULL, stop_requested_ms = NULL,
            decisions = CASE WHEN $7::text IS NULL THEN e.decisions
                ELSE (COALESCE(e.decisions, '[]')::jsonb || jsonb_build_array($7::text::jsonb))::text END
        FROM old WHERE e.id = old.id AND e.status = 'awaiting_approval'
        RETURNING e.id
    ), d AS (
        DELETE FROM ledgers WHERE execution_id IN (SELECT id FROM u)
    ), h AS (
        INSERT INTO status_history (execution_id, status, at_ms, detail)
        SELECT id, 'running', $2, $4 FROM u
    )
    SELECT old.*, pg_notify('execbox_events', $5)::text FROM old JOIN u ON u.id = old.id"
    )
});

/// Marks stopped the replicas whose lease ran out and fails their live executions (and those
/// of replicas stopped before), with their history and a notification each; returns them.
const REAP: &str = "WITH dead AS (
        UPDATE replicas SET stopped_at = now()
        WHERE stopped_at IS NULL AND lease_until < now()
        RETURNING id
    ), failed AS (
        UPDATE executions e SET status = 'failed', error_code = $2,
            error_message = 'interrupted: replica ' || r.name || ' stopped',
            updated_ms = $1, ended_ms = $1, pgid = NULL
        FROM replicas r
        WHERE e.owner_replica = r.id AND e.status IN ('starting', 'running', 'stopping')
            AND (r.stopped_at IS NOT NULL OR r.id IN (SELECT id FROM dead))
        RETURNING e.id, e.error_message, e.owner_replica
    ), history AS (
        INSERT INTO status_history (execution_id, status, at_ms, detail)
        SELECT id, 'failed', $1, error_message FROM failed
    )
    SELECT id, pg_notify('execbox_events', json_build_object('r', owner_replica, 'id', id)::text)::text
    FROM failed";

/// This process as a replica.
#[derive(Debug)]
struct Replica {
    id: String,
    name: String,
    lease: Duration,
}

pub(crate) struct PgStore {
    pg: Pg,
    replica: Arc<Replica>,
    signals: broadcast::Sender<StoreSignal>,
    tasks: Vec<tokio::task::AbortHandle>,
    recovered: Vec<String>,
    /// Ends the database could not take when they happened, being written again.
    kept: Arc<KeptEnds>,
}

impl Drop for PgStore {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        self.kept.abandon();
    }
}

/// The message of a call that found the database unavailable (down, stalled, cut off).
pub(crate) const UNAVAILABLE_MESSAGE: &str =
    "the state database is unavailable; try again in a few seconds (the server's log says why)";

/// A failed call as its caller sees it: in plain words, naming no database (an HTTP caller
/// or a model reads it); the whole error, URL masked, goes to the log.
fn fail(e: PgError) -> CapabilityError {
    tracing::warn!("execution store: {e}");
    if e.is_unavailable() {
        CapabilityError::new(
            CapabilityErrorCode::RegistryNotInitialized,
            UNAVAILABLE_MESSAGE,
        )
    } else {
        CapabilityError::new(
            CapabilityErrorCode::ExecutionFailed,
            format!(
                "the state database refused the statement ({}); the server's log says why",
                e.plain()
            ),
        )
    }
}

/// A failure to open the store, for the operator starting a process: the whole error, the
/// database named by its URL with the password masked.
fn fail_open(e: PgError) -> CapabilityError {
    let code = if e.is_unavailable() {
        CapabilityErrorCode::RegistryNotInitialized
    } else {
        CapabilityErrorCode::ExecutionFailed
    };
    CapabilityError::new(code, format!("execution store: {e}"))
}

impl PgStore {
    /// Opens (and migrates) the store; with `options`, joins it as a replica (a lease, a
    /// heartbeat, the reaping of dead replicas, notifications), else only to read it.
    pub(crate) fn open(
        url: &PgUrl,
        options: Option<&ReplicaOptions>,
    ) -> Result<PgStore, CapabilityError> {
        let pg = Pg::shared(url).map_err(fail_open)?;
        pg.migrate(&MIGRATIONS).map_err(fail_open)?;
        let Some(options) = options else {
            return Ok(PgStore {
                pg,
                replica: Arc::new(Replica {
                    id: String::new(),
                    name: String::new(),
                    lease: Duration::ZERO,
                }),
                signals: broadcast::channel(1).0,
                tasks: Vec::new(),
                recovered: Vec::new(),
                kept: Arc::default(),
            });
        };
        let timeout = options.timeout.max(Duration::from_secs(3));
        let host = host_name();
        let replica = Arc::new(Replica {
            id: replica_id(),
            name: options
                .name
                .clone()
                .unwrap_or_else(|| format!("{host}:{}", std::process::id())),
            lease: timeout / 2,
        });
        {
            let replica = replica.clone();
            pg.block(move |c| async move { join(&c, &replica, &host).await })
                .map_err(fail_open)?;
        }
        let recovered = pg.block(reap).map_err(fail_open)?;
        kill_leftovers(&recovered);
        if !recovered.is_empty() {
            tracing::warn!(
                count = recovered.len(),
                "marked failed the executions of replicas that stopped"
            );
        }
        let (signals, _) = broadcast::channel(1024);
        let beat = timeout / 6;
        let tasks = vec![
            pg.spawn(listen(pg.clone(), replica.clone(), signals.clone()))
                .abort_handle(),
            pg.spawn(heartbeat(
                pg.clone(),
                replica.clone(),
                signals.clone(),
                beat,
            ))
            .abort_handle(),
            pg.spawn(pick_up_stops(pg.clone(), replica.clone(), signals.clone()))
                .abort_handle(),
        ];
        tracing::info!(replica = %replica.name, id = %replica.id, database = %url, "joined the shared execution store");
        Ok(PgStore {
            pg,
            replica,
            signals,
            tasks,
            recovered,
            kept: Arc::default(),
        })
    }

    pub(crate) fn recovered(&self) -> &[String] {
        &self.recovered
    }

    pub(crate) fn replica_name(&self) -> &str {
        &self.replica.name
    }

    pub(crate) fn spawn<F>(&self, task: F) -> tokio::task::JoinHandle<()>
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.pg.spawn(task)
    }

    pub(crate) fn signals(&self) -> broadcast::Receiver<StoreSignal> {
        self.signals.subscribe()
    }

    pub(crate) async fn insert(&self, record: &ExecutionRecord) -> Result<(), CapabilityError> {
        let r = record.clone();
        let me = self.replica.id.clone();
        let payload = event_payload(&me, &r.execution_id);
        self.pg
            .run(move |c| async move {
                let statement = c.prepare_cached(INSERT).await?;
                c.execute(
                    &statement,
                    &[
                        &r.execution_id,
                        &r.capability,
                        &r.capability_type,
                        &r.executor,
                        &r.capability_path,
                        &r.parent_id,
                        &r.principal,
                        &r.status.as_str(),
                        &r.params.to_string(),
                        &(r.created_ms as i64),
                        &me,
                        &payload,
                    ],
                )
                .await
                .map(|_| ())
            })
            .await
            .map_err(fail)
    }

    pub(crate) async fn set_status(
        &self,
        id: &str,
        status: ExecutionStatus,
        detail: Option<&str>,
    ) -> Result<(), CapabilityError> {
        let (id, detail) = (id.to_string(), detail.map(str::to_string));
        let payload = event_payload(&self.replica.id, &id);
        let now = now_ms() as i64;
        self.pg
            .run(move |c| async move {
                let statement = c.prepare_cached(SET_STATUS).await?;
                c.execute(
                    &statement,
                    &[&id, &status.as_str(), &now, &detail, &payload],
                )
                .await
                .map(|_| ())
            })
            .await
            .map_err(fail)
    }

    pub(crate) async fn set_pgid(
        &self,
        id: &str,
        pgid: Option<u32>,
    ) -> Result<(), CapabilityError> {
        let id = id.to_string();
        let pgid = pgid.map(|p| p as i32);
        self.pg
            .run(move |c| async move {
                c.execute(
                    "UPDATE executions SET pgid = $2 WHERE id = $1",
                    &[&id, &pgid],
                )
                .await
                .map(|_| ())
            })
            .await
            .map_err(fail)
    }

    pub(crate) async fn finish(
        &self,
        id: &str,
        status: ExecutionStatus,
        result: Option<&Value>,
        additional_context: Option<&Value>,
        error: Option<&CapabilityError>,
        logs: &[String],
    ) -> Result<Option<u64>, CapabilityError> {
        let now = now_ms();
        let end = End {
            id: id.to_string(),
            status: status.as_str(),
            result: result.map(Value::to_string),
            context: additional_context.map(Value::to_string),
            code: error.map(|e| e.code.as_str().to_string()),
            message: error.map(|e| e.message.clone()),
            ended_ms: now as i64,
            logs: (!logs.is_empty()).then(|| Value::from(logs).to_string()),
            payload: event_payload(&self.replica.id, id),
        };
        match end.write(&self.pg).await {
            Ok(written) => Ok(written.then_some(now)),
            // The database is away: the end is kept and written when it is back, and is
            // reported now (its waiters get the outcome, not an error).
            Err(e) if e.is_unavailable() => {
                self.kept.keep(&self.pg, end, &e);
                Ok(Some(now))
            }
            Err(e) => Err(fail(e)),
        }
    }

    pub(crate) async fn pause(
        &self,
        id: &str,
        pending: &PendingApproval,
        ledger: &str,
        logs: &[String],
    ) -> Result<bool, CapabilityError> {
        let now = now_ms() as i64;
        let id = id.to_string();
        let payload = event_payload(&self.replica.id, &id);
        let detail = pause_detail(pending);
        let pending = serde_json::to_string(pending).map_err(|e| {
            CapabilityError::new(
                CapabilityErrorCode::ExecutionFailed,
                format!("execution store: {e}"),
            )
        })?;
        let logs = (!logs.is_empty()).then(|| Value::from(logs).to_string());
        let ledger = ledger.to_string();
        let bytes = ledger.len() as i32;
        self.pg
            .run(move |c| async move {
                let statement = c.prepare_cached(PAUSE).await?;
                let paused = c
                    .query_opt(
                        &statement,
                        &[
                            &id, &pending, &logs, &now, &ledger, &bytes, &detail, &payload,
                        ],
                    )
                    .await?;
                Ok(paused.is_some())
            })
            .await
            .map_err(fail)
    }

    pub(crate) async fn resume(
        &self,
        id: &str,
        take: &Take<'_>,
    ) -> Result<Option<(ExecutionRecord, String)>, CapabilityError> {
        let now = now_ms() as i64;
        let id = id.to_string();
        let me = self.replica.id.clone();
        let payload = json!({"r": me, "id": id, "e": "resumed"}).to_string();
        let (call, decision) = match take {
            Take::Decision(d) => (
                Some(i64::from(d.call)),
                Some(serde_json::to_string(d).map_err(|e| {
                    CapabilityError::new(
                        CapabilityErrorCode::ExecutionFailed,
                        format!("execution store: {e}"),
                    )
                })?),
            ),
            Take::Stop => (None, None),
        };
        self.pg
            .run(move |c| async move {
                let statement = c.prepare_cached(&RESUME).await?;
                let row = c
                    .query_opt(
                        &statement,
                        &[&id, &now, &me, &RESUMED_DETAIL, &payload, &call, &decision],
                    )
                    .await?;
                Ok(row.map(|row| {
                    let ledger = row.get::<_, Option<String>>(20).unwrap_or_default();
                    (record(&row), ledger)
                }))
            })
            .await
            .map_err(fail)
    }

    pub(crate) async fn paused_usage(
        &self,
        principal: Option<&str>,
    ) -> Result<(u64, u64), CapabilityError> {
        let principal = principal.map(str::to_string);
        self.pg
            .run(move |c| async move {
                let row = c
                    .query_one(
                        "SELECT COUNT(*), COALESCE(SUM(l.bytes), 0)::bigint FROM executions e LEFT JOIN ledgers l ON l.execution_id = e.id WHERE e.status = 'awaiting_approval' AND e.principal IS NOT DISTINCT FROM $1",
                        &[&principal],
                    )
                    .await?;
                Ok((
                    row.get::<_, i64>(0).max(0) as u64,
                    row.get::<_, i64>(1).max(0) as u64,
                ))
            })
            .await
            .map_err(fail)
    }

    pub(crate) async fn paused_before(
        &self,
        before_ms: u64,
    ) -> Result<Vec<String>, CapabilityError> {
        let before = before_ms as i64;
        self.pg
            .run(move |c| async move {
                let rows = c
                    .query(
                        "SELECT id FROM executions WHERE status = 'awaiting_approval' AND updated_ms < $1 ORDER BY updated_ms",
                        &[&before],
                    )
                    .await?;
                Ok(rows.iter().map(|r| r.get::<_, String>(0)).collect())
            })
            .await
            .map_err(fail)
    }

    #[cfg(any(test, feature = "serve"))]
    pub(crate) async fn ledger(&self, id: &str) -> Result<Option<String>, CapabilityError> {
        let id = id.to_string();
        self.pg
            .run(move |c| async move {
                let row = c
                    .query_opt("SELECT ledger FROM ledgers WHERE execution_id = $1", &[&id])
                    .await?;
                Ok(row.map(|r| r.get(0)))
            })
            .await
            .map_err(fail)
    }

    pub(crate) async fn request_stop(&self, id: &str) -> Result<bool, CapabilityError> {
        let id = id.to_string();
        let now = now_ms() as i64;
        self.pg
            .run(move |mut c| async move {
                let tx = c.transaction().await?;
                let owner = tx
                    .query_opt(
                        "UPDATE executions SET stop_requested_ms = COALESCE(stop_requested_ms, $2) WHERE id = $1 AND status IN ('starting', 'running', 'stopping') RETURNING owner_replica",
                        &[&id, &now],
                    )
                    .await?;
                let Some(owner) = owner else {
                    return Ok(false);
                };
                let owner: String = owner.get(0);
                let payload = json!({"owner": owner, "id": id}).to_string();
                tx.execute("SELECT pg_notify($1, $2)", &[&STOPS, &payload])
                    .await?;
                tx.commit().await?;
                Ok(true)
            })
            .await
            .map_err(fail)
    }

    pub(crate) async fn get(&self, id: &str) -> Result<Option<ExecutionRecord>, CapabilityError> {
        let id = id.to_string();
        self.pg
            .run(move |c| async move {
                // Prepared once per connection: one round trip, not two.
                let statement = c.prepare_cached(&GET).await?;
                let row = c.query_opt(&statement, &[&id]).await?;
                Ok(row.map(|r| record(&r)))
            })
            .await
            .map_err(fail)
    }

    pub(crate) async fn list(
        &self,
        filter: &ExecutionFilter,
    ) -> Result<Vec<ExecutionRecord>, CapabilityError> {
        let limit = i64::from(filter.limit.unwrap_or(1_000).min(MAX_LIST));
        let status = filter.status.map(|s| s.as_str().to_string());
        let parent = filter.parent_id.clone();
        let capability = filter.capability.clone();
        let principal = filter.principal.clone();
        self.pg
            .run(move |c| async move {
                let rows = c
                    .query(
                        &format!(
                            "SELECT {SUMMARY_COLUMNS} FROM {FROM}
                             WHERE ($1::text IS NULL OR e.status = $1) AND ($2::text IS NULL OR e.parent_id = $2) AND ($3::text IS NULL OR e.capability = $3) AND ($5::text IS NULL OR e.principal = $5)
                             ORDER BY e.created_ms DESC, e.id DESC LIMIT $4"
                        ),
                        &[&status, &parent, &capability, &limit, &principal],
                    )
                    .await?;
                Ok(rows.iter().map(record).collect())
            })
            .await
            .map_err(fail)
    }

    pub(crate) async fn history(&self, id: &str) -> Result<Vec<StatusChange>, CapabilityError> {
        let id = id.to_string();
        self.pg
            .run(move |c| async move {
                let rows = c
                    .query(
                        "SELECT status, at_ms, detail FROM status_history WHERE execution_id = $1 ORDER BY seq",
                        &[&id],
                    )
                    .await?;
                Ok(rows
                    .iter()
                    .map(|r| StatusChange {
                        status: r
                            .get::<_, String>(0)
                            .parse()
                            .unwrap_or(ExecutionStatus::Failed),
                        at_ms: r.get::<_, i64>(1) as u64,
                        detail: r.get(2),
                    })
                    .collect())
            })
            .await
            .map_err(fail)
    }

    pub(crate) async fn close(&self) {
        // Ends still kept get a last chance before the replica says it stopped (its
        // executions would then be failed by the others' reaper).
        let left = self.kept.settle(CLOSE_SETTLE).await;
        if left > 0 {
            tracing::warn!(
                left,
                "the database did not take the end of {left} execution(s) before this replica stopped; the other replicas will mark them failed"
            );
        }
        let id = self.replica.id.clone();
        let closed = self
            .pg
            .run(move |c| async move {
                c.execute(
                    "UPDATE replicas SET stopped_at = now() WHERE id = $1",
                    &[&id],
                )
                .await
            })
            .await;
        if let Err(e) = closed {
            tracing::warn!(
                "cannot record this replica stopped (the others will see its lease run out): {e}"
            );
        }
    }
}

/// The payload of an `execbox_events` notification.
fn event_payload(replica: &str, id: &str) -> String {
    json!({"r": replica, "id": id}).to_string()
}

fn record(row: &Row) -> ExecutionRecord {
    let json = |i: usize| -> Option<Value> {
        row.get::<_, Option<String>>(i)
            .and_then(|t| serde_json::from_str(&t).ok())
    };
    let error_code: Option<String> = row.get(11);
    let error_message: Option<String> = row.get(12);
    ExecutionRecord {
        execution_id: row.get(0),
        capability: row.get(1),
        capability_type: row.get(2),
        executor: row.get(3),
        capability_path: row.get(4),
        parent_id: row.get(5),
        principal: row.get(6),
        status: row
            .get::<_, String>(7)
            .parse()
            .unwrap_or(ExecutionStatus::Failed),
        params: json(8).unwrap_or(Value::Null),
        result: json(9),
        additional_context: json(10),
        error: error_code.map(|code| CapabilityError {
            code: CapabilityErrorCode::parse(&code).unwrap_or(CapabilityErrorCode::ExecutionFailed),
            message: error_message.unwrap_or_default(),
        }),
        created_ms: row.get::<_, i64>(13) as u64,
        updated_ms: row.get::<_, i64>(14) as u64,
        ended_ms: row.get::<_, Option<i64>>(15).map(|t| t as u64),
        logs: json(16)
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default(),
        replica: row.get(17),
        pending_approval: json(18)
            .and_then(|v| serde_json::from_value::<PendingApproval>(v).ok())
            .map(PendingApproval::with_digest),
        decisions: json(19)
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default(),
    }
}

/// Records this replica with a fresh lease (again, when it was marked stopped meanwhile).
async fn join(
    c: &execbox_pg::Client,
    replica: &Replica,
    host: &str,
) -> Result<(), execbox_pg::DriverError> {
    let lease = replica.lease.as_secs_f64();
    c.execute(
        "INSERT INTO replicas (id, name, host, pid, lease_until) VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5))
         ON CONFLICT (id) DO UPDATE SET stopped_at = NULL, heartbeat_at = now(), lease_until = now() + make_interval(secs => $5)",
        &[&replica.id, &replica.name, &host, &(std::process::id() as i32), &lease],
    )
    .await
    .map(|_| ())
}

async fn reap(c: execbox_pg::Client) -> Result<Vec<String>, execbox_pg::DriverError> {
    let rows = c
        .query(
            REAP,
            &[
                &(now_ms() as i64),
                &CapabilityErrorCode::ExecutionFailed.as_str(),
            ],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Kills what the reaped executions left running on this machine: only processes that carry
/// the execution's own id (see `sqlite.rs`), so nothing else, here or elsewhere.
fn kill_leftovers(ids: &[String]) {
    for id in ids {
        let killed = execbox_host::supervisor::kill_marked(EXECUTION_ID_ENV, id);
        if killed > 0 {
            tracing::debug!(execution = %id, killed, "killed what the execution left running");
        }
    }
}

/// The executions this replica runs that another asked it to stop.
async fn pending_stops(pg: &Pg, me: &str) -> Result<Vec<String>, PgError> {
    let me = me.to_string();
    pg.run(move |c| async move {
        let rows = c
            .query(
                "SELECT id FROM executions WHERE owner_replica = $1 AND stop_requested_ms IS NOT NULL AND status IN ('starting', 'running', 'stopping')",
                &[&me],
            )
            .await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    })
    .await
}

/// Renews the lease and reaps dead replicas, every `beat`.
async fn heartbeat(
    pg: Pg,
    replica: Arc<Replica>,
    signals: broadcast::Sender<StoreSignal>,
    beat: Duration,
) {
    let host = host_name();
    let mut ticks = tokio::time::interval(beat);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let renewed = {
            let replica = replica.clone();
            let lease = replica.lease.as_secs_f64();
            pg.run(move |c| async move {
                c.execute(
                    "UPDATE replicas SET heartbeat_at = now(), lease_until = now() + make_interval(secs => $2) WHERE id = $1 AND stopped_at IS NULL",
                    &[&replica.id, &lease],
                )
                .await
            })
            .await
        };
        match renewed {
            Ok(1) => {}
            Ok(_) => {
                tracing::error!(replica = %replica.name, "this replica was marked stopped (it missed its lease) and its executions failed; joining again and stopping what it still runs of them");
                let me = replica.id.clone();
                let failed = pg
                    .run(move |c| async move {
                        let rows = c.query("SELECT id FROM executions WHERE owner_replica = $1 AND status = 'failed' AND error_message LIKE 'interrupted: replica %'", &[&me]).await?;
                        Ok(rows.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>())
                    })
                    .await
                    .unwrap_or_default();
                for id in failed {
                    let _ = signals.send(StoreSignal::Stop(id));
                }
                let (replica, host) = (replica.clone(), host.clone());
                if let Err(e) = pg
                    .run(move |c| async move { join(&c, &replica, &host).await })
                    .await
                {
                    tracing::error!("cannot join the shared store again: {e}");
                }
            }
            Err(e) => {
                tracing::warn!("cannot renew this replica's lease: {e}");
                continue;
            }
        }
        match pg.run(reap).await {
            Ok(ids) if !ids.is_empty() => {
                tracing::warn!(
                    count = ids.len(),
                    "marked failed the executions of replicas that stopped"
                );
                let leftovers = ids.clone();
                let _ = tokio::task::spawn_blocking(move || kill_leftovers(&leftovers)).await;
            }
            Ok(_) => {}
            Err(e) => tracing::warn!("cannot check the other replicas' leases: {e}"),
        }
    }
}

/// How often a replica reads the stops asked of its executions, whatever it heard: the
/// table is the truth, and a stop whose notification was lost (or came before the
/// execution was live here, as while it is being resumed) is applied within about this long.
const STOP_PICKUP: Duration = Duration::from_secs(1);

/// Asks this replica to stop, every [`STOP_PICKUP`], each of its executions whose stop was
/// asked (`stop_requested_ms`) and that has not ended yet.
async fn pick_up_stops(pg: Pg, replica: Arc<Replica>, signals: broadcast::Sender<StoreSignal>) {
    let mut ticks = tokio::time::interval(STOP_PICKUP);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if let Ok(ids) = pending_stops(&pg, &replica.id).await {
            for id in ids {
                let _ = signals.send(StoreSignal::Stop(id));
            }
        }
    }
}

/// Turns notifications into [`StoreSignal`]s for this replica.
async fn listen(pg: Pg, replica: Arc<Replica>, signals: broadcast::Sender<StoreSignal>) {
    let mut listener = pg.listen(&[EVENTS, STOPS]);
    while let Some(notice) = listener.recv().await {
        match notice {
            execbox_pg::Notice::Resync => {
                let _ = signals.send(StoreSignal::Resync);
                if let Ok(ids) = pending_stops(&pg, &replica.id).await {
                    for id in ids {
                        let _ = signals.send(StoreSignal::Stop(id));
                    }
                }
            }
            execbox_pg::Notice::Notification { channel, payload } => {
                let Ok(payload) = serde_json::from_str::<Value>(&payload) else {
                    continue;
                };
                let id = payload["id"].as_str().unwrap_or_default().to_string();
                if channel == EVENTS && payload["r"] != replica.id.as_str() {
                    let _ = signals.send(if payload["e"] == "resumed" {
                        StoreSignal::Resumed(id)
                    } else {
                        StoreSignal::Changed(id)
                    });
                } else if channel == STOPS && payload["owner"] == replica.id.as_str() {
                    let _ = signals.send(StoreSignal::Stop(id));
                }
            }
        }
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// A fresh replica id: `rep_<unix-ms>_<8 hex>`.
fn replica_id() -> String {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 4];
    let _ = ring::rand::SystemRandom::new().fill(&mut bytes);
    format!(
        "rep_{}_{:02x}{:02x}{:02x}{:02x}_{}",
        now_ms(),
        bytes[0],
        bytes[1],
        bytes[2],
        bytes[3],
        std::process::id()
    )
}

#[cfg(test)]
mod tests {
    use execbox_pg::testing::TestServer;
    use serde_json::json;

    use super::*;
    use crate::store::{ExecutionStore, ReplicaOptions};
    use execbox_policy::StoreLocation;

    fn record(id: &str) -> ExecutionRecord {
        ExecutionRecord {
            execution_id: id.into(),
            capability: "c".into(),
            capability_type: "script".into(),
            executor: "script".into(),
            capability_path: "/c".into(),
            parent_id: Some("agent".into()),
            principal: Some("alice".into()),
            status: ExecutionStatus::Starting,
            params: json!({"a": 1}),
            result: None,
            additional_context: None,
            error: None,
            logs: Vec::new(),
            created_ms: now_ms(),
            updated_ms: now_ms(),
            ended_ms: None,
            replica: None,
            pending_approval: None,
            decisions: Vec::new(),
        }
    }

    fn open(url: &str, name: &str, timeout: Duration) -> ExecutionStore {
        ExecutionStore::open_at(
            &StoreLocation::parse(url).unwrap(),
            &ReplicaOptions {
                name: Some(name.into()),
                timeout,
            },
        )
        .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn records_and_history_read_as_in_sqlite_and_an_end_is_written_once() {
        let Some(server) = TestServer::start_or_skip() else {
            return;
        };
        let url = server.database("records");
        let store = open(&url, "one", Duration::from_secs(30));
        store.insert(&record("x")).await.unwrap();
        store
            .set_status("x", ExecutionStatus::Running, None)
            .await
            .unwrap();
        // `running` only from `starting`.
        store
            .set_status("x", ExecutionStatus::Running, None)
            .await
            .unwrap();
        let ended = store
            .finish(
                "x",
                ExecutionStatus::Completed,
                Some(&json!(2)),
                None,
                None,
                &["log".into()],
            )
            .await
            .unwrap();
        assert!(ended.is_some());
        let again = store
            .finish("x", ExecutionStatus::Failed, None, None, None, &[])
            .await
            .unwrap();
        assert_eq!(again, None, "one terminal status");
        let got = store.get("x").await.unwrap().unwrap();
        assert_eq!(got.status, ExecutionStatus::Completed);
        assert_eq!(got.result, Some(json!(2)));
        assert_eq!(got.params, json!({"a": 1}));
        assert_eq!(got.logs, ["log"]);
        assert_eq!(got.replica.as_deref(), Some("one"));
        let statuses: Vec<ExecutionStatus> = store
            .history("x")
            .await
            .unwrap()
            .into_iter()
            .map(|h| h.status)
            .collect();
        assert_eq!(
            statuses,
            [
                ExecutionStatus::Starting,
                ExecutionStatus::Running,
                ExecutionStatus::Completed
            ]
        );
        let listed = store
            .list(&ExecutionFilter {
                principal: Some("alice".into()),
                status: Some(ExecutionStatus::Completed),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].params, Value::Null, "lists are summaries");
        assert!(store
            .list(&ExecutionFilter {
                principal: Some("bob".into()),
                ..Default::default()
            })
            .await
            .unwrap()
            .is_empty());
        assert!(store.get("nope").await.unwrap().is_none());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_replica_past_its_lease_is_reaped_then_stops_what_it_still_runs() {
        let Some(server) = TestServer::start_or_skip() else {
            return;
        };
        let url = server.database("fencing");
        let paused = open(&url, "paused", Duration::from_secs(3));
        let mut signals = paused.signals().unwrap();
        paused.insert(&record("mine")).await.unwrap();
        // As if it had been paused past its lease and another replica's reaper had seen it
        // run out: in one transaction, which its own heartbeat waits for (the row is locked).
        // (The lease running out by itself is tested with a SIGKILLed `execbox serve`.)
        let other = Pg::new(&PgUrl::parse(&url).unwrap(), Default::default()).unwrap();
        let reaped = other
            .run(|mut c| async move {
                let tx = c.transaction().await?;
                tx.execute(
                    "UPDATE replicas SET lease_until = now() - interval '1 second' WHERE name = 'paused'",
                    &[],
                )
                .await?;
                let rows = tx
                    .query(
                        REAP,
                        &[&(now_ms() as i64), &CapabilityErrorCode::ExecutionFailed.as_str()],
                    )
                    .await?;
                tx.commit().await?;
                Ok(rows.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>())
            })
            .await
            .unwrap();
        assert_eq!(reaped, ["mine"]);
        let other = open(&url, "other", Duration::from_secs(3));
        let failed = other.get("mine").await.unwrap().unwrap();
        assert_eq!(failed.status, ExecutionStatus::Failed);
        assert_eq!(
            failed.error.unwrap().message,
            "interrupted: replica paused stopped"
        );
        // The paused replica, at its next beat, finds itself fenced: it is asked to stop what
        // it still runs of its failed executions, and joins again.
        let stop = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                if let Ok(StoreSignal::Stop(id)) = signals.recv().await {
                    return id;
                }
            }
        })
        .await
        .expect("a stop within two beats");
        assert_eq!(stop, "mine");
        // Its late end does not overwrite the reaper's.
        let late = paused
            .finish(
                "mine",
                ExecutionStatus::Completed,
                Some(&json!(1)),
                None,
                None,
                &[],
            )
            .await
            .unwrap();
        assert_eq!(late, None);
        assert_eq!(
            paused.get("mine").await.unwrap().unwrap().status,
            ExecutionStatus::Failed
        );
    }

    fn pending() -> PendingApproval {
        PendingApproval {
            tool: "bank.transfer".into(),
            input: json!({"to": "bob", "amount": 5}),
            call: 2,
            input_sha256: execbox_host::input_sha256(&json!({"to": "bob", "amount": 5})),
            permission: "bank:approve".into(),
            self_approval: true,
            rule: None,
            reason: None,
            approvers: Vec::new(),
            under_policy: false,
            since_ms: 1_700_000_000_000,
        }
    }

    const LEDGER: &str = r#"{"calls": [{"tool": "bank.balance", "result": 7}], "random": [0.5]}"#;

    async fn statuses(store: &ExecutionStore, id: &str) -> Vec<ExecutionStatus> {
        store
            .history(id)
            .await
            .unwrap()
            .into_iter()
            .map(|h| h.status)
            .collect()
    }

    async fn running(store: &ExecutionStore, id: &str) {
        store.insert(&record(id)).await.unwrap();
        store
            .set_status(id, ExecutionStatus::Running, None)
            .await
            .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_decision_takes_a_paused_execution_only_at_the_call_it_names_and_is_kept() {
        let Some(server) = TestServer::start_or_skip() else {
            return;
        };
        let url = server.database("decide");
        let store = open(&url, "one", Duration::from_secs(30));
        running(&store, "p").await;
        assert!(store.pause("p", &pending(), LEDGER, &[]).await.unwrap());
        assert_eq!(
            store.paused_usage(Some("alice")).await.unwrap(),
            (1, LEDGER.len() as u64)
        );
        assert_eq!(store.paused_usage(None).await.unwrap(), (0, 0));
        let decision = |call: u32, approved: bool| crate::records::DecisionRecord {
            call,
            tool: "bank.transfer".into(),
            input_sha256: pending().input_sha256,
            approved,
            by: Some("ops".into()),
            reason: None,
            at_ms: 1_700_000_000_001,
        };
        // An approval of another call takes nothing.
        let stale = decision(1, true);
        assert!(store
            .resume("p", &Take::Decision(&stale))
            .await
            .unwrap()
            .is_none());
        assert_eq!(
            store.get("p").await.unwrap().unwrap().status,
            ExecutionStatus::AwaitingApproval
        );
        let right = decision(2, true);
        assert!(store
            .resume("p", &Take::Decision(&right))
            .await
            .unwrap()
            .is_some());
        let now = store.get("p").await.unwrap().unwrap();
        assert_eq!(now.status, ExecutionStatus::Running);
        assert_eq!(now.decisions, vec![right.clone()]);
        // Paused again at call 4: the earlier decision takes nothing, a new one is appended.
        let later = PendingApproval {
            call: 4,
            ..pending()
        };
        assert!(store.pause("p", &later, LEDGER, &[]).await.unwrap());
        assert!(store
            .resume("p", &Take::Decision(&right))
            .await
            .unwrap()
            .is_none());
        let fourth = decision(4, false);
        assert!(store
            .resume("p", &Take::Decision(&fourth))
            .await
            .unwrap()
            .is_some());
        assert_eq!(
            store.get("p").await.unwrap().unwrap().decisions,
            vec![right, fourth]
        );
        assert!(store.paused_before(u64::MAX).await.unwrap().is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_paused_execution_has_no_owner_and_resumes_once_under_its_resumer() {
        let Some(server) = TestServer::start_or_skip() else {
            return;
        };
        let url = server.database("pause");
        let store = open(&url, "one", Duration::from_secs(30));
        running(&store, "p").await;
        let logs = vec!["balance 7".to_string()];
        assert!(store.pause("p", &pending(), LEDGER, &logs).await.unwrap());
        let paused = store.get("p").await.unwrap().unwrap();
        assert_eq!(paused.status, ExecutionStatus::AwaitingApproval);
        assert_eq!(paused.pending_approval, Some(pending()));
        assert_eq!(paused.logs, logs);
        assert_eq!(paused.replica, None, "no replica runs it");
        assert_eq!(
            statuses(&store, "p").await,
            [
                ExecutionStatus::Starting,
                ExecutionStatus::Running,
                ExecutionStatus::AwaitingApproval
            ]
        );
        assert_eq!(
            store.history("p").await.unwrap()[2].detail.as_deref(),
            Some("awaiting approval of `bank.transfer` (call 2)")
        );
        assert_eq!(store.ledger("p").await.unwrap().as_deref(), Some(LEDGER));
        let listed = store
            .list(&ExecutionFilter {
                status: Some(ExecutionStatus::AwaitingApproval),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].pending_approval, Some(pending()));
        // A stop request finds nothing to stop: no replica runs it.
        assert!(!store.request_stop("p").await.unwrap());

        let (was, ledger) = store
            .resume("p", &Take::Stop)
            .await
            .unwrap()
            .expect("resumed");
        assert_eq!(ledger, LEDGER, "byte for byte");
        assert_eq!(was.status, ExecutionStatus::AwaitingApproval);
        assert_eq!(was.pending_approval, Some(pending()));
        assert_eq!(was.logs, logs);
        assert_eq!(was.principal.as_deref(), Some("alice"));
        let now = store.get("p").await.unwrap().unwrap();
        assert_eq!(now.status, ExecutionStatus::Running);
        assert_eq!(now.pending_approval, None);
        assert_eq!(now.replica.as_deref(), Some("one"));
        assert_eq!(
            store.history("p").await.unwrap()[3].detail.as_deref(),
            Some(RESUMED_DETAIL)
        );
        assert_eq!(store.ledger("p").await.unwrap(), None);
        assert!(store.resume("p", &Take::Stop).await.unwrap().is_none());
        assert!(store.resume("nope", &Take::Stop).await.unwrap().is_none());

        // Only a running execution pauses, and one asked to stop does not.
        store
            .finish("p", ExecutionStatus::Completed, None, None, None, &[])
            .await
            .unwrap();
        assert!(!store.pause("p", &pending(), LEDGER, &[]).await.unwrap());
        assert_eq!(store.ledger("p").await.unwrap(), None);
        running(&store, "asked").await;
        assert!(store.request_stop("asked").await.unwrap());
        assert!(!store.pause("asked", &pending(), LEDGER, &[]).await.unwrap());
        assert_eq!(
            store.get("asked").await.unwrap().unwrap().status,
            ExecutionStatus::Running
        );

        // An oversize ledger is refused, and nothing written.
        running(&store, "big").await;
        let e = store
            .pause(
                "big",
                &pending(),
                &"x".repeat(super::super::MAX_LEDGER_BYTES + 1),
                &[],
            )
            .await
            .unwrap_err();
        assert!(
            e.message.contains("more than the 8388608 bytes (8 MiB)"),
            "{e}"
        );
        assert_eq!(
            store.get("big").await.unwrap().unwrap().status,
            ExecutionStatus::Running
        );
        assert_eq!(store.ledger("big").await.unwrap(), None);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_paused_execution_ends_denied_or_stopped_and_its_ledger_is_deleted() {
        let Some(server) = TestServer::start_or_skip() else {
            return;
        };
        let url = server.database("deny");
        let store = open(&url, "one", Duration::from_secs(30));
        running(&store, "denied").await;
        assert!(store
            .pause("denied", &pending(), LEDGER, &["so far".into()])
            .await
            .unwrap());
        let denial = CapabilityError::new(
            CapabilityErrorCode::ApprovalDenied,
            "`bank.transfer` was denied by carol",
        );
        assert!(store
            .finish(
                "denied",
                ExecutionStatus::Failed,
                None,
                None,
                Some(&denial),
                &[]
            )
            .await
            .unwrap()
            .is_some());
        let denied = store.get("denied").await.unwrap().unwrap();
        assert_eq!(denied.status, ExecutionStatus::Failed);
        assert_eq!(denied.error, Some(denial));
        assert_eq!(denied.pending_approval, None);
        assert_eq!(denied.logs, ["so far"]);
        assert_eq!(store.ledger("denied").await.unwrap(), None);
        assert!(store.resume("denied", &Take::Stop).await.unwrap().is_none());

        running(&store, "stopped").await;
        assert!(store
            .pause("stopped", &pending(), LEDGER, &[])
            .await
            .unwrap());
        store
            .set_status("stopped", ExecutionStatus::Stopping, None)
            .await
            .unwrap();
        assert_eq!(
            store.get("stopped").await.unwrap().unwrap().status,
            ExecutionStatus::AwaitingApproval,
            "no replica runs it to be stopping"
        );
        assert!(store
            .finish("stopped", ExecutionStatus::Stopped, None, None, None, &[])
            .await
            .unwrap()
            .is_some());
        assert_eq!(
            statuses(&store, "stopped").await,
            [
                ExecutionStatus::Starting,
                ExecutionStatus::Running,
                ExecutionStatus::AwaitingApproval,
                ExecutionStatus::Stopped
            ]
        );
        assert_eq!(store.ledger("stopped").await.unwrap(), None);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn of_concurrent_resumes_on_two_replicas_exactly_one_wins_and_the_other_hears_it() {
        let Some(server) = TestServer::start_or_skip() else {
            return;
        };
        let url = server.database("race");
        let a = Arc::new(open(&url, "a", Duration::from_secs(30)));
        let b = Arc::new(open(&url, "b", Duration::from_secs(30)));
        let mut heard_by_b = b.signals().unwrap();
        let mut heard_by_a = a.signals().unwrap();
        // Both listen (each hears an execution of the other's) before the races.
        for (store, heard) in [(&a, &mut heard_by_b), (&b, &mut heard_by_a)] {
            let mut listening = false;
            for attempt in 0..50 {
                let id = format!("{}_{attempt}", store.replica().unwrap());
                store.insert(&record(&id)).await.unwrap();
                let heard_it = tokio::time::timeout(Duration::from_millis(200), async {
                    while heard.recv().await != Ok(StoreSignal::Changed(id.clone())) {}
                });
                if heard_it.await.is_ok() {
                    listening = true;
                    break;
                }
            }
            assert!(listening, "the other replica does not listen");
        }
        for round in 0..5 {
            let id = format!("r{round}");
            running(&a, &id).await;
            assert!(a.pause(&id, &pending(), LEDGER, &[]).await.unwrap());
            let tasks: Vec<_> = (0..8)
                .map(|i| {
                    let store = if i % 2 == 0 { a.clone() } else { b.clone() };
                    let id = id.clone();
                    tokio::spawn(async move {
                        let name = store.replica().unwrap().to_string();
                        store
                            .resume(&id, &Take::Stop)
                            .await
                            .unwrap()
                            .map(|(_, ledger)| (name, ledger))
                    })
                })
                .collect();
            let mut winners = Vec::new();
            for task in tasks {
                if let Some((name, ledger)) = task.await.unwrap() {
                    assert_eq!(ledger, LEDGER);
                    winners.push(name);
                }
            }
            assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
            let now = a.get(&id).await.unwrap().unwrap();
            assert_eq!(now.status, ExecutionStatus::Running);
            assert_eq!(now.replica.as_deref(), Some(winners[0].as_str()));
            assert_eq!(
                statuses(&a, &id).await,
                [
                    ExecutionStatus::Starting,
                    ExecutionStatus::Running,
                    ExecutionStatus::AwaitingApproval,
                    ExecutionStatus::Running
                ]
            );
            // The replica that lost hears the resume as one.
            let loser = if winners[0] == "a" {
                &mut heard_by_b
            } else {
                &mut heard_by_a
            };
            let resumed = tokio::time::timeout(Duration::from_secs(10), async {
                loop {
                    if let Ok(StoreSignal::Resumed(heard)) = loser.recv().await {
                        if heard == id {
                            return;
                        }
                    }
                }
            })
            .await;
            assert!(resumed.is_ok(), "round {round}: no resume heard");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_reaper_leaves_a_paused_execution_of_a_dead_replica_for_another_to_resume() {
        let Some(server) = TestServer::start_or_skip() else {
            return;
        };
        let url = server.database("reap_paused");
        let dead = open(&url, "dead", Duration::from_secs(3));
        running(&dead, "paused").await;
        running(&dead, "live").await;
        assert!(dead.pause("paused", &pending(), LEDGER, &[]).await.unwrap());
        // Its lease runs out (as after a SIGKILL), and another replica reaps it.
        let other = Pg::new(&PgUrl::parse(&url).unwrap(), Default::default()).unwrap();
        let reaped = other
            .run(|mut c| async move {
                let tx = c.transaction().await?;
                tx.execute(
                    "UPDATE replicas SET lease_until = now() - interval '1 second' WHERE name = 'dead'",
                    &[],
                )
                .await?;
                let rows = tx
                    .query(
                        REAP,
                        &[&(now_ms() as i64), &CapabilityErrorCode::ExecutionFailed.as_str()],
                    )
                    .await?;
                tx.commit().await?;
                Ok(rows.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>())
            })
            .await
            .unwrap();
        assert_eq!(reaped, ["live"]);
        drop(dead);
        // A replica joining later reaps again at open: still not the paused one.
        let next = open(&url, "next", Duration::from_secs(3));
        assert!(!next.recovered().contains(&"paused".to_string()));
        let paused = next.get("paused").await.unwrap().unwrap();
        assert_eq!(paused.status, ExecutionStatus::AwaitingApproval);
        assert_eq!(paused.pending_approval, Some(pending()));
        assert_eq!(
            next.ledger("paused").await.unwrap().as_deref(),
            Some(LEDGER)
        );
        let (_, ledger) = next
            .resume("paused", &Take::Stop)
            .await
            .unwrap()
            .expect("resumed");
        assert_eq!(ledger, LEDGER);
        let resumed = next.get("paused").await.unwrap().unwrap();
        assert_eq!(resumed.status, ExecutionStatus::Running);
        assert_eq!(resumed.replica.as_deref(), Some("next"));
    }
}
