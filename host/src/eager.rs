//! Starting a future on the caller's own thread, for bindings called from outside the runtime.
//!
//! An SDK's `run` is called on a thread that is not one of Tokio's (Node.js' main thread, a
//! Python thread). `Handle::spawn` would make a sleeping worker wake up just to write the
//! `execute` line to the runner, a hand-off between cores on the critical path of every
//! execution (tens of microseconds on a virtual machine, where waking an idle core is dear).
//! [`spawn_eager`] instead polls the future once right there, inside the runtime's context:
//! the execution is checked out, its `execute` written, and only then does the future wait.
//! It is not handed to a worker until something wakes it (the runner's answer, a timer, a
//! cancel), and then on the thread that woke it, usually the worker that read the answer.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Wake, Waker};

use tokio::runtime::Handle;

/// Polls `future` once on this thread (inside `handle`'s context, so it may use timers, I/O
/// and `tokio::spawn`), then lets it go on as a task of `handle` once it is woken. The future
/// delivers its own result (a channel, a callback): nothing joins it.
///
/// The first poll runs on the caller's thread, so it must not block for long: true of an
/// execution's start, which takes a pooled runner (or starts one) and writes one line.
pub fn spawn_eager<F>(handle: &Handle, future: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    let _entered = handle.enter();
    let mut future: Task = Box::pin(future);
    let parked = Arc::new(Parked {
        state: Mutex::new(State::Polling { woken: false }),
        handle: handle.clone(),
    });
    let waker = Waker::from(parked.clone());
    if future
        .as_mut()
        .poll(&mut Context::from_waker(&waker))
        .is_ready()
    {
        return;
    }
    let mut state = parked.lock();
    match *state {
        // Woken while it was being polled (by another thread): it must be polled again.
        State::Polling { woken: true } => {
            *state = State::Spawned;
            drop(state);
            handle.spawn(future);
        }
        _ => *state = State::Parked(future),
    }
}

type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A future polled once and waiting for its first wake-up.
struct Parked {
    state: Mutex<State>,
    handle: Handle,
}

enum State {
    /// The first poll is running on the caller's thread.
    Polling { woken: bool },
    /// Waiting: the first wake-up spawns it.
    Parked(Task),
    /// A task of the runtime now, which polls it with its own waker.
    Spawned,
}

impl Parked {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Wake for Parked {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let mut state = self.lock();
        match std::mem::replace(&mut *state, State::Spawned) {
            State::Polling { .. } => *state = State::Polling { woken: true },
            State::Parked(future) => {
                drop(state);
                self.handle.spawn(future);
            }
            State::Spawned => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use std::task::Poll;

    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn the_first_poll_runs_on_the_callers_thread_and_the_rest_on_the_runtime() {
        let runtime = runtime();
        let caller = std::thread::current().id();
        let (tx, rx) = std::sync::mpsc::channel();
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        spawn_eager(runtime.handle(), async move {
            let first = std::thread::current().id();
            wait.await.unwrap();
            tx.send((first, std::thread::current().id())).unwrap();
        });
        runtime.spawn(async move { go.send(()).unwrap() });
        let (first, rest) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(first, caller);
        assert_ne!(rest, caller);
    }

    #[test]
    fn a_future_ready_at_once_completes_on_the_callers_thread() {
        let runtime = runtime();
        let (tx, rx) = std::sync::mpsc::channel();
        spawn_eager(runtime.handle(), async move {
            tx.send(std::thread::current().id()).unwrap();
        });
        assert_eq!(rx.try_recv().unwrap(), std::thread::current().id());
    }

    #[test]
    fn timers_and_spawns_work_in_the_first_poll() {
        let runtime = runtime();
        let (tx, rx) = std::sync::mpsc::channel();
        spawn_eager(runtime.handle(), async move {
            let inner = tokio::spawn(async { 7 });
            tokio::time::sleep(Duration::from_millis(20)).await;
            tx.send(inner.await.unwrap()).unwrap();
        });
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), 7);
    }

    #[test]
    fn a_wake_during_the_first_poll_is_not_lost() {
        let runtime = runtime();
        let (tx, rx) = std::sync::mpsc::channel();
        spawn_eager(runtime.handle(), async move {
            // Pending once, having woken itself: the wake lands while it is being polled.
            let mut yielded = false;
            std::future::poll_fn(|cx| {
                if yielded {
                    Poll::Ready(())
                } else {
                    yielded = true;
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
            })
            .await;
            tx.send(()).unwrap();
        });
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
    }
}
