//! The host's side of a runner's stdin: each message written by whoever sends it, at once.
//!
//! A writer task would cost every message a hand-off to another task, and on a thread
//! outside the runtime (an SDK's caller, see [`spawn_eager`](crate::spawn_eager)) a worker's
//! wake-up. A line almost always fits in the pipe's buffer, so the sender writes it itself,
//! without blocking; only what the pipe cannot take now waits in a backlog, written by a
//! task that lives while there is one. Lines are never interleaved or reordered: once there
//! is a backlog, later lines join it.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use execbox_protocol::Message;
use tokio::net::unix::pipe;

/// Writes protocol lines to a runner's stdin; cheap to share.
pub(crate) struct PipeWriter {
    pipe: pipe::Sender,
    state: Mutex<Backlog>,
}

#[derive(Default)]
struct Backlog {
    /// Bytes the pipe has not taken yet, oldest first.
    bytes: Vec<u8>,
    /// The pipe failed (the runner is gone): nothing more is written.
    closed: bool,
}

/// The runner's stdin is closed: it exited or is exiting.
#[derive(Debug)]
pub(crate) struct Closed;

impl PipeWriter {
    /// Takes over the write end of a pipe (made non-blocking). Must be called inside a Tokio
    /// runtime.
    pub(crate) fn new(fd: OwnedFd) -> io::Result<Arc<PipeWriter>> {
        Ok(Arc::new(PipeWriter {
            pipe: pipe::Sender::from_owned_fd(fd)?,
            state: Mutex::new(Backlog::default()),
        }))
    }

    /// Sends `message` as one line: written now when the pipe takes it, else kept in order
    /// for the backlog's task. Must be called inside the runtime's context (a worker, or a
    /// thread that entered it).
    pub(crate) fn send(self: &Arc<Self>, message: &Message) -> Result<(), Closed> {
        let mut line = message.encode().into_bytes();
        line.push(b'\n');
        let mut state = self.lock();
        if state.closed {
            return Err(Closed);
        }
        let mut written = 0;
        if state.bytes.is_empty() {
            while written < line.len() {
                match self.pipe.try_write(&line[written..]) {
                    Ok(n) => written += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        tracing::debug!("cannot write to the runner: {e}");
                        state.closed = true;
                        return Err(Closed);
                    }
                }
            }
            if written == line.len() {
                return Ok(());
            }
            // The backlog was empty: no task is writing it, so one starts.
            let writer = self.clone();
            tokio::spawn(async move { writer.drain().await });
        }
        state.bytes.extend_from_slice(&line[written..]);
        Ok(())
    }

    /// Writes the backlog as the pipe takes it, until it is empty or the pipe fails.
    async fn drain(self: Arc<Self>) {
        loop {
            if let Err(e) = self.pipe.writable().await {
                tracing::debug!("cannot write to the runner: {e}");
                self.close();
                return;
            }
            let mut state = self.lock();
            if state.closed {
                return;
            }
            match self.pipe.try_write(&state.bytes) {
                Ok(n) => {
                    state.bytes.drain(..n);
                    if state.bytes.is_empty() {
                        // Under the lock: the next `send` sees the empty backlog and writes.
                        state.bytes = Vec::new();
                        return;
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => {
                    tracing::debug!("cannot write to the runner: {e}");
                    state.closed = true;
                    state.bytes = Vec::new();
                    return;
                }
            }
        }
    }

    fn close(&self) {
        let mut state = self.lock();
        state.closed = true;
        state.bytes = Vec::new();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Backlog> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use execbox_protocol::Cancel;

    use super::*;

    fn cancel(id: String) -> Message {
        Message::Cancel(Cancel { id })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lines_beyond_the_pipes_buffer_arrive_whole_and_in_order() {
        let (read, write) = std::io::pipe().unwrap();
        let writer = PipeWriter::new(OwnedFd::from(write)).unwrap();
        // About 1 MiB in all, many times a pipe's buffer, sent before anything is read.
        let ids: Vec<String> = (0..2000).map(|i| format!("{i:0>500}")).collect();
        for id in &ids {
            writer.send(&cancel(id.clone())).unwrap();
        }
        let expected: String = ids
            .iter()
            .map(|id| format!("{}\n", cancel(id.clone()).encode()))
            .collect();
        let reader = std::thread::spawn(move || {
            let mut read = read;
            let mut got = vec![0; expected.len()];
            read.read_exact(&mut got).unwrap();
            (String::from_utf8(got).unwrap(), expected)
        });
        let (got, expected) = tokio::task::spawn_blocking(move || reader.join().unwrap())
            .await
            .unwrap();
        assert!(got == expected, "the lines arrived cut or out of order");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_closed_pipe_is_reported_not_hidden() {
        let (read, write) = std::io::pipe().unwrap();
        let writer = PipeWriter::new(OwnedFd::from(write)).unwrap();
        drop(read);
        // The first line may be taken into the backlog before the pipe is known to be
        // writable; its failed write then closes the writer, and every later send fails.
        let _ = writer.send(&cancel("a".into()));
        let failed = async {
            while writer.send(&cancel("b".into())).is_ok() {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(5), failed)
            .await
            .expect("a send to a closed pipe fails");
    }
}
