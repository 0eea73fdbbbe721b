//! Rate limits: a tool's `rate_limit` and the counters that enforce it, per principal and tool.
//!
//! A [`RateLimit`] is `requests` per `window`. It is enforced with `governor`'s GCRA (the
//! generic cell rate algorithm) with a burst of `requests`: a fresh principal may make all
//! `requests` at once, and after that one more each `window / requests`. So a 3-per-minute
//! limit admits 3 calls at once, refuses the 4th, and admits one more 20 s later; no window
//! boundary lets a caller make 2 × `requests` in a short time, as fixed windows do.
//!
//! [`RateLimits`] holds the counters, keyed by principal (or none) and `provider.tool`:
//! - [`RateLimits::in_memory`]: for a long-lived host (the library, server modes);
//! - [`RateLimits::open`]: in a SQLite state file (see `state.rs`) that processes share, so
//!   successive or concurrent `execbox run` invocations count together;
//! - [`RateLimits::open_at`] with a `postgres://` URL: in PostgreSQL (see `pg_store.rs`),
//!   exact across every process and replica using the database.
//!
//! All run the same algorithm (governor's; in PostgreSQL one statement computes it the same
//! way), so a limit means the same in each.

use std::collections::HashMap;
use std::fmt;
use std::num::NonZeroU32;
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use execbox_host::RateLimit;
use governor::clock::{Clock, MonotonicClock};
use governor::state::keyed::HashMapStateStore;
use governor::{NotUntil, Quota, RateLimiter};

use super::pg_store::PolicyDb;
use super::state::{EpochClock, PrincipalKey, SqliteLimiter, SqliteStore, StateDb};

use super::{PolicyError, Principal, StoreLocation};

/// governor's quota for `limit`: a burst of `requests`, one cell back every `window / requests`.
fn quota(limit: &RateLimit) -> Quota {
    let period = (limit.window() / limit.requests()).max(Duration::from_nanos(1));
    Quota::with_period(period)
        .expect("the period is at least 1 ns")
        .allow_burst(NonZeroU32::new(limit.requests()).expect("a rate limit admits at least 1"))
}

type MemoryLimiter = RateLimiter<PrincipalKey, HashMapStateStore<PrincipalKey>, MonotonicClock>;

enum Limiter {
    Memory(MemoryLimiter),
    Sqlite(SqliteLimiter),
}

enum Backend {
    Memory,
    Sqlite(Arc<StateDb>),
    Postgres(PolicyDb),
}

/// Rate-limit counters per principal and tool, in memory, in a shared SQLite state file, or
/// in PostgreSQL.
///
/// Cheap to share behind an `Arc`; every method takes `&self` and is safe to call from many
/// threads at once.
pub struct RateLimits {
    backend: Backend,
    /// `provider.tool` → its limit → the limiter (one counter per principal).
    limiters: RwLock<HashMap<String, HashMap<RateLimit, Arc<Limiter>>>>,
}

impl fmt::Debug for RateLimits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.backend {
            Backend::Memory => f.write_str("RateLimits(in memory)"),
            Backend::Sqlite(db) => write!(f, "RateLimits({})", db.path().display()),
            Backend::Postgres(db) => write!(f, "RateLimits({})", db.url()),
        }
    }
}

impl RateLimits {
    /// Counters in this process's memory, for a long-lived host.
    pub fn in_memory() -> RateLimits {
        RateLimits {
            backend: Backend::Memory,
            limiters: RwLock::new(HashMap::new()),
        }
    }

    /// Counters in the SQLite state file `path` (created if missing), shared with every
    /// process that opens the same file; see the `state` module for the file.
    pub fn open(path: impl AsRef<Path>) -> Result<RateLimits, PolicyError> {
        let db = StateDb::open(path.as_ref())?;
        Ok(RateLimits {
            backend: Backend::Sqlite(Arc::new(db)),
            limiters: RwLock::new(HashMap::new()),
        })
    }

    /// Counters at `location`: a SQLite file ([`RateLimits::open`]), or a PostgreSQL
    /// database, whose `policy` tables are created or migrated now (or, when it cannot be
    /// reached now, on first use: until then calls are refused).
    pub fn open_at(location: &StoreLocation) -> Result<RateLimits, PolicyError> {
        match location {
            StoreLocation::Sqlite(path) => RateLimits::open(path),
            StoreLocation::Postgres(url) => Ok(RateLimits {
                backend: Backend::Postgres(PolicyDb::open(url).map_err(PolicyError::SharedState)?),
                limiters: RwLock::new(HashMap::new()),
            }),
        }
    }

    /// Whether the counters live in a state file or a database: a check then is a
    /// transaction, which may wait for other processes (up to the 5 s busy timeout of SQLite,
    /// the 5 s connect and 10 s statement timeouts of PostgreSQL), so async callers should
    /// run it on a blocking thread.
    pub fn is_shared(&self) -> bool {
        !matches!(self.backend, Backend::Memory)
    }

    /// Counts one call of `tool` (`provider.tool`) by `principal` against `limit`: `Ok` when
    /// admitted, [`PolicyError::RateLimited`] (with the time to wait) when not, or
    /// [`PolicyError::State`] or [`PolicyError::SharedState`] when the state file or database
    /// cannot be used (the call is then refused: counters fail closed).
    pub fn check(
        &self,
        principal: &Principal,
        tool: &str,
        limit: &RateLimit,
    ) -> Result<(), PolicyError> {
        self.check_key(principal.key(), tool, limit)
    }

    /// [`RateLimits::check`] for a principal's name (`None` without one).
    pub(crate) fn check_key(
        &self,
        principal: Option<&Arc<str>>,
        tool: &str,
        limit: &RateLimit,
    ) -> Result<(), PolicyError> {
        let refused = |wait: Duration| PolicyError::RateLimited {
            tool: tool.to_string(),
            limit: *limit,
            retry_after: wait,
        };
        if let Backend::Postgres(db) = &self.backend {
            return match db.check(principal.map(|p| &**p), tool, limit)? {
                None => Ok(()),
                Some(wait) => Err(refused(wait)),
            };
        }
        let limiter = self.limiter(tool, limit);
        let key: PrincipalKey = principal.cloned();
        match &*limiter {
            Limiter::Memory(l) => l
                .check_key(&key)
                .map_err(|not_until| refused(not_until.wait_time_from(l.clock().now()))),
            Limiter::Sqlite(l) => match l.check_key(&key) {
                Ok(()) => Ok(()),
                Err(not_until) => match SqliteStore::take_error() {
                    Some(error) => Err(error),
                    None => Err(refused(wait_time(&not_until, l.clock()))),
                },
            },
        }
    }

    fn limiter(&self, tool: &str, limit: &RateLimit) -> Arc<Limiter> {
        if let Some(l) = self
            .limiters
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(tool)
            .and_then(|by_limit| by_limit.get(limit))
        {
            return l.clone();
        }
        let mut limiters = self.limiters.write().unwrap_or_else(|e| e.into_inner());
        let by_limit = limiters.entry(tool.to_string()).or_default();
        by_limit
            .entry(*limit)
            .or_insert_with(|| {
                Arc::new(match &self.backend {
                    Backend::Memory => Limiter::Memory(RateLimiter::hashmap_with_clock(
                        quota(limit),
                        MonotonicClock,
                    )),
                    Backend::Sqlite(db) => {
                        let store = SqliteStore::new(db.clone(), tool, limit);
                        Limiter::Sqlite(EpochClock::limiter(quota(limit), store))
                    }
                    Backend::Postgres(_) => unreachable!("PostgreSQL counts without a limiter"),
                })
            })
            .clone()
    }
}

fn wait_time(not_until: &NotUntil<governor::nanos::Nanos>, clock: &EpochClock) -> Duration {
    not_until.wait_time_from(clock.now())
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Barrier;

    use super::*;

    #[test]
    fn a_burst_of_the_limit_is_admitted_then_the_next_is_refused_with_the_wait() {
        let limits = RateLimits::in_memory();
        let limit = RateLimit::new(3, Duration::from_secs(60)).unwrap();
        let alice: Arc<str> = Arc::from("alice");
        for _ in 0..3 {
            limits
                .check_key(Some(&alice), "weather.get", &limit)
                .unwrap();
        }
        let e = limits
            .check_key(Some(&alice), "weather.get", &limit)
            .unwrap_err();
        let PolicyError::RateLimited { retry_after, .. } = &e else {
            panic!("{e}");
        };
        assert!(*retry_after > Duration::from_secs(19), "{retry_after:?}");
        assert!(*retry_after <= Duration::from_secs(20), "{retry_after:?}");
        assert_eq!(
            e.to_string(),
            "rate limit exceeded for weather.get: 3 per 1m; retry in 20 s"
        );
        // Other principals, the anonymous one and other tools have counters of their own.
        let bob: Arc<str> = Arc::from("bob");
        limits.check_key(Some(&bob), "weather.get", &limit).unwrap();
        limits.check_key(None, "weather.get", &limit).unwrap();
        limits
            .check_key(Some(&alice), "weather.put", &limit)
            .unwrap();
    }

    /// 1,000 threads released at once against one counter: exactly the limit gets through.
    pub(crate) fn admitted_of_1000_concurrent(limits: &RateLimits, limit: u32) -> usize {
        let limit = RateLimit::new(limit, Duration::from_secs(3600)).unwrap();
        let admitted = AtomicUsize::new(0);
        let barrier = Barrier::new(1000);
        let principal: Arc<str> = Arc::from("p");
        std::thread::scope(|s| {
            for _ in 0..1000 {
                s.spawn(|| {
                    barrier.wait();
                    match limits.check_key(Some(&principal), "t.shared", &limit) {
                        Ok(()) => {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(PolicyError::RateLimited { .. }) => {}
                        Err(e) => panic!("{e}"),
                    }
                });
            }
        });
        admitted.into_inner()
    }

    #[test]
    fn a_thousand_concurrent_calls_in_memory_admit_exactly_the_limit() {
        assert_eq!(
            admitted_of_1000_concurrent(&RateLimits::in_memory(), 100),
            100
        );
    }
}
