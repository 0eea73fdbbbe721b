//! The soak and fault suite, shared by `benches/soak.rs` (the full run) and `tests/soak.rs` (the short one);
//! both also include `tests/support/mod.rs`, whose process and runner helpers it uses as `crate::support`.
//!
//! Four phases, each returning a [`Report`]:
//! - [`stdio_soak`]: many executions of mixed guest code on ONE warm stdio runner, driven
//!   directly over its pipes (this module plays the host), sampling the runner's RSS;
//! - [`ws_storm`]: concurrent WebSocket sessions against one `--listen` runner, with abrupt
//!   disconnects, cancels and tool calls, then a check that every session slot came back;
//! - [`kills`]: runners killed with SIGKILL while a tool call is pending, through the host's
//!   `PooledExecutor` and `ProcessExecutor`;
//! - [`bad_inputs`]: one table of malformed, oversized, deep, stale and flooding input, sent
//!   over stdio and WebSocket, each followed by a normal execution that must still succeed.
//!
//! Nothing here asserts speed: every wait is bounded generously ([`GRACE`] past the
//! execution's own `timeoutMs`), and a missing `done` is reported as a lost execution.
//! The runner keeps its default OS lockdown throughout; a runner ending by a signal (SIGSYS
//! from seccomp included) is reported as a violation.

mod bad_inputs;
mod cases;
mod drive;
mod kills;
mod report;
mod stdio;
mod transport;
mod ws;

pub(crate) use bad_inputs::bad_inputs;
pub(crate) use cases::*;
pub(crate) use drive::*;
pub(crate) use kills::kills;
pub(crate) use report::*;
pub(crate) use stdio::stdio_soak;
pub(crate) use transport::*;
pub(crate) use ws::ws_storm;

use std::time::Duration;

/// How long past its own `timeoutMs` (or past a cancel) a `done` may take before the execution
/// counts as lost. Generous on purpose: the suite shares two cores with other test binaries.
pub(crate) const GRACE: Duration = Duration::from_secs(10);

/// `--max-sessions` of the WebSocket runner under the storm.
pub(crate) const MAX_SESSIONS: usize = 64;

/// The storm comes in this many waves of sessions (each wave reconnecting all of them), and
/// the listening runner's RSS is reported after each.
pub(crate) const WS_WAVES: usize = 2;

/// How much the soaked runner's RSS may grow from the sample taken after the warm-up to the
/// last sample. The warm-up runs every case at least once, so the baseline already holds the
/// allocator's high-water mark (the largest guest heap is 8 MiB, a log flood's `done` 64 KB);
/// what grows after it is a leak. 16 MiB over 95,000 executions is about 175 bytes each, so a
/// leak of one small allocation per execution fails the check, while the allocator's
/// page-level noise (a few MiB) does not.
pub(crate) const RSS_GROWTH_BOUND_KIB: u64 = 16 * 1024;

/// The size of a run.
#[derive(Debug, Clone)]
pub(crate) struct Scale {
    /// `full` or `short`.
    pub name: &'static str,
    /// Seed of every random choice; printed so a run can be repeated.
    pub seed: u64,
    /// Executions on the one stdio runner.
    pub stdio_executions: u64,
    /// Sample the runner's RSS every this many executions.
    pub rss_every: u64,
    /// The RSS baseline is the first sample at or after this many executions.
    pub rss_warmup: u64,
    /// Concurrent WebSocket sessions in the storm.
    pub ws_sessions: usize,
    /// Executions each storm session completes, per wave.
    pub ws_executions_per_session: u64,
    /// Sessions opened at once after the storm, each running one execution.
    pub ws_fresh_sessions: usize,
    /// Runners killed mid tool call under the pool.
    pub pool_kills: u64,
    /// Runners killed mid tool call under the fresh-process executor.
    pub process_kills: u64,
    /// Times every bad input is sent.
    pub bad_input_rounds: u64,
}

impl Scale {
    /// `"short"` (the test) or anything else (the full soak).
    pub(crate) fn new(name: &str, seed: u64) -> Scale {
        if name == "short" {
            Scale {
                name: "short",
                seed,
                stdio_executions: 2_000,
                rss_every: 100,
                rss_warmup: 500,
                ws_sessions: 8,
                ws_executions_per_session: 20,
                ws_fresh_sessions: 16,
                pool_kills: 3,
                process_kills: 2,
                bad_input_rounds: 1,
            }
        } else {
            Scale {
                name: "full",
                seed,
                stdio_executions: 100_000,
                rss_every: 1_000,
                rss_warmup: 5_000,
                ws_sessions: 50,
                ws_executions_per_session: 200,
                ws_fresh_sessions: MAX_SESSIONS,
                pool_kills: 20,
                process_kills: 10,
                bad_input_rounds: 3,
            }
        }
    }
}

/// `SOAK_SEED` (decimal or `0x` hex) if set, else one derived from the clock.
pub(crate) fn seed_from_env() -> u64 {
    let parsed = std::env::var("SOAK_SEED").ok().and_then(|s| {
        let s = s.trim();
        match s.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => s.parse().ok(),
        }
    });
    parsed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    })
}

/// SplitMix64: small, seedable, good enough to pick cases and fault points.
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// True `percent` times in a hundred.
    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// `n` random bytes.
    pub(crate) fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}
