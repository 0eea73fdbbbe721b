//! The stdio transport: NDJSON on stdin and stdout, read on its own thread.

use std::io::{self, Read, Write};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use execbox_protocol::{LineFramer, Message};

use crate::lockdown::{Lockdown, LockdownError, Mode};
use crate::session::{Inbound, Outbound, Sent, Session, SessionInput, SessionLimits};

/// Writes each message as one line to stdout, flushed at once. Nothing else ever writes there.
struct StdoutSink {
    stdout: Mutex<io::Stdout>,
}

impl Outbound for StdoutSink {
    fn send(&self, message: &Message) {
        let mut line = message.encode();
        line.push('\n');
        let mut stdout = self.stdout.lock().unwrap_or_else(|e| e.into_inner());
        let written = stdout
            .write_all(line.as_bytes())
            .and_then(|()| stdout.flush());
        if let Err(e) = written {
            // A closed stdout means the host is gone; stdin's EOF ends the session.
            tracing::debug!("cannot write to stdout: {e}");
        }
    }
}

/// Exit status when the watchdog ended the process: an execution was stuck in a long native
/// call, its `timeout` is answered, and a thread cannot be killed.
pub const WATCHDOG_EXIT_CODE: i32 = 3;

/// Serves one session on stdin/stdout until stdin closes.
///
/// With [`Lockdown::Enforce`], the Landlock step of the lockdown comes first (on this thread,
/// so every thread spawned after it inherits it), then the session's threads and the reader
/// are spawned, then the rlimits and seccomp reach all of them; only then is the reader let go
/// to read stdin. So no thread need be created under the lockdown, and stdio's allowlist has
/// no `clone`.
pub fn serve(limits: SessionLimits, lockdown: Lockdown) -> Result<(), StdioError> {
    if lockdown == Lockdown::Enforce {
        crate::lockdown::close_inherited_fds();
    }
    let pending = lockdown.begin(Mode::Stdio)?;
    let out = Arc::new(StdoutSink {
        stdout: Mutex::new(io::stdout()),
    });
    // The engine may be stuck in a native call that cannot be interrupted: once the watchdog
    // has answered, ending the process is the only way to free the host's runner.
    let session = Session::builder()
        .limits(limits)
        .watchdog(|| std::process::exit(WATCHDOG_EXIT_CODE))
        .start(out)
        .map_err(StdioError::Spawn)?;
    let (go, gate) = mpsc::channel::<()>();
    let input = session.input();
    std::thread::Builder::new()
        .name("stdin-reader".into())
        .spawn(move || {
            if gate.recv().is_ok() {
                read_stdin(limits, &input);
            }
        })
        .map_err(StdioError::Spawn)?;
    if let Some(pending) = pending {
        pending.finish()?;
    }
    // The reader is alive (it waits on the gate) until it has been let go.
    let _ = go.send(());
    session.join().map_err(|_| StdioError::EnginePanicked)
}

/// Why a stdio session could not be served.
#[derive(Debug, thiserror::Error)]
pub enum StdioError {
    /// The OS lockdown could not be applied; nothing was read.
    #[error(transparent)]
    Lockdown(#[from] LockdownError),
    /// A thread of the session (engine, watchdog, stdin reader) could not be started.
    #[error("cannot start the session's threads")]
    Spawn(#[source] io::Error),
    /// The engine thread panicked: a bug in the runner.
    #[error("the engine thread panicked")]
    EnginePanicked,
}

fn read_stdin(limits: SessionLimits, input: &SessionInput) {
    let mut framer = LineFramer::new(limits.max_message_bytes);
    let mut buf = vec![0u8; 64 * 1024];
    let mut stdin = io::stdin().lock();
    let forward = |item: Inbound| input.send(item) != Sent::Ended;
    loop {
        let n = match stdin.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::warn!("cannot read stdin: {e}");
                break;
            }
        };
        framer.push(&buf[..n]);
        while let Some(frame) = framer.next_frame() {
            if !forward(Inbound::from_frame(frame)) {
                return;
            }
        }
    }
    framer.finish();
    while let Some(frame) = framer.next_frame() {
        if !forward(Inbound::from_frame(frame)) {
            return;
        }
    }
    forward(Inbound::Closed);
}
