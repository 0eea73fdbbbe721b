//! [`Migrations`]: each component's schema, versioned in `execbox_schema` and migrated at
//! start under an advisory lock, so that replicas starting together migrate once.

use super::pool::MIGRATION_TIMEOUT;
use super::{Pg, PgError};

/// A component's schema as the ordered statements that bring it from version 0 to
/// `steps.len()`: step `i` (0-based) migrates version `i` to `i + 1`. Steps are only ever
/// appended.
#[derive(Debug, Clone, Copy)]
pub struct Migrations {
    /// The component (`capabilities`, `policy`): its row in `execbox_schema`.
    pub component: &'static str,
    /// The steps, each one or more statements.
    pub steps: &'static [&'static str],
}

/// The advisory lock every migration holds (any constant; `hashtext` of a name keeps it readable).
const LOCK: &str = "SELECT pg_advisory_xact_lock(hashtext('execbox_schema'))";

impl Pg {
    /// Brings `migrations.component`'s schema to its newest version in one transaction, or
    /// refuses a database whose schema is newer than this execbox's.
    pub fn migrate(&self, migrations: &Migrations) -> Result<(), PgError> {
        let migrations = *migrations;
        let known = migrations.steps.len() as i32;
        let url = self.url().to_string();
        let found = self.block_within(MIGRATION_TIMEOUT, move |mut client| async move {
            let tx = client.transaction().await?;
            tx.batch_execute(LOCK).await?;
            tx.batch_execute(
                "CREATE TABLE IF NOT EXISTS execbox_schema (
                    component TEXT PRIMARY KEY,
                    version INTEGER NOT NULL,
                    migrated_at TIMESTAMPTZ NOT NULL DEFAULT now()
                )",
            )
            .await?;
            let found: i32 = tx
                .query_opt(
                    "SELECT version FROM execbox_schema WHERE component = $1",
                    &[&migrations.component],
                )
                .await?
                .map(|row| row.get(0))
                .unwrap_or(0);
            if found > known {
                return Ok(found);
            }
            for step in &migrations.steps[found as usize..] {
                tx.batch_execute(step).await?;
            }
            if found < known {
                tx.execute(
                    "INSERT INTO execbox_schema (component, version) VALUES ($1, $2)
                     ON CONFLICT (component) DO UPDATE SET version = $2, migrated_at = now()",
                    &[&migrations.component, &known],
                )
                .await?;
                tracing::info!(
                    component = migrations.component,
                    from = found,
                    to = known,
                    "migrated the database schema"
                );
            }
            tx.commit().await?;
            Ok(found)
        })?;
        if found > known {
            return Err(PgError::NewerSchema {
                url,
                component: migrations.component.into(),
                found,
                known,
            });
        }
        Ok(())
    }
}
