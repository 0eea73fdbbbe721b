//! Server-side ceilings on what an `execute` may ask for in `options`: the runner's flags
//! `--max-timeout-ms`, `--max-memory-limit-bytes`, `--max-log-lines` and `--max-log-chars`.
//!
//! A client chooses its execution's limits; the runner's operator bounds them. An `execute`
//! asking for more than a ceiling is refused before it starts, with a `done` carrying
//! `validation_error` that names the option, the value asked, the ceiling and its flag. A
//! ceiling is never below the option's default ([`Ceilings::check_flags`]), so an `execute`
//! that omits an option (and gets its default) always fits: nothing is clamped silently.

use execbox_protocol::RuntimeOptions;

/// Default of `--max-timeout-ms`: 24 hours, the longest a capability may run
/// (`MAX_CAPABILITY_TIMEOUT_MS`), so no host of this workspace is refused by default.
pub const DEFAULT_MAX_TIMEOUT_MS: u64 = 86_400_000;
/// Default of `--max-memory-limit-bytes`: 1 GiB.
pub const DEFAULT_MAX_MEMORY_LIMIT_BYTES: u64 = 1 << 30;
/// Default of `--max-log-lines`: 100,000 lines.
pub const DEFAULT_MAX_LOG_LINES: u64 = 100_000;
/// Default of `--max-log-chars`: 100,000,000 characters, the most a host of this workspace
/// asks for (the conformance suite's case of logs over the message limit). Kept logs live in
/// the runner's heap (up to 3 bytes a character) and a `done` carries at most
/// `--max-message-bytes` of them: a runner serving others sets a lower ceiling.
pub const DEFAULT_MAX_LOG_CHARS: u64 = 100_000_000;

/// The largest `execute.options` a runner accepts, field by field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ceilings {
    /// `--max-timeout-ms`: the largest `timeoutMs`.
    pub timeout_ms: u64,
    /// `--max-memory-limit-bytes`: the largest `memoryLimitBytes`. What one session's guest
    /// may allocate; the runner process's own memory comes on top.
    pub memory_limit_bytes: u64,
    /// `--max-log-lines`: the largest `maxLogLines`.
    pub max_log_lines: u64,
    /// `--max-log-chars`: the largest `maxLogChars`. Kept logs live in the runner's own heap,
    /// outside the guest's memory limit.
    pub max_log_chars: u64,
}

impl Default for Ceilings {
    /// The flags' defaults: the `DEFAULT_MAX_*` constants of this module.
    fn default() -> Ceilings {
        Ceilings {
            timeout_ms: DEFAULT_MAX_TIMEOUT_MS,
            memory_limit_bytes: DEFAULT_MAX_MEMORY_LIMIT_BYTES,
            max_log_lines: DEFAULT_MAX_LOG_LINES,
            max_log_chars: DEFAULT_MAX_LOG_CHARS,
        }
    }
}

/// One ceiling: the option it bounds, its flag, its unit, its value and the option's default.
struct Row {
    option: &'static str,
    flag: &'static str,
    unit: &'static str,
    ceiling: u64,
    default: u64,
}

impl Ceilings {
    fn rows(&self) -> [Row; 4] {
        [
            Row {
                option: "timeoutMs",
                flag: "--max-timeout-ms",
                unit: "ms",
                ceiling: self.timeout_ms,
                default: RuntimeOptions::DEFAULT_TIMEOUT_MS,
            },
            Row {
                option: "memoryLimitBytes",
                flag: "--max-memory-limit-bytes",
                unit: "bytes",
                ceiling: self.memory_limit_bytes,
                default: RuntimeOptions::DEFAULT_MEMORY_LIMIT_BYTES,
            },
            Row {
                option: "maxLogLines",
                flag: "--max-log-lines",
                unit: "lines",
                ceiling: self.max_log_lines,
                default: RuntimeOptions::DEFAULT_MAX_LOG_LINES,
            },
            Row {
                option: "maxLogChars",
                flag: "--max-log-chars",
                unit: "characters",
                ceiling: self.max_log_chars,
                default: RuntimeOptions::DEFAULT_MAX_LOG_CHARS,
            },
        ]
    }

    /// Checks an execution's options; the error is the message of the `validation_error`
    /// that refuses it, for the first option over its ceiling.
    pub fn check(&self, options: &RuntimeOptions) -> Result<(), String> {
        let asked = [
            options.timeout_ms,
            options.memory_limit_bytes,
            options.max_log_lines,
            options.max_log_chars,
        ];
        for (row, asked) in self.rows().iter().zip(asked) {
            if asked > row.ceiling {
                return Err(format!(
                    "options.{} {asked} is over this runner's ceiling of {} {} ({}); ask for at \
                     most that",
                    row.option, row.ceiling, row.unit, row.flag
                ));
            }
        }
        Ok(())
    }

    /// Checks the ceilings themselves: none may be below its option's default, or an
    /// `execute` that omits the option would be refused.
    pub fn check_flags(&self) -> Result<(), String> {
        for row in self.rows() {
            if row.ceiling < row.default {
                return Err(format!(
                    "{} {} is below the default {} of {} {}: an execute that omits the option \
                     would be refused; give at least {}",
                    row.flag, row.ceiling, row.option, row.default, row.unit, row.default
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_option_over_its_ceiling_is_named_with_the_ceiling_and_the_flag() {
        let ceilings = Ceilings {
            memory_limit_bytes: 64 << 20,
            timeout_ms: 60_000,
            ..Ceilings::default()
        };
        assert_eq!(ceilings.check(&RuntimeOptions::default()), Ok(()));
        let mut asked = RuntimeOptions {
            memory_limit_bytes: 1 << 40,
            ..RuntimeOptions::default()
        };
        assert_eq!(
            ceilings.check(&asked),
            Err(
                "options.memoryLimitBytes 1099511627776 is over this runner's ceiling of \
                 67108864 bytes (--max-memory-limit-bytes); ask for at most that"
                    .into()
            )
        );
        asked.memory_limit_bytes = 64 << 20;
        assert_eq!(ceilings.check(&asked), Ok(()), "the ceiling itself fits");
        asked.timeout_ms = 60_001;
        assert!(ceilings
            .check(&asked)
            .unwrap_err()
            .contains("(--max-timeout-ms)"));
        let logs = RuntimeOptions {
            max_log_chars: u64::MAX,
            ..RuntimeOptions::default()
        };
        assert!(Ceilings::default()
            .check(&logs)
            .unwrap_err()
            .starts_with("options.maxLogChars 18446744073709551615 is over"));
    }

    #[test]
    fn a_ceiling_below_the_default_is_refused() {
        assert_eq!(Ceilings::default().check_flags(), Ok(()));
        let low = Ceilings {
            max_log_lines: 10,
            ..Ceilings::default()
        };
        assert_eq!(
            low.check_flags(),
            Err(
                "--max-log-lines 10 is below the default maxLogLines of 100 lines: an execute \
                 that omits the option would be refused; give at least 100"
                    .into()
            )
        );
    }
}
