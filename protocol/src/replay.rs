//! Replay of an execution's clock and randomness: `execute.replay` and `done.clock`.
//!
//! A host that re-runs an execution from the start (answering its tool calls from a record)
//! sends the seed and the clock readings of the first run, so the program sees the same
//! `Math.random()` sequence and the same `Date.now()` / `new Date()` / `Date()` values and takes
//! the same path. Both fields are additive: a runner that does not know them ignores them, and
//! a host that does not send `replay` gets no `clock` back.
//!
//! On the wire a clock is run-length encoded: `[[ms, count], ...]`, the value `ms` read
//! `count` times in a row, in order.

use serde::ser::{Serialize, SerializeStruct, SerializeTuple, Serializer};
use serde_json::Value;

use crate::manifest::expected;

/// The most runs a clock may have, in `execute.replay.clock` and in `done.clock`. A runner
/// stops recording at this many (and says so with `done.clockOverflow`); an `execute` with
/// more is invalid.
pub const MAX_CLOCK_RUNS: usize = 100_000;

/// The largest `randomSeed`: the largest integer a JavaScript number holds exactly (2^53 - 1).
pub const MAX_RANDOM_SEED: u64 = (1 << 53) - 1;

/// `execute.replay`: what makes a re-run see the clock and randomness of an earlier run.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Replay {
    /// Seeds the guest's `Math.random()`: the same seed gives the same sequence, in any
    /// runner process (`randomSeed`, `0..=`[`MAX_RANDOM_SEED`]).
    pub random_seed: u64,
    /// Clock readings the guest gets first, in order, before the real clock (`clock`,
    /// optional, at most [`MAX_CLOCK_RUNS`] runs).
    pub clock: Vec<ClockRun>,
}

/// One run of equal clock readings: `ms` read `count` times in a row (`[ms, count]`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ClockRun {
    /// The reading, in milliseconds since the Unix epoch; finite.
    pub ms: f64,
    /// How many readings in a row had it; at least 1.
    pub count: u32,
}

impl Serialize for ClockRun {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut pair = serializer.serialize_tuple(2)?;
        // A whole number is written as one (`1700000000000`, not `1700000000000.0`), so the
        // wire reads as JavaScript would write it.
        if self.ms.fract() == 0.0 && self.ms.abs() <= MAX_RANDOM_SEED as f64 {
            pair.serialize_element(&(self.ms as i64))?;
        } else {
            pair.serialize_element(&self.ms)?;
        }
        pair.serialize_element(&self.count)?;
        pair.end()
    }
}

impl Serialize for Replay {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let fields = if self.clock.is_empty() { 1 } else { 2 };
        let mut s = serializer.serialize_struct("Replay", fields)?;
        s.serialize_field("randomSeed", &self.random_seed)?;
        if !self.clock.is_empty() {
            s.serialize_field("clock", &self.clock)?;
        }
        s.end()
    }
}

/// A field path and what is wrong with it, e.g. `("replay.clock[3][1]", "must be ...")`.
pub(crate) type Invalid = (String, String);

/// Reads `execute.replay` (`field` is its path, `replay`).
pub(crate) fn replay_from_value(value: &Value, field: &str) -> Result<Replay, Invalid> {
    let Value::Object(obj) = value else {
        return Err((field.to_owned(), expected("an object", value)));
    };
    let seed_field = format!("{field}.randomSeed");
    let random_seed = match obj.get("randomSeed") {
        None | Some(Value::Null) => return Err((seed_field, "is required".into())),
        Some(Value::Number(n)) => whole(n)
            .filter(|seed| *seed <= MAX_RANDOM_SEED)
            .ok_or_else(|| {
                (
                    seed_field,
                    format!("must be a whole number from 0 to {MAX_RANDOM_SEED}, got {n}"),
                )
            })?,
        Some(other) => return Err((seed_field, expected("a number", other))),
    };
    let clock = match obj.get("clock") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => clock_from_value(v, &format!("{field}.clock"))?,
    };
    Ok(Replay { random_seed, clock })
}

/// Reads a run-length encoded clock, `[[ms, count], ...]` (`field` is its path).
pub(crate) fn clock_from_value(value: &Value, field: &str) -> Result<Vec<ClockRun>, Invalid> {
    let Value::Array(items) = value else {
        return Err((
            field.to_owned(),
            expected("an array of [ms, count] pairs", value),
        ));
    };
    if items.len() > MAX_CLOCK_RUNS {
        return Err((
            field.to_owned(),
            format!(
                "has {} runs, over the limit of {MAX_CLOCK_RUNS}; an execution with more clock \
                 readings than that cannot be replayed",
                items.len()
            ),
        ));
    }
    let mut runs = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("{field}[{i}]");
        let pair = match item {
            Value::Array(pair) if pair.len() == 2 => pair,
            Value::Array(pair) => {
                return Err((
                    at,
                    format!("must be a pair [ms, count], got {} items", pair.len()),
                ))
            }
            other => return Err((at, expected("a pair [ms, count]", other))),
        };
        let ms = match &pair[0] {
            Value::Number(n) => n.as_f64().filter(|ms| ms.is_finite()).ok_or_else(|| {
                (
                    format!("{at}[0]"),
                    format!("must be a finite number of milliseconds, got {n}"),
                )
            })?,
            other => return Err((format!("{at}[0]"), expected("a number", other))),
        };
        let count = match &pair[1] {
            Value::Number(n) => whole(n)
                .filter(|c| *c >= 1)
                .and_then(|c| u32::try_from(c).ok())
                .ok_or_else(|| {
                    (
                        format!("{at}[1]"),
                        format!("must be a whole number from 1 to {}, got {n}", u32::MAX),
                    )
                })?,
            other => return Err((format!("{at}[1]"), expected("a number", other))),
        };
        runs.push(ClockRun { ms, count });
    }
    Ok(runs)
}

/// A non-negative whole number, written as an integer or as a float with no fraction.
fn whole(n: &serde_json::Number) -> Option<u64> {
    n.as_u64().or_else(|| {
        n.as_f64()
            .filter(|x| x.fract() == 0.0 && *x >= 0.0 && *x <= u64::MAX as f64)
            .map(|x| x as u64)
    })
}

/// An upper bound of a clock's encoded length, in bytes.
pub(crate) fn clock_size_hint(runs: &[ClockRun]) -> usize {
    // `[` ms (at most 24 characters) `,` count (at most 10) `]` `,`
    runs.len().saturating_mul(40).saturating_add(64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(json: &str) -> Result<Replay, Invalid> {
        replay_from_value(&serde_json::from_str(json).unwrap(), "replay")
    }

    #[test]
    fn replay_reads_its_seed_and_clock() {
        let replay = read(r#"{"randomSeed":42,"clock":[[1000,2],[2000.5,1]]}"#).unwrap();
        let exact = read(r#"{"randomSeed":1,"clock":[[1700000000000.1234,1]]}"#).unwrap();
        assert_eq!(exact.clock[0].ms, 1_700_000_000_000.123_4);
        assert_eq!(replay.random_seed, 42);
        assert_eq!(
            replay.clock,
            vec![
                ClockRun {
                    ms: 1000.0,
                    count: 2
                },
                ClockRun {
                    ms: 2000.5,
                    count: 1
                }
            ]
        );
        assert_eq!(read(r#"{"randomSeed":7}"#).unwrap().clock, vec![]);
        assert_eq!(
            read(r#"{"randomSeed":9007199254740991.0}"#)
                .unwrap()
                .random_seed,
            MAX_RANDOM_SEED
        );
    }

    #[test]
    fn malformed_replay_names_the_field() {
        let cases = [
            (r#"[]"#, "replay"),
            (r#"{}"#, "replay.randomSeed"),
            (r#"{"randomSeed":"1"}"#, "replay.randomSeed"),
            (r#"{"randomSeed":-1}"#, "replay.randomSeed"),
            (r#"{"randomSeed":1.5}"#, "replay.randomSeed"),
            (r#"{"randomSeed":9007199254740992}"#, "replay.randomSeed"),
            (r#"{"randomSeed":1,"clock":{}}"#, "replay.clock"),
            (r#"{"randomSeed":1,"clock":[5]}"#, "replay.clock[0]"),
            (r#"{"randomSeed":1,"clock":[[1,1,1]]}"#, "replay.clock[0]"),
            (
                r#"{"randomSeed":1,"clock":[[1,1],["2",1]]}"#,
                "replay.clock[1][0]",
            ),
            (
                r#"{"randomSeed":1,"clock":[[1,1],[2,1],[3,1],[4,0]]}"#,
                "replay.clock[3][1]",
            ),
            (
                r#"{"randomSeed":1,"clock":[[1,4294967296]]}"#,
                "replay.clock[0][1]",
            ),
            (
                r#"{"randomSeed":1,"clock":[[1,1.5]]}"#,
                "replay.clock[0][1]",
            ),
        ];
        for (json, field) in cases {
            let (got, reason) = read(json).unwrap_err();
            assert_eq!(got, field, "{json}: {reason}");
            assert!(
                reason.starts_with("must") || reason.starts_with("is"),
                "{reason}"
            );
        }
        let many = format!(
            r#"{{"randomSeed":1,"clock":[{}]}}"#,
            vec!["[1,1]"; MAX_CLOCK_RUNS + 1].join(",")
        );
        let (field, reason) = read(&many).unwrap_err();
        assert_eq!(field, "replay.clock");
        assert!(reason.contains("100000"), "{reason}");
    }

    #[test]
    fn whole_milliseconds_are_written_as_integers() {
        let runs = [
            ClockRun {
                ms: 1_700_000_000_000.0,
                count: 3,
            },
            ClockRun { ms: 0.25, count: 1 },
            ClockRun {
                ms: 1e300,
                count: 1,
            },
        ];
        assert_eq!(
            serde_json::to_string(&runs).unwrap(),
            "[[1700000000000,3],[0.25,1],[1e+300,1]]"
        );
        assert!(serde_json::to_string(&runs).unwrap().len() <= clock_size_hint(&runs));
        let replay = Replay {
            random_seed: 3,
            clock: vec![],
        };
        assert_eq!(
            serde_json::to_string(&replay).unwrap(),
            r#"{"randomSeed":3}"#
        );
    }
}
