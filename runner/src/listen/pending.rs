//! The connections not yet upgraded, at most [`super::MAX_PENDING_HANDSHAKES`]: when the set is
//! full, a new connection evicts the oldest one still reading its request head, so a flood of
//! slow or silent connections cannot keep a health probe (or a client) from being read.
//!
//! A connection is in one of two stages. While it reads its head it may be evicted: an
//! attacker's trickling connections are the oldest ones, and a probe that sends its head at
//! once is read long before 64 newer connections arrive (that takes an attacker opening
//! connections faster than tens of thousands a second). Once its head is read it is upgrading
//! (the auth check and a response of a few hundred bytes, bounded by the handshake timeout)
//! and is no longer evicted; when every connection in the set is upgrading, a new one is
//! refused at accept, as before.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// The set of connections not yet upgraded.
#[derive(Debug)]
pub(crate) struct Pending {
    limit: usize,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Numbers the connections, oldest first.
    next: u64,
    /// Connections reading their head, oldest first; dropping the sender evicts one.
    reading: VecDeque<(u64, oneshot::Sender<()>)>,
    /// Connections whose head is read, still upgrading.
    upgrading: usize,
}

/// What became of a new connection.
#[derive(Debug)]
pub(crate) enum Admission {
    /// Admitted; `evicted` says whether the oldest connection reading its head made room.
    Admitted { ticket: Ticket, evicted: bool },
    /// Every connection in the set is upgrading: the new one is refused.
    Full,
}

impl Pending {
    /// A set of at most `limit` connections (at least one).
    pub(crate) fn new(limit: usize) -> Arc<Pending> {
        Arc::new(Pending {
            limit: limit.max(1),
            state: Mutex::new(State::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admits a new connection in its head-reading stage, evicting the oldest connection
    /// still reading its head when the set is full.
    pub(crate) fn admit(self: &Arc<Pending>) -> Admission {
        let mut state = self.lock();
        let mut evicted = false;
        if state.reading.len() + state.upgrading >= self.limit {
            // Dropping its sender wakes the evicted connection's `Ticket::evicted`.
            if state.reading.pop_front().is_none() {
                return Admission::Full;
            }
            evicted = true;
        }
        let id = state.next;
        state.next += 1;
        let (tx, rx) = oneshot::channel();
        state.reading.push_back((id, tx));
        Admission::Admitted {
            ticket: Ticket {
                pending: self.clone(),
                id,
                eviction: Some(rx),
            },
            evicted,
        }
    }

    /// Connections in the set: reading their head, and upgrading.
    #[cfg(test)]
    fn counts(&self) -> (usize, usize) {
        let state = self.lock();
        (state.reading.len(), state.upgrading)
    }
}

/// One connection's place in the [`Pending`] set; dropping it gives the place back.
#[derive(Debug)]
pub(crate) struct Ticket {
    pending: Arc<Pending>,
    id: u64,
    /// `Some` while the connection reads its head.
    eviction: Option<oneshot::Receiver<()>>,
}

impl Ticket {
    /// Resolves once a newer connection evicted this one; never after [`Ticket::head_read`].
    pub(crate) async fn evicted(&mut self) {
        match &mut self.eviction {
            // Nothing is ever sent: only the sender's drop, by an eviction, ends the wait.
            Some(rx) => {
                let _ = rx.await;
            }
            None => std::future::pending().await,
        }
    }

    /// The head is read: the connection is upgrading, and no longer evicted. `false` when it
    /// was evicted already.
    pub(crate) fn head_read(&mut self) -> bool {
        let mut state = self.pending.lock();
        let Some(at) = state.reading.iter().position(|(id, _)| *id == self.id) else {
            return false;
        };
        state.reading.remove(at);
        state.upgrading += 1;
        self.eviction = None;
        true
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut state = self.pending.lock();
        if self.eviction.is_some() {
            if let Some(at) = state.reading.iter().position(|(id, _)| *id == self.id) {
                state.reading.remove(at);
            }
        } else {
            state.upgrading = state.upgrading.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    fn ticket(admission: Admission) -> (Ticket, bool) {
        match admission {
            Admission::Admitted { ticket, evicted } => (ticket, evicted),
            Admission::Full => panic!("refused"),
        }
    }

    fn is_evicted(ticket: &mut Ticket) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        pin!(ticket.evicted()).as_mut().poll(&mut cx) == Poll::Ready(())
    }

    #[test]
    fn a_new_connection_evicts_the_oldest_reading_one_and_upgrading_ones_stay() {
        let pending = Pending::new(3);
        let (mut a, _) = ticket(pending.admit());
        let (mut b, _) = ticket(pending.admit());
        let (mut c, evicted) = ticket(pending.admit());
        assert!(!evicted);
        assert!(b.head_read(), "b upgrades");
        // Full: the oldest still reading (a) is evicted, not b.
        let (mut d, evicted) = ticket(pending.admit());
        assert!(evicted);
        assert!(is_evicted(&mut a));
        assert!(!a.head_read(), "an evicted connection cannot upgrade");
        assert!(!is_evicted(&mut b) && !is_evicted(&mut c) && !is_evicted(&mut d));
        drop(a);
        assert_eq!(pending.counts(), (2, 1));
        // Then c, then d; with only upgrading ones left, a new one is refused.
        let (_e, _) = ticket(pending.admit());
        assert!(is_evicted(&mut c));
        assert!(d.head_read());
        let (mut f, _) = ticket(pending.admit());
        assert!(f.head_read());
        drop(c);
        assert_eq!(pending.counts(), (0, 3));
        assert!(matches!(pending.admit(), Admission::Full));
        drop(b);
        assert_eq!(pending.counts(), (0, 2));
        let (_g, evicted) = ticket(pending.admit());
        assert!(!evicted);
    }
}
