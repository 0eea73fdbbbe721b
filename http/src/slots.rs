//! Connection slots: at most so many connections at once, and when they are all taken, the one
//! that has waited longest without a request in progress makes room for the newcomer: a
//! connection that never sent a whole request head first, an idle kept-alive one only when
//! there is none.
//!
//! Closing newcomers when the cap is reached would let anyone who holds the cap's worth of
//! half-sent request heads (no token needed) lock everybody out, one head timeout after the
//! other. Evicting the oldest idle connection instead means a real request, whose head arrives
//! at once, is served unless connections are opened faster than it can send its head; only
//! connections that carry a request in progress ([`Slot::busy`]) are never evicted. Half-sent
//! heads go before kept-alive connections that have been served, so a flood of them takes
//! nothing from the clients already served.
//!
//! Plain `std`: the runner's listener uses it without the `server` feature.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// How a connection is told to close to make room: called once, at most, from the thread that
/// admits the newcomer; it must not block (cancel a token, wake a task).
pub type Evict = Box<dyn Fn() + Send + Sync>;

/// The slots of one listener. Cheap to clone; clones share the slots.
#[derive(Clone)]
pub struct ConnectionSlots {
    inner: Arc<Inner>,
}

struct Inner {
    max: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Admission order: the first entry is the oldest connection.
    open: BTreeMap<u64, Entry>,
    next: u64,
    evicted: u64,
}

struct Entry {
    busy: Arc<AtomicUsize>,
    /// Whether a whole request head has arrived on it ([`Slot::busy`] was called once).
    served: Arc<AtomicBool>,
    evict: Evict,
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full {
    /// The cap.
    pub max: usize,
}

impl ConnectionSlots {
    /// At most `max` connections (at least one).
    pub fn new(max: usize) -> ConnectionSlots {
        ConnectionSlots {
            inner: Arc::new(Inner {
                max: max.max(1),
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// The cap.
    pub fn max(&self) -> usize {
        self.inner.max
    }

    /// Connections holding a slot now.
    pub fn open(&self) -> usize {
        self.lock().open.len()
    }

    /// Connections evicted so far to make room.
    pub fn evicted(&self) -> u64 {
        self.lock().evicted
    }

    /// Admits a new connection, which `evict` closes if it must make room later. When every
    /// slot is taken, the oldest connection without a request in progress is evicted (its
    /// `evict` called, its slot given to this one), one that was never served before one that
    /// was; when all of them are busy, [`Full`].
    pub fn admit(&self, evict: Evict) -> Result<Slot, Full> {
        let mut state = self.lock();
        let mut made_room = false;
        if state.open.len() >= self.inner.max {
            let idle = |e: &Entry| e.busy.load(Ordering::SeqCst) == 0;
            let never_served = state
                .open
                .iter()
                .find(|(_, e)| idle(e) && !e.served.load(Ordering::SeqCst));
            let idle = never_served
                .or_else(|| state.open.iter().find(|(_, e)| idle(e)))
                .map(|(id, _)| *id);
            let Some(id) = idle else {
                return Err(Full {
                    max: self.inner.max,
                });
            };
            if let Some(victim) = state.open.remove(&id) {
                state.evicted += 1;
                made_room = true;
                (victim.evict)();
            }
        }
        let id = state.next;
        state.next += 1;
        let busy = Arc::new(AtomicUsize::new(0));
        let served = Arc::new(AtomicBool::new(false));
        state.open.insert(
            id,
            Entry {
                busy: busy.clone(),
                served: served.clone(),
                evict,
            },
        );
        Ok(Slot {
            slots: self.clone(),
            id,
            busy,
            served,
            made_room,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state stays consistent whatever panicked while holding it.
        self.inner
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// One admitted connection's slot, released when dropped.
pub struct Slot {
    slots: ConnectionSlots,
    id: u64,
    busy: Arc<AtomicUsize>,
    served: Arc<AtomicBool>,
    made_room: bool,
}

impl Slot {
    /// Whether admitting this connection evicted another.
    pub fn made_room(&self) -> bool {
        self.made_room
    }

    /// Marks a request in progress on this connection until the guard is dropped: a busy
    /// connection is never evicted, and once idle again it goes after every connection that
    /// was never busy.
    pub fn busy(&self) -> Busy {
        self.served.store(true, Ordering::SeqCst);
        self.busy.fetch_add(1, Ordering::SeqCst);
        Busy {
            busy: self.busy.clone(),
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.lock().open.remove(&self.id);
    }
}

/// A request in progress; see [`Slot::busy`].
pub struct Busy {
    busy: Arc<AtomicUsize>,
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flag() -> (Arc<AtomicBool>, Evict) {
        let flag = Arc::new(AtomicBool::new(false));
        let set = flag.clone();
        (flag, Box::new(move || set.store(true, Ordering::SeqCst)))
    }

    #[test]
    fn the_oldest_idle_connection_makes_room() {
        let slots = ConnectionSlots::new(2);
        let (first, evict_first) = flag();
        let (second, evict_second) = flag();
        let a = slots.admit(evict_first).unwrap();
        let b = slots.admit(evict_second).unwrap();
        // The oldest is busy: the second, idle, is evicted.
        let request = a.busy();
        let (_, evict_third) = flag();
        let c = slots.admit(evict_third).unwrap();
        assert!(c.made_room() && !a.made_room());
        assert!(!first.load(Ordering::SeqCst));
        assert!(second.load(Ordering::SeqCst));
        assert_eq!((slots.open(), slots.evicted()), (2, 1));
        // Dropping an evicted slot does not free anyone else's.
        drop(b);
        assert_eq!(slots.open(), 2);
        // Every connection busy: the newcomer is refused.
        let also = c.busy();
        let (_, evict_fourth) = flag();
        assert_eq!(slots.admit(evict_fourth).err(), Some(Full { max: 2 }));
        // A request that ends makes its connection evictable again.
        drop(request);
        let (_, evict_fifth) = flag();
        assert!(slots.admit(evict_fifth).is_ok());
        assert!(first.load(Ordering::SeqCst));
        drop(also);
    }

    #[test]
    fn half_sent_heads_go_before_served_connections() {
        let slots = ConnectionSlots::new(3);
        let (served, evict_served) = flag();
        let (half, evict_half) = flag();
        let (later_half, evict_later_half) = flag();
        let a = slots.admit(evict_served).unwrap();
        drop(a.busy());
        let _b = slots.admit(evict_half).unwrap();
        let _c = slots.admit(evict_later_half).unwrap();
        // The oldest connection was served and is idle now: the oldest half-sent head goes.
        let (_, evict) = flag();
        let _d = slots.admit(evict).unwrap();
        assert!(half.load(Ordering::SeqCst));
        assert!(!served.load(Ordering::SeqCst));
        let (_, evict) = flag();
        let _e = slots.admit(evict).unwrap();
        assert!(later_half.load(Ordering::SeqCst));
        // Every other connection is a half-sent head, newer than the served one: those first.
        assert!(!served.load(Ordering::SeqCst));
        let (_, evict) = flag();
        let _f = slots.admit(evict).unwrap();
        assert!(!served.load(Ordering::SeqCst));
        let (_, evict) = flag();
        let _g = slots.admit(evict).unwrap();
        assert!(!served.load(Ordering::SeqCst));
        drop(a);
    }

    #[test]
    fn a_released_slot_is_free_again() {
        let slots = ConnectionSlots::new(1);
        let (_, evict) = flag();
        let a = slots.admit(evict).unwrap();
        drop(a);
        let (evicted, evict) = flag();
        let _b = slots.admit(evict).unwrap();
        assert!(!evicted.load(Ordering::SeqCst));
        assert_eq!(slots.evicted(), 0);
    }
}
