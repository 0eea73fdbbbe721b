//! The shape of each MCP tool's last result, so a declaration without an output schema can
//! say what a call returned before (`// observed result: { sum: number }`).
//!
//! Kept in memory for the process, and in the `observed_result` table of the state file or
//! database when there is one (`--state`, or the policy's `state`), so a later process starts
//! knowing them. A shape is a short TypeScript-like type of the value, never the value itself.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use super::pg_store::PolicyDb;
use super::state::StateDb;
use super::{PolicyError, StoreLocation};

/// The last observed result shape of each tool, by namespace and tool name. Cheap to share.
#[derive(Default)]
pub struct ObservedResults {
    db: Option<Db>,
    shapes: Mutex<HashMap<(String, String), String>>,
}

enum Db {
    Sqlite(Arc<StateDb>),
    Postgres(PolicyDb),
}

impl std::fmt::Debug for ObservedResults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.db {
            Some(Db::Sqlite(db)) => write!(f, "ObservedResults({})", db.path().display()),
            Some(Db::Postgres(db)) => write!(f, "ObservedResults({})", db.url()),
            None => f.write_str("ObservedResults(in memory)"),
        }
    }
}

impl ObservedResults {
    /// Shapes kept for this process only.
    pub fn in_memory() -> ObservedResults {
        ObservedResults::default()
    }

    /// Shapes kept in the state file at `path` too (created and migrated if needed), starting
    /// with the ones recorded there before.
    pub fn open(path: impl AsRef<Path>) -> Result<ObservedResults, PolicyError> {
        let db = StateDb::open(path.as_ref())?;
        let shapes = db
            .observed_results()?
            .into_iter()
            .map(|(namespace, tool, shape)| ((namespace, tool), shape))
            .collect();
        Ok(ObservedResults {
            db: Some(Db::Sqlite(Arc::new(db))),
            shapes: Mutex::new(shapes),
        })
    }

    /// Shapes kept at `location` too: a state file ([`ObservedResults::open`]), or a
    /// PostgreSQL database shared with every process using it. A database that cannot be
    /// reached now is no error: the process starts knowing no shapes, and records them
    /// once it is back.
    pub fn open_at(location: &StoreLocation) -> Result<ObservedResults, PolicyError> {
        let url = match location {
            StoreLocation::Sqlite(path) => return ObservedResults::open(path),
            StoreLocation::Postgres(url) => url,
        };
        let db = PolicyDb::open(url).map_err(PolicyError::SharedState)?;
        let shapes = match db.observed_results() {
            Ok(rows) => rows
                .into_iter()
                .map(|(namespace, tool, shape)| ((namespace, tool), shape))
                .collect(),
            Err(e) if e.is_unavailable() => {
                tracing::warn!("observed result shapes: {e}");
                HashMap::new()
            }
            Err(e) => return Err(PolicyError::SharedState(e)),
        };
        Ok(ObservedResults {
            db: Some(Db::Postgres(db)),
            shapes: Mutex::new(shapes),
        })
    }

    /// The last shape recorded for `namespace`'s tool `tool` (its name as the server lists it).
    pub fn get(&self, namespace: &str, tool: &str) -> Option<String> {
        let shapes = self.shapes.lock().unwrap_or_else(|e| e.into_inner());
        shapes
            .get(&(namespace.to_owned(), tool.to_owned()))
            .cloned()
    }

    /// Records `shape` as the last result shape of `namespace`'s tool `tool`; written to the
    /// state file or database only when it differs from the one before. One that cannot be
    /// written is reported (the shape is still kept in memory).
    pub fn record(&self, namespace: &str, tool: &str, shape: &str) -> Result<(), PolicyError> {
        let key = (namespace.to_owned(), tool.to_owned());
        {
            let mut shapes = self.shapes.lock().unwrap_or_else(|e| e.into_inner());
            if shapes.get(&key).map(String::as_str) == Some(shape) {
                return Ok(());
            }
            shapes.insert(key, shape.to_owned());
        }
        match &self.db {
            Some(Db::Sqlite(db)) => db.record_observed_result(namespace, tool, shape),
            Some(Db::Postgres(db)) => db
                .record_observed_result(namespace, tool, shape)
                .map_err(PolicyError::SharedState),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_outlive_the_process_in_a_state_file() {
        let dir = std::env::temp_dir().join(format!("execbox-observed-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("state.db");
        let first = ObservedResults::open(&file).unwrap();
        assert_eq!(first.get("calc", "get-sum"), None);
        first.record("calc", "get-sum", "{ sum: number }").unwrap();
        first.record("calc", "get-sum", "{ sum: number }").unwrap();
        assert_eq!(
            first.get("calc", "get-sum").as_deref(),
            Some("{ sum: number }")
        );
        drop(first);
        let second = ObservedResults::open(&file).unwrap();
        assert_eq!(
            second.get("calc", "get-sum").as_deref(),
            Some("{ sum: number }")
        );
        second.record("calc", "get-sum", "string").unwrap();
        assert_eq!(
            ObservedResults::open(&file)
                .unwrap()
                .get("calc", "get-sum")
                .as_deref(),
            Some("string")
        );
        let memory = ObservedResults::in_memory();
        memory.record("a", "b", "null").unwrap();
        assert_eq!(memory.get("a", "b").as_deref(), Some("null"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
