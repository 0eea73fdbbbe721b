//! A response body that holds a guard (a busy connection, a long request counted) until it
//! is sent or dropped: what both the connection loop (`serve.rs`) and the long-request
//! bound (`long.rs`) wrap a response in.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;

/// A response body that holds `G` (a busy connection, a long request counted) until it is
/// sent or dropped.
pub(crate) struct Guarded<G> {
    body: Body,
    _guard: G,
}

impl<G> Guarded<G> {
    pub(crate) fn new(body: Body, guard: G) -> Self {
        Guarded {
            body,
            _guard: guard,
        }
    }
}

impl<G: Send + Unpin + 'static> http_body::Body for Guarded<G> {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
