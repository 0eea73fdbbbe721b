//! Long requests (event streams, long polls): at most so many per caller, and never the
//! connection slots that short requests need.
//!
//! A request in progress keeps its connection from being evicted ([`ConnectionSlots`]), so
//! without a bound a caller holding the cap's worth of event streams would have every newcomer
//! closed on accept. Routes marked with [`long_requests`] are counted per caller (the key its
//! [`Caller`] gives) and in all: a caller past [`ServeOptions::max_long_requests_per_caller`],
//! or any caller once long requests hold all but the reserve of the connection slots (a
//! quarter of them, at least one), gets `429 TOO_MANY_REQUESTS` at once. The reserved slots
//! hold only short requests, half-sent heads and idle connections, and the latter two make
//! room for a newcomer.
//!
//! [`ConnectionSlots`]: crate::ConnectionSlots
//! [`ServeOptions::max_long_requests_per_caller`]: crate::ServeOptions::max_long_requests_per_caller

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::MethodRouter;

use crate::guarded::Guarded;
use crate::layer::{refusal_response, Caller};
use crate::Refusal;

/// The default [`ServeOptions::max_long_requests_per_caller`](crate::ServeOptions): 16.
pub const DEFAULT_MAX_LONG_REQUESTS_PER_CALLER: usize = 16;

/// The long requests of one server, shared by its connections ([`crate::serve`] puts it in
/// every request's extensions).
#[derive(Clone)]
pub(crate) struct LongRequests {
    inner: Arc<Inner>,
}

struct Inner {
    per_caller: usize,
    /// Long requests held at most, in all: the connection cap less the reserve.
    total: usize,
    reserve: usize,
    state: Mutex<Counts>,
}

#[derive(Default)]
struct Counts {
    held: usize,
    by_caller: HashMap<String, usize>,
}

impl LongRequests {
    /// For a server of `connections` slots, `per_caller` long requests per caller at most.
    pub(crate) fn new(per_caller: usize, connections: usize) -> LongRequests {
        let reserve = connections.div_ceil(4).max(1);
        LongRequests {
            inner: Arc::new(Inner {
                per_caller,
                total: connections.saturating_sub(reserve),
                reserve,
                state: Mutex::new(Counts::default()),
            }),
        }
    }

    /// Long requests the server may hold at once.
    pub(crate) fn total(&self) -> usize {
        self.inner.total
    }

    /// One more long request of `caller` (`""`: anonymous callers, one caller), or the
    /// refusal saying which bound it is past.
    fn hold(&self, caller: &str) -> Result<Held, Refusal> {
        let mut state = self.lock();
        let mine = state.by_caller.get(caller).copied().unwrap_or(0);
        if mine >= self.inner.per_caller {
            let who = match caller {
                "" => "anonymous callers already hold".to_owned(),
                name => format!("principal `{name}` already holds"),
            };
            return Err(Refusal::too_many(format!(
                "{who} {mine} long requests (event streams and waits), the most one caller may \
                 hold at once; close one before opening another"
            )));
        }
        if state.held >= self.inner.total {
            return Err(Refusal::too_many(format!(
                "the server holds {} long requests (event streams and waits), all it takes at \
                 once: its other {} connections are kept for short requests; try again when \
                 one has ended",
                state.held, self.inner.reserve
            )));
        }
        state.held += 1;
        *state.by_caller.entry(caller.to_owned()).or_default() += 1;
        Ok(Held {
            requests: self.clone(),
            caller: caller.to_owned(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Counts> {
        // The counts stay consistent whatever panicked while holding them.
        self.inner
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// One long request, counted until dropped (with its response body).
struct Held {
    requests: LongRequests,
    caller: String,
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut state = self.requests.lock();
        state.held = state.held.saturating_sub(1);
        if let Some(n) = state.by_caller.get_mut(&self.caller) {
            *n -= 1;
            if *n == 0 {
                state.by_caller.remove(&self.caller);
            }
        }
    }
}

/// Who a caller is, for counting its long requests: the same key for the same caller (a
/// principal's name; anonymous callers are `""`, one caller).
pub type CallerKey<C> = fn(&Caller<C>) -> String;

/// `route`'s requests are long (an event stream, a long poll): each is counted against its
/// caller's bound and the server's share from the moment the door admits it until its
/// response body is sent or dropped, and refused with `429 TOO_MANY_REQUESTS` past either
/// (see the module docs). `key` names the caller; the route must sit behind a
/// [`FrontDoor`](crate::FrontDoor), and is counted only when served by [`crate::serve`].
pub fn long_requests<C, S>(route: MethodRouter<S>, key: CallerKey<C>) -> MethodRouter<S>
where
    C: Clone + Send + Sync + 'static,
    S: Clone + Send + Sync + 'static,
{
    route.route_layer(middleware::from_fn_with_state(key, hold::<C>))
}

async fn hold<C: Clone + Send + Sync + 'static>(
    State(key): State<CallerKey<C>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(requests) = request.extensions().get::<LongRequests>().cloned() else {
        // Not served by `serve`: there are no connection slots to keep.
        return next.run(request).await;
    };
    let caller = request
        .extensions()
        .get::<Caller<C>>()
        .map(key)
        .unwrap_or_default();
    match requests.hold(&caller) {
        Ok(held) => {
            let response = next.run(request).await;
            response.map(|body| Body::new(Guarded::new(body, held)))
        }
        Err(refusal) => {
            tracing::debug!(caller, "refused a long request: {}", refusal.message);
            refusal_response(&refusal)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_holds_its_bound_and_the_server_keeps_a_reserve() {
        // 16 connections: 12 for long requests, 4 kept.
        let requests = LongRequests::new(8, 16);
        assert_eq!(requests.total(), 12);
        let a: Vec<Held> = (0..8).map(|_| requests.hold("a").unwrap()).collect();
        let refused = requests.hold("a").err().unwrap();
        assert_eq!((refused.status, refused.code), (429, "TOO_MANY_REQUESTS"));
        assert!(refused.message.contains("principal `a` already holds 8"));
        let b: Vec<Held> = (0..4).map(|_| requests.hold("b").unwrap()).collect();
        let full = requests.hold("c").err().unwrap();
        assert!(full.message.contains("the server holds 12"), "{full}");
        assert!(full.message.contains("other 4 connections"), "{full}");
        // Ending one frees its place, for its caller and in all.
        drop(b);
        assert!(requests.hold("c").is_ok());
        drop(a);
        let anonymous: Vec<Held> = (0..8).map(|_| requests.hold("").unwrap()).collect();
        let refused = requests.hold("").err().unwrap();
        assert!(refused
            .message
            .starts_with("anonymous callers already hold 8"));
        drop(anonymous);
        assert!(requests.lock().by_caller.is_empty());
        assert_eq!(requests.lock().held, 0);
    }

    #[test]
    fn one_connection_keeps_it_for_short_requests() {
        let requests = LongRequests::new(8, 1);
        assert_eq!(requests.total(), 0);
        assert!(requests.hold("a").is_err());
    }
}
