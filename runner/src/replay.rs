//! A re-run's clock and randomness: the guest's clock readings (replayed, then real, all
//! recorded) and its seeded `Math.random()`, as plain Rust state the engine's hooks call.
//!
//! Used only for an `execute` that carries `replay`; an ordinary execution has none of it.

use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use execbox_protocol::{ClockRun, Execute, Replay, MAX_CLOCK_RUNS};

/// What an execution with `replay` needs: the seed of its `Math.random()` and its clock,
/// shared with the watchdog, which may have to answer the execution itself.
#[derive(Debug, Clone)]
pub(crate) struct Replaying {
    pub(crate) random_seed: u64,
    pub(crate) clock: Arc<Mutex<Clock>>,
}

impl Replaying {
    pub(crate) fn new(replay: &Replay) -> Replaying {
        Replaying {
            random_seed: replay.random_seed,
            clock: Arc::new(Mutex::new(Clock::new(replay.clock.clone()))),
        }
    }

    /// What the guest read so far, and whether that record is incomplete.
    pub(crate) fn observed(&self) -> (Vec<ClockRun>, bool) {
        self.clock
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .observed()
    }

    /// [`Replaying::observed`] without waiting: for the watchdog, which must not block on an
    /// engine it is about to give up on. A clock it cannot read is an empty, incomplete record.
    pub(crate) fn try_observed(&self) -> (Vec<ClockRun>, bool) {
        match self.clock.try_lock() {
            Ok(clock) => clock.observed(),
            Err(_) => (Vec::new(), true),
        }
    }
}

/// The `clock` of a `done` refusing `exec` before it ran: empty when it asked for a replay.
pub(crate) fn unobserved(exec: &Execute) -> Option<Vec<ClockRun>> {
    exec.replay.as_ref().map(|_| Vec::new())
}

/// The guest's clock: readings come from the replayed runs first, in order, then from the real
/// clock; every reading is recorded, run-length encoded, up to [`MAX_CLOCK_RUNS`] runs.
#[derive(Debug)]
pub(crate) struct Clock {
    replay: Vec<ClockRun>,
    /// The replayed run being read, and how many of its readings were taken.
    next: usize,
    taken: u32,
    recorded: Vec<ClockRun>,
    /// A reading needed a run past [`MAX_CLOCK_RUNS`]: nothing more is recorded.
    overflow: bool,
}

impl Clock {
    pub(crate) fn new(replay: Vec<ClockRun>) -> Clock {
        Clock {
            replay,
            next: 0,
            taken: 0,
            recorded: Vec::new(),
            overflow: false,
        }
    }

    /// One reading of the guest's clock, in milliseconds since the Unix epoch.
    pub(crate) fn read(&mut self) -> f64 {
        let ms = self.replayed().unwrap_or_else(real_now);
        self.record(ms);
        ms
    }

    fn replayed(&mut self) -> Option<f64> {
        while let Some(run) = self.replay.get(self.next) {
            if self.taken < run.count {
                self.taken += 1;
                return Some(run.ms);
            }
            self.next += 1;
            self.taken = 0;
        }
        None
    }

    fn record(&mut self, ms: f64) {
        if self.overflow {
            return;
        }
        if let Some(last) = self.recorded.last_mut() {
            if last.ms.to_bits() == ms.to_bits() && last.count < u32::MAX {
                last.count += 1;
                return;
            }
        }
        if self.recorded.len() >= MAX_CLOCK_RUNS {
            self.overflow = true;
            return;
        }
        self.recorded.push(ClockRun { ms, count: 1 });
    }

    fn observed(&self) -> (Vec<ClockRun>, bool) {
        (self.recorded.clone(), self.overflow)
    }
}

/// The real clock as QuickJS reads it: whole milliseconds since the Unix epoch.
fn real_now() -> f64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(since) => since.as_millis() as f64,
        Err(before) => -(before.duration().as_millis() as f64),
    }
}

/// The guest's `Math.random()` for a re-run: xoshiro256** seeded through splitmix64, each
/// number the top 53 bits of one output scaled to `[0, 1)`. Fixed here and in docs/runner.md,
/// so a seed gives the same sequence in every runner process and every runner implementing it.
#[derive(Debug, Clone)]
pub(crate) struct Random {
    state: [u64; 4],
}

impl Random {
    pub(crate) fn new(seed: u64) -> Random {
        let mut mix = seed;
        let mut splitmix = || {
            mix = mix.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = mix;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        Random {
            state: [splitmix(), splitmix(), splitmix(), splitmix()],
        }
    }

    fn next_u64(&mut self) -> u64 {
        let s = &mut self.state;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// The next number in `[0, 1)`.
    pub(crate) fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(ms: f64, count: u32) -> ClockRun {
        ClockRun { ms, count }
    }

    #[test]
    fn replayed_readings_come_first_then_the_real_clock_and_all_are_recorded() {
        let mut clock = Clock::new(vec![run(1000.0, 2), run(2000.0, 1)]);
        assert_eq!(clock.read(), 1000.0);
        assert_eq!(clock.read(), 1000.0);
        assert_eq!(clock.read(), 2000.0);
        let before = real_now();
        let real = clock.read();
        assert!(real >= before && real <= real_now(), "{real}");
        let (recorded, overflow) = clock.observed();
        assert!(!overflow);
        assert_eq!(recorded[..2], [run(1000.0, 2), run(2000.0, 1)]);
        assert_eq!(recorded[2].ms, real);
    }

    #[test]
    fn equal_readings_merge_and_too_many_runs_overflow() {
        let replay: Vec<ClockRun> = (0..MAX_CLOCK_RUNS + 5)
            .map(|i| run(i as f64, if i == 0 { 3 } else { 1 }))
            .collect();
        let mut clock = Clock::new(replay);
        for _ in 0..MAX_CLOCK_RUNS + 7 {
            clock.read();
        }
        let (recorded, overflow) = clock.observed();
        assert!(overflow);
        assert_eq!(recorded.len(), MAX_CLOCK_RUNS);
        assert_eq!(recorded[0], run(0.0, 3));
        assert_eq!(
            recorded[MAX_CLOCK_RUNS - 1],
            run((MAX_CLOCK_RUNS - 1) as f64, 1)
        );
    }

    #[test]
    fn the_random_sequence_is_fixed_by_the_seed() {
        let take = |seed| {
            let mut random = Random::new(seed);
            (0..5).map(|_| random.next_f64()).collect::<Vec<_>>()
        };
        assert_eq!(take(42), take(42));
        assert_ne!(take(42), take(43));
        assert!(take(7).iter().all(|x| (0.0..1.0).contains(x)));
        // The algorithm is part of the protocol: pinned (xoshiro256** from splitmix64).
        let mut zero = Random::new(0);
        assert_eq!(zero.next_u64(), 0x99ec_5f36_cb75_f2b4);
    }
}
