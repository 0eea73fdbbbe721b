//! The stdio transport: NDJSON on stdin and stdout, read on its own thread.

use std::io::{self, Read, Write};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use execbox_protocol::{LineFramer, Message};

use crate::engine::{Engine, Outbound, ENGINE_STACK_BYTES};
use crate::lockdown::{Mode, Sandbox};
use crate::session::{run_session, Control, Inbound, SessionLimits};

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

/// Exit status when the watchdog ended the process (see [`Control::watch`]).
pub const WATCHDOG_EXIT_CODE: i32 = 3;

/// Serves one session on stdin/stdout until stdin closes.
///
/// With [`Sandbox::Enforce`], the Landlock step of the lockdown comes first (on this thread,
/// so both threads inherit it), then both threads are spawned, then the rlimits and seccomp
/// reach all of them; only then is the reader let go to read stdin. So no thread need be created
/// under the lockdown, and stdio's allowlist has no `clone`.
pub fn serve(limits: SessionLimits, sandbox: Sandbox) -> anyhow::Result<()> {
    if sandbox == Sandbox::Enforce {
        crate::lockdown::close_inherited_fds();
    }
    let lockdown = sandbox.begin(Mode::Stdio)?;
    let interrupt = Arc::new(AtomicBool::new(false));
    let control = Control::new(interrupt.clone());
    let (tx, rx) = mpsc::channel::<Inbound>();

    let (go, gate) = mpsc::channel::<()>();
    let reader_control = control.clone();
    std::thread::Builder::new()
        .name("stdin-reader".into())
        .spawn(move || {
            if gate.recv().is_ok() {
                read_stdin(limits, &reader_control, &tx);
            }
        })?;

    let out: Arc<dyn Outbound> = Arc::new(StdoutSink {
        stdout: Mutex::new(io::stdout()),
    });
    control.set_sink(out.clone());
    let watchdog_control = control.clone();
    std::thread::Builder::new()
        .name("watchdog".into())
        .spawn(move || {
            // The engine is stuck in a native call and cannot be interrupted: the `done` is
            // out, and ending the process is the only way to free the host's runner.
            watchdog_control.watch(&|| std::process::exit(WATCHDOG_EXIT_CODE));
        })?;
    let engine_thread = std::thread::Builder::new()
        .name("engine".into())
        .stack_size(ENGINE_STACK_BYTES)
        .spawn(move || run_session(&mut Engine::new(interrupt), &rx, &control, out, limits))?;
    if let Some(lockdown) = lockdown {
        lockdown.finish()?;
    }
    go.send(())?;
    engine_thread
        .join()
        .map_err(|_| anyhow::anyhow!("the engine thread panicked"))?;
    Ok(())
}

fn read_stdin(limits: SessionLimits, control: &Control, tx: &mpsc::Sender<Inbound>) {
    let mut framer = LineFramer::new(limits.max_message_bytes);
    let mut buf = vec![0u8; 64 * 1024];
    let mut stdin = io::stdin().lock();
    let forward = |item: Inbound| match control.admit(item) {
        Some(item) => tx.send(item).is_ok(),
        None => true,
    };
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
