//! The policy's tables in PostgreSQL: rate-limit counters exact across processes and
//! replicas, the shapes of observed results, and the audit log as rows.
//!
//! A `postgres://` URL as `state` (`--state`, the policy's `state`) or as the audit log
//! (`--audit-log`, the policy's `audit.file`) puts them here. Every process and replica naming
//! the same database shares them, through the process's one pool for it (`Pg::shared`).
//!
//! The schema is the `policy` component of `execbox_schema`, migrated by `Pg::migrate` under
//! an advisory lock. A database that cannot be reached when a store opens is migrated on
//! first use instead, so a process can start while the database is down (its rate-limited
//! calls and audited executions are refused until the database is back).
//!
//! ```text
//! -- version 1
//! CREATE TABLE rate_limit (
//!   principal TEXT NOT NULL,      -- '' for executions without a principal
//!   tool TEXT NOT NULL,           -- provider.tool
//!   requests BIGINT NOT NULL,     -- the limit: a changed limit starts a new counter
//!   window_ms BIGINT NOT NULL,
//!   tat_ns BIGINT NOT NULL,       -- when the next call conforms, ns since the Unix epoch
//!   PRIMARY KEY (principal, tool, requests, window_ms)
//! );
//! CREATE TABLE observed_result (
//!   namespace TEXT NOT NULL,      -- the upstream's namespace
//!   tool TEXT NOT NULL,           -- the tool's name as the server lists it
//!   shape TEXT NOT NULL,          -- `{ sum: number }`
//!   observed_at TIMESTAMPTZ NOT NULL,
//!   PRIMARY KEY (namespace, tool)
//! );
//! CREATE TABLE audit_events (
//!   id BIGSERIAL PRIMARY KEY,     -- the order events were recorded in
//!   at TIMESTAMPTZ NOT NULL,      -- the line's `ts`
//!   event TEXT NOT NULL,          -- the line's `event` (tool_call, execution_started, ...)
//!   execution_id TEXT NOT NULL,
//!   principal TEXT,               -- NULL without one
//!   tool TEXT,                    -- provider.tool, for tool_call*
//!   line TEXT NOT NULL            -- the JSON line, byte for byte as the file would hold it
//! );                              -- indexed by execution_id, (principal, at), (event, at)
//! ```
//!
//! A rate-limit decision is one statement, governor's GCRA computed by the server with its
//! own clock (`clock_timestamp()`), so processes on hosts with skewed clocks still agree:
//! with `T = window / requests` (ns) and `tau = T × (requests − 1)`, a call is admitted when
//! `tat − tau ≤ now`, and the TAT becomes `max(tat, now) + T`; a fresh counter starts at
//! `now`. The upsert locks the counter's row, so concurrent decisions are serialised and
//! none is lost; a refusal then reads the TAT once more for the wait.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use execbox_host::RateLimit;
use execbox_pg::{Migrations, Pg, PgError, PgUrl};

use super::PolicyError;

/// The `policy` component's schema; steps are only ever appended.
const MIGRATIONS: Migrations = Migrations {
    component: "policy",
    steps: &["CREATE TABLE IF NOT EXISTS rate_limit (
            principal TEXT NOT NULL,
            tool TEXT NOT NULL,
            requests BIGINT NOT NULL,
            window_ms BIGINT NOT NULL,
            tat_ns BIGINT NOT NULL,
            PRIMARY KEY (principal, tool, requests, window_ms)
        );
        CREATE TABLE IF NOT EXISTS observed_result (
            namespace TEXT NOT NULL,
            tool TEXT NOT NULL,
            shape TEXT NOT NULL,
            observed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
            PRIMARY KEY (namespace, tool)
        );
        CREATE TABLE IF NOT EXISTS audit_events (
            id BIGSERIAL PRIMARY KEY,
            at TIMESTAMPTZ NOT NULL DEFAULT now(),
            event TEXT NOT NULL,
            execution_id TEXT NOT NULL,
            principal TEXT,
            tool TEXT,
            line TEXT NOT NULL
        );
        CREATE INDEX IF NOT EXISTS audit_events_execution_id ON audit_events (execution_id);
        CREATE INDEX IF NOT EXISTS audit_events_principal ON audit_events (principal, at);
        CREATE INDEX IF NOT EXISTS audit_events_event ON audit_events (event, at);"],
};

/// The server's clock in ns since the Unix epoch.
const NOW_NS: &str = "(extract(epoch FROM clock_timestamp()) * 1e9)::bigint";

/// One decision: a row back is an admission (see the module docs).
fn check_statement() -> String {
    format!(
        "INSERT INTO rate_limit AS r (principal, tool, requests, window_ms, tat_ns)
         VALUES ($1, $2, $3, $4, {NOW_NS} + $5)
         ON CONFLICT (principal, tool, requests, window_ms)
         DO UPDATE SET tat_ns = GREATEST(r.tat_ns, {NOW_NS}) + $5
         WHERE r.tat_ns - $6 <= {NOW_NS}
         RETURNING tat_ns"
    )
}

/// After a refusal: how long until the counter admits a call, in ns.
fn wait_statement() -> String {
    format!(
        "SELECT tat_ns - $5 - {NOW_NS} FROM rate_limit
         WHERE principal = $1 AND tool = $2 AND requests = $3 AND window_ms = $4"
    )
}

/// The policy's database: the process's pool for it, and whether its schema is migrated.
pub(crate) struct PolicyDb {
    pg: Pg,
    migrated: AtomicBool,
}

/// An audit line and the columns it is indexed by.
pub(crate) struct AuditRow<'a> {
    pub(crate) at: &'a str,
    pub(crate) event: &'a str,
    pub(crate) execution_id: &'a str,
    pub(crate) principal: Option<&'a str>,
    pub(crate) tool: Option<&'a str>,
    pub(crate) line: &'a str,
}

impl PolicyDb {
    /// The database at `url`, migrated now, or on first use when it cannot be reached now.
    pub(crate) fn open(url: &PgUrl) -> Result<PolicyDb, PgError> {
        let db = PolicyDb {
            pg: Pg::shared(url)?,
            migrated: AtomicBool::new(false),
        };
        match db.ensure_schema() {
            Ok(()) => Ok(db),
            Err(e) if e.is_unavailable() => {
                tracing::warn!("the policy's tables are created when the database is back");
                Ok(db)
            }
            Err(e) => Err(e),
        }
    }

    /// The database's URL, password hidden when shown.
    pub(crate) fn url(&self) -> &PgUrl {
        self.pg.url()
    }

    fn ensure_schema(&self) -> Result<(), PgError> {
        if self.migrated.load(Ordering::Acquire) {
            return Ok(());
        }
        self.noted(self.pg.migrate(&MIGRATIONS))?;
        self.migrated.store(true, Ordering::Release);
        Ok(())
    }

    /// `result`, after noting that a failed statement makes the next use check the schema
    /// again: a database that went away may come back without the policy's tables (restored
    /// from an older backup, or recreated), and they are then created again.
    ///
    /// The whole error (the database named, password masked) is logged here: what the
    /// caller shows (a refusal, an execution's error) names no database.
    fn noted<T>(&self, result: Result<T, PgError>) -> Result<T, PgError> {
        if let Err(e) = &result {
            tracing::warn!("policy database: {e}");
            self.migrated.store(false, Ordering::Release);
        }
        result
    }

    /// Counts one call of `tool` by `principal` against `limit`: `None` when admitted, else
    /// how long until a call would be.
    pub(crate) fn check(
        &self,
        principal: Option<&str>,
        tool: &str,
        limit: &RateLimit,
    ) -> Result<Option<Duration>, PolicyError> {
        self.ensure_schema().map_err(PolicyError::SharedState)?;
        // governor's quota (limits.rs): T = window / requests, at least 1 ns.
        let window_ns = i64::try_from(limit.window().as_nanos()).unwrap_or(i64::MAX);
        let requests = i64::from(limit.requests());
        let t = (window_ns / requests).max(1);
        let tau = t.saturating_mul(requests - 1);
        let window_ms = i64::try_from(limit.window().as_millis()).unwrap_or(i64::MAX);
        let principal = principal.unwrap_or("").to_owned();
        let tool = tool.to_owned();
        let decided = self.pg.block(move |client| async move {
            let check = client.prepare_cached(&check_statement()).await?;
            let admitted = client
                .query_opt(
                    &check,
                    &[&principal, &tool, &requests, &window_ms, &t, &tau],
                )
                .await?;
            if admitted.is_some() {
                return Ok(None);
            }
            let wait = client.prepare_cached(&wait_statement()).await?;
            let wait: Option<i64> = client
                .query_opt(&wait, &[&principal, &tool, &requests, &window_ms, &tau])
                .await?
                .map(|row| row.get(0));
            Ok(Some(wait.unwrap_or(0)))
        });
        let wait_ns = self.noted(decided).map_err(PolicyError::SharedState)?;
        Ok(wait_ns.map(|ns| Duration::from_nanos(u64::try_from(ns).unwrap_or(0))))
    }

    /// Every observed result shape: `(namespace, tool, shape)`.
    pub(crate) fn observed_results(&self) -> Result<Vec<(String, String, String)>, PgError> {
        self.ensure_schema()?;
        let rows = self.pg.block(|client| async move {
            let rows = client
                .query("SELECT namespace, tool, shape FROM observed_result", &[])
                .await?;
            Ok(rows
                .iter()
                .map(|row| (row.get(0), row.get(1), row.get(2)))
                .collect())
        });
        self.noted(rows)
    }

    /// Records the last result shape of `namespace`'s tool `tool`.
    pub(crate) fn record_observed_result(
        &self,
        namespace: &str,
        tool: &str,
        shape: &str,
    ) -> Result<(), PgError> {
        self.ensure_schema()?;
        let (namespace, tool, shape) = (namespace.to_owned(), tool.to_owned(), shape.to_owned());
        let written = self.pg.block(move |client| async move {
            client
                .execute(
                    "INSERT INTO observed_result (namespace, tool, shape, observed_at)
                     VALUES ($1, $2, $3, now())
                     ON CONFLICT (namespace, tool) DO UPDATE
                     SET shape = excluded.shape, observed_at = excluded.observed_at",
                    &[&namespace, &tool, &shape],
                )
                .await
                .map(|_| ())
        });
        self.noted(written)
    }

    /// Appends one audit row; when this returns `Ok` the row is committed.
    pub(crate) fn append_audit(&self, row: &AuditRow<'_>) -> Result<(), PgError> {
        self.ensure_schema()?;
        let owned = |s: Option<&str>| s.map(str::to_owned);
        let (at, event, execution_id, line) = (
            row.at.to_owned(),
            row.event.to_owned(),
            row.execution_id.to_owned(),
            row.line.to_owned(),
        );
        let (principal, tool) = (owned(row.principal), owned(row.tool));
        let written = self.pg.block(move |client| async move {
            let insert = client
                .prepare_cached(
                    "INSERT INTO audit_events (at, event, execution_id, principal, tool, line)
                     VALUES ($1::text::timestamptz, $2, $3, $4, $5, $6)",
                )
                .await?;
            client
                .execute(
                    &insert,
                    &[&at, &event, &execution_id, &principal, &tool, &line],
                )
                .await
                .map(|_| ())
        });
        self.noted(written)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Instant;

    use execbox_host::{GuardError, GuardedCall, ToolRequirements};
    use execbox_pg::testing::TestServer;
    use serde_json::{json, Value};

    use super::super::limits::tests::admitted_of_1000_concurrent;
    use super::super::{
        AuditEvent, AuditLog, AuditOutcome, Enforcement, ObservedResults, Policy, RateLimits,
    };
    use super::*;

    fn location(url: &str) -> StoreLocation {
        let location = StoreLocation::parse(url).unwrap();
        assert!(matches!(location, StoreLocation::Postgres(_)));
        location
    }

    /// A second pool on the same database (a pool is per URL): what another process has.
    fn other_process(url: &str, name: &str) -> StoreLocation {
        location(&format!("{url}&application_name={name}"))
    }

    fn limit(n: u32, secs: u64) -> RateLimit {
        RateLimit::new(n, Duration::from_secs(secs)).unwrap()
    }

    use super::super::StoreLocation;

    #[test]
    fn a_thousand_concurrent_checks_on_postgres_admit_exactly_the_limit() {
        let Some(server) = TestServer::start_or_skip() else {
            return;
        };
        let url = server.database("thousand");
        let limits = RateLimits::open_at(&location(&url)).unwrap();
        assert!(limits.is_shared());
        assert_eq!(admitted_of_1000_concurrent(&limits, 100), 100);
    }

    #[test]
    fn two_pools_on_one_database_count_together() {
        let Some(server) = TestServer::start_or_skip() else {
            return;
        };
        let url = server.database("two_pools");
        let a = RateLimits::open_at(&other_process(&url, "a")).unwrap();
        let b = RateLimits::open_at(&other_process(&url, "b")).unwrap();
        let admitted = AtomicUsize::new(0);
        let limit = limit(150, 3600);
        std::thread::scope(|s| {
            for limits in [&a, &b, &a, &b] {
                let admitted = &admitted;
                s.spawn(move || {
                    for _ in 0..100 {
                        match limits.check_key(None, "t.race", &limit) {
                            Ok(()) => {
                                admitted.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(PolicyError::RateLimited { .. }) => {}
                            Err(e) => panic!("{e}"),
                        }
                    }
                });
            }
        });
        assert_eq!(admitted.into_inner(), 150);
    }

    #[test]
    fn a_burst_then_one_per_period_with_the_wait_as_governor_computes_it() {
        let Some(server) = TestServer::start_or_skip() else {
            return;
        };
        let url = server.database("burst");
        let limits = RateLimits::open_at(&location(&url)).unwrap();
        let alice: Arc<str> = Arc::from("alice");
        for _ in 0..3 {
            limits
                .check_key(Some(&alice), "weather.get", &limit(3, 60))
                .unwrap();
        }
        let e = limits
            .check_key(Some(&alice), "weather.get", &limit(3, 60))
            .unwrap_err();
        let PolicyError::RateLimited { retry_after, .. } = &e else {
            panic!("{e}");
        };
        // Three at once, then one each 20 s: the 4th waits (nearly) 20 s.
        assert!(*retry_after > Duration::from_secs(19), "{retry_after:?}");
        assert!(*retry_after <= Duration::from_secs(20), "{retry_after:?}");
        assert_eq!(
            e.to_string(),
            "rate limit exceeded for weather.get: 3 per 1m; retry in 20 s"
        );
        // Another process sees the same counter.
        let other = RateLimits::open_at(&other_process(&url, "other")).unwrap();
        assert!(other
            .check_key(Some(&alice), "weather.get", &limit(3, 60))
            .is_err());
        // Other principals, none, other tools and changed limits count from zero.
        limits
            .check_key(None, "weather.get", &limit(3, 60))
            .unwrap();
        let bob: Arc<str> = Arc::from("bob");
        limits
            .check_key(Some(&bob), "weather.get", &limit(3, 60))
            .unwrap();
        limits
            .check_key(Some(&alice), "weather.put", &limit(3, 60))
            .unwrap();
        limits
            .check_key(Some(&alice), "weather.get", &limit(4, 60))
            .unwrap();
        // A short period lets the next call in once it has passed: 2 per 200 ms.
        let short = RateLimit::new(2, Duration::from_millis(200)).unwrap();
        limits.check_key(None, "t.short", &short).unwrap();
        limits.check_key(None, "t.short", &short).unwrap();
        let Err(PolicyError::RateLimited { retry_after, .. }) =
            limits.check_key(None, "t.short", &short)
        else {
            panic!("the third call of 2 per 200 ms was admitted");
        };
        assert!(retry_after <= Duration::from_millis(100), "{retry_after:?}");
        std::thread::sleep(retry_after + Duration::from_millis(5));
        limits.check_key(None, "t.short", &short).unwrap();
    }

    #[test]
    fn observed_results_outlive_the_process_in_postgres() {
        let Some(server) = TestServer::start_or_skip() else {
            return;
        };
        let url = server.database("observed");
        let first = ObservedResults::open_at(&location(&url)).unwrap();
        assert_eq!(first.get("calc", "get-sum"), None);
        first.record("calc", "get-sum", "{ sum: number }").unwrap();
        let second = ObservedResults::open_at(&other_process(&url, "second")).unwrap();
        assert_eq!(
            second.get("calc", "get-sum").as_deref(),
            Some("{ sum: number }")
        );
        second.record("calc", "get-sum", "string").unwrap();
        let third = ObservedResults::open_at(&other_process(&url, "third")).unwrap();
        assert_eq!(third.get("calc", "get-sum").as_deref(), Some("string"));
    }

    #[test]
    fn each_audit_event_is_a_row_with_its_line_and_indexed_columns() {
        let Some(server) = TestServer::start_or_skip() else {
            return;
        };
        let url = server.database("audit");
        let log = AuditLog::open_at(&location(&url), false).unwrap();
        let input = json!({"city": "Paris", "secret": "hunter2"});
        log.record(&AuditEvent::execution_started("e1", Some("alice")))
            .unwrap();
        log.record(
            &AuditEvent::tool_call(
                "e1",
                Some("alice"),
                "weather.get",
                &input,
                AuditOutcome::RateLimited,
                Duration::ZERO,
            )
            .error("rate limit exceeded for weather.get: 3 per 1m; retry in 20 s"),
        )
        .unwrap();
        log.record(&AuditEvent::execution_finished(
            "e1",
            None,
            AuditOutcome::Ok,
            Duration::from_millis(5),
        ))
        .unwrap();
        let pg = server.pg();
        let statement = "SELECT id, event, execution_id, principal, tool, line, \
             at = (line::jsonb ->> 'ts')::timestamptz FROM audit_events ORDER BY id";
        let rows: Vec<AuditColumns> = {
            let url = PgUrl::parse(&url).unwrap();
            let pg = Pg::new(&url, Default::default()).unwrap();
            pg.block(move |c| async move {
                let rows = c.query(statement, &[]).await?;
                Ok(rows
                    .iter()
                    .map(|r| {
                        (
                            r.get(0),
                            r.get(1),
                            r.get(2),
                            r.get(3),
                            r.get(4),
                            r.get(5),
                            r.get(6),
                        )
                    })
                    .collect())
            })
            .unwrap()
        };
        drop(pg);
        assert_eq!(rows.len(), 3);
        let columns: Vec<(&str, &str, Option<&str>, Option<&str>)> = rows
            .iter()
            .map(|r| (&*r.1, &*r.2, r.3.as_deref(), r.4.as_deref()))
            .collect();
        assert_eq!(
            columns,
            [
                ("execution_started", "e1", Some("alice"), None),
                ("tool_call", "e1", Some("alice"), Some("weather.get")),
                ("execution_finished", "e1", None, None),
            ]
        );
        assert!(rows.windows(2).all(|w| w[0].0 < w[1].0), "ids in order");
        assert!(rows.iter().all(|r| r.6), "`at` is the line's `ts`");
        // The line is the JSON line a file would hold, without its line break.
        let call: Value = serde_json::from_str(&rows[1].5).unwrap();
        assert!(!rows[1].5.contains('\n') && !rows[1].5.contains("hunter2"));
        assert_eq!(
            call.as_object().unwrap().keys().collect::<Vec<_>>(),
            [
                "ts",
                "event",
                "execution_id",
                "principal",
                "tool",
                "outcome",
                "duration_ms",
                "input_sha256",
                "error"
            ]
        );
        assert_eq!(call["outcome"], "rate_limited");
        assert_eq!(call["input_sha256"].as_str().map(str::len), Some(64));
    }

    /// id, event, execution_id, principal, tool, line, and whether `at` is the line's `ts`.
    type AuditColumns = (
        i64,
        String,
        String,
        Option<String>,
        Option<String>,
        String,
        bool,
    );

    fn refused_message(r: Result<crate::AuditedCall, GuardError>) -> String {
        match r {
            Err(GuardError::Refused(e)) => e.message,
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("admitted"),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_database_that_goes_away_refuses_calls_until_it_is_back() {
        let Some(mut server) = TestServer::start_or_skip() else {
            return;
        };
        let url = server.database("away");
        let limits = Arc::new(RateLimits::open_at(&location(&url)).unwrap());
        let audit = Arc::new(AuditLog::open_at(&other_process(&url, "audit"), false).unwrap());
        let guard = Enforcement::new(Policy::new().principal(None).unwrap(), limits.clone());
        let audited = guard.clone().with_audit(audit);
        let mut requirements = ToolRequirements::default();
        requirements.rate_limit = Some(limit(1000, 60));
        let input = json!({});
        let call = || GuardedCall::new("e1", "weather.get", &requirements, &input);
        guard
            .admit_call(call())
            .await
            .unwrap()
            .finish(Ok(()))
            .unwrap();

        server.kill();
        // The check fails closed, naming the database (never admitted). A backend of the
        // killed server may answer on its open connection for a moment before it exits.
        let deadline = Instant::now() + Duration::from_secs(10);
        let e = loop {
            let check = || limits.check_key(None, "weather.get", &limit(1000, 60));
            match tokio::task::block_in_place(check) {
                Err(e) => break e,
                Ok(()) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                Ok(()) => panic!("admitted with the database killed"),
            }
        };
        assert!(matches!(e, PolicyError::SharedState(_)), "{e}");
        // In plain words: a model may read it, and it never sees a database URL.
        assert_eq!(
            e.to_string(),
            "rate-limit state: the database is unavailable"
        );
        // The model reads which tool, that the store is down, and to try later: no types.
        let message = refused_message(guard.admit_call(call()).await);
        assert_eq!(
            message,
            "weather.get: the call was refused because the rate-limit store is unavailable \
             (the host cannot count calls of this tool now); try again later"
        );
        // An audit row that cannot be written ends the execution.
        let started = tokio::task::block_in_place(|| {
            execbox_host::CallGuard::execution_started(&audited, "e2")
        });
        match started {
            Err(GuardError::Fatal(m)) => {
                assert_eq!(
                    m,
                    "cannot write the audit log: the database is unavailable; refusing to run unaudited"
                );
            }
            other => panic!("{other:?}"),
        }

        server.resume().unwrap();
        // Without a restart: the broken connections are replaced on their next use.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match guard.admit_call(call()).await {
                Ok(admitted) => {
                    admitted.finish(Ok(())).unwrap();
                    break;
                }
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("not admitted after the database came back: {e}"),
            }
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while tokio::task::block_in_place(|| {
            execbox_host::CallGuard::execution_started(&audited, "e3")
        })
        .is_err()
        {
            assert!(Instant::now() < deadline, "the audit log did not recover");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A stalled database (SIGSTOP: connections open, nothing answers) refuses a rate-limited
    /// call within the pool's call deadline, instead of holding it until the program's own
    /// time limit.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stalled_database_refuses_a_rate_limited_call_within_the_deadline() {
        let Some(server) = TestServer::start_or_skip() else {
            return;
        };
        let url = server.database("stalled");
        let limits = Arc::new(RateLimits::open_at(&location(&url)).unwrap());
        let guard = Enforcement::new(Policy::new().principal(None).unwrap(), limits);
        let mut requirements = ToolRequirements::default();
        requirements.rate_limit = Some(limit(1000, 60));
        let input = json!({});
        let call = || GuardedCall::new("e1", "weather.get", &requirements, &input);
        guard
            .admit_call(call())
            .await
            .unwrap()
            .finish(Ok(()))
            .unwrap();
        let stalled = server.stall();
        let asked = Instant::now();
        let message = refused_message(guard.admit_call(call()).await);
        let took = asked.elapsed();
        drop(stalled);
        assert_eq!(
            message,
            "weather.get: the call was refused because the rate-limit store is unavailable \
             (the host cannot count calls of this tool now); try again later"
        );
        // The 5 s call deadline, with room for a loaded machine.
        assert!(took < Duration::from_secs(9), "{took:?}");
    }
}
