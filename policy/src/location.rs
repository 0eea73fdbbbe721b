//! [`StoreLocation`]: where a store lives, parsed once from what the user wrote: a SQLite
//! file path, or a `postgres://` URL shared by every process and replica that names it.

use std::fmt;
use std::path::{Path, PathBuf};

use execbox_pg::PgUrl;

/// A store's location (`--db`, `--state`, a policy file's `state`).
#[derive(Clone, Debug)]
// A location is parsed once per store and kept beside it: its size does not matter, and a
// box would only make matching on it clumsier.
#[allow(clippy::large_enum_variant)]
pub enum StoreLocation {
    /// A SQLite file (created if missing), shared by the processes of one machine.
    Sqlite(PathBuf),
    /// A PostgreSQL database, shared by every process and replica that names it.
    Postgres(PgUrl),
}

impl StoreLocation {
    /// `text` as a location: a `postgres://` or `postgresql://` URL (whose errors never show
    /// its password), else a file path.
    pub fn parse(text: &str) -> Result<StoreLocation, execbox_pg::PgError> {
        if PgUrl::is_url(text) {
            PgUrl::parse(text).map(StoreLocation::Postgres)
        } else {
            Ok(StoreLocation::Sqlite(PathBuf::from(text)))
        }
    }

    /// A path given as an OS string (a command-line argument): a URL when it reads as one.
    pub fn from_path(path: &Path) -> Result<StoreLocation, execbox_pg::PgError> {
        match path.to_str() {
            Some(text) => StoreLocation::parse(text),
            None => Ok(StoreLocation::Sqlite(path.to_path_buf())),
        }
    }

    /// The file, when it is one.
    pub fn file(&self) -> Option<&Path> {
        match self {
            StoreLocation::Sqlite(path) => Some(path),
            StoreLocation::Postgres(_) => None,
        }
    }

    /// A relative file resolved against `base`; URLs are returned as they are.
    pub fn resolved_against(self, base: &Path) -> StoreLocation {
        match self {
            StoreLocation::Sqlite(path) if path.is_relative() => {
                StoreLocation::Sqlite(base.join(path))
            }
            other => other,
        }
    }
}

impl fmt::Display for StoreLocation {
    /// The path, or the URL with its password hidden.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreLocation::Sqlite(path) => write!(f, "{}", path.display()),
            StoreLocation::Postgres(url) => write!(f, "{url}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_postgres_and_anything_else_is_a_file() {
        let url = StoreLocation::parse("postgres://u:pw@db:5432/execbox").unwrap();
        assert!(matches!(url, StoreLocation::Postgres(_)));
        assert_eq!(url.to_string(), "postgres://u:***@db:5432/execbox");
        // Rebuilt from what was parsed, whatever the password holds.
        let url = StoreLocation::parse("postgres://u:Zq9/Xk?Wv@db/execbox").unwrap();
        assert_eq!(url.to_string(), "postgres://u:***@db:5432/execbox");
        assert_eq!(
            format!("{url:?}"),
            "Postgres(postgres://u:***@db:5432/execbox)"
        );
        let file = StoreLocation::parse("state.db").unwrap();
        assert_eq!(file.file(), Some(Path::new("state.db")));
        assert_eq!(
            file.resolved_against(Path::new("/etc/execbox")).file(),
            Some(Path::new("/etc/execbox/state.db"))
        );
        assert!(StoreLocation::parse("postgres://u:pw@db:nope/x").is_err());
    }
}
