//! Stopping: an execution of this process and its whole tree, a paused one, or another
//! replica's (asked through the store).

use std::time::Duration;

use execbox_policy::{AuditEvent, Principal};
use futures_util::future::join_all;

use super::{err, CapabilityManager};
use crate::records::{CapabilityError, CapabilityErrorCode, ExecutionRecord, ExecutionStatus};

/// How long a stop of another replica's execution waits for it to end before returning it
/// as it then is (a replica that died has its executions failed within its timeout).
const REMOTE_STOP_WAIT: Duration = Duration::from_secs(60);

/// How many times a stop looks for an execution that moved while it was being stopped.
const STOP_LOOKS: usize = 4;

impl CapabilityManager {
    /// Stops an execution of this process and its children, and returns it once it ended
    /// (`stopped`, or whatever it ended with first). An execution that already ended is
    /// returned as it is.
    pub async fn stop(&self, id: &str) -> Result<ExecutionRecord, CapabilityError> {
        self.stop_inner(id.to_string()).await
    }

    fn stop_inner(
        &self,
        id: String,
    ) -> futures_util::future::BoxFuture<'_, Result<ExecutionRecord, CapabilityError>> {
        Box::pin(async move {
            // Looked for again when it moved meanwhile: a paused execution that someone
            // resumed while this stop tried to end it runs again (here or on another replica),
            // and one this process was resuming may have just become live here. Bounded: it
            // could pause and be resumed again in turn.
            for _ in 0..STOP_LOOKS {
                let found = {
                    let mut live = self.live();
                    live.get_mut(&id).map(|l| {
                        let first = !l.stop_requested;
                        l.stop_requested = true;
                        (
                            first,
                            l.cancel.clone(),
                            l.done.clone(),
                            l.capability.clone(),
                            l.principal.clone(),
                        )
                    })
                };
                let Some((first, cancel, mut done, capability, principal)) = found else {
                    // Paused: nothing runs it; it ends here, unless someone resumed it first.
                    if let Some(record) = self.stop_paused(&id).await? {
                        if record.status.is_terminal() {
                            return Ok(record);
                        }
                        continue;
                    }
                    // Another replica's: its owner is asked (and stops it promptly), or, when
                    // that replica died, the others mark it failed within the replica timeout.
                    if self.0.store.request_stop(&id).await? {
                        let _ = self.wait(&id, Some(REMOTE_STOP_WAIT)).await?;
                    } else if self.live().contains_key(&id) {
                        continue;
                    }
                    return self.get(&id).await;
                };
                if first {
                    // In a task of its own: a caller that goes away at an await here (an HTTP
                    // client that hung up) would otherwise leave it marked as being stopped
                    // but never cancelled, and every later stop waiting for an end that the
                    // stop never brought about.
                    let manager = self.clone();
                    let stopping = id.clone();
                    let begun = tokio::spawn(async move {
                        manager
                            .begin_stop(&stopping, cancel, &capability, principal.as_ref())
                            .await
                    })
                    .await;
                    match begun {
                        Ok(begun) => begun?,
                        Err(e) => {
                            return Err(err(
                                CapabilityErrorCode::ExecutionFailed,
                                format!(
                                "the stop of execution {id} was cut short ({e}); ask for it again"
                            ),
                            ))
                        }
                    }
                }
                let _ = done.wait_for(Option::is_some).await;
                return self.get(&id).await;
            }
            self.get(&id).await
        })
    }

    /// The first stop of a live execution: recorded (`stopping`) and audited, then its run
    /// cancelled and its children stopped.
    async fn begin_stop(
        &self,
        id: &str,
        cancel: tokio_util::sync::CancellationToken,
        capability: &str,
        principal: Option<&Principal>,
    ) -> Result<(), CapabilityError> {
        // Stopping matters more than recording it: a failed write does not keep the
        // execution running (and later stops waiting on it forever).
        if let Err(e) = self
            .0
            .store
            .set_status(id, ExecutionStatus::Stopping, Some("stop requested"))
            .await
        {
            tracing::error!(execution = %id, "cannot record the stop request: {e}");
        }
        if let Err(e) = self.audit(AuditEvent::capability_stop_requested(
            id,
            principal.and_then(Principal::name),
            capability,
        )) {
            tracing::error!(execution = %id, "{e}");
        }
        // The parent first, so it ends `stopped` rather than failing on a child's stop; its
        // children are stopped too, and have ended before the parent's own end is written
        // (`drive`), so none is left running under it.
        cancel.cancel();
        self.stop_all_for_parent(id).await?;
        Ok(())
    }

    /// Stops every execution of this process whose parent is `parent_id`, and their
    /// children, down the whole tree; returns the executions stopped (direct children).
    pub async fn stop_all_for_parent(
        &self,
        parent_id: &str,
    ) -> Result<Vec<ExecutionRecord>, CapabilityError> {
        let children: Vec<String> = self
            .live()
            .iter()
            .filter(|(_, l)| l.parent.as_deref() == Some(parent_id))
            .map(|(id, _)| id.clone())
            .collect();
        let stopped = join_all(children.into_iter().map(|id| self.stop_inner(id))).await;
        stopped.into_iter().collect()
    }

    /// Stops every execution of this process (before a server exits).
    pub async fn stop_all(&self) {
        let roots: Vec<String> = self.live().keys().cloned().collect();
        let _ = join_all(roots.into_iter().map(|id| self.stop_inner(id))).await;
    }
}
