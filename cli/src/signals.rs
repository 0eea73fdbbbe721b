//! The CLI's stop signals: Ctrl-C (SIGINT), SIGTERM and a hang-up (SIGHUP, the terminal or the
//! SSH session gone), each as the exit status it asks for.
//!
//! Tool processes run in process groups of their own, so a terminal's signals do not reach
//! them: every signal that would end `execbox` is handled here, so that it stops them first.
//! (Unix only, as the CLI is.)

/// Exit status after SIGHUP (128 + 1).
pub const EXIT_HUNG_UP: u8 = 129;
/// Exit status after SIGINT (128 + 2).
pub const EXIT_INTERRUPTED: u8 = 130;
/// Exit status after SIGTERM (128 + 15).
pub const EXIT_TERMINATED: u8 = 143;

/// Receives SIGINT, SIGTERM and SIGHUP. Create it inside the Tokio runtime, before the work it
/// stops.
pub struct StopSignals {
    term: Option<tokio::signal::unix::Signal>,
    hangup: Option<tokio::signal::unix::Signal>,
}

impl StopSignals {
    pub fn new() -> StopSignals {
        use tokio::signal::unix::{signal, SignalKind};
        StopSignals {
            term: signal(SignalKind::terminate()).ok(),
            hangup: signal(SignalKind::hangup()).ok(),
        }
    }

    /// The next SIGINT, SIGTERM or SIGHUP, as its exit status ([`EXIT_INTERRUPTED`],
    /// [`EXIT_TERMINATED`], [`EXIT_HUNG_UP`]); `None` once none can be received any more.
    pub async fn next(&mut self) -> Option<u8> {
        async fn recv(signal: Option<&mut tokio::signal::unix::Signal>) -> Option<()> {
            match signal {
                Some(signal) => signal.recv().await,
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            Ok(()) = tokio::signal::ctrl_c() => Some(EXIT_INTERRUPTED),
            Some(()) = recv(self.term.as_mut()) => Some(EXIT_TERMINATED),
            Some(()) = recv(self.hangup.as_mut()) => Some(EXIT_HUNG_UP),
            else => None,
        }
    }
}
