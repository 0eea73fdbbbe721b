//! The execution store in SQLite (WAL): every execution and its status history, written
//! before any status is reported, and the recovery of executions a dead process left behind.
//!
//! Schema (`PRAGMA user_version` 4, migrated at open; a newer file is refused):
//! - `executions`: one row per execution (id, capability, type, executor, path, parent,
//!   principal, status, params, result, additional context, error code and message, times,
//!   since version 2 `logs`, a JSON array of strings or NULL, and since version 3
//!   `pending_approval`, the JSON of the call it waits on while `awaiting_approval`, and since
//!   version 4 `decisions`, a JSON array of the decisions taken on its calls),
//!   plus `owner_pid` and `owner_start`, the process running it (0 and NULL while no process
//!   does: awaiting approval), and `pgid`, the process group of its external executor while
//!   one runs;
//! - `status_history`: one row per status change (execution, status, time, detail);
//! - `ledgers` (since version 3): the replay ledger of an execution `awaiting_approval`
//!   (execution id, the ledger's text, its bytes, when it was written), deleted when it
//!   resumes or ends.
//!
//! Recovery at open: an execution left `starting`, `running` or `stopping` by a process that
//! is gone is marked `failed` with "interrupted: the server stopped", and what is left of its
//! executor is killed. One `awaiting_approval` is never touched: no process runs it, and it
//! waits for an approver however many servers come and go. The owner is the pid and the start time of the process that ran it
//! (`owner_pid`, `owner_start`, from `/proc`), so a pid reused by another process, or a
//! server that comes back as the same pid 1 of a container, does not keep a dead owner's
//! executions `running`. An owner that is alive (another server on the same file) keeps its
//! executions.
//!
//! The file is not trusted to name what to kill: a recorded `pgid` is only a hint. Its
//! process group is killed only when one of its processes carries the execution's own
//! `EXECBOX_EXECUTION_ID` in its environment (set by execbox after the executor's `env`, so
//! it cannot be forged by configuration), so a stale or planted row cannot kill an unrelated
//! process group. Without `/proc`, nothing is killed.
//! The store uses its own file: do not point a policy's rate-limit `state` at it.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension, Row, TransactionBehavior};
use serde_json::Value;

use crate::records::{
    now_ms, CapabilityError, CapabilityErrorCode, ExecutionFilter, ExecutionRecord,
    ExecutionStatus, PendingApproval, StatusChange,
};

/// The schema version this execbox writes.
const SCHEMA_VERSION: i64 = 4;

/// How long to wait for another process's transaction.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How many prepared statements the connection keeps (rusqlite's default is 16; the store
/// has about twenty).
const STATEMENT_CACHE: usize = 64;

use super::Take;
use super::{EXECUTION_ID_ENV, INTERRUPTED_MESSAGE, MAX_LIST};

/// Executions and their history in one SQLite file. Cheap to share behind an `Arc`; each
/// call takes the one connection's lock for a short transaction.
pub(crate) struct SqliteStore {
    path: PathBuf,
    conn: Mutex<Connection>,
    recovered: Vec<String>,
    /// This process as the owner of the executions it records: its pid and start time, read
    /// once at open (neither changes while it runs).
    owner: (i64, Option<i64>),
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

fn store_error(path: &Path, e: impl std::fmt::Display) -> CapabilityError {
    CapabilityError::new(
        CapabilityErrorCode::RegistryNotInitialized,
        format!("execution store {}: {e}", path.display()),
    )
}

/// The columns of a record, in the order [`record`] reads them.
macro_rules! columns {
    () => {
        "id, capability, type, executor, capability_path, parent_id, principal, status, params, result, additional_context, error_code, error_message, created_ms, updated_ms, ended_ms, logs, pending_approval, decisions"
    };
}

const COLUMNS: &str = columns!();

/// [`COLUMNS`] without the params, result, additional context and logs, for lists.
const SUMMARY_COLUMNS: &str = "id, capability, type, executor, capability_path, parent_id, principal, status, NULL, NULL, NULL, error_code, error_message, created_ms, updated_ms, ended_ms, NULL, pending_approval, decisions";

/// One execution by id.
const GET: &str = concat!("SELECT ", columns!(), " FROM executions WHERE id = ?1");

/// A status change with its detail.
const HISTORY_INSERT: &str =
    "INSERT INTO status_history (execution_id, status, at_ms, detail) VALUES (?1, ?2, ?3, ?4)";

/// A write transaction (`BEGIN DEFERRED`, as rusqlite's `Connection::transaction`) whose
/// `BEGIN`, `COMMIT` and `ROLLBACK` are prepared once, not parsed at every write; rolled back
/// unless committed, on any error or unwinding.
struct Write<'c> {
    conn: &'c Connection,
    done: bool,
}

impl<'c> Write<'c> {
    fn begin(conn: &'c Connection) -> rusqlite::Result<Write<'c>> {
        conn.prepare_cached("BEGIN")?.execute([])?;
        Ok(Write { conn, done: false })
    }

    fn commit(mut self) -> rusqlite::Result<()> {
        self.conn.prepare_cached("COMMIT")?.execute([])?;
        self.done = true;
        Ok(())
    }
}

impl Drop for Write<'_> {
    fn drop(&mut self) {
        // A failed COMMIT (busy) leaves the transaction open: roll it back too.
        if !self.done && !self.conn.is_autocommit() {
            let rolled_back = self
                .conn
                .prepare_cached("ROLLBACK")
                .and_then(|mut s| s.execute([]));
            if let Err(e) = rolled_back {
                tracing::error!("cannot roll back a write of the execution store: {e}");
            }
        }
    }
}

/// The history detail of a resume.
pub(super) const RESUMED_DETAIL: &str = "resumed after approval";

impl SqliteStore {
    /// Opens (creating it and its folder if missing) and migrates `path`, then recovers what
    /// a dead process left running (see the module docs).
    pub(crate) fn open(path: impl AsRef<Path>) -> Result<SqliteStore, CapabilityError> {
        let path = path.as_ref();
        let fail = |e: rusqlite::Error| store_error(path, e);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            let created = !dir.exists();
            std::fs::create_dir_all(dir).map_err(|e| {
                store_error(
                    path,
                    format!("cannot create its folder {}: {e}", dir.display()),
                )
            })?;
            keep_out_of_git(dir, created);
        }
        let mut conn = Connection::open(path).map_err(fail)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(fail)?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
            .map_err(fail)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(store_error(
                path,
                format!("cannot use WAL mode (the file is in {mode} mode)"),
            ));
        }
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(fail)?;
        // Every statement of the hot path stays prepared (`prepare_cached`): parsing SQL
        // cost more than running it.
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(fail)?;
            let version: i64 = tx
                .query_row("PRAGMA user_version", [], |row| row.get(0))
                .map_err(fail)?;
            if version > SCHEMA_VERSION {
                return Err(store_error(
                    path,
                    format!("schema version {version} is newer than this execbox's {SCHEMA_VERSION}; use a newer execbox or another --db"),
                ));
            }
            if version < 1 {
                tx.execute_batch(
                    "CREATE TABLE IF NOT EXISTS executions (
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
                        created_ms INTEGER NOT NULL,
                        updated_ms INTEGER NOT NULL,
                        ended_ms INTEGER,
                        owner_pid INTEGER NOT NULL,
                        owner_start INTEGER,
                        pgid INTEGER
                    );
                    CREATE INDEX IF NOT EXISTS executions_status ON executions (status);
                    CREATE INDEX IF NOT EXISTS executions_parent ON executions (parent_id);
                    CREATE TABLE IF NOT EXISTS status_history (
                        execution_id TEXT NOT NULL,
                        status TEXT NOT NULL,
                        at_ms INTEGER NOT NULL,
                        detail TEXT
                    );
                    CREATE INDEX IF NOT EXISTS status_history_execution ON status_history (execution_id);
                    PRAGMA user_version = 1;",
                )
                .map_err(fail)?;
            }
            if version < 2 {
                tx.execute_batch(
                    "ALTER TABLE executions ADD COLUMN logs TEXT;
                    PRAGMA user_version = 2;",
                )
                .map_err(fail)?;
            }
            if version < 3 {
                tx.execute_batch(
                    "ALTER TABLE executions ADD COLUMN pending_approval TEXT;
                    CREATE TABLE IF NOT EXISTS ledgers (
                        execution_id TEXT PRIMARY KEY REFERENCES executions (id) ON DELETE CASCADE,
                        ledger TEXT NOT NULL,
                        bytes INTEGER NOT NULL,
                        updated_ms INTEGER NOT NULL
                    );
                    PRAGMA user_version = 3;",
                )
                .map_err(fail)?;
            }
            if version < 4 {
                tx.execute_batch(
                    "ALTER TABLE executions ADD COLUMN decisions TEXT;
                    PRAGMA user_version = 4;",
                )
                .map_err(fail)?;
            }
            tx.commit().map_err(fail)?;
        }
        let pid = i64::from(std::process::id());
        let mut store = SqliteStore {
            path: path.to_path_buf(),
            conn: Mutex::new(conn),
            recovered: Vec::new(),
            owner: (pid, start_time(pid)),
        };
        store.recovered = store.recover()?;
        Ok(store)
    }

    /// The file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The executions [`SqliteStore::open`] found interrupted and marked failed.
    pub(crate) fn recovered(&self) -> &[String] {
        &self.recovered
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn fail(&self, e: impl std::fmt::Display) -> CapabilityError {
        store_error(&self.path, e)
    }

    fn recover(&self) -> Result<Vec<String>, CapabilityError> {
        let mut conn = self.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.fail(e))?;
        let rows: Vec<(String, i64, Option<i64>, Option<i64>)> = {
            let mut stmt = tx
                .prepare("SELECT id, owner_pid, owner_start, pgid FROM executions WHERE status IN ('starting', 'running', 'stopping')")
                .map_err(|e| self.fail(e))?;
            let rows = stmt
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                .map_err(|e| self.fail(e))?;
            rows.filter_map(Result::ok).collect()
        };
        let now = now_ms() as i64;
        let mut recovered = Vec::new();
        for (id, owner, owner_start, pgid) in rows {
            if owner_alive(owner, owner_start) {
                continue;
            }
            // Every process that carries the execution's id, in its recorded group or not (a
            // descendant that called setsid), never an unrelated group that reused the id.
            let killed = execbox_host::supervisor::kill_marked(EXECUTION_ID_ENV, &id);
            if killed > 0 || pgid.is_some() {
                tracing::debug!(execution = %id, killed, "killed what the execution left running");
            }
            tx.execute(
                "UPDATE executions SET status = 'failed', error_code = ?2, error_message = ?3, updated_ms = ?4, ended_ms = ?4, pgid = NULL WHERE id = ?1",
                params![id, CapabilityErrorCode::ExecutionFailed.as_str(), INTERRUPTED_MESSAGE, now],
            )
            .map_err(|e| self.fail(e))?;
            tx.execute(
                "INSERT INTO status_history (execution_id, status, at_ms, detail) VALUES (?1, 'failed', ?2, ?3)",
                params![id, now, INTERRUPTED_MESSAGE],
            )
            .map_err(|e| self.fail(e))?;
            tracing::warn!(execution = %id, "marked failed: {INTERRUPTED_MESSAGE}");
            recovered.push(id);
        }
        tx.commit().map_err(|e| self.fail(e))?;
        Ok(recovered)
    }

    /// Records a new execution, owned by this process, with its first status.
    pub(crate) fn insert(&self, record: &ExecutionRecord) -> Result<(), CapabilityError> {
        let (pid, start) = self.owner;
        let conn = self.lock();
        let tx = Write::begin(&conn).map_err(|e| self.fail(e))?;
        conn.prepare_cached(
            "INSERT INTO executions (id, capability, type, executor, capability_path, parent_id, principal, status, params, created_ms, updated_ms, owner_pid, owner_start)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10, ?11, ?12)",
        )
        .and_then(|mut s| {
            s.execute(params![
                record.execution_id,
                record.capability,
                record.capability_type,
                record.executor,
                record.capability_path,
                record.parent_id,
                record.principal,
                record.status.as_str(),
                record.params.to_string(),
                record.created_ms as i64,
                pid,
                start,
            ])
        })
        .map_err(|e| self.fail(e))?;
        conn.prepare_cached(
            "INSERT INTO status_history (execution_id, status, at_ms) VALUES (?1, ?2, ?3)",
        )
        .and_then(|mut s| {
            s.execute(params![
                record.execution_id,
                record.status.as_str(),
                record.created_ms as i64
            ])
        })
        .map_err(|e| self.fail(e))?;
        tx.commit().map_err(|e| self.fail(e))
    }

    /// Moves a live execution to `status`: `running` only from `starting` (a stop asked for
    /// meanwhile stays `stopping`), `stopping` from `starting` or `running`; an execution
    /// that ended, or is `awaiting_approval` (no process runs it: it is stopped by
    /// [`SqliteStore::finish`]), is left as it is.
    pub(crate) fn set_status(
        &self,
        id: &str,
        status: ExecutionStatus,
        detail: Option<&str>,
    ) -> Result<(), CapabilityError> {
        let now = now_ms() as i64;
        let conn = self.lock();
        let tx = Write::begin(&conn).map_err(|e| self.fail(e))?;
        let changed = conn
            .prepare_cached(
                "UPDATE executions SET status = ?2, updated_ms = ?3 WHERE id = ?1 AND (status = 'starting' OR (status = 'running' AND ?2 = 'stopping'))",
            )
            .and_then(|mut s| s.execute(params![id, status.as_str(), now]))
            .map_err(|e| self.fail(e))?;
        if changed > 0 {
            conn.prepare_cached(HISTORY_INSERT)
                .and_then(|mut s| s.execute(params![id, status.as_str(), now, detail]))
                .map_err(|e| self.fail(e))?;
        }
        tx.commit().map_err(|e| self.fail(e))
    }

    /// Records the process group of an execution's executor (`None` once it is gone).
    pub(crate) fn set_pgid(&self, id: &str, pgid: Option<u32>) -> Result<(), CapabilityError> {
        self.lock()
            .execute(
                "UPDATE executions SET pgid = ?2 WHERE id = ?1",
                params![id, pgid.map(i64::from)],
            )
            .map(|_| ())
            .map_err(|e| self.fail(e))
    }

    /// Ends an execution that is live or `awaiting_approval`: its terminal status, result and
    /// error, its pending approval cleared and its ledger deleted; `Ok(None)` when it had
    /// ended already (another process recovered it), which leaves its recorded end alone.
    pub(crate) fn finish(
        &self,
        id: &str,
        status: ExecutionStatus,
        result: Option<&Value>,
        additional_context: Option<&Value>,
        error: Option<&CapabilityError>,
        logs: &[String],
    ) -> Result<Option<u64>, CapabilityError> {
        let now = now_ms();
        let conn = self.lock();
        let tx = Write::begin(&conn).map_err(|e| self.fail(e))?;
        // One terminal status per execution: an execution another process already ended
        // (recovered as interrupted) keeps that end.
        let changed = conn
            .prepare_cached(
                "UPDATE executions SET status = ?2, result = ?3, additional_context = ?4, error_code = ?5, error_message = ?6, updated_ms = ?7, ended_ms = ?7, logs = COALESCE(?8, logs), pgid = NULL, pending_approval = NULL WHERE id = ?1 AND status IN ('starting', 'running', 'stopping', 'awaiting_approval')",
            )
            .and_then(|mut s| {
                s.execute(params![
                    id,
                    status.as_str(),
                    result.map(Value::to_string),
                    additional_context.map(Value::to_string),
                    error.map(|e| e.code.as_str()),
                    error.map(|e| e.message.as_str()),
                    now as i64,
                    (!logs.is_empty()).then(|| Value::from(logs).to_string()),
                ])
            })
            .map_err(|e| self.fail(e))?;
        if changed == 0 {
            return Ok(None);
        }
        conn.prepare_cached(HISTORY_INSERT)
            .and_then(|mut s| {
                s.execute(params![
                    id,
                    status.as_str(),
                    now as i64,
                    error.map(|e| e.message.as_str())
                ])
            })
            .map_err(|e| self.fail(e))?;
        conn.prepare_cached("DELETE FROM ledgers WHERE execution_id = ?1")
            .and_then(|mut s| s.execute([id]))
            .map_err(|e| self.fail(e))?;
        tx.commit().map_err(|e| self.fail(e))?;
        Ok(Some(now))
    }

    /// Pauses a running (or starting) execution for approval (see
    /// [`ExecutionStore::pause`](super::ExecutionStore::pause)): `Ok(false)`, with nothing
    /// written, when it was not running.
    pub(crate) fn pause(
        &self,
        id: &str,
        pending: &PendingApproval,
        ledger: &str,
        logs: &[String],
    ) -> Result<bool, CapabilityError> {
        let now = now_ms() as i64;
        let pending_json = serde_json::to_string(pending).map_err(|e| self.fail(e))?;
        let mut conn = self.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.fail(e))?;
        let changed = tx
            .execute(
                "UPDATE executions SET status = 'awaiting_approval', pending_approval = ?2, logs = ?3, updated_ms = ?4, owner_pid = 0, owner_start = NULL, pgid = NULL WHERE id = ?1 AND status IN ('starting', 'running')",
                params![
                    id,
                    pending_json,
                    (!logs.is_empty()).then(|| Value::from(logs).to_string()),
                    now
                ],
            )
            .map_err(|e| self.fail(e))?;
        if changed == 0 {
            return Ok(false);
        }
        tx.execute(
            "INSERT INTO ledgers (execution_id, ledger, bytes, updated_ms) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (execution_id) DO UPDATE SET ledger = excluded.ledger, bytes = excluded.bytes, updated_ms = excluded.updated_ms",
            params![id, ledger, ledger.len() as i64, now],
        )
        .map_err(|e| self.fail(e))?;
        tx.execute(
            "INSERT INTO status_history (execution_id, status, at_ms, detail) VALUES (?1, 'awaiting_approval', ?2, ?3)",
            params![id, now, pause_detail(pending)],
        )
        .map_err(|e| self.fail(e))?;
        tx.commit().map_err(|e| self.fail(e))?;
        Ok(true)
    }

    /// Takes an execution awaiting approval to run it again in this process (see
    /// [`ExecutionStore::resume`](super::ExecutionStore::resume)): the record as it was
    /// before, and its ledger; `Ok(None)` when it is not awaiting approval. The read and the
    /// write are one immediate transaction, which holds the file's write lock, so of
    /// concurrent resumes (in this process or others) exactly one finds it awaiting.
    pub(crate) fn resume(
        &self,
        id: &str,
        take: &Take<'_>,
    ) -> Result<Option<(ExecutionRecord, String)>, CapabilityError> {
        let now = now_ms() as i64;
        let me = std::process::id() as i64;
        let (call, decision) = match take {
            Take::Decision(d) => (
                Some(i64::from(d.call)),
                Some(serde_json::to_string(d).map_err(|e| self.fail(e))?),
            ),
            Take::Stop => (None, None),
        };
        let mut conn = self.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.fail(e))?;
        let found = tx
            .query_row(
                &format!("SELECT {COLUMNS}, (SELECT ledger FROM ledgers WHERE execution_id = executions.id) FROM executions WHERE id = ?1 AND status = 'awaiting_approval' AND (?2 IS NULL OR json_extract(pending_approval, '$.call') = ?2)"),
                params![id, call],
                |row| Ok((record(row)?, row.get::<_, Option<String>>(19)?)),
            )
            .optional()
            .map_err(|e| self.fail(e))?;
        let Some((paused, ledger)) = found else {
            return Ok(None);
        };
        tx.execute(
            "UPDATE executions SET status = 'running', pending_approval = NULL, updated_ms = ?2, owner_pid = ?3, owner_start = ?4, pgid = NULL, decisions = CASE WHEN ?5 IS NULL THEN decisions ELSE json_insert(COALESCE(decisions, '[]'), '$[#]', json(?5)) END WHERE id = ?1 AND status = 'awaiting_approval'",
            params![id, now, me, start_time(me), decision],
        )
        .map_err(|e| self.fail(e))?;
        tx.execute("DELETE FROM ledgers WHERE execution_id = ?1", [id])
            .map_err(|e| self.fail(e))?;
        tx.execute(
            "INSERT INTO status_history (execution_id, status, at_ms, detail) VALUES (?1, 'running', ?2, ?3)",
            params![id, now, RESUMED_DETAIL],
        )
        .map_err(|e| self.fail(e))?;
        tx.commit().map_err(|e| self.fail(e))?;
        Ok(Some((paused, ledger.unwrap_or_default())))
    }

    /// See [`ExecutionStore::paused_usage`](super::ExecutionStore::paused_usage).
    pub(crate) fn paused_usage(
        &self,
        principal: Option<&str>,
    ) -> Result<(u64, u64), CapabilityError> {
        self.lock()
            .query_row(
                "SELECT COUNT(*), COALESCE(SUM(l.bytes), 0) FROM executions e LEFT JOIN ledgers l ON l.execution_id = e.id WHERE e.status = 'awaiting_approval' AND e.principal IS ?1",
                [principal],
                |row| Ok((row.get::<_, i64>(0)?.max(0) as u64, row.get::<_, i64>(1)?.max(0) as u64)),
            )
            .map_err(|e| self.fail(e))
    }

    /// See [`ExecutionStore::paused_before`](super::ExecutionStore::paused_before).
    pub(crate) fn paused_before(&self, before_ms: u64) -> Result<Vec<String>, CapabilityError> {
        let conn = self.lock();
        let mut statement = conn
            .prepare("SELECT id FROM executions WHERE status = 'awaiting_approval' AND updated_ms < ?1 ORDER BY updated_ms")
            .map_err(|e| self.fail(e))?;
        let ids = statement
            .query_map([before_ms as i64], |row| row.get::<_, String>(0))
            .map_err(|e| self.fail(e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.fail(e))?;
        Ok(ids)
    }

    /// The ledger of an execution awaiting approval.
    #[cfg(any(test, feature = "serve"))]
    pub(crate) fn ledger(&self, id: &str) -> Result<Option<String>, CapabilityError> {
        self.lock()
            .query_row(
                "SELECT ledger FROM ledgers WHERE execution_id = ?1",
                [id],
                |row| row.get(0),
            )
            .optional()
            .map_err(|e| self.fail(e))
    }

    /// One execution.
    pub(crate) fn get(&self, id: &str) -> Result<Option<ExecutionRecord>, CapabilityError> {
        self.lock()
            .prepare_cached(GET)
            .and_then(|mut s| s.query_row([id], record).optional())
            .map_err(|e| self.fail(e))
    }

    /// Executions matching `filter`, newest first, as summaries: `params`, `result` and
    /// `additionalContext` are left out (null), so a list of thousands stays small whatever
    /// each execution returned; [`SqliteStore::get`] has them.
    pub(crate) fn list(
        &self,
        filter: &ExecutionFilter,
    ) -> Result<Vec<ExecutionRecord>, CapabilityError> {
        let limit = filter.limit.unwrap_or(1_000).min(MAX_LIST);
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached(&format!(
                "SELECT {SUMMARY_COLUMNS} FROM executions
                 WHERE (?1 IS NULL OR status = ?1) AND (?2 IS NULL OR parent_id = ?2) AND (?3 IS NULL OR capability = ?3) AND (?5 IS NULL OR principal = ?5)
                 ORDER BY created_ms DESC, id DESC LIMIT ?4"
            ))
            .map_err(|e| self.fail(e))?;
        let rows = stmt
            .query_map(
                params![
                    filter.status.map(ExecutionStatus::as_str),
                    filter.parent_id,
                    filter.capability,
                    limit,
                    filter.principal
                ],
                record,
            )
            .map_err(|e| self.fail(e))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.fail(e))
    }

    /// An execution's status changes, oldest first.
    pub(crate) fn history(&self, id: &str) -> Result<Vec<StatusChange>, CapabilityError> {
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached("SELECT status, at_ms, detail FROM status_history WHERE execution_id = ?1 ORDER BY rowid")
            .map_err(|e| self.fail(e))?;
        let rows = stmt
            .query_map([id], |r| {
                let status: String = r.get(0)?;
                Ok(StatusChange {
                    status: status.parse().unwrap_or(ExecutionStatus::Failed),
                    at_ms: r.get::<_, i64>(1)? as u64,
                    detail: r.get(2)?,
                })
            })
            .map_err(|e| self.fail(e))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.fail(e))
    }
}

/// The `.gitignore` execbox writes in a project's `.execbox/` folder that holds only its
/// state (execbox created the folder for it): everything in it.
const GITIGNORE_ALL: &str = "# Written by execbox: its state, not for version control.\n*\n";

/// The `.gitignore` execbox writes in a project's `.execbox/` folder that was there before
/// (it holds capabilities and executors, which are for version control): the state files.
const GITIGNORE_STATE: &str = "# Written by execbox: its state, not for version control (the \
capabilities and executors beside it are).\n/.gitignore\n/state.db\n/state.db-*\n";

/// Keeps a project's state out of version control, as Python's venvs and pytest's caches do:
/// in a folder named `.execbox` without a `.gitignore`, writes one ignoring everything when
/// execbox just `created` the folder, else the state files only. A failure is logged, never
/// an error: the state works the same without it.
fn keep_out_of_git(dir: &Path, created: bool) {
    if dir.file_name().is_none_or(|n| n != ".execbox") {
        return;
    }
    let ignore = dir.join(".gitignore");
    if ignore.exists() {
        return;
    }
    let text = if created {
        GITIGNORE_ALL
    } else {
        GITIGNORE_STATE
    };
    if let Err(e) = std::fs::write(&ignore, text) {
        tracing::warn!("cannot write {}: {e}", ignore.display());
    }
}

fn json_column(row: &Row<'_>, i: usize) -> rusqlite::Result<Option<Value>> {
    let text: Option<String> = row.get(i)?;
    Ok(text.and_then(|t| serde_json::from_str(&t).ok()))
}

fn record(row: &Row<'_>) -> rusqlite::Result<ExecutionRecord> {
    let status: String = row.get(7)?;
    let error_code: Option<String> = row.get(11)?;
    let error_message: Option<String> = row.get(12)?;
    Ok(ExecutionRecord {
        execution_id: row.get(0)?,
        capability: row.get(1)?,
        capability_type: row.get(2)?,
        executor: row.get(3)?,
        capability_path: row.get(4)?,
        parent_id: row.get(5)?,
        principal: row.get(6)?,
        status: status.parse().unwrap_or(ExecutionStatus::Failed),
        params: json_column(row, 8)?.unwrap_or(Value::Null),
        result: json_column(row, 9)?,
        additional_context: json_column(row, 10)?,
        error: error_code.map(|code| CapabilityError {
            code: CapabilityErrorCode::parse(&code).unwrap_or(CapabilityErrorCode::ExecutionFailed),
            message: error_message.unwrap_or_default(),
        }),
        created_ms: row.get::<_, i64>(13)? as u64,
        updated_ms: row.get::<_, i64>(14)? as u64,
        ended_ms: row.get::<_, Option<i64>>(15)?.map(|t| t as u64),
        logs: json_column(row, 16)?
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default(),
        replica: None,
        pending_approval: json_column(row, 17)?
            .and_then(|v| serde_json::from_value::<PendingApproval>(v).ok())
            .map(PendingApproval::with_digest),
        decisions: json_column(row, 18)?
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default(),
    })
}

/// The history detail of a pause: the call it waits on.
pub(super) fn pause_detail(pending: &PendingApproval) -> String {
    format!(
        "awaiting approval of `{}` (call {})",
        pending.tool, pending.call
    )
}

/// Whether the process that owned an execution still runs: its pid exists and, where the
/// start time was recorded and can be read, started at that time (a reused pid is another
/// process).
fn owner_alive(pid: i64, start: Option<i64>) -> bool {
    if !process_alive(pid) {
        return false;
    }
    match (start, start_time(pid)) {
        (Some(recorded), Some(now)) => recorded == now,
        _ => true,
    }
}

/// The fields of `/proc/<pid>/stat` after the command name (which may hold spaces and `)`).
fn proc_stat(pid: i64) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// A process's start time, in clock ticks after boot (`/proc/<pid>/stat` field 22).
fn start_time(pid: i64) -> Option<i64> {
    // Fields after the name start at field 3 (state), so field 22 is index 19.
    proc_stat(pid)?.get(19)?.parse().ok()
}

/// Whether a process with this pid exists (a process we may not signal exists too).
#[cfg(unix)]
#[allow(unsafe_code)]
fn process_alive(pid: i64) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill(2) with signal 0 sends nothing and has no memory-safety preconditions.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg(not(unix))]
fn process_alive(_pid: i64) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::DecisionRecord;
    use serde_json::json;

    fn record(id: &str, status: ExecutionStatus) -> ExecutionRecord {
        ExecutionRecord {
            execution_id: id.into(),
            capability: "c".into(),
            capability_type: "script".into(),
            executor: "script".into(),
            capability_path: "/c".into(),
            parent_id: None,
            principal: None,
            status,
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

    fn temp_db(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("execbox-store-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir.join("nested/state.db")
    }

    #[test]
    fn executions_of_a_dead_owner_are_failed_at_open_and_a_live_owner_keeps_its_own() {
        let path = temp_db("recover");
        let store = SqliteStore::open(&path).unwrap();
        store
            .insert(&record("dead", ExecutionStatus::Starting))
            .unwrap();
        store
            .set_status("dead", ExecutionStatus::Running, None)
            .unwrap();
        store
            .insert(&record("mine", ExecutionStatus::Starting))
            .unwrap();
        // A process that has exited owns `dead`.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        child.wait().unwrap();
        store
            .lock()
            .execute(
                "UPDATE executions SET owner_pid = ?1 WHERE id = 'dead'",
                [gone as i64],
            )
            .unwrap();
        drop(store);

        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.recovered(), ["dead"]);
        let dead = store.get("dead").unwrap().unwrap();
        assert_eq!(dead.status, ExecutionStatus::Failed);
        assert_eq!(dead.error.unwrap().message, INTERRUPTED_MESSAGE);
        let history: Vec<ExecutionStatus> = store
            .history("dead")
            .unwrap()
            .into_iter()
            .map(|c| c.status)
            .collect();
        assert_eq!(
            history,
            [
                ExecutionStatus::Starting,
                ExecutionStatus::Running,
                ExecutionStatus::Failed
            ]
        );
        // This process is alive: its execution is left alone.
        assert_eq!(
            store.get("mine").unwrap().unwrap().status,
            ExecutionStatus::Starting
        );
        let _ = std::fs::remove_dir_all(path.parent().unwrap().parent().unwrap());
    }

    #[test]
    fn a_stop_asked_for_while_starting_is_not_overwritten_by_running() {
        let path = temp_db("transitions");
        let store = SqliteStore::open(&path).unwrap();
        store
            .insert(&record("x", ExecutionStatus::Starting))
            .unwrap();
        store
            .set_status("x", ExecutionStatus::Stopping, None)
            .unwrap();
        store
            .set_status("x", ExecutionStatus::Running, None)
            .unwrap();
        assert_eq!(
            store.get("x").unwrap().unwrap().status,
            ExecutionStatus::Stopping
        );
        store
            .finish("x", ExecutionStatus::Stopped, None, None, None, &[])
            .unwrap();
        store
            .set_status("x", ExecutionStatus::Stopping, None)
            .unwrap();
        assert_eq!(
            store.get("x").unwrap().unwrap().status,
            ExecutionStatus::Stopped
        );
        let filter = ExecutionFilter {
            status: Some(ExecutionStatus::Stopped),
            ..Default::default()
        };
        assert_eq!(store.list(&filter).unwrap().len(), 1);
        let _ = std::fs::remove_dir_all(path.parent().unwrap().parent().unwrap());
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let path = temp_db("newer");
        drop(SqliteStore::open(&path).unwrap());
        Connection::open(&path)
            .unwrap()
            .pragma_update(None, "user_version", 9)
            .unwrap();
        let e = SqliteStore::open(&path).unwrap_err();
        assert_eq!(e.code, CapabilityErrorCode::RegistryNotInitialized);
        assert!(e.message.contains("schema version 9 is newer"), "{e}");
        let _ = std::fs::remove_dir_all(path.parent().unwrap().parent().unwrap());
    }

    #[test]
    fn an_execution_ends_once() {
        let path = temp_db("once");
        let store = SqliteStore::open(&path).unwrap();
        store
            .insert(&record("a", ExecutionStatus::Starting))
            .unwrap();
        assert!(store
            .finish("a", ExecutionStatus::Stopped, None, None, None, &[])
            .unwrap()
            .is_some());
        // A second end (another process recovered it first, say) leaves the first alone.
        assert!(store
            .finish("a", ExecutionStatus::Failed, None, None, None, &[])
            .unwrap()
            .is_none());
        let history: Vec<ExecutionStatus> = store
            .history("a")
            .unwrap()
            .into_iter()
            .map(|c| c.status)
            .collect();
        assert_eq!(
            history,
            [ExecutionStatus::Starting, ExecutionStatus::Stopped]
        );
        let _ = std::fs::remove_dir_all(path.parent().unwrap().parent().unwrap());
    }

    fn pending() -> PendingApproval {
        PendingApproval {
            tool: "bank.transfer".into(),
            input: json!({"to": "bob", "amount": 5}),
            call: 3,
            input_sha256: execbox_host::input_sha256(&json!({"to": "bob", "amount": 5})),
            permission: "bank:approve".into(),
            self_approval: false,
            rule: None,
            reason: None,
            approvers: Vec::new(),
            under_policy: false,
            since_ms: 1_700_000_000_000,
        }
    }

    const LEDGER: &str = r#"{"calls":[{"tool":"bank.balance","result":7}],"clock":[1,2]}"#;

    fn decision(call: u32, approved: bool) -> DecisionRecord {
        DecisionRecord {
            call,
            tool: "bank.transfer".into(),
            input_sha256: pending().input_sha256,
            approved,
            by: Some("ops".into()),
            reason: None,
            at_ms: 1_700_000_000_001,
        }
    }

    #[tokio::test]
    async fn a_decision_takes_a_paused_execution_only_at_the_call_it_names_and_is_kept() {
        let (store, _path) = running("decide", "p").await;
        assert!(store.pause("p", &pending(), LEDGER, &[]).await.unwrap());
        assert_eq!(
            store.paused_usage(None).await.unwrap(),
            (1, LEDGER.len() as u64)
        );
        // An approval of an earlier call (one an approver was shown before) takes nothing.
        let stale = decision(2, true);
        assert!(store
            .resume("p", &Take::Decision(&stale))
            .await
            .unwrap()
            .is_none());
        let paused = store.get("p").await.unwrap().unwrap();
        assert_eq!(paused.status, ExecutionStatus::AwaitingApproval);
        assert!(paused.decisions.is_empty());
        // The call waiting now is taken, and the decision kept with the execution.
        let right = decision(3, true);
        assert!(store
            .resume("p", &Take::Decision(&right))
            .await
            .unwrap()
            .is_some());
        let now = store.get("p").await.unwrap().unwrap();
        assert_eq!(now.status, ExecutionStatus::Running);
        assert_eq!(now.decisions, vec![right.clone()]);
        // Paused again at call 5, a second decision is appended after the first.
        let later = PendingApproval {
            call: 5,
            ..pending()
        };
        assert!(store.pause("p", &later, LEDGER, &[]).await.unwrap());
        assert!(store
            .resume("p", &Take::Decision(&right))
            .await
            .unwrap()
            .is_none());
        let fifth = decision(5, false);
        assert!(store
            .resume("p", &Take::Decision(&fifth))
            .await
            .unwrap()
            .is_some());
        let listed = store.get("p").await.unwrap().unwrap();
        assert_eq!(listed.decisions, vec![right, fifth]);
        assert_eq!(store.paused_usage(None).await.unwrap(), (0, 0));
    }

    fn statuses(store: &SqliteStore, id: &str) -> Vec<ExecutionStatus> {
        store
            .history(id)
            .unwrap()
            .into_iter()
            .map(|c| c.status)
            .collect()
    }

    fn owner(store: &SqliteStore, id: &str) -> (i64, Option<i64>) {
        store
            .lock()
            .query_row(
                "SELECT owner_pid, owner_start FROM executions WHERE id = ?1",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap()
    }

    /// A store through its public face, on a fresh file, with `id` running.
    async fn running(name: &str, id: &str) -> (super::super::ExecutionStore, PathBuf) {
        let path = temp_db(name);
        let store = super::super::ExecutionStore::open(&path).unwrap();
        store
            .insert(&record(id, ExecutionStatus::Starting))
            .await
            .unwrap();
        store
            .set_status(id, ExecutionStatus::Running, None)
            .await
            .unwrap();
        (store, path)
    }

    fn sqlite(store: &super::super::ExecutionStore) -> &SqliteStore {
        match &store.backend {
            super::super::Backend::Sqlite(s) => s,
            super::super::Backend::Postgres(_) => unreachable!(),
        }
    }

    #[tokio::test]
    async fn a_paused_execution_shows_its_call_and_logs_and_resumes_once_with_its_ledger() {
        let (store, path) = running("pause", "p").await;
        let logs = vec!["balance 7".to_string()];
        assert!(store.pause("p", &pending(), LEDGER, &logs).await.unwrap());
        let paused = store.get("p").await.unwrap().unwrap();
        assert_eq!(paused.status, ExecutionStatus::AwaitingApproval);
        assert_eq!(paused.pending_approval, Some(pending()));
        assert_eq!(paused.logs, logs);
        assert_eq!(paused.ended_ms, None);
        let history = store.history("p").await.unwrap();
        assert_eq!(
            history.last().unwrap().detail.as_deref(),
            Some("awaiting approval of `bank.transfer` (call 3)")
        );
        assert_eq!(
            statuses(sqlite(&store), "p"),
            [
                ExecutionStatus::Starting,
                ExecutionStatus::Running,
                ExecutionStatus::AwaitingApproval
            ]
        );
        // No process runs it now.
        assert_eq!(owner(sqlite(&store), "p"), (0, None));
        assert_eq!(store.ledger("p").await.unwrap().as_deref(), Some(LEDGER));
        // Listed with its call, under its status.
        let listed = store
            .list(&ExecutionFilter {
                status: Some(ExecutionStatus::AwaitingApproval),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].pending_approval, Some(pending()));

        // The resume hands over the record as it was paused, and the ledger byte for byte.
        let (was, ledger) = store
            .resume("p", &Take::Stop)
            .await
            .unwrap()
            .expect("resumed");
        assert_eq!(ledger, LEDGER);
        assert_eq!(was.status, ExecutionStatus::AwaitingApproval);
        assert_eq!(was.pending_approval, Some(pending()));
        assert_eq!(was.logs, logs);
        assert_eq!(was.params, json!({"a": 1}));
        let now = store.get("p").await.unwrap().unwrap();
        assert_eq!(now.status, ExecutionStatus::Running);
        assert_eq!(now.pending_approval, None);
        let me = std::process::id() as i64;
        assert_eq!(owner(sqlite(&store), "p"), (me, start_time(me)));
        assert_eq!(
            store
                .history("p")
                .await
                .unwrap()
                .last()
                .unwrap()
                .detail
                .as_deref(),
            Some(RESUMED_DETAIL)
        );
        // Its ledger went with it; a second resume finds nothing to resume.
        assert_eq!(store.ledger("p").await.unwrap(), None);
        assert!(store.resume("p", &Take::Stop).await.unwrap().is_none());
        assert!(store
            .resume("unknown", &Take::Stop)
            .await
            .unwrap()
            .is_none());
        // It can pause again, at a later call.
        assert!(store.pause("p", &pending(), "[]", &[]).await.unwrap());
        assert_eq!(store.ledger("p").await.unwrap().as_deref(), Some("[]"));
        let _ = std::fs::remove_dir_all(path.parent().unwrap().parent().unwrap());
    }

    #[tokio::test]
    async fn only_a_running_execution_pauses() {
        let (store, path) = running("pause-ended", "ended").await;
        store
            .finish("ended", ExecutionStatus::Completed, None, None, None, &[])
            .await
            .unwrap();
        assert!(!store.pause("ended", &pending(), LEDGER, &[]).await.unwrap());
        let ended = store.get("ended").await.unwrap().unwrap();
        assert_eq!(ended.status, ExecutionStatus::Completed);
        assert_eq!(ended.pending_approval, None);
        assert_eq!(store.ledger("ended").await.unwrap(), None);

        store
            .insert(&record("stopping", ExecutionStatus::Starting))
            .await
            .unwrap();
        store
            .set_status("stopping", ExecutionStatus::Stopping, None)
            .await
            .unwrap();
        assert!(!store
            .pause("stopping", &pending(), LEDGER, &[])
            .await
            .unwrap());
        assert_eq!(
            statuses(sqlite(&store), "stopping"),
            [ExecutionStatus::Starting, ExecutionStatus::Stopping]
        );
        assert_eq!(store.ledger("stopping").await.unwrap(), None);
        let _ = std::fs::remove_dir_all(path.parent().unwrap().parent().unwrap());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn of_concurrent_resumes_in_two_connections_exactly_one_wins() {
        let (store, path) = running("race", "r").await;
        assert!(store.pause("r", &pending(), LEDGER, &[]).await.unwrap());
        // A second connection to the file locks as another process would.
        let other = std::sync::Arc::new(super::super::ExecutionStore::open(&path).unwrap());
        let store = std::sync::Arc::new(store);
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let store = if i % 2 == 0 {
                    store.clone()
                } else {
                    other.clone()
                };
                tokio::spawn(async move { store.resume("r", &Take::Stop).await.unwrap() })
            })
            .collect();
        let mut won = 0;
        for task in tasks {
            if let Some((_, ledger)) = task.await.unwrap() {
                assert_eq!(ledger, LEDGER);
                won += 1;
            }
        }
        assert_eq!(won, 1);
        assert_eq!(
            statuses(sqlite(&store), "r"),
            [
                ExecutionStatus::Starting,
                ExecutionStatus::Running,
                ExecutionStatus::AwaitingApproval,
                ExecutionStatus::Running
            ]
        );
        let _ = std::fs::remove_dir_all(path.parent().unwrap().parent().unwrap());
    }

    #[tokio::test]
    async fn a_paused_execution_ends_denied_or_stopped_and_its_ledger_is_deleted() {
        let (store, path) = running("deny", "denied").await;
        assert!(store
            .pause("denied", &pending(), LEDGER, &["so far".into()])
            .await
            .unwrap());
        let denial = CapabilityError::new(
            CapabilityErrorCode::ApprovalDenied,
            "`bank.transfer` was denied by carol",
        );
        let ended = store
            .finish(
                "denied",
                ExecutionStatus::Failed,
                None,
                None,
                Some(&denial),
                &[],
            )
            .await
            .unwrap();
        assert!(ended.is_some());
        let denied = store.get("denied").await.unwrap().unwrap();
        assert_eq!(denied.status, ExecutionStatus::Failed);
        assert_eq!(denied.error, Some(denial));
        assert_eq!(denied.pending_approval, None);
        assert_eq!(
            denied.logs,
            ["so far"],
            "an end without logs keeps those of the pause"
        );
        assert_eq!(store.ledger("denied").await.unwrap(), None);
        assert!(store.resume("denied", &Take::Stop).await.unwrap().is_none());

        store
            .insert(&record("stopped", ExecutionStatus::Starting))
            .await
            .unwrap();
        assert!(store
            .pause("stopped", &pending(), LEDGER, &[])
            .await
            .unwrap());
        // No process runs it: `stopping` does not apply; the stop ends it directly.
        store
            .set_status("stopped", ExecutionStatus::Stopping, None)
            .await
            .unwrap();
        assert_eq!(
            store.get("stopped").await.unwrap().unwrap().status,
            ExecutionStatus::AwaitingApproval
        );
        assert!(store
            .finish("stopped", ExecutionStatus::Stopped, None, None, None, &[])
            .await
            .unwrap()
            .is_some());
        let stopped = store.get("stopped").await.unwrap().unwrap();
        assert_eq!(stopped.status, ExecutionStatus::Stopped);
        assert_eq!(stopped.pending_approval, None);
        assert_eq!(store.ledger("stopped").await.unwrap(), None);
        assert_eq!(
            statuses(sqlite(&store), "stopped"),
            [
                ExecutionStatus::Starting,
                ExecutionStatus::AwaitingApproval,
                ExecutionStatus::Stopped
            ]
        );
        let _ = std::fs::remove_dir_all(path.parent().unwrap().parent().unwrap());
    }

    #[tokio::test]
    async fn an_oversize_ledger_is_refused_and_nothing_is_written() {
        let (store, path) = running("oversize", "big").await;
        let ledger = "x".repeat(super::super::MAX_LEDGER_BYTES + 1);
        let e = store
            .pause("big", &pending(), &ledger, &[])
            .await
            .unwrap_err();
        assert_eq!(e.code, CapabilityErrorCode::ExecutionFailed);
        assert!(
            e.message.contains("replay ledger is 8388609 bytes")
                && e.message.contains("8388608 bytes (8 MiB)")
                && e.message.contains("`bank.transfer`"),
            "{e}"
        );
        assert_eq!(
            store.get("big").await.unwrap().unwrap().status,
            ExecutionStatus::Running
        );
        assert_eq!(store.ledger("big").await.unwrap(), None);
        // Exactly the limit is kept.
        let ledger = "x".repeat(super::super::MAX_LEDGER_BYTES);
        assert!(store.pause("big", &pending(), &ledger, &[]).await.unwrap());
        assert_eq!(
            store.ledger("big").await.unwrap().map(|l| l.len()),
            Some(ledger.len())
        );
        let _ = std::fs::remove_dir_all(path.parent().unwrap().parent().unwrap());
    }

    #[tokio::test]
    async fn a_reopened_file_leaves_a_paused_execution_awaiting_approval() {
        let (store, path) = running("reopen", "paused").await;
        assert!(store
            .pause("paused", &pending(), LEDGER, &[])
            .await
            .unwrap());
        store
            .insert(&record("dead", ExecutionStatus::Starting))
            .await
            .unwrap();
        // The process that ran both has exited (the paused one was left by it too).
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        child.wait().unwrap();
        sqlite(&store)
            .lock()
            .execute("UPDATE executions SET owner_pid = ?1", [gone as i64])
            .unwrap();
        drop(store);

        let store = super::super::ExecutionStore::open(&path).unwrap();
        assert_eq!(store.recovered(), ["dead"]);
        let paused = store.get("paused").await.unwrap().unwrap();
        assert_eq!(paused.status, ExecutionStatus::AwaitingApproval);
        assert_eq!(paused.pending_approval, Some(pending()));
        assert_eq!(
            store.ledger("paused").await.unwrap().as_deref(),
            Some(LEDGER)
        );
        // And the next process resumes it.
        assert!(store.resume("paused", &Take::Stop).await.unwrap().is_some());
        let _ = std::fs::remove_dir_all(path.parent().unwrap().parent().unwrap());
    }

    #[test]
    fn a_version_2_file_is_migrated_to_4_keeping_its_rows() {
        let path = temp_db("v2");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        // A file as execbox wrote it at schema version 2.
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE executions (
                id TEXT PRIMARY KEY, capability TEXT NOT NULL, type TEXT NOT NULL,
                executor TEXT NOT NULL, capability_path TEXT NOT NULL, parent_id TEXT,
                principal TEXT, status TEXT NOT NULL, params TEXT NOT NULL, result TEXT,
                additional_context TEXT, error_code TEXT, error_message TEXT,
                created_ms INTEGER NOT NULL, updated_ms INTEGER NOT NULL, ended_ms INTEGER,
                owner_pid INTEGER NOT NULL, owner_start INTEGER, pgid INTEGER, logs TEXT
            );
            CREATE INDEX executions_status ON executions (status);
            CREATE INDEX executions_parent ON executions (parent_id);
            CREATE TABLE status_history (
                execution_id TEXT NOT NULL, status TEXT NOT NULL, at_ms INTEGER NOT NULL,
                detail TEXT
            );
            CREATE INDEX status_history_execution ON status_history (execution_id);
            INSERT INTO executions VALUES ('old', 'c', 'script', 'script', '/c', NULL, 'alice',
                'completed', '{\"a\":1}', '2', NULL, NULL, NULL, 10, 20, 20, 1, NULL, NULL,
                '[\"line\"]');
            INSERT INTO status_history VALUES ('old', 'completed', 20, NULL);
            PRAGMA user_version = 2;",
        )
        .unwrap();
        drop(conn);

        let store = SqliteStore::open(&path).unwrap();
        let version: i64 = store
            .lock()
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, 4);
        let old = store.get("old").unwrap().unwrap();
        assert_eq!(old.status, ExecutionStatus::Completed);
        assert_eq!(old.result, Some(json!(2)));
        assert_eq!(old.logs, ["line"]);
        assert_eq!(old.principal.as_deref(), Some("alice"));
        assert_eq!(old.pending_approval, None);
        assert_eq!(statuses(&store, "old"), [ExecutionStatus::Completed]);
        // The new schema is usable: a new execution pauses.
        store
            .insert(&record("new", ExecutionStatus::Starting))
            .unwrap();
        assert!(store.pause("new", &pending(), LEDGER, &[]).unwrap());
        assert_eq!(store.ledger("new").unwrap().as_deref(), Some(LEDGER));
        let _ = std::fs::remove_dir_all(path.parent().unwrap().parent().unwrap());
    }

    #[test]
    fn an_owner_is_its_pid_and_its_start_time() {
        let me = std::process::id() as i64;
        assert!(owner_alive(me, start_time(me)));
        // The same pid with another start time is another process: the owner is gone.
        if let Some(start) = start_time(me) {
            assert!(!owner_alive(me, Some(start + 1)));
        }
    }
}
