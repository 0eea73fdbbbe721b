//! Runner commands: the real runner, wrappers in `sh` that record its pid (and tap its input),
//! fake runners written in `sh`, and a runner listening for WebSocket sessions.

use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use execbox_host::RunnerCommand;

/// The `execbox` binary of this build; `execbox runner` is the runner.
pub const EXECBOX: &str = env!("CARGO_BIN_EXE_execbox");

/// The real runner: `execbox runner`.
pub fn runner() -> RunnerCommand {
    RunnerCommand::new(EXECBOX).arg("runner")
}

/// A "runner" that is `sh -c SCRIPT`.
pub fn fake_runner(script: &str) -> RunnerCommand {
    RunnerCommand::new("/bin/sh")
        .arg("-c")
        .arg(script.to_owned())
}

/// The real runner started through `sh`, which first appends its pid to `pids` (the runner
/// keeps that pid: `exec`).
pub fn counted_runner(pids: &Path) -> RunnerCommand {
    fake_runner(&format!(
        "echo $$ >> '{}'; exec '{EXECBOX}' runner",
        pids.display()
    ))
}

/// The real runner started through `sh`, which records its pid in `pids` and copies
/// everything the host sends it into `log`.
pub fn tapped_runner(pids: &Path, log: &Path) -> RunnerCommand {
    fake_runner(&format!(
        "echo $$ >> '{}'; tee -a '{}' | '{EXECBOX}' runner",
        pids.display(),
        log.display()
    ))
}

/// `execbox runner --listen 127.0.0.1:0`, killed and reaped when dropped.
pub struct ListeningRunner {
    child: Option<Child>,
    /// The URL it printed, `ws://127.0.0.1:PORT`.
    pub url: String,
}

impl ListeningRunner {
    /// Starts `execbox runner --listen 127.0.0.1:0 ARGS...` with only `env` of the execbox
    /// variables, and reads its URL.
    pub fn start(args: &[&str], env: &[(&str, &str)]) -> ListeningRunner {
        let mut child = Command::new(EXECBOX)
            .args(["runner", "--listen", "127.0.0.1:0"])
            .args(args)
            .env_remove("EXECBOX_TOKEN")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start execbox runner --listen");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("piped stdout"))
            .read_line(&mut line)
            .expect("read the runner's URL");
        ListeningRunner {
            child: Some(child),
            url: line.trim().to_owned(),
        }
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// The process, no longer killed when this handle drops.
    pub fn into_child(mut self) -> Child {
        self.child.take().expect("the child is there until dropped")
    }

    /// Kills and reaps it.
    pub fn stop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ListeningRunner {
    fn drop(&mut self) {
        self.stop();
    }
}
