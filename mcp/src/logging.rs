//! `logging/setLevel` and the upstreams' `notifications/message`: each client session sets its
//! level; the upstreams that declare logging are set to the most verbose level any session
//! asked for, and each of their messages goes to the sessions whose level it reaches, its
//! logger naming the upstream (`github`, or `github.LOGGER`).

// Logging is deprecated by SEP-2577, yet clients and servers still use it.
#![allow(deprecated)]

use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::service::{Peer, RoleServer};

use super::offers::same_session;

/// How severe a level is: `debug` 0 up to `emergency` 7.
pub(crate) fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// A connected client session: whom to tell of changes, and the level it asked for (`None`:
/// it never sent `logging/setLevel`, and is sent no upstream messages).
pub(crate) struct Session {
    pub peer: Peer<RoleServer>,
    pub level: Option<LoggingLevel>,
}

/// Every connected client session.
#[derive(Default)]
pub(crate) struct Sessions(std::sync::Mutex<Vec<Session>>);

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Session>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A session that has initialized.
    pub(crate) fn add(&self, peer: Peer<RoleServer>) {
        let mut sessions = self.lock();
        sessions.retain(|s| !s.peer.is_transport_closed());
        if !sessions.iter().any(|s| same_session(&s.peer, &peer)) {
            sessions.push(Session { peer, level: None });
        }
    }

    /// The open sessions.
    pub(crate) fn peers(&self) -> Vec<Peer<RoleServer>> {
        let mut sessions = self.lock();
        sessions.retain(|s| !s.peer.is_transport_closed());
        sessions.iter().map(|s| s.peer.clone()).collect()
    }

    /// Sets `peer`'s session's level; returns the most verbose level of every open session.
    pub(crate) fn set_level(&self, peer: &Peer<RoleServer>, level: LoggingLevel) -> LoggingLevel {
        let mut sessions = self.lock();
        sessions.retain(|s| !s.peer.is_transport_closed());
        match sessions.iter_mut().find(|s| same_session(&s.peer, peer)) {
            Some(session) => session.level = Some(level),
            None => sessions.push(Session {
                peer: peer.clone(),
                level: Some(level),
            }),
        }
        sessions
            .iter()
            .filter_map(|s| s.level)
            .min_by_key(|l| rank(*l))
            .unwrap_or(level)
    }

    /// Sends an upstream's message to every session whose level it reaches, its logger
    /// naming the upstream.
    pub(crate) async fn log(&self, namespace: &str, message: &LoggingMessageNotificationParam) {
        let peers: Vec<Peer<RoleServer>> = {
            let mut sessions = self.lock();
            sessions.retain(|s| !s.peer.is_transport_closed());
            sessions
                .iter()
                .filter(|s| s.level.is_some_and(|l| rank(message.level) >= rank(l)))
                .map(|s| s.peer.clone())
                .collect()
        };
        if peers.is_empty() {
            return;
        }
        let mut forwarded = message.clone();
        forwarded.logger = Some(match &message.logger {
            Some(logger) => format!("{namespace}.{logger}"),
            None => namespace.to_owned(),
        });
        forwarded.meta = None;
        for peer in peers {
            let _ = peer.notify_logging_message(forwarded.clone()).await;
        }
    }
}
