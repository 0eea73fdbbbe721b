//! [`PgError`]: what went wrong with the database, naming it (password hidden) and what to check.

/// An error of the shared store's database.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// The URL cannot be used.
    #[error("database URL {url}: {reason}")]
    Url {
        /// The URL, password hidden.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No connection could be had in time: the database is down, unreachable, refuses us, or
    /// every pooled connection is busy.
    #[error("database {url} is unavailable: {reason}; check that it is running and reachable, and the credentials in the URL")]
    Unavailable {
        /// The URL, password hidden.
        url: String,
        /// What the driver or the pool said.
        reason: String,
    },
    /// A statement failed.
    #[error("database {url}: {reason}")]
    Query {
        /// The URL, password hidden.
        url: String,
        /// What the server said.
        reason: String,
    },
    /// The schema in the database is newer than this execbox knows.
    #[error("database {url}: the {component} schema is at version {found}, newer than this execbox's {known}; use a newer execbox or another database")]
    NewerSchema {
        /// The URL, password hidden.
        url: String,
        /// Whose schema (`capabilities`, `policy`).
        component: String,
        /// The version found.
        found: i32,
        /// The newest version this execbox writes.
        known: i32,
    },
}

impl PgError {
    /// Whether the database could not be reached (rather than refusing a statement).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, PgError::Unavailable { .. })
    }

    /// What went wrong in plain words, naming no database: for answers to HTTP callers and
    /// to models, which never see a database URL (the whole error, URL masked, is for the
    /// operator's log).
    pub fn plain(&self) -> String {
        match self {
            PgError::Url { .. } => "its database URL cannot be used".into(),
            PgError::Unavailable { .. } => "the database is unavailable".into(),
            PgError::Query { .. } => "the database refused a statement".into(),
            PgError::NewerSchema {
                component,
                found,
                known,
                ..
            } => format!(
                "the {component} schema in the database is at version {found}, newer than this execbox's {known}"
            ),
        }
    }
}

/// The text of a driver error: the server's message and detail when it sent one.
pub(crate) fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => match db.detail() {
            Some(detail) => format!("{} ({detail})", db.message()),
            None => db.message().to_string(),
        },
        None => {
            let mut text = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(cause) = source {
                let cause = cause.to_string();
                if !text.contains(&cause) {
                    text.push_str(": ");
                    text.push_str(&cause);
                }
                source = cause_of(source);
            }
            text
        }
    }
}

fn cause_of<'a>(
    e: Option<&'a (dyn std::error::Error + 'static)>,
) -> Option<&'a (dyn std::error::Error + 'static)> {
    e.and_then(std::error::Error::source)
}
