//! [`Listener`]: a connection that LISTENs on channels, reconnects when it is lost, and says
//! so ([`Notice::Resync`]), since notifications sent while it was away are gone.

use std::time::Duration;

use futures_util::future::poll_fn;
use tokio::sync::mpsc;
use tokio_postgres::AsyncMessage;

use super::error::describe;
use super::Pg;

/// What a [`Listener`] hears.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// A `NOTIFY` on one of its channels.
    Notification {
        /// The channel.
        channel: String,
        /// The payload (at most 8,000 bytes: PostgreSQL's limit).
        payload: String,
    },
    /// The listener (re)connected and is listening: whatever was notified before may have been
    /// missed, so re-read the state it stands for. The first notice is always one.
    Resync,
}

/// Notifications of some channels, for as long as it lives (dropping it closes its connection).
#[derive(Debug)]
pub struct Listener {
    notices: mpsc::UnboundedReceiver<Notice>,
    task: tokio::task::AbortHandle,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Listener {
    /// The next notice; `None` only once the pool is gone.
    pub async fn recv(&mut self) -> Option<Notice> {
        self.notices.recv().await
    }
}

impl Pg {
    /// A dedicated connection (outside the pool) that `LISTEN`s on `channels` (plain lower-case
    /// identifiers), reconnecting with a growing pause (up to 5 s) while the database is away.
    pub fn listen(&self, channels: &[&str]) -> Listener {
        let (tx, notices) = mpsc::unbounded_channel();
        let pg = self.clone();
        let statement: String = channels
            .iter()
            .map(|c| format!("LISTEN \"{c}\";"))
            .collect();
        let task = self.handle().spawn(async move {
            let mut pause = Duration::from_millis(100);
            loop {
                match pg.listen_once(&statement, &tx).await {
                    Ok(()) => pause = Duration::from_millis(100),
                    Err(reason) => {
                        tracing::warn!(database = %pg.url(), "cannot listen for notifications: {reason}; retrying in {pause:?}")
                    }
                }
                if tx.is_closed() {
                    return;
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
            }
        });
        Listener {
            notices,
            task: task.abort_handle(),
        }
    }

    /// One connection's life: connect, LISTEN, forward until it ends.
    async fn listen_once(
        &self,
        statement: &str,
        tx: &mpsc::UnboundedSender<Notice>,
    ) -> Result<(), String> {
        let timeout = self.options().connect_timeout;
        let connect = self.config().connect(self.tls());
        let (client, mut connection) = tokio::time::timeout(timeout, connect)
            .await
            .map_err(|_| format!("no connection within {timeout:?}"))?
            .map_err(|e| describe(&e))?;
        let forward = tx.clone();
        let mut pump = tokio::spawn(async move {
            loop {
                match poll_fn(|cx| connection.poll_message(cx)).await {
                    Some(Ok(AsyncMessage::Notification(n))) => {
                        let notice = Notice::Notification {
                            channel: n.channel().to_string(),
                            payload: n.payload().to_string(),
                        };
                        if forward.send(notice).is_err() {
                            return Ok(());
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return Err(describe(&e)),
                    None => return Err("the connection closed".to_string()),
                }
            }
        });
        let deadline = self.options().call_timeout;
        let listening = tokio::select! {
            r = client.batch_execute(statement) => r.map_err(|e| describe(&e)),
            ended = &mut pump => Err(ended.unwrap_or_else(|e| Err(e.to_string())).err().unwrap_or_default()),
            _ = tokio::time::sleep(deadline) => Err(format!("LISTEN got no answer within {deadline:?}")),
        };
        if listening.is_err() {
            pump.abort();
        }
        listening?;
        if tx.send(Notice::Resync).is_err() {
            return Ok(());
        }
        let ended = pump.await.unwrap_or_else(|e| Err(e.to_string()));
        drop(client);
        match ended {
            Ok(()) => Ok(()),
            Err(reason) => Err(format!("lost the connection: {reason}")),
        }
    }
}
