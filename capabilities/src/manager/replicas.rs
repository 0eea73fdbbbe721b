//! Hearing the other replicas of a shared store: their changes become this manager's events,
//! and a stop they ask of one of ours stops it.

use tokio::sync::broadcast;

use super::{CapabilityManager, Inner};
use crate::records::{ExecutionEventKind, ExecutionStatus};
use crate::store::StoreSignal;

/// Hears the other replicas of a shared store for as long as the manager lives: their status
/// changes become this manager's events (so subscribers see every replica's executions) and
/// wake its waiters; a stop asked of one of ours stops it.
pub(super) async fn hear_replicas(
    manager: std::sync::Weak<Inner>,
    mut signals: broadcast::Receiver<StoreSignal>,
) {
    loop {
        let signal = match signals.recv().await {
            Ok(signal) => signal,
            Err(broadcast::error::RecvError::Lagged(_)) => StoreSignal::Resync,
            Err(broadcast::error::RecvError::Closed) => return,
        };
        let Some(inner) = manager.upgrade() else {
            return;
        };
        let manager = CapabilityManager(inner);
        match signal {
            StoreSignal::Resync => {
                manager.0.changed.send_modify(|n| *n += 1);
            }
            StoreSignal::Changed(id) => {
                if let Ok(Some(record)) = manager.0.store.get(&id).await {
                    let kind = match record.status {
                        ExecutionStatus::Starting => Some(ExecutionEventKind::Started),
                        ExecutionStatus::AwaitingApproval => {
                            Some(ExecutionEventKind::AwaitingApproval)
                        }
                        ExecutionStatus::Completed => Some(ExecutionEventKind::Completed),
                        ExecutionStatus::Timeout => Some(ExecutionEventKind::Timeout),
                        ExecutionStatus::Stopped => Some(ExecutionEventKind::Stopped),
                        ExecutionStatus::Failed => Some(ExecutionEventKind::Failed),
                        _ => None,
                    };
                    if let Some(kind) = kind {
                        let (status, error) = (record.status, record.error.clone());
                        manager.emit(kind, &record, status, error);
                    }
                }
            }
            StoreSignal::Resumed(id) => {
                if let Ok(Some(record)) = manager.0.store.get(&id).await {
                    let (status, error) = (record.status, record.error.clone());
                    manager.emit(ExecutionEventKind::Resumed, &record, status, error);
                }
            }
            // Heard again every second while the stop is pending (the store reads the table,
            // so that a lost notification is made up for): once is enough. One not (yet)
            // live here, such as one this replica is resuming, is stopped at the next one.
            StoreSignal::Stop(id) => {
                let stopping = manager.live().get(&id).map(|l| l.stop_requested);
                if stopping == Some(false) {
                    tokio::spawn(async move {
                        tracing::info!(execution = %id, "stopping it: another replica asked");
                        if let Err(e) = manager.stop(&id).await {
                            tracing::warn!(execution = %id, "cannot stop it: {e}");
                        }
                    });
                }
            }
        }
    }
}
