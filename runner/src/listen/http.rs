//! The plain HTTP side of the `--listen` port: the request head read before tungstenite sees it
//! (bounded in size, under the handshake timeout), the health and metrics answers, and a stream
//! that replays the head to tungstenite when the request is an upgrade.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

/// The largest request head read (request line and headers); a longer one gets 431.
pub(crate) const MAX_HEAD_BYTES: usize = 16 * 1024;

/// What the request head asks for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Request {
    /// A WebSocket upgrade (`Upgrade: websocket`), whatever its path: tungstenite and the
    /// auth check decide.
    Upgrade,
    /// Any other request: its method and path (query string removed).
    Plain { method: String, path: String },
}

/// Why no request could be read.
#[derive(Debug)]
pub(crate) enum HeadError {
    /// The connection closed or failed before a whole head arrived.
    Io(io::Error),
    /// Over [`MAX_HEAD_BYTES`] without the blank line that ends a head.
    TooLarge,
    /// Not an HTTP/1 request line.
    Malformed,
}

/// Reads from `stream` until the blank line ending the request head; returns the request and
/// every byte read (the head and anything after it), to be replayed by [`Replay`].
pub(crate) async fn read_head(stream: &mut TcpStream) -> Result<(Request, Vec<u8>), HeadError> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        let n = stream.read(&mut chunk).await.map_err(HeadError::Io)?;
        if n == 0 {
            return Err(HeadError::Io(io::ErrorKind::UnexpectedEof.into()));
        }
        let searched = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = find(&buf[searched..], b"\r\n\r\n") {
            let head = &buf[..searched + end];
            return Ok((parse(head)?, buf));
        }
        if buf.len() > MAX_HEAD_BYTES {
            return Err(HeadError::TooLarge);
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn parse(head: &[u8]) -> Result<Request, HeadError> {
    let head = std::str::from_utf8(head).map_err(|_| HeadError::Malformed)?;
    let mut lines = head.split("\r\n");
    let mut parts = lines.next().unwrap_or("").split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(HeadError::Malformed);
    };
    if !version.starts_with("HTTP/1.") || method.is_empty() || target.is_empty() {
        return Err(HeadError::Malformed);
    }
    let upgrade = lines.any(|line| {
        line.split_once(':').is_some_and(|(name, value)| {
            name.trim().eq_ignore_ascii_case("upgrade")
                && value
                    .split(',')
                    .any(|v| v.trim().eq_ignore_ascii_case("websocket"))
        })
    });
    if upgrade {
        return Ok(Request::Upgrade);
    }
    let path = target.split('?').next().unwrap_or(target);
    Ok(Request::Plain {
        method: method.to_owned(),
        path: path.to_owned(),
    })
}

/// Writes a whole response with `Connection: close` and ends the connection.
pub(crate) async fn respond(
    stream: &mut TcpStream,
    status: u16,
    content_type: &str,
    body: &str,
    head_only: bool,
) {
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        400 => "Bad Request",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "",
    };
    let mut response = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\
         cache-control: no-store\r\nconnection: close\r\n\r\n",
        body.len()
    );
    if !head_only {
        response.push_str(body);
    }
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// A connection whose first bytes were already read: they are read again first.
#[derive(Debug)]
pub(crate) struct Replay {
    head: Vec<u8>,
    at: usize,
    stream: TcpStream,
}

impl Replay {
    pub(crate) fn new(head: Vec<u8>, stream: TcpStream) -> Replay {
        Replay {
            head,
            at: 0,
            stream,
        }
    }
}

impl AsyncRead for Replay {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.at < this.head.len() {
            let n = (this.head.len() - this.at).min(buf.remaining());
            buf.put_slice(&this.head[this.at..this.at + n]);
            this.at += n;
            if this.at == this.head.len() {
                this.head = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Replay {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_are_told_apart() {
        assert_eq!(
            parse(b"GET /livez?x=1 HTTP/1.1\r\nHost: a").unwrap(),
            Request::Plain {
                method: "GET".into(),
                path: "/livez".into()
            }
        );
        assert_eq!(
            parse(b"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: WebSocket").unwrap(),
            Request::Upgrade
        );
        assert!(matches!(parse(b"hello"), Err(HeadError::Malformed)));
    }
}
