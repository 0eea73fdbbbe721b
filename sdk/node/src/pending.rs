//! Tables of questions waiting for a JavaScript answer (a tool call's output, an approval),
//! by id: the Rust side opens an entry and waits; the answer comes back by id.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;

use tokio::sync::oneshot;

/// The questions of one kind waiting in this process. One table per kind for the whole
/// process, so the JavaScript callbacks (held by Node-API as GC roots) need no reference back
/// to what asked.
pub(crate) struct Pending<T> {
    waiting: Mutex<BTreeMap<i64, oneshot::Sender<T>>>,
    next: AtomicI64,
}

impl<T> Pending<T> {
    /// An empty table.
    pub(crate) const fn new() -> Self {
        Pending {
            waiting: Mutex::new(BTreeMap::new()),
            next: AtomicI64::new(1),
        }
    }

    /// Opens a question; `None` when the table is broken (a panic while it was held).
    pub(crate) fn open(&'static self) -> Option<Waiting<T>> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (sender, receiver) = oneshot::channel();
        self.waiting.lock().ok()?.insert(id, sender);
        Some(Waiting {
            table: self,
            id,
            receiver: Some(receiver),
        })
    }

    /// Answers question `id`; false when nobody waits for it any more.
    pub(crate) fn answer(&self, id: i64, value: T) -> bool {
        let sender = match self.waiting.lock() {
            Ok(mut waiting) => waiting.remove(&id),
            Err(_) => None,
        };
        sender.is_some_and(|sender| sender.send(value).is_ok())
    }
}

/// One open question. Dropping it (its future ended, or was dropped because the execution
/// ended first) removes it from the table: a late answer then finds nothing and is ignored.
pub(crate) struct Waiting<T: 'static> {
    table: &'static Pending<T>,
    id: i64,
    receiver: Option<oneshot::Receiver<T>>,
}

impl<T> Waiting<T> {
    /// The id JavaScript answers with.
    pub(crate) fn id(&self) -> i64 {
        self.id
    }

    /// Waits for the answer; `None` when the question was dropped unanswered.
    pub(crate) async fn answer(mut self) -> Option<T> {
        let receiver = self.receiver.take()?;
        receiver.await.ok()
    }
}

impl<T> Drop for Waiting<T> {
    fn drop(&mut self) {
        if let Ok(mut waiting) = self.table.waiting.lock() {
            waiting.remove(&self.id);
        }
    }
}
