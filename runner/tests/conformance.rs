//! Replays every conformance transcript against `execbox-runner`, once over stdio and once over WebSocket.
//!
//! Each `transcripts/<area>/<name>.ndjson` of `execbox-conformance` becomes two tests:
//! `stdio::<area>::<name>` spawns a fresh runner process and speaks NDJSON over its stdio;
//! `ws::<area>::<name>` opens a fresh connection to one `execbox-runner --listen 127.0.0.1:0`
//! started for the whole run (on first use) and killed at the end.
//!
//! Run one area with `cargo test -p execbox-runner --test conformance -- cancel::`.

use std::sync::{Arc, OnceLock};

use execbox_conformance::{
    load_dir, replay, ListeningRunner, StdioRunner, Transcript, TRANSCRIPTS_DIR,
};
use libtest_mimic::{Arguments, Failed, Trial};

const RUNNER: &str = env!("CARGO_BIN_EXE_execbox-runner");

/// The shared WebSocket runner, started by the first WebSocket test that runs.
type Server = Arc<OnceLock<Result<ListeningRunner, String>>>;

fn main() {
    let args = Arguments::from_args();
    let transcripts = match load_dir(TRANSCRIPTS_DIR) {
        Ok(transcripts) => transcripts.into_iter().map(Arc::new).collect::<Vec<_>>(),
        Err(e) => {
            eprintln!("cannot load the conformance transcripts: {e}");
            std::process::exit(2);
        }
    };
    let command = vec![RUNNER.to_string()];
    let server: Server = Arc::new(OnceLock::new());

    let mut trials = Vec::with_capacity(transcripts.len() * 2);
    for transcript in &transcripts {
        let name = transcript.name.replace('/', "::");
        let stdio = StdioRunner {
            command: command.clone(),
        };
        let t = Arc::clone(transcript);
        trials.push(Trial::test(format!("stdio::{name}"), move || {
            replay(&t, &stdio).map_err(|failure| Failed::from(failure.to_string()))
        }));
        let t = Arc::clone(transcript);
        let (server, command) = (Arc::clone(&server), command.clone());
        trials.push(Trial::test(format!("ws::{name}"), move || {
            replay_ws(&t, &server, &command)
        }));
    }

    let conclusion = libtest_mimic::run(&args, trials);
    // The trials (and their handles) are gone: this drop kills the listening runner.
    drop(server);
    conclusion.exit();
}

fn replay_ws(transcript: &Transcript, server: &Server, command: &[String]) -> Result<(), Failed> {
    let server = server
        .get_or_init(|| ListeningRunner::spawn(command).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| Failed::from(format!("cannot start `execbox-runner --listen`: {e}")))?;
    replay(transcript, &server.ws_runner()).map_err(|failure| {
        let stderr = server
            .stderr_tail()
            .map(|tail| format!("\n  listening runner stderr (shared by all sessions):\n{tail}"))
            .unwrap_or_default();
        Failed::from(format!("{failure}{stderr}"))
    })
}
