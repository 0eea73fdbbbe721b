//! Ends of executions that PostgreSQL could not take when their program ended (the database
//! down, stalled or cut off): kept in this process and written again, with a growing pause,
//! until they land, so that no execution stays `running` once the database is back.
//!
//! The outcome itself is not lost meanwhile: the store answers the end as written, so the
//! manager tells the execution's local waiters and subscribers at once; the row, the history
//! and the notification follow when the database takes them. If the replica dies first, its
//! lease runs out and the reaper fails the execution ("interrupted: replica NAME stopped"),
//! and if the reaper got there first (this replica's lease ran out while it could not reach
//! the database), its end stands: an end is written only over a live status.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use execbox_pg::{Pg, PgError};

use super::FINISH;

/// The first pause before an end is written again; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(100);

/// The longest pause between two tries: an end lands at most this long (plus one call) after
/// the database is back.
pub(super) const MAX_PAUSE: Duration = Duration::from_secs(2);

/// An execution's end as [`FINISH`] writes it.
#[derive(Clone, Debug)]
pub(super) struct End {
    pub(super) id: String,
    pub(super) status: &'static str,
    pub(super) result: Option<String>,
    pub(super) context: Option<String>,
    pub(super) code: Option<String>,
    pub(super) message: Option<String>,
    /// When the program ended (ms since the Unix epoch): the row's `ended_ms`, however late
    /// it is written.
    pub(super) ended_ms: i64,
    pub(super) logs: Option<String>,
    pub(super) payload: String,
}

impl End {
    /// Writes it: `Ok(true)` when written, `Ok(false)` when the execution had ended already.
    pub(super) async fn write(&self, pg: &Pg) -> Result<bool, PgError> {
        let end = self.clone();
        pg.run(move |c| async move {
            let statement = c.prepare_cached(FINISH).await?;
            let ended = c
                .query_opt(
                    &statement,
                    &[
                        &end.id,
                        &end.status,
                        &end.result,
                        &end.context,
                        &end.code,
                        &end.message,
                        &end.ended_ms,
                        &end.logs,
                        &end.payload,
                    ],
                )
                .await?;
            Ok(ended.is_some())
        })
        .await
    }
}

/// The ends being written again, by execution id.
#[derive(Default)]
pub(super) struct KeptEnds {
    tasks: Mutex<HashMap<String, tokio::task::AbortHandle>>,
    settled: tokio::sync::Notify,
}

impl KeptEnds {
    /// Keeps `end`, which could not be written (`why`), and writes it again on `pg`'s runtime
    /// until it lands (or the execution is found ended by another).
    pub(super) fn keep(self: &Arc<Self>, pg: &Pg, end: End, why: &PgError) {
        tracing::warn!(
            execution = %end.id,
            status = end.status,
            "cannot record the end of the execution now ({why}); it is kept here and written as soon as the database takes it"
        );
        let kept = Arc::downgrade(self);
        let id = end.id.clone();
        let writer = pg.clone();
        // Held while the task is spawned and recorded, so that it cannot remove itself first.
        let mut tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        let task = pg.spawn(async move {
            let mut pause = FIRST_PAUSE;
            let mut tries = 1u32;
            loop {
                tokio::time::sleep(pause).await;
                tries += 1;
                match end.write(&writer).await {
                    Ok(true) => {
                        tracing::info!(execution = %end.id, status = end.status, tries, "recorded the end of the execution once the database was back");
                        break;
                    }
                    Ok(false) => {
                        tracing::warn!(execution = %end.id, status = end.status, "the execution had been ended by another replica meanwhile (this one could not reach the database past its lease); that end stands");
                        break;
                    }
                    Err(e) => {
                        tracing::debug!(execution = %end.id, tries, "the end of the execution is still not recorded: {e}"); 
                        pause = (pause * 2).min(MAX_PAUSE);
                    }
                }
            }
            if let Some(kept) = kept.upgrade() {
                kept.tasks
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&end.id);
                kept.settled.notify_waiters();
            }
        });
        tasks.insert(id, task.abort_handle());
    }

    /// How many ends are still being written.
    pub(super) fn len(&self) -> usize {
        self.tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Waits until every kept end landed, at most `within`; returns how many are left.
    pub(super) async fn settle(&self, within: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let settled = self.settled.notified();
            let left = self.len();
            if left == 0 || tokio::time::Instant::now() >= deadline {
                return left;
            }
            let _ = tokio::time::timeout_at(deadline, settled).await;
        }
    }

    /// Stops writing them (the store is dropped: the process is going away, and the reaper
    /// fails what this replica leaves).
    pub(super) fn abandon(&self) {
        for (_, task) in self
            .tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain()
        {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use execbox_pg::testing::TestServer;
    use execbox_policy::StoreLocation;
    use serde_json::json;

    use crate::records::{now_ms, ExecutionRecord, ExecutionStatus};
    use crate::store::{ExecutionStore, ReplicaOptions};

    use super::*;

    /// An execution whose program ends while the database is down is `completed`, with its
    /// result, once the database is back: its end was kept and written again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_end_written_while_the_database_is_down_lands_once_it_is_back() {
        let Some(mut server) = TestServer::start_or_skip() else {
            return;
        };
        let url = server.database("kept_ends");
        let store = ExecutionStore::open_at(
            &StoreLocation::parse(&url).unwrap(),
            &ReplicaOptions {
                name: Some("one".into()),
                timeout: Duration::from_secs(30),
            },
        )
        .unwrap();
        let record: ExecutionRecord = serde_json::from_value(json!({
            "executionId": "x",
            "capability": "c",
            "type": "script",
            "executor": "script",
            "capabilityPath": "/c",
            "status": "starting",
            "params": {},
            "createdMs": now_ms(),
            "updatedMs": now_ms(),
        }))
        .unwrap();
        store.insert(&record).await.unwrap();
        store
            .set_status("x", ExecutionStatus::Running, None)
            .await
            .unwrap();

        // The test server does not sync its commits (fsync and synchronous_commit are off):
        // a checkpoint first, so that its crash loses nothing written so far.
        tokio::task::block_in_place(|| {
            server
                .pg()
                .block(|c| async move { c.batch_execute("CHECKPOINT").await })
                .unwrap();
            server.kill();
        });
        let ended = store
            .finish(
                "x",
                ExecutionStatus::Completed,
                Some(&json!({"sum": 5})),
                None,
                None,
                &["a log line".into()],
            )
            .await
            .expect("an end is reported even while the database is down");
        assert!(ended.is_some());
        tokio::task::block_in_place(|| server.resume()).unwrap();

        let back = Instant::now();
        let got = loop {
            if let Ok(Some(got)) = store.get("x").await {
                if got.status != ExecutionStatus::Running {
                    break got;
                }
            }
            assert!(
                back.elapsed() < Duration::from_secs(20),
                "still running 20 s after the database came back"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(got.status, ExecutionStatus::Completed);
        assert_eq!(got.result, Some(json!({"sum": 5})));
        assert_eq!(got.logs, ["a log line"]);
        assert_eq!(got.ended_ms, ended, "the end's time is when it happened");
        let statuses: Vec<ExecutionStatus> = store
            .history("x")
            .await
            .unwrap()
            .into_iter()
            .map(|h| h.status)
            .collect();
        assert_eq!(
            statuses,
            [
                ExecutionStatus::Starting,
                ExecutionStatus::Running,
                ExecutionStatus::Completed
            ]
        );
        store.close().await;
    }
}
