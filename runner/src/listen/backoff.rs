//! Pacing for the accept loop: exponential backoff after errors and rate-limited warnings.

use std::time::{Duration, Instant};

/// Exponential backoff: each [`Backoff::next`] doubles the delay up to a ceiling;
/// [`Backoff::reset`] starts over. The accept loop sleeps this long after a failed `accept`
/// (EMFILE, ENFILE, ENOMEM...), which would otherwise fail again at once, in a tight loop.
#[derive(Debug)]
pub(crate) struct Backoff {
    first: Duration,
    ceiling: Duration,
    next: Duration,
}

impl Backoff {
    /// Starts at `first`, doubles up to `ceiling`.
    pub(crate) fn new(first: Duration, ceiling: Duration) -> Backoff {
        Backoff {
            first,
            ceiling,
            next: first,
        }
    }

    /// The delay to wait now; the following one is twice as long (up to the ceiling).
    pub(crate) fn next(&mut self) -> Duration {
        let now = self.next;
        self.next = (self.next * 2).min(self.ceiling);
        now
    }

    /// Back to the first delay, after a success.
    pub(crate) fn reset(&mut self) {
        self.next = self.first;
    }
}

/// Lets one event through per interval and counts the others, so a repeated warning costs
/// one line per interval whatever the rate of its cause.
#[derive(Debug)]
pub(crate) struct RateLimited {
    interval: Duration,
    last: Option<Instant>,
    suppressed: u64,
}

impl RateLimited {
    /// At most one event per `interval`.
    pub(crate) fn new(interval: Duration) -> RateLimited {
        RateLimited {
            interval,
            last: None,
            suppressed: 0,
        }
    }

    /// `Some(n)` when this event may be reported, `n` being how many were suppressed since
    /// the last one reported; `None` when it is to be suppressed (and counted).
    pub(crate) fn allow(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(last) if now.duration_since(last) < self.interval => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }
}

/// ` (N similar suppressed)`, or nothing when none were.
pub(crate) fn suppressed_note(suppressed: u64) -> String {
    if suppressed == 0 {
        String::new()
    } else {
        format!(" ({suppressed} similar suppressed in the last second)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_its_ceiling_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(5), Duration::from_secs(1));
        let delays: Vec<u128> = (0..10).map(|_| b.next().as_millis()).collect();
        assert_eq!(delays, [5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        b.reset();
        assert_eq!(b.next(), Duration::from_millis(5));
    }

    #[test]
    fn rate_limit_lets_one_through_per_interval_and_counts_the_rest() {
        let mut r = RateLimited::new(Duration::from_secs(1));
        let t0 = Instant::now();
        assert_eq!(r.allow(t0), Some(0));
        for i in 1..=100 {
            assert_eq!(r.allow(t0 + Duration::from_millis(i * 5)), None);
        }
        assert_eq!(r.allow(t0 + Duration::from_millis(1000)), Some(100));
        assert_eq!(r.allow(t0 + Duration::from_millis(1001)), None);
    }
}
