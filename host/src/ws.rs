//! WebSocket runners (`execbox-runner --listen`): one connection per execution.
//!
//! The URL may be one runner or a Service in front of many: the Service balances, and a
//! session a runner turns away before it starts (HTTP 503 while it drains, a 1013 close when
//! its sessions are full, a refused or reset connection) is tried again, with backoff, up to
//! [`RetryPolicy::attempts`] times. Nothing is retried once the runner accepted the session.
//!
//! `wss://` URLs are spoken with rustls (the ring provider), trusting the webpki roots and any
//! added with [`WsExecutor::with_tls_roots_pem`] (a private CA in front of the runners).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use execbox_protocol::{Frame, Message};
use futures_util::{SinkExt, StreamExt};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::{header, HeaderValue};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message as WsFrame;

use crate::connection::{Connection, RunnerEvent, SessionTimings, Terminate};
use crate::executor::{ExecuteFuture, ExecuteRequest, ExecuteResult, Executor};

/// Connects to a remote runner for each execution.
#[derive(Clone)]
pub struct WsExecutor {
    url: String,
    token: Option<String>,
    timings: SessionTimings,
    retry: RetryPolicy,
    /// Roots trusted for `wss://` besides the webpki ones.
    extra_roots: Vec<rustls::pki_types::CertificateDer<'static>>,
    /// The TLS client configuration, built on the first `wss://` connection.
    tls: Arc<OnceLock<Result<Arc<rustls::ClientConfig>, String>>>,
}

/// How a session that runners turn away before it starts is tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Tries in all, the first included (at least 1).
    pub attempts: u32,
    /// The wait before the second try; it doubles after each, up to `max_backoff`.
    pub first_backoff: Duration,
    /// The longest wait between two tries.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: 5,
            first_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(1),
        }
    }
}

/// Why one try did not give a session.
enum Refused {
    /// Turned away before the session started: worth another try.
    Busy(String),
    /// Anything else: the error to report.
    Fatal(String),
}

impl std::fmt::Debug for WsExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WsExecutor")
            .field("url", &self.url)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("timings", &self.timings)
            .field("retry", &self.retry)
            .field("extra_roots", &self.extra_roots.len())
            .finish()
    }
}

impl WsExecutor {
    /// An executor for the runner at `url` (e.g. `ws://127.0.0.1:7070`); fails unless `url`
    /// is a `ws://` or `wss://` URL with a host.
    pub fn new(url: impl Into<String>) -> Result<Self, WsError> {
        let url = url.into();
        check_url(&url)?;
        Ok(WsExecutor {
            url,
            token: None,
            timings: SessionTimings::default(),
            retry: RetryPolicy::default(),
            extra_roots: Vec::new(),
            tls: Arc::new(OnceLock::new()),
        })
    }

    /// Also trusts the CA certificates of `pem` for `wss://` (e.g. a private CA of the TLS
    /// terminator in front of the runners). An error names what could not be read.
    pub fn with_tls_roots_pem(mut self, pem: &[u8]) -> Result<Self, WsError> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::CertificateDer;
        let mut added = 0;
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| {
                WsError::InvalidCa(format!("cannot read a CA certificate from PEM: {e}"))
            })?;
            self.extra_roots.push(cert.into_owned());
            added += 1;
        }
        if added == 0 {
            return Err(WsError::InvalidCa(
                "no CA certificate (-----BEGIN CERTIFICATE-----) in the PEM given".into(),
            ));
        }
        self.tls = Arc::new(OnceLock::new());
        Ok(self)
    }

    /// The rustls configuration for `wss://`: the ring provider, TLS 1.2 and 1.3, the webpki
    /// roots and the extra ones.
    fn tls_config(&self) -> Result<Arc<rustls::ClientConfig>, String> {
        self.tls
            .get_or_init(|| {
                let mut roots = rustls::RootCertStore {
                    roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
                };
                for cert in &self.extra_roots {
                    roots
                        .add(cert.clone())
                        .map_err(|e| format!("cannot trust an added CA certificate: {e}"))?;
                }
                let provider = Arc::new(rustls::crypto::ring::default_provider());
                let config = rustls::ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .map_err(|e| format!("cannot configure TLS: {e}"))?
                    .with_root_certificates(roots)
                    .with_no_client_auth();
                Ok(Arc::new(config))
            })
            .clone()
    }

    /// Overrides how sessions turned away (draining, full, refused) are tried again.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Sends `Authorization: Bearer TOKEN` on every upgrade request, for a runner started with
    /// `--token-file` or `EXECBOX_TOKEN`.
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Overrides the host-side grace periods.
    pub fn with_timings(mut self, timings: SessionTimings) -> Self {
        self.timings = timings;
        self
    }

    /// Opens one session, trying again while runners turn it away (see [`RetryPolicy`]).
    pub async fn connect(&self) -> Result<Connection, WsError> {
        self.with_retries(|| async {
            self.connect_once()
                .await
                .map(|(connection, _turned_away)| connection)
        })
        .await
        .map_err(WsError::Connect)
    }

    /// Runs `attempt` until it gives a session or fails for good, waiting between tries.
    async fn with_retries<T, F, Fut>(&self, mut attempt: F) -> Result<T, String>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, Refused>>,
    {
        let attempts = self.retry.attempts.max(1);
        let mut backoff = self.retry.first_backoff;
        let mut last = String::new();
        for n in 1..=attempts {
            match attempt().await {
                Ok(value) => return Ok(value),
                Err(Refused::Fatal(message)) => return Err(message),
                Err(Refused::Busy(why)) => {
                    tracing::debug!(url = %self.url, attempt = n, %why, "runner turned the session away");
                    last = why;
                }
            }
            if n < attempts {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(self.retry.max_backoff);
            }
        }
        Err(format!(
            "no runner at {} took the session after {attempts} attempts (last: {last}); the \
             runners are draining or full: add runners, or retry later",
            self.url
        ))
    }

    /// One try: a session, and a flag the reader raises if the runner closes it with 1013
    /// before saying anything (its sessions are full; nothing ran).
    async fn connect_once(&self) -> Result<(Connection, Arc<AtomicBool>), Refused> {
        let failed =
            |e: &dyn std::fmt::Display| format!("cannot connect to runner at {}: {e}", self.url);
        let mut request = self
            .url
            .as_str()
            .into_client_request()
            .map_err(|e| Refused::Fatal(failed(&e)))?;
        if let Some(token) = &self.token {
            let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|_| Refused::Fatal(failed(&"the token is not a valid header value")))?;
            value.set_sensitive(true);
            request.headers_mut().insert(header::AUTHORIZATION, value);
        }
        let connector = if self.url.starts_with("wss://") {
            let config = self.tls_config().map_err(|e| Refused::Fatal(failed(&e)))?;
            Some(tokio_tungstenite::Connector::Rustls(config))
        } else {
            None
        };
        let (ws, _) =
            tokio_tungstenite::connect_async_tls_with_config(request, None, false, connector)
                .await
                .map_err(|e| {
                    if turned_away(&e) {
                        Refused::Busy(e.to_string())
                    } else {
                        Refused::Fatal(failed(&e))
                    }
                })?;
        let full = Arc::new(AtomicBool::new(false));
        let reader_full = full.clone();
        let (mut sink, mut stream) = ws.split();
        let (host_tx, mut host_rx) = mpsc::unbounded_channel::<Message>();
        let (event_tx, event_rx) = mpsc::unbounded_channel::<RunnerEvent>();
        let (close_tx, mut close_rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    message = host_rx.recv() => match message {
                        Some(m) => if sink.send(WsFrame::text(m.encode())).await.is_err() { break },
                        None => break,
                    },
                    _ = &mut close_rx => break,
                }
            }
            let _ = sink.close().await;
        });
        tokio::spawn(async move {
            let mut heard = false;
            let how = loop {
                match stream.next().await {
                    Some(Ok(WsFrame::Text(text))) => {
                        heard = true;
                        let event = RunnerEvent::from_frame(Frame::Line(text.as_str().to_owned()));
                        if event_tx.send(event).is_err() {
                            return;
                        }
                    }
                    Some(Ok(WsFrame::Binary(_))) => {
                        let _ = event_tx.send(RunnerEvent::Garbage("binary frame".into()));
                    }
                    Some(Ok(WsFrame::Close(frame))) => {
                        if !heard && frame.as_ref().is_some_and(|f| f.code == CloseCode::Again) {
                            reader_full.store(true, Ordering::SeqCst);
                        }
                        break match frame {
                            Some(f) => {
                                format!("runner closed the connection ({}: {})", f.code, f.reason)
                            }
                            None => "runner closed the connection".to_owned(),
                        };
                    }
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => break format!("connection failed: {e}"),
                    None => break "connection closed".to_owned(),
                }
            };
            let _ = event_tx.send(RunnerEvent::Closed(how));
        });
        let terminate: Terminate = Box::new(move || {
            Box::pin(async move {
                let _ = close_tx.send(());
            })
        });
        Ok((
            Connection::new(host_tx, event_rx, terminate, self.timings),
            full,
        ))
    }
}

/// Errors of a [`WsExecutor`].
#[derive(Debug, Clone, thiserror::Error)]
pub enum WsError {
    /// The runner address is not a `ws://` or `wss://` URL with a host.
    #[error("invalid runner URL {url:?}: {why}; expected ws://HOST:PORT or wss://HOST:PORT")]
    InvalidUrl {
        /// The address as given.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// The PEM given to [`WsExecutor::with_tls_roots_pem`] holds no usable CA certificate.
    #[error("{0}")]
    InvalidCa(String),
    /// No session could be opened (refused for good, or turned away on every try).
    #[error("{0}")]
    Connect(String),
}

/// Checks the scheme and host of a runner URL.
fn check_url(url: &str) -> Result<(), WsError> {
    let invalid = |why: &str| WsError::InvalidUrl {
        url: url.to_owned(),
        why: why.to_owned(),
    };
    let uri: tokio_tungstenite::tungstenite::http::Uri =
        url.parse().map_err(|e| invalid(&format!("{e}")))?;
    match uri.scheme_str() {
        Some("ws" | "wss") => {}
        Some(other) => return Err(invalid(&format!("the scheme is {other}://"))),
        None => return Err(invalid("no scheme")),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(invalid("no host"));
    }
    Ok(())
}

/// Whether a failed upgrade is a runner turning the session away for now: the connection
/// refused or reset (a runner starting or stopping), or an HTTP 502, 503 or 504 (draining, or
/// a Service with no ready runner).
fn turned_away(error: &tokio_tungstenite::tungstenite::Error) -> bool {
    use std::io::ErrorKind;
    use tokio_tungstenite::tungstenite::Error;
    match error {
        Error::Io(e) => matches!(
            e.kind(),
            ErrorKind::ConnectionRefused
                | ErrorKind::ConnectionReset
                | ErrorKind::ConnectionAborted
        ),
        Error::Http(response) => matches!(response.status().as_u16(), 502..=504),
        _ => false,
    }
}

impl Executor for WsExecutor {
    fn execute(&self, request: ExecuteRequest) -> ExecuteFuture<'_> {
        Box::pin(async move {
            let cancel = &request.cancel;
            let ran = self
                .with_retries(|| async {
                    let (connection, full) = self.connect_once().await?;
                    let result = connection.execute_once(&request).await;
                    // Closed with 1013 before a word: the runner was full and ran nothing.
                    if full.load(Ordering::SeqCst) && !cancel.is_cancelled() {
                        return Err(Refused::Busy(
                            "the runner closed the session with 1013 (its sessions are full)"
                                .into(),
                        ));
                    }
                    Ok(result)
                })
                .await;
            ran.unwrap_or_else(|message| {
                ExecuteResult::failed(execbox_protocol::ErrorCode::InternalError, message)
            })
        })
    }
}
