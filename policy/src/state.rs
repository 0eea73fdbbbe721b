//! The SQLite state file: rate-limit counters that processes share.
//!
//! `execbox run` is one process per execution, so counters kept in memory would start from
//! zero each time. With a state file (`--state FILE` or the policy's `state`), every process
//! that opens the same file counts together, and concurrent processes never lose a count.
//!
//! The algorithm is governor's GCRA, unchanged: [`SqliteStore`] is a governor `StateStore`
//! whose one value per key, the theoretical arrival time (TAT) of the next call, lives in a
//! row instead of an atomic. Each decision is one `BEGIN IMMEDIATE` transaction (read the
//! TAT, let governor decide, write the new TAT, commit), so two processes deciding at once
//! are serialised by SQLite's write lock, and each decision is committed before it is
//! reported.
//!
//! governor measures time from the moment a limiter is created, which differs between
//! processes. [`EpochClock`] makes that moment the Unix epoch for every process: it reads
//! zero until the limiter has been built, then the wall clock in nanoseconds since the
//! epoch. TATs stored in the file are therefore nanoseconds since the Unix epoch, which every
//! process agrees on (within clock skew: a host whose clock jumps back sees calls refused
//! until it catches up, never admitted twice).
//!
//! The file: WAL mode (readers never block the writer), `synchronous = NORMAL` (a commit
//! survives a crash of the process; the last commits may be lost on power loss, which loses
//! counts, never corrupts the file), a 5 s busy timeout, and its schema version in
//! `PRAGMA user_version` (2), migrated at open. A file from a newer execbox is refused.
//!
//! ```text
//! CREATE TABLE rate_limit (
//!   principal TEXT NOT NULL,      -- '' for executions without a principal
//!   tool TEXT NOT NULL,           -- provider.tool
//!   requests INTEGER NOT NULL,    -- the limit: a changed limit starts a new counter
//!   window_ms INTEGER NOT NULL,
//!   tat_ns INTEGER NOT NULL,      -- when the next call conforms, ns since the Unix epoch
//!   PRIMARY KEY (principal, tool, requests, window_ms)
//! ) WITHOUT ROWID;
//! -- version 2: the shape of each MCP tool's last result (see `observed.rs`)
//! CREATE TABLE observed_result (
//!   namespace TEXT NOT NULL,      -- the upstream's namespace
//!   tool TEXT NOT NULL,           -- the tool's name as the server lists it
//!   shape TEXT NOT NULL,          -- `{ sum: number }`
//!   observed_ms INTEGER NOT NULL, -- when, ms since the Unix epoch
//!   PRIMARY KEY (namespace, tool)
//! ) WITHOUT ROWID;
//! ```

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use governor::clock::Clock;
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::StateStore;
use governor::{Quota, RateLimiter};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

use execbox_host::RateLimit;

use super::PolicyError;

/// The key of one counter within a tool's limiter: the principal, or none. Both kinds of
/// counters (in memory, see `limits.rs`, and in this file) are keyed by it.
pub(crate) type PrincipalKey = Option<Arc<str>>;

/// The schema version this execbox writes (`PRAGMA user_version`).
pub(crate) const SCHEMA_VERSION: i64 = 2;

/// How long a process waits for another one's transaction before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// One connection to a state file, shared by this process's limiters.
pub(crate) struct StateDb {
    path: PathBuf,
    conn: Mutex<Connection>,
}

impl StateDb {
    /// Opens (creating if missing) and migrates the state file.
    pub(crate) fn open(path: &Path) -> Result<StateDb, PolicyError> {
        let error = |e: rusqlite::Error| PolicyError::State {
            path: path.to_path_buf(),
            message: describe(&e),
        };
        let mut conn = Connection::open(path).map_err(error)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(error)?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
            .map_err(error)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(PolicyError::State {
                path: path.to_path_buf(),
                message: format!("cannot use WAL mode (the file is in {mode} mode)"),
            });
        }
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(error)?;
        migrate(&mut conn).map_err(|e| match e {
            Migration::Sqlite(e) => error(e),
            Migration::TooNew(v) => PolicyError::State {
                path: path.to_path_buf(),
                message: format!(
                    "the state file has schema version {v}, newer than this execbox's \
                     {SCHEMA_VERSION}; use a newer execbox or another file"
                ),
            },
        })?;
        Ok(StateDb {
            path: path.to_path_buf(),
            conn: Mutex::new(conn),
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Every observed result shape: `(namespace, tool, shape)`.
    pub(crate) fn observed_results(&self) -> Result<Vec<(String, String, String)>, PolicyError> {
        let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let rows = (|| {
            let mut statement =
                conn.prepare("SELECT namespace, tool, shape FROM observed_result")?;
            let rows = statement
                .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })();
        rows.map_err(|e: rusqlite::Error| self.error(&e))
    }

    /// Records the shape of a tool's last result, replacing the one before.
    pub(crate) fn record_observed_result(
        &self,
        namespace: &str,
        tool: &str,
        shape: &str,
    ) -> Result<(), PolicyError> {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        conn.execute(
            "INSERT INTO observed_result (namespace, tool, shape, observed_ms)
             VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (namespace, tool) DO UPDATE
             SET shape = excluded.shape, observed_ms = excluded.observed_ms",
            rusqlite::params![namespace, tool, shape, now_ms],
        )
        .map(|_| ())
        .map_err(|e| self.error(&e))
    }

    fn error(&self, e: &rusqlite::Error) -> PolicyError {
        PolicyError::State {
            path: self.path.clone(),
            message: describe(e),
        }
    }
}

/// A SQLite error with its extended code, which says more than "disk I/O error".
fn describe(e: &rusqlite::Error) -> String {
    match e {
        rusqlite::Error::SqliteFailure(f, _) => format!("{e} (SQLite code {})", f.extended_code),
        _ => e.to_string(),
    }
}

enum Migration {
    Sqlite(rusqlite::Error),
    TooNew(i64),
}

impl From<rusqlite::Error> for Migration {
    fn from(e: rusqlite::Error) -> Self {
        Migration::Sqlite(e)
    }
}

/// Brings the schema to [`SCHEMA_VERSION`], in one immediate transaction so that two
/// processes opening a new file at once do not both create it.
fn migrate(conn: &mut Connection) -> Result<(), Migration> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let version: i64 = tx.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    if version > SCHEMA_VERSION {
        return Err(Migration::TooNew(version));
    }
    if version < 1 {
        tx.execute_batch(
            "CREATE TABLE IF NOT EXISTS rate_limit (
                principal TEXT NOT NULL,
                tool TEXT NOT NULL,
                requests INTEGER NOT NULL,
                window_ms INTEGER NOT NULL,
                tat_ns INTEGER NOT NULL,
                PRIMARY KEY (principal, tool, requests, window_ms)
            ) WITHOUT ROWID;
            PRAGMA user_version = 1;",
        )?;
    }
    if version < 2 {
        tx.execute_batch(
            "CREATE TABLE IF NOT EXISTS observed_result (
                namespace TEXT NOT NULL,
                tool TEXT NOT NULL,
                shape TEXT NOT NULL,
                observed_ms INTEGER NOT NULL,
                PRIMARY KEY (namespace, tool)
            ) WITHOUT ROWID;
            PRAGMA user_version = 2;",
        )?;
    }
    tx.commit()?;
    Ok(())
}

thread_local! {
    /// The state-file error of the last decision made on this thread, if it failed.
    static LAST_ERROR: RefCell<Option<PolicyError>> = const { RefCell::new(None) };
}

/// governor's state for one tool and limit, kept in the state file; keyed by principal.
pub(crate) struct SqliteStore {
    db: Arc<StateDb>,
    tool: String,
    requests: i64,
    window_ms: i64,
}

impl SqliteStore {
    pub(crate) fn new(db: Arc<StateDb>, tool: &str, limit: &RateLimit) -> SqliteStore {
        SqliteStore {
            db,
            tool: tool.to_string(),
            requests: i64::from(limit.requests()),
            window_ms: i64::try_from(limit.window().as_millis()).unwrap_or(i64::MAX),
        }
    }

    /// The error that made this thread's last refusal, if the state file failed (rather
    /// than the limit being reached). Taken, so it is reported once.
    pub(crate) fn take_error() -> Option<PolicyError> {
        LAST_ERROR.with(|slot| slot.borrow_mut().take())
    }

    /// One decision in one immediate transaction: read the TAT, decide, store the new TAT.
    fn decide<T, F, E>(&self, key: &PrincipalKey, f: &F) -> Result<Result<T, E>, rusqlite::Error>
    where
        F: Fn(Option<Nanos>) -> Result<(T, Nanos), E>,
    {
        let principal = key.as_deref().unwrap_or("");
        let mut conn = self.db.conn.lock().unwrap_or_else(|e| e.into_inner());
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let tat: Option<i64> = tx
            .prepare_cached(
                "SELECT tat_ns FROM rate_limit
                 WHERE principal = ?1 AND tool = ?2 AND requests = ?3 AND window_ms = ?4",
            )?
            .query_row(
                (principal, &self.tool, self.requests, self.window_ms),
                |row| row.get(0),
            )
            .optional()?;
        let decision = f(tat.map(|t| Nanos::new(u64::try_from(t).unwrap_or(0))));
        match decision {
            Ok((value, next)) => {
                let next = i64::try_from(next.as_u64()).unwrap_or(i64::MAX);
                tx.prepare_cached(
                    "INSERT INTO rate_limit (principal, tool, requests, window_ms, tat_ns)
                     VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (principal, tool, requests, window_ms)
                     DO UPDATE SET tat_ns = excluded.tat_ns",
                )?
                .execute((
                    principal,
                    &self.tool,
                    self.requests,
                    self.window_ms,
                    next,
                ))?;
                tx.commit()?;
                Ok(Ok(value))
            }
            // Nothing to write; dropping the transaction rolls it back.
            Err(refused) => Ok(Err(refused)),
        }
    }
}

impl StateStore for SqliteStore {
    type Key = PrincipalKey;

    fn measure_and_replace<T, F, E>(&self, key: &Self::Key, f: F) -> Result<T, E>
    where
        F: Fn(Option<Nanos>) -> Result<(T, Nanos), E>,
    {
        match self.decide(key, &f) {
            Ok(decision) => decision,
            Err(e) => {
                // governor's `StateStore` has no error of its own: a store can only admit or
                // refuse. A state file that cannot be used must not admit (that would lift
                // every limit), so the call is refused as if the next conforming time were
                // the end of time, and the real error is left for `RateLimits::check` to
                // report instead of a meaningless wait.
                LAST_ERROR.with(|slot| {
                    *slot.borrow_mut() = Some(PolicyError::State {
                        path: self.db.path.clone(),
                        message: describe(&e),
                    })
                });
                match f(Some(Nanos::new(u64::MAX))) {
                    Err(refused) => Err(refused),
                    // A TAT at u64::MAX ns (the year 2554) minus a burst of at most
                    // `MAX_WINDOW` is later than any wall-clock reading before then.
                    Ok(_) => unreachable!("a call conformed to a TAT at the end of time"),
                }
            }
        }
    }
}

/// A limiter over the state file.
pub(crate) type SqliteLimiter =
    RateLimiter<PrincipalKey, SqliteStore, EpochClock, NoOpMiddleware<Nanos>>;

/// Nanoseconds since the Unix epoch, the same in every process; see the module docs.
#[derive(Clone, Debug, Default)]
pub(crate) struct EpochClock {
    armed: Arc<AtomicBool>,
}

impl EpochClock {
    /// A limiter whose time origin is the Unix epoch: the clock reads 0 while governor takes
    /// its start reading, and the wall clock afterwards.
    pub(crate) fn limiter(quota: Quota, store: SqliteStore) -> SqliteLimiter {
        let clock = EpochClock::default();
        let limiter = RateLimiter::new(quota, store, clock.clone());
        clock.armed.store(true, Ordering::Release);
        limiter
    }
}

impl Clock for EpochClock {
    type Instant = Nanos;

    fn now(&self) -> Nanos {
        if !self.armed.load(Ordering::Acquire) {
            return Nanos::new(0);
        }
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Nanos::new(u64::try_from(since_epoch.as_nanos()).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::super::limits::tests::admitted_of_1000_concurrent;
    use super::super::limits::RateLimits;
    use super::*;

    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> TempDir {
            static N: AtomicUsize = AtomicUsize::new(0);
            let dir = std::env::temp_dir().join(format!(
                "execbox-state-{name}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn limit(n: u32, secs: u64) -> RateLimit {
        RateLimit::new(n, Duration::from_secs(secs)).unwrap()
    }

    #[test]
    fn successive_openings_of_one_file_count_together() {
        let dir = TempDir::new("successive");
        let file = dir.0.join("state.db");
        let alice: Arc<str> = Arc::from("alice");
        for _ in 0..3 {
            let limits = RateLimits::open(&file).unwrap();
            limits
                .check_key(Some(&alice), "weather.get", &limit(3, 60))
                .unwrap();
        }
        let limits = RateLimits::open(&file).unwrap();
        let e = limits
            .check_key(Some(&alice), "weather.get", &limit(3, 60))
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("rate limit exceeded for weather.get: 3 per 1m; retry in "),
            "{e}"
        );
        // Another principal, and a changed limit, count from zero.
        limits
            .check_key(None, "weather.get", &limit(3, 60))
            .unwrap();
        limits
            .check_key(Some(&alice), "weather.get", &limit(4, 60))
            .unwrap();
    }

    #[test]
    fn stored_times_are_nanoseconds_since_the_epoch() {
        let dir = TempDir::new("epoch");
        let file = dir.0.join("state.db");
        let limits = RateLimits::open(&file).unwrap();
        let before = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        limits.check_key(None, "t.x", &limit(1, 60)).unwrap();
        let conn = Connection::open(&file).unwrap();
        let tat: i64 = conn
            .query_row(
                "SELECT tat_ns FROM rate_limit WHERE tool = 't.x'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        let tat = Duration::from_nanos(tat as u64);
        // The first call conforms now; the next one a full period (60 s) later.
        assert!(
            tat >= before + Duration::from_secs(60),
            "{tat:?} {before:?}"
        );
        assert!(tat < before + Duration::from_secs(61), "{tat:?} {before:?}");
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
    }

    #[test]
    fn a_thousand_concurrent_calls_on_a_state_file_admit_exactly_the_limit() {
        let dir = TempDir::new("thousand");
        let limits = RateLimits::open(dir.0.join("state.db")).unwrap();
        assert_eq!(admitted_of_1000_concurrent(&limits, 100), 100);
    }

    #[test]
    fn two_connections_racing_on_one_file_never_lose_counts() {
        let dir = TempDir::new("race");
        let file = dir.0.join("state.db");
        let (a, b) = (
            RateLimits::open(&file).unwrap(),
            RateLimits::open(&file).unwrap(),
        );
        let admitted = AtomicUsize::new(0);
        let limit = limit(150, 3600);
        std::thread::scope(|s| {
            for limits in [&a, &b, &a, &b] {
                let admitted = &admitted;
                s.spawn(move || {
                    for _ in 0..100 {
                        if limits.check_key(None, "t.race", &limit).is_ok() {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(admitted.into_inner(), 150);
    }

    /// The child half of `two_processes_never_lose_counts`: runs only when asked to.
    #[test]
    fn child_process_counting_on_a_shared_file() {
        let Ok(file) = std::env::var("EXECBOX_TEST_STATE_FILE") else {
            return;
        };
        let limits = RateLimits::open(&file).unwrap();
        let mut admitted = 0;
        for _ in 0..200 {
            match limits.check_key(None, "t.procs", &limit(250, 3600)) {
                Ok(()) => admitted += 1,
                Err(PolicyError::RateLimited { .. }) => {}
                Err(e) => panic!("{e}"),
            }
        }
        println!("\nADMITTED {admitted}");
    }

    #[test]
    fn two_processes_never_lose_counts() {
        let dir = TempDir::new("procs");
        let file = dir.0.join("state.db");
        // Create the file first, so both children migrate nothing.
        drop(RateLimits::open(&file).unwrap());
        let exe = std::env::current_exe().unwrap();
        let children: Vec<_> = (0..2)
            .map(|_| {
                std::process::Command::new(&exe)
                    .args([
                        "--exact",
                        "state::tests::child_process_counting_on_a_shared_file",
                        "--nocapture",
                        "--test-threads=1",
                    ])
                    .env("EXECBOX_TEST_STATE_FILE", &file)
                    .stdout(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut total = 0;
        for child in children {
            let out = child.wait_with_output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            let line = text
                .lines()
                .find_map(|l| l.strip_prefix("ADMITTED "))
                .unwrap_or_else(|| panic!("no count in {text}"));
            assert!(out.status.success(), "{text}");
            total += line.trim().parse::<usize>().unwrap();
        }
        // 400 calls against a limit of 250: exactly 250 admitted between the two.
        assert_eq!(total, 250);
    }

    #[test]
    fn an_unusable_state_file_is_an_error_naming_it() {
        let dir = TempDir::new("unusable");
        let e = RateLimits::open(dir.0.join("no/such/dir/state.db")).unwrap_err();
        assert!(e.to_string().contains("no/such/dir/state.db"), "{e}");
        let newer = dir.0.join("newer.db");
        Connection::open(&newer)
            .unwrap()
            .execute_batch("PRAGMA user_version = 7")
            .unwrap();
        let e = RateLimits::open(&newer).unwrap_err().to_string();
        assert!(e.contains("schema version 7"), "{e}");
    }
}
