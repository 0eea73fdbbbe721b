//! WebSocket runners (`execbox-runner --listen`): one connection per execution.

use execbox_protocol::{Frame, Message, RuntimeOptions};
use futures_util::{SinkExt, StreamExt};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::{header, HeaderValue};
use tokio_tungstenite::tungstenite::Message as WsFrame;
use tokio_util::sync::CancellationToken;

use crate::connection::{Connection, RunnerEvent, SessionTimings, Terminate};
use crate::executor::{ExecuteFuture, ExecuteResult, Executor};
use crate::toolset::ToolSet;

/// Connects to a remote runner for each execution.
#[derive(Clone)]
pub struct WsExecutor {
    url: String,
    token: Option<String>,
    timings: SessionTimings,
}

impl std::fmt::Debug for WsExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WsExecutor")
            .field("url", &self.url)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("timings", &self.timings)
            .finish()
    }
}

impl WsExecutor {
    /// An executor for the runner at `url` (e.g. `ws://127.0.0.1:7070`).
    pub fn new(url: impl Into<String>) -> Self {
        WsExecutor {
            url: url.into(),
            token: None,
            timings: SessionTimings::default(),
        }
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

    /// Opens one session.
    pub async fn connect(&self) -> Result<Connection, String> {
        let failed =
            |e: &dyn std::fmt::Display| format!("cannot connect to runner at {}: {e}", self.url);
        let mut request = self
            .url
            .as_str()
            .into_client_request()
            .map_err(|e| failed(&e))?;
        if let Some(token) = &self.token {
            let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|_| failed(&"the token is not a valid header value"))?;
            value.set_sensitive(true);
            request.headers_mut().insert(header::AUTHORIZATION, value);
        }
        let (ws, _) = tokio_tungstenite::connect_async(request)
            .await
            .map_err(|e| failed(&e))?;
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
            let how = loop {
                match stream.next().await {
                    Some(Ok(WsFrame::Text(text))) => {
                        let event = frame_to_event(Frame::Line(text.as_str().to_owned()));
                        if event_tx.send(event).is_err() {
                            return;
                        }
                    }
                    Some(Ok(WsFrame::Binary(_))) => {
                        let _ = event_tx.send(RunnerEvent::Garbage("binary frame".into()));
                    }
                    Some(Ok(WsFrame::Close(frame))) => {
                        break match frame {
                            Some(f) => {
                                format!("runner closed the connection ({}: {})", f.code, f.reason)
                            }
                            None => "runner closed the connection".to_owned(),
                        }
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
        Ok(Connection::new(host_tx, event_rx, terminate, self.timings))
    }
}

impl Executor for WsExecutor {
    fn execute<'a>(
        &'a self,
        code: &'a str,
        tools: &'a ToolSet,
        options: RuntimeOptions,
        cancel: CancellationToken,
    ) -> ExecuteFuture<'a> {
        Box::pin(async move {
            match self.connect().await {
                Ok(connection) => connection.execute_once(code, tools, options, &cancel).await,
                Err(message) => {
                    ExecuteResult::failed(execbox_protocol::ErrorCode::InternalError, message)
                }
            }
        })
    }
}

/// Classifies one line or frame from a runner.
pub(crate) fn frame_to_event(frame: Frame) -> RunnerEvent {
    match frame {
        Frame::Line(line) => match Message::decode(&line) {
            Ok(message) => RunnerEvent::Message(message),
            Err(e) => {
                let mut shown: String = line.chars().take(200).collect();
                if shown.len() < line.len() {
                    shown.push('…');
                }
                RunnerEvent::Garbage(format!("{e}: {shown}"))
            }
        },
        Frame::InvalidUtf8 { len } => RunnerEvent::Garbage(format!("{len} bytes of invalid UTF-8")),
        Frame::Oversized { len, .. } => {
            RunnerEvent::Garbage(format!("a message of {len} bytes, over the size limit"))
        }
    }
}
