//! Strict YAML for configuration files: one document into one serde type, or a clear error.
//!
//! Every configuration file the host reads (the tools file, the policy file) goes through
//! [`from_str`] or [`from_file`], which use `serde-saphyr` (no `unsafe`, no intermediate
//! tree) with explicit limits, and refuse:
//!
//! - a duplicate key in any mapping;
//! - a document over the [budget](budget) (events, nodes, depth, anchors, aliases, scalar
//!   bytes) or whose aliases expand past [`MAX_REPLAYED_EVENTS`] (a "billion laughs" bomb);
//! - more than one document;
//! - a value of the wrong type;
//! - a field the type does not know: every struct read through here carries
//!   `#[serde(deny_unknown_fields)]`, and the error suggests the closest expected field
//!   (``unknown field `inputSchema`; did you mean `input_schema`?``).
//!
//! An error names the file, the line and column, and the YAML path of the value when known:
//! `tools.yaml:7:9: providers.text.tools.word_count: unknown field ...`.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde_saphyr::options::{AliasLimits, DuplicateKeyPolicy};
use serde_saphyr::{Budget, Error as SaphyrError, Options};

/// A value with where the file wrote it (line and column), for errors found after loading.
pub use serde_saphyr::Spanned;

/// A value written in code, not read from a file: spanned nowhere (line and column 0).
pub fn unplaced<T>(value: T) -> Spanned<T> {
    let nowhere = serde_saphyr::Location::UNKNOWN;
    Spanned::new(value, nowhere, nowhere)
}

/// The largest configuration file read (4 MiB).
pub const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// The most parser events that aliases may replay in one document: a few thousand are
/// plenty for a configuration file, and a billion-laughs document needs billions.
pub const MAX_REPLAYED_EVENTS: usize = 100_000;

/// Why a YAML configuration file cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum YamlError {
    /// The file cannot be read (or is larger than 4 MiB).
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The text is not a YAML document of the expected shape.
    #[error("{}{}: {}{message}", path.display(), Position(*line, *column), YamlPath(at))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// 1-based line, when known.
        line: Option<u64>,
        /// 1-based column, when known.
        column: Option<u64>,
        /// The YAML path of the value, e.g. `providers.text.tools.x` (empty for the root or
        /// when unknown).
        at: String,
        /// What is wrong, with a "did you mean" for an unknown field.
        message: String,
    },
}

impl YamlError {
    /// The 1-based line of the problem, when known.
    pub fn line(&self) -> Option<u64> {
        match self {
            YamlError::Read { .. } => None,
            YamlError::Invalid { line, .. } => *line,
        }
    }
}

/// `:line:column`, `:line`, or nothing.
pub struct Position<N>(pub Option<N>, pub Option<N>);

impl<N: fmt::Display + Copy> fmt::Display for Position<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.0, self.1) {
            (Some(line), Some(column)) => write!(f, ":{line}:{column}"),
            (Some(line), None) => write!(f, ":{line}"),
            _ => Ok(()),
        }
    }
}

/// `path: `, or nothing for the root.
struct YamlPath<'a>(&'a str);

impl fmt::Display for YamlPath<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() || self.0 == "." {
            Ok(())
        } else {
            write!(f, "{}: ", self.0)
        }
    }
}

/// The limits every configuration file is parsed under: far above any real tools or policy
/// file, far below what would cost noticeable time or memory.
fn budget() -> Budget {
    let mut budget = Budget::default();
    budget.max_reader_input_bytes = Some(MAX_FILE_BYTES as usize);
    budget.max_events = 1_000_000;
    budget.max_nodes = 500_000;
    budget.max_depth = 128;
    budget.max_documents = 1;
    budget.max_anchors = 10_000;
    budget.max_aliases = 10_000;
    budget.max_total_scalar_bytes = MAX_FILE_BYTES as usize;
    budget.max_merge_keys = 1_000;
    budget
}

fn options() -> Options {
    let mut alias_limits = AliasLimits::default();
    alias_limits.max_total_replayed_events = MAX_REPLAYED_EVENTS;
    alias_limits.max_replay_stack_depth = 16;
    alias_limits.max_alias_expansions_per_anchor = 1_000;
    let mut options = Options::default();
    options.budget = Some(budget());
    options.alias_limits = alias_limits;
    options.duplicate_keys = DuplicateKeyPolicy::Error;
    // YAML 1.2 scalars, as serde_yaml read them: `yes`, `no`, `on`, `off` are strings, and
    // so are `0755` and `1_000` where the type is not fixed (a JSON Schema's `enum`).
    options.strict_booleans = true;
    options.leading_zero_numbers_as_strings = true;
    options.underscored_numbers_as_strings = true;
    // One-line messages: the location is given as `file:line:column`.
    options.with_snippet = false;
    options
}

/// Reads `path` (at most [`MAX_FILE_BYTES`]) and loads it as one `T`.
pub fn from_file<T: DeserializeOwned>(path: &Path) -> Result<T, YamlError> {
    let read_error = |source| YamlError::Read {
        path: path.to_path_buf(),
        source,
    };
    let size = std::fs::metadata(path).map_err(read_error)?.len();
    if size > MAX_FILE_BYTES {
        return Err(read_error(std::io::Error::other(format!(
            "the file is {size} bytes, more than the {MAX_FILE_BYTES} a configuration file may have"
        ))));
    }
    let text = std::fs::read_to_string(path).map_err(read_error)?;
    from_str(&text, path)
}

/// Loads `text` as one `T`; `path` is only used in error messages.
pub fn from_str<T: DeserializeOwned>(text: &str, path: &Path) -> Result<T, YamlError> {
    let invalid = |line, column, at: String, message: String| YamlError::Invalid {
        path: path.to_path_buf(),
        line,
        column,
        at,
        message,
    };
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(invalid(
            None,
            None,
            String::new(),
            format!("the document is larger than {MAX_FILE_BYTES} bytes"),
        ));
    }
    // serde_path_to_error tracks where the deserializer is; its error is handed back to
    // serde-saphyr unwrapped, so that parsing stops there (and the location is kept).
    let mut at = String::new();
    let loaded = serde_saphyr::with_deserializer_from_str_with_options(text, options(), |de| {
        serde_path_to_error::deserialize::<_, T>(de).map_err(|e| {
            at = e.path().to_string();
            e.into_inner()
        })
    });
    loaded.map_err(|e| {
        let (line, column, message) = describe(&e);
        invalid(line, column, container_path(&at, &e), message)
    })
}

/// The path of the mapping that holds the problem: the path as tracked ends in the key being
/// read (an unknown field, which the message names, or `?` for a key not read yet).
fn container_path(at: &str, error: &SaphyrError) -> String {
    let mut at = at;
    let last_is = |at: &str, key: &str| at == key || at.ends_with(&format!(".{key}"));
    if let SaphyrError::SerdeUnknownField { field, .. } = error.without_snippet() {
        if last_is(at, field) {
            at = &at[..at.len() - field.len()];
        }
    }
    while last_is(at, "?") {
        at = &at[..at.len() - 1];
        at = at.strip_suffix('.').unwrap_or(at);
    }
    at.strip_suffix('.').unwrap_or(at).to_string()
}

/// The line, column and one-line message of a parser or deserializer error.
fn describe(error: &SaphyrError) -> (Option<u64>, Option<u64>, String) {
    let outer = error.without_snippet();
    let location = outer.location().filter(|l| l.line() > 0);
    // An error met while replaying an alias is wrapped with the alias's locations.
    let error = match outer {
        SaphyrError::AliasError { error, .. } => error.without_snippet(),
        other => other,
    };
    let line = location.map(|l| l.line());
    let column = location.map(|l| l.column()).filter(|c| *c > 0);
    let message = match error {
        SaphyrError::SerdeUnknownField {
            field, expected, ..
        } => unknown_field_message(field, expected),
        SaphyrError::DuplicateMappingKey { key: Some(key), .. } => {
            format!("duplicate key `{key}`; each key may appear once in a mapping")
        }
        SaphyrError::DuplicateMappingKey { key: None, .. } => {
            "duplicate key; each key may appear once in a mapping".to_string()
        }
        SaphyrError::Budget { breach, .. } => format!(
            "the document is over the limits of a configuration file ({breach:?}); \
             is it an alias bomb?"
        ),
        SaphyrError::AliasReplayLimitExceeded { .. }
        | SaphyrError::AliasExpansionLimitExceeded { .. }
        | SaphyrError::AliasReplayStackDepthExceeded { .. } => format!(
            "aliases expand to more than a configuration file may hold (at most \
             {MAX_REPLAYED_EVENTS} parser events replayed through aliases); is it an alias bomb?"
        ),
        other => strip_location(&other.to_string()),
    };
    (line, column, message)
}

/// serde-saphyr ends its messages with ` at line L, column C`; the location is reported
/// separately, as `file:line:column`.
fn strip_location(message: &str) -> String {
    match message.find(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message.to_string(),
    }
}

/// ``unknown field `x`; did you mean `y`? (expected one of `a`, `b`)``.
pub fn unknown_field_message(field: &str, expected: &[&str]) -> String {
    let mut message = format!("unknown field `{field}`");
    if let Some(suggestion) = did_you_mean(field, expected.iter().copied()) {
        message.push_str(&format!("; did you mean `{suggestion}`?"));
    }
    match expected {
        [] => message.push_str(" (no fields are expected here)"),
        [only] => message.push_str(&format!(" (expected `{only}`)")),
        many => {
            let list: Vec<String> = many.iter().map(|f| format!("`{f}`")).collect();
            message.push_str(&format!(" (expected one of {})", list.join(", ")));
        }
    }
    message
}

/// The candidate closest to `given`, if it is close enough to be what was meant: a
/// different spelling (`inputSchema`, `input-schema` for `input_schema`) or a small typo.
pub fn did_you_mean<'a>(
    given: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let normalise = |s: &str| -> String {
        s.chars()
            .filter(|c| *c != '_' && *c != '-')
            .flat_map(char::to_lowercase)
            .collect()
    };
    let given_norm = normalise(given);
    let mut best: Option<(usize, &str)> = None;
    for candidate in candidates {
        let distance = if normalise(candidate) == given_norm {
            0
        } else {
            strsim::damerau_levenshtein(given, candidate)
        };
        // Up to a third of the longer name may differ (at least 1, at most 3 edits).
        let allowed = (given.chars().count().max(candidate.chars().count()) / 3).clamp(1, 3);
        if distance <= allowed && best.is_none_or(|(d, _)| distance < d) {
            best = Some((distance, candidate));
        }
    }
    best.map(|(_, c)| c)
}

/// The folder relative paths in a configuration file resolve against: the file's own
/// folder, made absolute (`.` for a bare file name).
pub fn base_dir(path: &Path) -> std::path::PathBuf {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    std::path::absolute(&dir).unwrap_or(dir)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Config {
        name: String,
        #[serde(default)]
        items: BTreeMap<String, Item>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Item {
        command: String,
        input_schema: Option<serde_json::Value>,
        timeout_seconds: Option<f64>,
    }

    fn load(text: &str) -> Result<Config, YamlError> {
        from_str(text, Path::new("c.yaml"))
    }

    fn error(text: &str) -> String {
        load(text).unwrap_err().to_string()
    }

    #[test]
    fn a_valid_document_loads() {
        let config =
            load("name: x\nitems:\n  a: { command: run, input_schema: { type: object } }\n")
                .unwrap();
        assert_eq!(config.name, "x");
        assert_eq!(
            config.items["a"].input_schema,
            Some(serde_json::json!({"type": "object"}))
        );
    }

    #[test]
    fn an_unknown_field_names_the_file_line_path_and_the_closest_field() {
        let e = error("name: x\nitems:\n  a:\n    command: run\n    inputSchema: {}\n");
        assert_eq!(
            e,
            "c.yaml:5:5: items.a: unknown field `inputSchema`; did you mean `input_schema`? \
             (expected one of `command`, `input_schema`, `timeout_seconds`)"
        );
        let e = error("name: x\nitems:\n  a:\n    command: run\n    timeout: 10\n");
        assert!(
            e.contains("unknown field `timeout`; did you mean `timeout_seconds`?")
                || e.contains("unknown field `timeout` (expected"),
            "{e}"
        );
        let e = error("name: x\nzzz: 1\n");
        assert!(
            e.starts_with("c.yaml:2:1: unknown field `zzz` (expected one of `name`, `items`)"),
            "{e}"
        );
    }

    #[test]
    fn did_you_mean_finds_spellings_and_typos_only() {
        let fields = ["command", "input_schema", "timeout_seconds", "args", "env"];
        assert_eq!(did_you_mean("inputSchema", fields), Some("input_schema"));
        assert_eq!(did_you_mean("input-schema", fields), Some("input_schema"));
        assert_eq!(did_you_mean("comand", fields), Some("command"));
        assert_eq!(did_you_mean("arg", fields), Some("args"));
        assert_eq!(
            did_you_mean("timeout_second", fields),
            Some("timeout_seconds")
        );
        assert_eq!(did_you_mean("colour", fields), None);
        assert_eq!(did_you_mean("x", fields), None);
    }

    #[test]
    fn duplicate_keys_are_refused_with_their_line() {
        let e = error("name: x\nitems:\n  a: { command: one }\n  a: { command: two }\n");
        assert!(e.starts_with("c.yaml:4:"), "{e}");
        assert!(e.contains("duplicate key `a`"), "{e}");
        let e = error("name: x\nname: y\n");
        assert!(e.contains("duplicate key `name`"), "{e}");
    }

    #[test]
    fn wrong_types_and_missing_fields_say_where() {
        let e = error("name: x\nitems:\n  a: { command: run, timeout_seconds: soon }\n");
        assert!(e.starts_with("c.yaml:3:"), "{e}");
        assert!(e.contains("items.a.timeout_seconds: "), "{e}");
        let e = error("name: x\nitems:\n  a: { input_schema: {} }\n");
        assert!(e.contains("missing field `command`"), "{e}");
        assert!(e.contains("items.a"), "{e}");
        let e = error("name: [1, 2");
        assert!(e.starts_with("c.yaml:"), "{e}");
    }

    #[test]
    fn a_billion_laughs_document_is_refused_quickly() {
        let mut text = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
        for i in 1..10 {
            let refs: Vec<String> = (0..10).map(|_| format!("*a{}", i - 1)).collect();
            text.push_str(&format!("a{i}: &a{i} [{}]\n", refs.join(", ")));
        }
        text.push_str("name: x\n");
        let started = std::time::Instant::now();
        let e = from_str::<serde_json::Value>(&text, Path::new("bomb.yaml"))
            .unwrap_err()
            .to_string();
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        assert!(e.starts_with("bomb.yaml:"), "{e}");
        assert!(e.contains("alias"), "{e}");
    }

    #[test]
    fn more_than_one_document_is_refused() {
        let e = error("name: x\n---\nname: y\n");
        assert!(e.starts_with("c.yaml:"), "{e}");
    }

    #[test]
    fn a_missing_file_names_it() {
        let e = from_file::<Config>(Path::new("/no/such/c.yaml"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("cannot read /no/such/c.yaml: "), "{e}");
    }
}
