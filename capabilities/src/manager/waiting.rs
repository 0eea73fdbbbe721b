//! Waiting for an execution to end or pause, here or on another replica.

use std::time::Duration;

use tokio::sync::broadcast;

use super::{not_found, CapabilityManager};
use crate::records::{CapabilityError, ExecutionEvent, ExecutionOutcome, ExecutionStatus};

impl CapabilityManager {
    /// Waits for an execution to end or to pause for approval: `Ok(Some(outcome))` once it
    /// has (its status says which), `Ok(None)` when `timeout` passed first. Works for executions of other processes too (by polling the
    /// store) and for executions that ended long ago.
    pub async fn wait(
        &self,
        id: &str,
        timeout: Option<Duration>,
    ) -> Result<Option<ExecutionOutcome>, CapabilityError> {
        let live = self.live().get(id).map(|l| l.done.clone());
        // Another replica's execution: read again when its event arrives (relayed from the
        // replica's notification), after a resync, and every 2 s in case one was lost; another
        // process's on a SQLite file, which sends none: every 50 ms.
        let mut events = self.0.events.subscribe();
        let mut resyncs = self.0.changed.subscribe();
        let pause = if self.0.signals_task.get().is_some() {
            Duration::from_secs(2)
        } else {
            Duration::from_millis(50)
        };
        let waiting = async {
            if let Some(mut done) = live {
                if let Ok(outcome) = done.wait_for(Option::is_some).await {
                    return Ok(outcome.clone());
                }
            }
            loop {
                match self.0.store.get(id).await? {
                    None => return Err(not_found(id)),
                    Some(r)
                        if r.status.is_terminal()
                            || r.status == ExecutionStatus::AwaitingApproval =>
                    {
                        return Ok(Some(r.outcome()))
                    }
                    Some(_) => {
                        tokio::select! {
                            () = event_of(&mut events, id) => {}
                            _ = resyncs.changed() => {}
                            () = tokio::time::sleep(pause) => {}
                        }
                    }
                }
            }
        };
        match timeout {
            None => waiting.await,
            Some(t) => match tokio::time::timeout(t, waiting).await {
                Ok(r) => r,
                Err(_) => {
                    if self.0.store.get(id).await?.is_none() {
                        return Err(not_found(id));
                    }
                    Ok(None)
                }
            },
        }
    }
}

/// Returns at the next event of execution `id` (or when events were missed).
pub(super) async fn event_of(events: &mut broadcast::Receiver<ExecutionEvent>, id: &str) {
    loop {
        match events.recv().await {
            Ok(event) if event.execution_id == id => return,
            Ok(_) => {}
            Err(broadcast::error::RecvError::Lagged(_)) => return,
            Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
        }
    }
}
