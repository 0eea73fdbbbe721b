//! The HTTP client of streamable HTTP upstreams: rustls (ring) with the webpki roots, and the
//! leniency the reference clients have with servers in the wild.
//!
//! [`Tolerant`] accepts whatever a server answers to a message that expects no answer (a
//! notification, or our reply to its request): the official TypeScript client ignores an
//! HTTP 500 or a JSON body answering `notifications/initialized`, and servers built on its
//! stateless examples send both; the MCP SDK for Rust would close the connection instead.
//! Failures that mean something still count: the server cannot be reached, it wants a
//! sign-in (401) or more scope (403), or the session is gone (404).

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::stream::BoxStream;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};

/// The HTTP client: rustls with the ring provider and the webpki roots.
pub(crate) fn reqwest_client() -> Result<reqwest::Client, String> {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot configure TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

/// Makes the process's TLS provider ring's, for the HTTP clients the MCP SDK builds itself
/// (its OAuth discovery and token requests).
pub(crate) fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// An HTTP client that tolerates odd answers to messages that expect none (see the module).
#[derive(Clone)]
pub(crate) struct Tolerant<C>(pub C);

/// Whether `message` expects no answer from the server.
fn expects_no_answer(message: &ClientJsonRpcMessage) -> bool {
    matches!(
        message,
        ClientJsonRpcMessage::Notification(_)
            | ClientJsonRpcMessage::Response(_)
            | ClientJsonRpcMessage::Error(_)
    )
}

/// The answer to a message that expects none, whatever the server sent, unless it means
/// something: no connection, a sign-in or scope wanted, the session gone.
fn tolerate<E: std::error::Error + Send + Sync + 'static>(
    method: &str,
    answer: Result<StreamableHttpPostResponse, StreamableHttpError<E>>,
) -> Result<StreamableHttpPostResponse, StreamableHttpError<E>> {
    match answer {
        Ok(StreamableHttpPostResponse::Accepted) => Ok(StreamableHttpPostResponse::Accepted),
        Ok(_) => {
            tracing::debug!(
                method,
                "the server answered a message that expects no answer; ignored"
            );
            Ok(StreamableHttpPostResponse::Accepted)
        }
        Err(
            e @ (StreamableHttpError::Client(_)
            | StreamableHttpError::Io(_)
            | StreamableHttpError::AuthRequired(_)
            | StreamableHttpError::InsufficientScope(_)
            | StreamableHttpError::Auth(_)
            | StreamableHttpError::SessionExpired),
        ) => Err(e),
        Err(e) => {
            tracing::debug!(method, "the server failed a message that expects no answer ({e}); ignored, as the reference clients do");
            Ok(StreamableHttpPostResponse::Accepted)
        }
    }
}

fn method_of(message: &ClientJsonRpcMessage) -> String {
    match message {
        ClientJsonRpcMessage::Notification(n) => serde_json::to_value(&n.notification)
            .ok()
            .and_then(|v| v.get("method").and_then(|m| m.as_str()).map(str::to_owned))
            .unwrap_or_else(|| "a notification".into()),
        ClientJsonRpcMessage::Response(_) => "a response".into(),
        ClientJsonRpcMessage::Error(_) => "an error response".into(),
        _ => "a request".into(),
    }
}

impl<C: StreamableHttpClient + Sync> StreamableHttpClient for Tolerant<C> {
    type Error = C::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let lenient = expects_no_answer(&message).then(|| method_of(&message));
        let answer = self
            .0
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await;
        match lenient {
            Some(method) => tolerate(&method, answer),
            None => answer,
        }
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let lenient = expects_no_answer(&message).then(|| method_of(&message));
        let answer = self
            .0
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await;
        match lenient {
            Some(method) => tolerate(&method, answer),
            None => answer,
        }
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.0
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<
        BoxStream<'static, Result<sse_stream::Sse, sse_stream::Error>>,
        StreamableHttpError<Self::Error>,
    > {
        self.0
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<
        BoxStream<'static, Result<sse_stream::Sse, sse_stream::Error>>,
        StreamableHttpError<Self::Error>,
    > {
        self.0
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}
