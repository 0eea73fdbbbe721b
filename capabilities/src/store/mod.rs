//! The execution store: every execution and its status history, written before any status is
//! reported, in a SQLite file (one machine, the default) or in PostgreSQL (replicas sharing
//! one database; see `postgres.rs`).
//!
//! [`ExecutionStore`] is the one face both have: the manager awaits its calls, and on
//! PostgreSQL it also hears, through [`StoreSignal`]s, what other replicas do (an execution's
//! new status, a resume, a stop asked of one of ours, a lost connection to resync after).
//!
//! Durable executions: [`ExecutionStore::pause`] moves a running execution to
//! `awaiting_approval` with the call it waits on and its replay ledger (opaque JSON text, at
//! most [`MAX_LEDGER_BYTES`]), and no owner: no process runs it, and neither the open-time
//! recovery (SQLite) nor the reaper of dead replicas (PostgreSQL) touches it.
//! [`ExecutionStore::resume`] is the one write that decides who runs it again (exactly one
//! of any number of concurrent callers, in any processes or replicas); `finish` ends it
//! instead (denied: `failed`; stopped: `stopped`). A ledger exists exactly while its
//! execution is `awaiting_approval`: `resume` hands it over and deletes it, and an end
//! deletes it.

mod postgres;
mod sqlite;

use std::path::Path;
use std::time::Duration;

use execbox_policy::StoreLocation;
use serde_json::Value;
use tokio::sync::broadcast;

use super::records::{
    CapabilityError, CapabilityErrorCode, DecisionRecord, ExecutionFilter, ExecutionRecord,
    ExecutionStatus, PendingApproval, StatusChange,
};
use postgres::PgStore;
use sqlite::SqliteStore;

/// The variable that marks every process of an external executor with its execution's id.
pub(crate) const EXECUTION_ID_ENV: &str = "EXECBOX_EXECUTION_ID";

/// The error message of an execution found interrupted at open (SQLite: its process is gone).
pub const INTERRUPTED_MESSAGE: &str = "interrupted: the server stopped";

/// Who takes an execution awaiting approval ([`ExecutionStore::resume`]), and on what grounds.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Take<'a> {
    /// A decision on the call it names: it takes the execution only while that call is the
    /// one waiting, and is kept in the record's `decisions`.
    Decision(&'a DecisionRecord),
    /// A stop: whatever call it waits on.
    Stop,
}

/// The largest replay ledger a paused execution may keep, in bytes: 8 MiB.
pub const MAX_LEDGER_BYTES: usize = 8 * 1024 * 1024;

/// The default (and largest) number of executions one list returns.
const MAX_LIST: u32 = 10_000;

/// The default of [`ReplicaOptions::timeout`]: a replica silent for this long has its
/// executions marked failed by another.
pub const DEFAULT_REPLICA_TIMEOUT: Duration = Duration::from_secs(30);

/// How a replica takes part in a shared (PostgreSQL) store. Unused with SQLite.
#[derive(Clone, Debug)]
pub struct ReplicaOptions {
    /// The replica's name, shown in records and in the failure of its executions when it dies
    /// (default: the host name and the process id).
    pub name: Option<String>,
    /// At most this long after a replica stops (killed, machine lost) its executions are
    /// marked `failed` ("interrupted: replica NAME stopped") by another. Its lease lasts half
    /// of it and is renewed, and leases are checked, every sixth of it. At least 3 s.
    pub timeout: Duration,
}

impl Default for ReplicaOptions {
    fn default() -> Self {
        ReplicaOptions {
            name: None,
            timeout: DEFAULT_REPLICA_TIMEOUT,
        }
    }
}

/// What a shared store hears from the other replicas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum StoreSignal {
    /// Another replica (or the reaper) changed an execution's status.
    Changed(String),
    /// Another replica resumed an execution that was awaiting approval (it is `running`
    /// there now).
    Resumed(String),
    /// Another replica asks this one to stop one of its executions.
    Stop(String),
    /// Notifications may have been missed (the listening connection was lost and is back):
    /// whoever waits should read the store again.
    Resync,
}

/// Executions and their history, in SQLite or PostgreSQL. Cheap to share behind an `Arc`.
pub struct ExecutionStore {
    backend: Backend,
    shown: String,
}

enum Backend {
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

impl std::fmt::Debug for ExecutionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ExecutionStore({})", self.shown)
    }
}

impl ExecutionStore {
    /// Opens (creating it and its folder if missing) and migrates the SQLite file `path`, then
    /// recovers what a dead process left running (see `sqlite.rs`).
    pub fn open(path: impl AsRef<Path>) -> Result<ExecutionStore, CapabilityError> {
        let path = path.as_ref();
        Ok(ExecutionStore {
            backend: Backend::Sqlite(SqliteStore::open(path)?),
            shown: path.display().to_string(),
        })
    }

    /// Opens the store at `location`: a SQLite file as [`ExecutionStore::open`] does, or a
    /// PostgreSQL database (migrated at open), where this process joins as a replica with
    /// `replica`'s name and timeout, and marks failed the executions of replicas that stopped.
    pub fn open_at(
        location: &StoreLocation,
        replica: &ReplicaOptions,
    ) -> Result<ExecutionStore, CapabilityError> {
        match location {
            StoreLocation::Sqlite(path) => ExecutionStore::open(path),
            StoreLocation::Postgres(url) => Ok(ExecutionStore {
                backend: Backend::Postgres(PgStore::open(url, Some(replica))?),
                shown: url.to_string(),
            }),
        }
    }

    /// Opens the store at `location` to read it (`execbox executions`): on PostgreSQL without
    /// joining as a replica (no lease, no background work); a SQLite file as
    /// [`ExecutionStore::open`] does.
    pub fn open_reader(location: &StoreLocation) -> Result<ExecutionStore, CapabilityError> {
        match location {
            StoreLocation::Sqlite(path) => ExecutionStore::open(path),
            StoreLocation::Postgres(url) => Ok(ExecutionStore {
                backend: Backend::Postgres(PgStore::open(url, None)?),
                shown: url.to_string(),
            }),
        }
    }

    /// Where it is: the file, or the URL with its password hidden.
    pub fn location(&self) -> &str {
        &self.shown
    }

    /// The file, for a SQLite store.
    pub fn path(&self) -> Option<&Path> {
        match &self.backend {
            Backend::Sqlite(s) => Some(s.path()),
            Backend::Postgres(_) => None,
        }
    }

    /// The executions found interrupted at open and marked failed: left by a dead process
    /// (SQLite) or by replicas whose lease had run out (PostgreSQL).
    pub fn recovered(&self) -> &[String] {
        match &self.backend {
            Backend::Sqlite(s) => s.recovered(),
            Backend::Postgres(p) => p.recovered(),
        }
    }

    /// This process's replica name, when the store is shared (PostgreSQL).
    pub fn replica(&self) -> Option<&str> {
        match &self.backend {
            Backend::Sqlite(_) => None,
            Backend::Postgres(p) => Some(p.replica_name()),
        }
    }

    /// Whether other processes share it through notifications (PostgreSQL).
    pub(crate) fn signals(&self) -> Option<broadcast::Receiver<StoreSignal>> {
        match &self.backend {
            Backend::Sqlite(_) => None,
            Backend::Postgres(p) => Some(p.signals()),
        }
    }

    /// Runs `task` on the shared store's own runtime (for a manager made outside any runtime).
    pub(crate) fn spawn<F>(&self, task: F) -> tokio::task::JoinHandle<()>
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        match &self.backend {
            Backend::Postgres(p) => p.spawn(task),
            Backend::Sqlite(_) => tokio::spawn(task),
        }
    }

    /// Records a new execution, owned by this process, with its first status.
    pub(crate) async fn insert(&self, record: &ExecutionRecord) -> Result<(), CapabilityError> {
        match &self.backend {
            Backend::Sqlite(s) => s.insert(record),
            Backend::Postgres(p) => p.insert(record).await,
        }
    }

    /// Moves a live execution to `status` (see `sqlite.rs` for which moves are allowed). An
    /// execution `awaiting_approval` never moves here (not even to `stopping`: no process
    /// runs it to be stopped): end it with [`ExecutionStore::finish`] (`stopped`) instead.
    pub(crate) async fn set_status(
        &self,
        id: &str,
        status: ExecutionStatus,
        detail: Option<&str>,
    ) -> Result<(), CapabilityError> {
        match &self.backend {
            Backend::Sqlite(s) => s.set_status(id, status, detail),
            Backend::Postgres(p) => p.set_status(id, status, detail).await,
        }
    }

    /// Records the process group of an execution's executor.
    pub(crate) async fn set_pgid(
        &self,
        id: &str,
        pgid: Option<u32>,
    ) -> Result<(), CapabilityError> {
        match &self.backend {
            Backend::Sqlite(s) => s.set_pgid(id, pgid),
            Backend::Postgres(p) => p.set_pgid(id, pgid).await,
        }
    }

    /// Ends an execution that is live or `awaiting_approval` (a denial: `failed` with
    /// `APPROVAL_DENIED`; a stop: `stopped`), clearing its pending approval and deleting its
    /// ledger; `Ok(None)` when it had ended already (recovered by another process or
    /// replica), which leaves its recorded end alone. Empty `logs` keep the logs recorded
    /// so far (those a pause stored), so ending a paused execution need not read them.
    pub(crate) async fn finish(
        &self,
        id: &str,
        status: ExecutionStatus,
        result: Option<&Value>,
        additional_context: Option<&Value>,
        error: Option<&CapabilityError>,
        logs: &[String],
    ) -> Result<Option<u64>, CapabilityError> {
        match &self.backend {
            Backend::Sqlite(s) => s.finish(id, status, result, additional_context, error, logs),
            Backend::Postgres(p) => {
                p.finish(id, status, result, additional_context, error, logs)
                    .await
            }
        }
    }

    /// Pauses a running (or starting) execution for approval, in one transaction: its
    /// status becomes `awaiting_approval` (with a history row and, on PostgreSQL, a
    /// notification), and `pending`, the logs so far and `ledger` (opaque JSON text, kept
    /// byte for byte) are stored; its owner is cleared, since no process runs it now.
    /// `Ok(false)` when it was not running (a stop was asked, or it ended meanwhile): then
    /// nothing is written. A ledger longer than [`MAX_LEDGER_BYTES`] is refused
    /// (`EXECUTION_FAILED`), and nothing is written.
    pub(crate) async fn pause(
        &self,
        id: &str,
        pending: &PendingApproval,
        ledger: &str,
        logs: &[String],
    ) -> Result<bool, CapabilityError> {
        if ledger.len() > MAX_LEDGER_BYTES {
            return Err(CapabilityError::new(
                CapabilityErrorCode::ExecutionFailed,
                format!(
                    "execution {id} cannot pause for approval of `{}`: its replay ledger is {} bytes, more than the {MAX_LEDGER_BYTES} bytes (8 MiB) a paused execution may keep; make fewer or smaller tool calls before the one that needs approval",
                    pending.tool,
                    ledger.len()
                ),
            ));
        }
        match &self.backend {
            Backend::Sqlite(s) => s.pause(id, pending, ledger, logs),
            Backend::Postgres(p) => p.pause(id, pending, ledger, logs).await,
        }
    }

    /// Takes an execution awaiting approval to run it again: the one write that decides who
    /// resumes it (of concurrent calls, in any tasks, processes or replicas, exactly one gets
    /// `Some`). In one transaction its status becomes `running` (history row `resumed after
    /// approval`; on PostgreSQL a notification that other replicas relay as a `resumed`
    /// event), owned by this process (replica), its pending approval is cleared and its
    /// ledger is deleted.
    ///
    /// Returns the record **as it was before this write** (status `awaiting_approval`, with
    /// its `pending_approval`: the call that was approved, and its logs so far) and the
    /// ledger text as [`ExecutionStore::pause`] stored it. `Ok(None)` when it is not
    /// awaiting approval (already resumed, denied, stopped, ended, or unknown), or, for a
    /// [`Take::Decision`], when the call it waits on is not the one the decision names.
    pub(crate) async fn resume(
        &self,
        id: &str,
        take: &Take<'_>,
    ) -> Result<Option<(ExecutionRecord, String)>, CapabilityError> {
        match &self.backend {
            Backend::Sqlite(s) => s.resume(id, take),
            Backend::Postgres(p) => p.resume(id, take).await,
        }
    }

    /// How many executions of `principal` (anonymous callers: `None`) await approval, and
    /// the bytes of their ledgers.
    pub(crate) async fn paused_usage(
        &self,
        principal: Option<&str>,
    ) -> Result<(u64, u64), CapabilityError> {
        match &self.backend {
            Backend::Sqlite(s) => s.paused_usage(principal),
            Backend::Postgres(p) => p.paused_usage(principal).await,
        }
    }

    /// The executions awaiting approval since before `before_ms` (Unix ms), oldest first.
    pub(crate) async fn paused_before(
        &self,
        before_ms: u64,
    ) -> Result<Vec<String>, CapabilityError> {
        match &self.backend {
            Backend::Sqlite(s) => s.paused_before(before_ms),
            Backend::Postgres(p) => p.paused_before(before_ms).await,
        }
    }

    /// The replay ledger of an execution awaiting approval (`None` for any other: a ledger
    /// lives only while its execution can resume).
    #[cfg(any(test, feature = "serve"))]
    pub(crate) async fn ledger(&self, id: &str) -> Result<Option<String>, CapabilityError> {
        match &self.backend {
            Backend::Sqlite(s) => s.ledger(id),
            Backend::Postgres(p) => p.ledger(id).await,
        }
    }

    /// Asks the replica that runs `id` to stop it (PostgreSQL): `true` when the execution is
    /// live and the request was sent, `false` when it had ended (or is unknown). SQLite has
    /// no way to reach another process: always `false`.
    pub(crate) async fn request_stop(&self, id: &str) -> Result<bool, CapabilityError> {
        match &self.backend {
            Backend::Sqlite(_) => Ok(false),
            Backend::Postgres(p) => p.request_stop(id).await,
        }
    }

    /// One execution.
    pub async fn get(&self, id: &str) -> Result<Option<ExecutionRecord>, CapabilityError> {
        match &self.backend {
            Backend::Sqlite(s) => s.get(id),
            Backend::Postgres(p) => p.get(id).await,
        }
    }

    /// Executions matching `filter`, newest first, as summaries: `params`, `result`,
    /// `additionalContext` and `logs` are left out, so a list of thousands stays small;
    /// [`ExecutionStore::get`] has them.
    pub async fn list(
        &self,
        filter: &ExecutionFilter,
    ) -> Result<Vec<ExecutionRecord>, CapabilityError> {
        match &self.backend {
            Backend::Sqlite(s) => s.list(filter),
            Backend::Postgres(p) => p.list(filter).await,
        }
    }

    /// An execution's status changes, oldest first.
    pub async fn history(&self, id: &str) -> Result<Vec<StatusChange>, CapabilityError> {
        match &self.backend {
            Backend::Sqlite(s) => s.history(id),
            Backend::Postgres(p) => p.history(id).await,
        }
    }

    /// Leaves the shared store (PostgreSQL): this replica is recorded stopped at once, so the
    /// others need not wait for its lease to run out. Call it after its executions ended.
    pub async fn close(&self) {
        if let Backend::Postgres(p) = &self.backend {
            p.close().await;
        }
    }
}
