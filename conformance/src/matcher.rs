//! Expected messages: compiled patterns with matchers (`$any`, `$string`, `$number`, `$re:`), callId renaming, masked durations.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::OnceLock;

use regex::{Regex, RegexBuilder};
use serde_json::{Number, Value};

use crate::json::preview_value;

/// Size limit for compiled `$re:` patterns: large enough for `^x{1048576}$`.
const REGEX_SIZE_LIMIT: usize = 1 << 30;

/// Keys compared before anything else in an object, when both sides have them.
const FIRST_KEYS: [&str; 2] = ["type", "id"];

/// How long a value may be quoted inside a one-line mismatch description.
const QUOTE_CHARS: usize = 200;

/// A `$re:` pattern, checked for syntax when the transcript is read and compiled on first use.
#[derive(Debug)]
pub(crate) struct LazyRegex {
    source: String,
    compiled: OnceLock<Result<Regex, String>>,
}

impl LazyRegex {
    /// Checks the syntax now; a pattern too big for the default limit is compiled later.
    fn new(source: &str) -> Result<Self, String> {
        match Regex::new(source) {
            Ok(_) | Err(regex::Error::CompiledTooBig(_)) => Ok(LazyRegex {
                source: source.to_string(),
                compiled: OnceLock::new(),
            }),
            Err(e) => Err(format!("invalid regex in \"$re:{source}\": {e}")),
        }
    }

    fn is_match(&self, text: &str) -> Result<bool, String> {
        let compiled = self.compiled.get_or_init(|| {
            RegexBuilder::new(&self.source)
                .size_limit(REGEX_SIZE_LIMIT)
                .dfa_size_limit(REGEX_SIZE_LIMIT)
                .build()
                .map_err(|e| format!("cannot compile \"$re:{}\": {e}", self.source))
        });
        match compiled {
            Ok(re) => Ok(re.is_match(text)),
            Err(e) => Err(e.clone()),
        }
    }
}

/// One node of an expected value.
#[derive(Debug)]
pub(crate) enum Pattern {
    /// `"$any"`: any value, which must be present.
    Any,
    /// `"$string"`: any string.
    AnyString,
    /// `"$number"`: any number.
    AnyNumber,
    /// `"$re:<regex>"`: a string the regex finds a match in (unanchored).
    Re(LazyRegex),
    /// A literal scalar, compared as a JSON value.
    Scalar(Value),
    /// An array of exactly these elements.
    Array(Vec<Pattern>),
    /// An object with exactly these keys (`type` and `id` are compared first).
    Object(Vec<(String, Pattern)>),
    /// A top-level `callId` naming the transcript's id for a runner-chosen one.
    CallId(String),
    /// A top-level `durationMs`: any non-negative number.
    Duration,
}

impl Pattern {
    /// Compiles an expected runner message; `callId` and `durationMs` are special at its top level.
    pub(crate) fn message(value: &Value) -> Result<Pattern, String> {
        match value {
            Value::Object(map) => {
                let mut fields = Vec::with_capacity(map.len());
                for (key, v) in map {
                    let pattern = match (key.as_str(), v) {
                        ("callId", Value::String(s)) if !s.starts_with('$') => {
                            Pattern::CallId(s.clone())
                        }
                        ("durationMs", Value::Number(_)) => Pattern::Duration,
                        _ => Pattern::value(v)?,
                    };
                    fields.push((key.clone(), pattern));
                }
                Ok(Pattern::Object(fields))
            }
            other => Pattern::value(other),
        }
    }

    /// Compiles any expected value.
    pub(crate) fn value(value: &Value) -> Result<Pattern, String> {
        Ok(match value {
            Value::String(s) => match s.strip_prefix('$') {
                None => Pattern::Scalar(value.clone()),
                Some(rest) => match rest {
                    "any" => Pattern::Any,
                    "string" => Pattern::AnyString,
                    "number" => Pattern::AnyNumber,
                    _ if rest.starts_with('$') => Pattern::Scalar(Value::String(rest.to_string())),
                    _ => match rest.strip_prefix("re:") {
                        Some(re) => Pattern::Re(LazyRegex::new(re)?),
                        None => {
                            return Err(format!(
                            "unknown matcher {s:?} (matchers: \"$any\", \"$string\", \"$number\", \
                                 \"$re:<regex>\"; write \"$${rest}\" for the literal string)"
                        ))
                        }
                    },
                },
            },
            Value::Array(items) => {
                Pattern::Array(items.iter().map(Pattern::value).collect::<Result<_, _>>()?)
            }
            Value::Object(map) => {
                let mut fields = Vec::with_capacity(map.len());
                for (key, v) in map {
                    fields.push((key.clone(), Pattern::value(v)?));
                }
                Pattern::Object(fields)
            }
            scalar => Pattern::Scalar(scalar.clone()),
        })
    }
}

/// The renaming of transcript callIds to the ids the runner chose, one-to-one.
#[derive(Debug, Default)]
pub(crate) struct CallIds {
    to_runner: HashMap<String, String>,
    to_transcript: HashMap<String, String>,
}

impl CallIds {
    /// The runner's id for a transcript id, once a received message bound it.
    pub(crate) fn runner_id(&self, transcript_id: &str) -> Option<&str> {
        self.to_runner.get(transcript_id).map(String::as_str)
    }

    fn bind(&mut self, transcript_id: &str, runner_id: &str) -> Result<(), String> {
        if let Some(bound) = self.to_runner.get(transcript_id) {
            return if bound == runner_id {
                Ok(())
            } else {
                Err(format!(
                    "transcript callId {transcript_id:?} is the runner's {bound:?}, got {runner_id:?}"
                ))
            };
        }
        if let Some(other) = self.to_transcript.get(runner_id) {
            return Err(format!(
                "runner reused callId {runner_id:?} (already transcript callId {other:?}) \
                 where the transcript expects a new call {transcript_id:?}"
            ));
        }
        self.to_runner
            .insert(transcript_id.to_string(), runner_id.to_string());
        self.to_transcript
            .insert(runner_id.to_string(), transcript_id.to_string());
        Ok(())
    }
}

/// One step of the path to a mismatch.
enum Segment<'a> {
    Key(&'a str),
    Index(usize),
}

/// Checks `actual` against `pattern`, binding callIds on success; the error says where and why.
pub(crate) fn check(pattern: &Pattern, actual: &Value, ids: &mut CallIds) -> Result<(), String> {
    let mut path = Vec::new();
    let mut bindings = Vec::new();
    walk(pattern, actual, &mut path, &mut bindings).map_err(|(path, why)| {
        if path.is_empty() {
            why
        } else {
            format!("at {path}: {why}")
        }
    })?;
    for (transcript_id, runner_id) in bindings {
        ids.bind(&transcript_id, &runner_id)?;
    }
    Ok(())
}

fn render(path: &[Segment<'_>]) -> String {
    let mut out = String::new();
    for segment in path {
        match segment {
            Segment::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Segment::Index(i) => {
                let _ = write!(out, "[{i}]");
            }
        }
    }
    out
}

fn quote(value: &Value) -> String {
    preview_value(value, QUOTE_CHARS)
}

fn walk<'a>(
    pattern: &'a Pattern,
    actual: &'a Value,
    path: &mut Vec<Segment<'a>>,
    bindings: &mut Vec<(String, String)>,
) -> Result<(), (String, String)> {
    let fail = |path: &Vec<Segment<'a>>, why: String| Err((render(path), why));
    match pattern {
        Pattern::Any => Ok(()),
        Pattern::AnyString if actual.is_string() => Ok(()),
        Pattern::AnyString => fail(path, format!("expected a string, got {}", quote(actual))),
        Pattern::AnyNumber if actual.is_number() => Ok(()),
        Pattern::AnyNumber => fail(path, format!("expected a number, got {}", quote(actual))),
        Pattern::Duration => match actual.as_f64() {
            Some(ms) if ms >= 0.0 => Ok(()),
            _ => fail(
                path,
                format!("expected a non-negative number, got {}", quote(actual)),
            ),
        },
        Pattern::Re(re) => match actual.as_str() {
            Some(text) => match re.is_match(text) {
                Ok(true) => Ok(()),
                Ok(false) => fail(
                    path,
                    format!(
                        "expected a string matching /{}/, got {}",
                        re.source,
                        quote(actual)
                    ),
                ),
                Err(e) => fail(path, e),
            },
            None => fail(
                path,
                format!(
                    "expected a string matching /{}/, got {}",
                    re.source,
                    quote(actual)
                ),
            ),
        },
        Pattern::CallId(transcript_id) => match actual.as_str() {
            Some(runner_id) => {
                bindings.push((transcript_id.clone(), runner_id.to_string()));
                Ok(())
            }
            None => fail(
                path,
                format!("expected a string callId, got {}", quote(actual)),
            ),
        },
        Pattern::Scalar(expected) => {
            if scalars_equal(expected, actual) {
                Ok(())
            } else {
                fail(
                    path,
                    format!("expected {}, got {}", quote(expected), quote(actual)),
                )
            }
        }
        Pattern::Array(items) => {
            let Some(actual_items) = actual.as_array() else {
                return fail(path, format!("expected an array, got {}", quote(actual)));
            };
            if items.len() != actual_items.len() {
                return fail(
                    path,
                    format!(
                        "expected an array of {} elements, got {}: {}",
                        items.len(),
                        actual_items.len(),
                        quote(actual)
                    ),
                );
            }
            for (i, (p, v)) in items.iter().zip(actual_items).enumerate() {
                path.push(Segment::Index(i));
                walk(p, v, path, bindings)?;
                path.pop();
            }
            Ok(())
        }
        Pattern::Object(fields) => {
            let Some(actual_map) = actual.as_object() else {
                return fail(path, format!("expected an object, got {}", quote(actual)));
            };
            let missing: Vec<&str> = fields
                .iter()
                .map(|(k, _)| k.as_str())
                .filter(|k| !actual_map.contains_key(*k))
                .collect();
            let extra: Vec<&str> = actual_map
                .keys()
                .map(String::as_str)
                .filter(|k| !fields.iter().any(|(f, _)| f == k))
                .collect();
            // Compare `type` and `id` before complaining about keys: "expected done, got
            // tool_call" and "expected id e2, got e1" say more than a key-set difference.
            for first in FIRST_KEYS {
                if let (Some((key, p)), Some(v)) = (
                    fields.iter().find(|(k, _)| k == first),
                    actual_map.get(first),
                ) {
                    path.push(Segment::Key(key));
                    walk(p, v, path, bindings)?;
                    path.pop();
                }
            }
            if !missing.is_empty() || !extra.is_empty() {
                let mut why = String::from("key sets differ:");
                if !missing.is_empty() {
                    let _ = write!(why, " missing {missing:?}");
                }
                if !extra.is_empty() {
                    let _ = write!(why, " unexpected {extra:?}");
                }
                return fail(path, why);
            }
            for (key, p) in fields {
                if FIRST_KEYS.contains(&key.as_str()) {
                    continue;
                }
                path.push(Segment::Key(key));
                walk(p, &actual_map[key.as_str()], path, bindings)?;
                path.pop();
            }
            Ok(())
        }
    }
}

fn scalars_equal(expected: &Value, actual: &Value) -> bool {
    match (expected, actual) {
        (Value::Number(a), Value::Number(b)) => numbers_equal(a, b),
        (a, b) => a == b,
    }
}

/// Numbers are equal by value (`1` equals `1.0`), but `-0` differs from `0`.
fn numbers_equal(a: &Number, b: &Number) -> bool {
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) {
        return x == y;
    }
    if let (Some(x), Some(y)) = (a.as_u64(), b.as_u64()) {
        return x == y;
    }
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y && x.is_sign_negative() == y.is_sign_negative(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn matches(expected: Value, actual: Value) -> Result<(), String> {
        let pattern = Pattern::message(&expected).unwrap();
        check(&pattern, &actual, &mut CallIds::default())
    }

    #[test]
    fn objects_compare_as_values_with_exact_key_sets() {
        assert!(matches(json!({"a": 1, "b": [true]}), json!({"b": [true], "a": 1.0})).is_ok());
        let err = matches(json!({"ok": true}), json!({"ok": true, "result": null})).unwrap_err();
        assert!(err.contains("unexpected [\"result\"]"), "{err}");
        let err = matches(json!({"a": {"b": [1, 2]}}), json!({"a": {"b": [1, 3]}})).unwrap_err();
        assert_eq!(err, "at a.b[1]: expected 2, got 3");
    }

    #[test]
    fn type_is_compared_first() {
        let err = matches(
            json!({"type": "done", "id": "x"}),
            json!({"type": "tool_call", "callId": "c"}),
        )
        .unwrap_err();
        assert_eq!(err, "at type: expected \"done\", got \"tool_call\"");
    }

    #[test]
    fn matchers_and_escapes() {
        let expected =
            json!({"a": "$any", "b": "$string", "c": "$number", "d": "$re:^x+$", "e": "$$any"});
        let actual = json!({"a": [1], "b": "s", "c": 2.5, "d": "xxx", "e": "$any"});
        assert!(matches(expected.clone(), actual).is_ok());
        let bad = json!({"a": null, "b": 1, "c": 2, "d": "xy", "e": "$any"});
        assert!(matches(expected, bad).unwrap_err().starts_with("at b:"));
        assert!(Pattern::value(&json!("$strng")).is_err());
        assert!(Pattern::value(&json!("$re:(")).is_err());
    }

    #[test]
    fn negative_zero_is_not_zero() {
        let minus_zero: Value = serde_json::from_str("-0.0").unwrap();
        assert!(matches(json!(0), minus_zero).is_err());
        let minus_zero: Value = serde_json::from_str("-0").unwrap();
        assert!(matches(json!(0), minus_zero).is_err());
        assert!(matches(json!(0), json!(0.0)).is_ok());
    }

    #[test]
    fn durations_are_masked_at_the_top_level_only() {
        assert!(matches(json!({"durationMs": 3}), json!({"durationMs": 1234.5})).is_ok());
        assert!(matches(json!({"durationMs": 3}), json!({"durationMs": -1})).is_err());
        assert!(matches(
            json!({"r": {"durationMs": 3}}),
            json!({"r": {"durationMs": 4}})
        )
        .is_err());
    }

    #[test]
    fn call_ids_are_renamed_one_to_one() {
        let call = |id: &str| json!({"type": "tool_call", "callId": id});
        let p1 = Pattern::message(&call("call-1")).unwrap();
        let p2 = Pattern::message(&call("call-2")).unwrap();
        let mut ids = CallIds::default();
        check(&p1, &call("r-7"), &mut ids).unwrap();
        assert_eq!(ids.runner_id("call-1"), Some("r-7"));
        check(&p1, &call("r-7"), &mut ids).unwrap();
        assert!(check(&p1, &call("r-8"), &mut ids).is_err());
        let err = check(&p2, &call("r-7"), &mut ids).unwrap_err();
        assert!(err.contains("reused"), "{err}");
        check(&p2, &call("r-8"), &mut ids).unwrap();
    }

    #[test]
    fn failed_matches_bind_nothing() {
        let p = Pattern::message(&json!({"type": "tool_call", "callId": "c", "input": 1})).unwrap();
        let mut ids = CallIds::default();
        assert!(check(
            &p,
            &json!({"type": "tool_call", "callId": "r", "input": 2}),
            &mut ids
        )
        .is_err());
        assert_eq!(ids.runner_id("c"), None);
    }
}

#[cfg(test)]
mod depth_tests {
    use super::*;
    use crate::json::{parse, with_big_stack, MAX_PARSE_DEPTH};

    #[test]
    fn the_deepest_parseable_values_compare_and_drop_on_the_big_stack() {
        let text = format!(
            "{}0{}",
            "[".repeat(MAX_PARSE_DEPTH),
            "]".repeat(MAX_PARSE_DEPTH)
        );
        with_big_stack(|| {
            let expected = parse(&text).unwrap();
            let actual = parse(&text).unwrap();
            let pattern = Pattern::value(&expected).unwrap();
            check(&pattern, &actual, &mut CallIds::default()).unwrap();
            let other = parse(&text.replacen('0', "1", 1)).unwrap();
            assert!(check(&pattern, &other, &mut CallIds::default()).is_err());
        });
    }
}
