//! What passes between a session and its transport: the items it is fed ([`Inbound`]) and the
//! sink for what the runner sends ([`Outbound`]), kept within the message size limit.
//!
//! A leaf of the runner: the session, its [`Control`](crate::control::Control) and the
//! engine all name these types, and this module names none of them. The public types are
//! re-exported with the [`Session`](crate::Session) that uses them.

use execbox_protocol::{DecodeError, Frame, Message, Received};

/// Where a session sends what the runner emits (`started`, `tool_call`, `done`). Implemented
/// by transports: stdout, a channel, a recorder.
pub trait Outbound: Send + Sync {
    /// Sends one message. Failures are the transport's business: it reports the close to the
    /// session as [`Inbound::Closed`].
    fn send(&self, message: &Message);
}

/// One item from the transport, in arrival order.
#[derive(Debug)]
pub enum Inbound {
    /// A well-formed message.
    Message(Message),
    /// A line or frame that is not a valid message.
    Invalid(DecodeError),
    /// A line or frame refused before parsing: over the size limit.
    Oversized {
        /// Its size in bytes.
        len: usize,
        /// Its first bytes, to tell which message it was.
        prefix: Vec<u8>,
    },
    /// Bytes that are not UTF-8.
    NotUtf8 {
        /// Its size in bytes.
        len: usize,
    },
    /// The transport closed or failed; nothing follows.
    Closed,
}

impl Inbound {
    /// Classifies one framed line, by the protocol's rules ([`Received`]): what a relay in
    /// front of the runner counts by is exactly what the runner acts on.
    pub fn from_frame(frame: Frame) -> Inbound {
        Received::from_frame(frame).into()
    }

    /// Decodes one message text.
    pub fn from_text(text: &str) -> Inbound {
        Received::from_text(text).into()
    }
}

impl From<Received> for Inbound {
    fn from(received: Received) -> Inbound {
        match received {
            Received::Message(message) => Inbound::Message(message),
            Received::Invalid(error) => Inbound::Invalid(error),
            Received::Oversized { len, prefix } => Inbound::Oversized { len, prefix },
            Received::NotUtf8 { len } => Inbound::NotUtf8 { len },
        }
    }
}

/// The size of `message` encoded, when it exceeds `limit`. Cheap for small messages: only
/// one that could be over the limit is encoded to measure it.
pub(crate) fn oversized(message: &Message, limit: usize) -> Option<usize> {
    if message.size_hint() <= limit {
        return None;
    }
    let size = message.encode().len();
    (size > limit).then_some(size)
}
