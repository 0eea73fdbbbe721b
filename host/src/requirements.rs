//! What a tool declares it needs before it may run: permissions, a rate limit, an approval.
//!
//! These are declarations, data the core keeps beside each tool (from the tools file, an
//! `mcp.json` or the [`Tool`](crate::Tool) builder) and hands to the [`CallGuard`](crate::CallGuard)
//! of an execution; the core itself enforces none of them, except that a tool declaring a
//! rate limit or an approval never runs without a guard (see `guard.rs`).

use std::fmt;
use std::num::NonZeroU32;
use std::time::Duration;

/// What a tool declares it needs; empty (the default) means anyone may call it, as often as
/// they like, without approval.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolRequirements {
    /// Permissions the caller must hold, every one (`weather:read`).
    pub permissions: Vec<String>,
    /// At most this many calls per window, per principal.
    pub rate_limit: Option<RateLimit>,
    /// Each call waits for an approver's decision before it runs.
    pub requires_approval: bool,
}

impl ToolRequirements {
    /// Whether the tool declares nothing.
    pub fn is_empty(&self) -> bool {
        self.permissions.is_empty() && self.rate_limit.is_none() && !self.requires_approval
    }

    /// Whether a call must not run without a guard enforcing it: a rate limit or an
    /// approval. (Permissions only mean something once a guard names a principal.)
    pub fn needs_guard(&self) -> bool {
        self.rate_limit.is_some() || self.requires_approval
    }
}

/// A rate limit that cannot be accepted, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid rate limit: {0}")]
pub struct RateLimitError(pub String);

/// The longest accepted `window` (366 days).
pub const MAX_WINDOW: Duration = Duration::from_secs(366 * 86_400);

/// A tool's rate limit: at most `requests` calls per `window`, per principal.
///
/// ```
/// use execbox_host::RateLimit;
/// use std::time::Duration;
///
/// let limit: RateLimit = "100 per 1h".parse().unwrap();
/// assert_eq!(limit, RateLimit::new(100, Duration::from_secs(3600)).unwrap());
/// assert_eq!(limit.to_string(), "100 per 1h");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RateLimit {
    requests: NonZeroU32,
    window: Duration,
}

impl RateLimit {
    /// `requests` per `window`; `requests` must be at least 1 and `window` from 1 ms to
    /// 366 days.
    pub fn new(requests: u32, window: Duration) -> Result<RateLimit, RateLimitError> {
        let requests = NonZeroU32::new(requests)
            .ok_or_else(|| RateLimitError("`requests` must be at least 1".into()))?;
        if window < Duration::from_millis(1) || window > MAX_WINDOW {
            return Err(RateLimitError(format!(
                "`window` must be from 1ms to {}d",
                MAX_WINDOW.as_secs() / 86_400
            )));
        }
        Ok(RateLimit { requests, window })
    }

    /// How many calls a window admits (the burst).
    pub fn requests(&self) -> u32 {
        self.requests.get()
    }

    /// The window.
    pub fn window(&self) -> Duration {
        self.window
    }
}

impl fmt::Display for RateLimit {
    /// `100 per 1h`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} per {}", self.requests, Window(self.window))
    }
}

impl std::str::FromStr for RateLimit {
    type Err = RateLimitError;

    /// `N per WINDOW` or `N/WINDOW`: `100 per 1h`, `3/1m`.
    fn from_str(s: &str) -> Result<RateLimit, RateLimitError> {
        let (n, w) = s
            .split_once(" per ")
            .or_else(|| s.split_once('/'))
            .ok_or_else(|| {
                RateLimitError(format!(
                    "{s:?} is not a rate limit; write it as `100 per 1h`"
                ))
            })?;
        let requests = n
            .trim()
            .parse::<u32>()
            .map_err(|_| RateLimitError(format!("{n:?} is not a number of requests")))?;
        let window = parse_window(w.trim()).map_err(RateLimitError)?;
        RateLimit::new(requests, window)
    }
}

/// A window as written in files: `30s`, `5m`, `1h`, `1d` (also `ms`); a whole number and a unit.
pub fn parse_window(text: &str) -> Result<Duration, String> {
    let bad =
        || format!("{text:?} is not a window; write a whole number and a unit: 30s, 5m, 1h or 1d");
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let unit_ms: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(bad()),
    };
    let ms = n.checked_mul(unit_ms).ok_or_else(bad)?;
    Ok(Duration::from_millis(ms))
}

/// A window written back in the largest unit that divides it: `1h`, `90s`, `1500ms`.
struct Window(Duration);

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        for (unit, size) in [
            ("d", 86_400_000),
            ("h", 3_600_000),
            ("m", 60_000),
            ("s", 1_000),
        ] {
            if ms >= size && ms.is_multiple_of(size) {
                return write!(f, "{}{unit}", ms / size);
            }
        }
        write!(f, "{ms}ms")
    }
}

/// Checks a permission a tool requires; the error says why it is refused.
pub fn check_permission(permission: &str) -> Result<(), String> {
    if permission.is_empty() {
        return Err("a permission must not be empty".into());
    }
    if permission.contains('*') {
        return Err(format!(
            "{permission:?}: a permission a tool requires cannot contain `*` (only grants can)"
        ));
    }
    if permission
        .chars()
        .any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(format!(
            "{permission:?}: a permission must not contain spaces or control characters"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_parse_and_print() {
        assert_eq!(parse_window("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_window("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_window("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_window("1d"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_window("250ms"), Ok(Duration::from_millis(250)));
        for bad in [
            "",
            "1",
            "h",
            "1 h",
            "1.5h",
            "-1s",
            "1w",
            "99999999999999999999d",
        ] {
            assert!(parse_window(bad).is_err(), "{bad:?}");
        }
        let limit = |n, secs| RateLimit::new(n, Duration::from_secs(secs)).unwrap();
        assert_eq!(limit(100, 3600).to_string(), "100 per 1h");
        assert_eq!(limit(3, 60).to_string(), "3 per 1m");
        assert_eq!(limit(3, 90).to_string(), "3 per 90s");
        assert_eq!(limit(1, 2 * 86_400).to_string(), "1 per 2d");
        assert_eq!("3/1m".parse::<RateLimit>().unwrap(), limit(3, 60));
        assert!(RateLimit::new(0, Duration::from_secs(1)).is_err());
        assert!(RateLimit::new(1, Duration::ZERO).is_err());
        assert!(RateLimit::new(1, MAX_WINDOW + Duration::from_secs(1)).is_err());
    }
}
