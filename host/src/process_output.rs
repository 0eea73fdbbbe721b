//! What a child process said and how it ended: pipes read under a cap, exit signals named,
//! and text from a process escaped before a person or a model reads it.

use std::io;
use std::process::ExitStatus;

use tokio::io::{AsyncRead, AsyncReadExt as _};

/// What [`read_capped`] read of a pipe.
pub struct Captured {
    /// The bytes kept (at most the cap).
    pub bytes: Vec<u8>,
    /// The pipe said more than the cap.
    pub overflowed: bool,
}

/// What [`read_capped`] keeps of a pipe that says more than its cap.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// The first `cap` bytes; then the pipe is closed (the writer gets `EPIPE`/`SIGPIPE`).
    Head,
    /// The last `cap` bytes; the pipe is drained to its end so the writer never blocks.
    Tail,
}

/// Reads a pipe to its end (or, for [`Keep::Head`], to its cap).
pub async fn read_capped<R: AsyncRead + Unpin>(
    pipe: Option<R>,
    cap: usize,
    keep: Keep,
) -> Captured {
    let mut captured = Captured {
        bytes: Vec::new(),
        overflowed: false,
    };
    let Some(mut pipe) = pipe else {
        return captured;
    };
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match pipe.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::debug!("reading tool output failed: {e}");
                break;
            }
        };
        match keep {
            Keep::Head => {
                let room = cap.saturating_sub(captured.bytes.len());
                captured.bytes.extend_from_slice(&buf[..n.min(room)]);
                if n > room {
                    captured.overflowed = true;
                    break;
                }
            }
            Keep::Tail => {
                captured.bytes.extend_from_slice(&buf[..n]);
                if captured.bytes.len() > cap.saturating_mul(2) {
                    let excess = captured.bytes.len() - cap;
                    captured.bytes.drain(..excess);
                    captured.overflowed = true;
                }
            }
        }
    }
    if captured.bytes.len() > cap {
        let excess = captured.bytes.len() - cap;
        captured.bytes.drain(..excess);
        captured.overflowed = true;
    }
    captured
}

/// The name of a common signal.
pub fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        15 => "SIGTERM",
        24 => "SIGXCPU",
        25 => "SIGXFSZ",
        _ => return None,
    })
}

/// The signal that ended a process, if one did.
#[cfg(unix)]
pub fn signal_of(status: ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal()
}

/// The signal that ended a process: never one, off Unix.
#[cfg(not(unix))]
pub fn signal_of(_status: ExitStatus) -> Option<i32> {
    None
}

/// `text` with control characters escaped as in JSON (`\n`, `\t`, `\u001b`), and `"` and
/// `\` too when `quotes`.
pub fn escape_controls(text: &str, quotes: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '"' | '\\' if quotes => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() => {
                let _ = std::fmt::Write::write_fmt(&mut out, format_args!("\\u{:04x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out
}
