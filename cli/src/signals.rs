//! The CLI's stop signals: Ctrl-C (SIGINT) and SIGTERM, each as the exit status it asks for.

/// Exit status after SIGINT (128 + 2).
pub const EXIT_INTERRUPTED: u8 = 130;
/// Exit status after SIGTERM (128 + 15).
pub const EXIT_TERMINATED: u8 = 143;

/// Receives SIGINT and SIGTERM. Create it inside the Tokio runtime, before the work it stops.
pub struct StopSignals {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
}

impl StopSignals {
    pub fn new() -> StopSignals {
        StopSignals {
            #[cfg(unix)]
            term: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok(),
        }
    }

    /// The next SIGINT or SIGTERM, as its exit status ([`EXIT_INTERRUPTED`],
    /// [`EXIT_TERMINATED`]); `None` once neither can be received any more.
    pub async fn next(&mut self) -> Option<u8> {
        #[cfg(unix)]
        let terminated = async {
            match self.term.as_mut() {
                Some(term) => term.recv().await,
                None => std::future::pending().await,
            }
        };
        #[cfg(not(unix))]
        let terminated = std::future::pending::<Option<()>>();
        tokio::select! {
            Ok(()) = tokio::signal::ctrl_c() => Some(EXIT_INTERRUPTED),
            Some(()) = terminated => Some(EXIT_TERMINATED),
            else => None,
        }
    }
}
