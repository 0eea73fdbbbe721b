//! `execbox-conformance`: replays the golden transcripts against a runner and prints one line per transcript.

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{ArgGroup, Parser};
use execbox_conformance::{
    load_dir, replay, Failure, StdioRunner, Transcript, Transport, WsRunner, TRANSCRIPTS_DIR,
};

const AFTER_HELP: &str = "\
Each transcript runs in a fresh session: --runner spawns the command anew and speaks NDJSON
over its stdin/stdout; --ws opens a new WebSocket connection (one message per text frame),
sending `Authorization: Bearer $EXECBOX_TOKEN` when that variable is set.
Output is one line per transcript in name order, failure details indented below it, then
exactly `N passed, M failed`.

Exit status: 0 when every transcript passed, 1 when any failed, 2 on a usage or setup error.

Examples:
  execbox-conformance --runner target/release/execbox-runner
  execbox-conformance --runner \"node my-runner.js --quiet\" --filter cancel/
  execbox-conformance --ws ws://127.0.0.1:8080 --jobs 8
  execbox-conformance --runner ./runner --transcripts ./my-transcripts --jobs 1";

/// Command-line flags.
#[derive(Parser, Debug)]
#[command(
    name = "execbox-conformance",
    version,
    about = "Check an execbox runner against the protocol's golden transcripts",
    after_help = AFTER_HELP,
    group(ArgGroup::new("target").required(true).args(["runner", "ws"]))
)]
struct Cli {
    /// Runner command line, split like a shell would; spawned once per transcript.
    #[arg(long, value_name = "\"CMD ARGS\"")]
    runner: Option<String>,
    /// WebSocket URL of a listening runner; one connection per transcript.
    #[arg(long, value_name = "ws://ADDR")]
    ws: Option<String>,
    /// Directory of `<area>/<name>.ndjson` transcripts.
    #[arg(long, value_name = "DIR", default_value = TRANSCRIPTS_DIR)]
    transcripts: PathBuf,
    /// Only replay transcripts whose name (`area/name`) contains this.
    #[arg(long, value_name = "SUBSTR")]
    filter: Option<String>,
    /// How many transcripts replay at once.
    #[arg(long, value_name = "N", default_value_t = 4)]
    jobs: usize,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("execbox-conformance: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}

/// Replays the selected transcripts; `Ok(true)` when all passed.
fn run(cli: &Cli) -> Result<bool> {
    let transport: Box<dyn Transport> = match (&cli.runner, &cli.ws) {
        (Some(line), None) => {
            Box::new(StdioRunner::from_command_line(line).context("reading --runner")?)
        }
        (None, Some(url)) => Box::new(WsRunner {
            url: url.clone(),
            // A token-protected runner (`--listen` with --token-file or EXECBOX_TOKEN).
            token: std::env::var("EXECBOX_TOKEN")
                .ok()
                .filter(|t| !t.is_empty()),
        }),
        _ => bail!("give exactly one of --runner and --ws"),
    };
    // Fail fast, once, when the runner cannot even be started or reached.
    drop(
        transport
            .connect()
            .context("cannot start or reach the runner")?,
    );
    let mut transcripts = load_dir(&cli.transcripts)
        .with_context(|| format!("loading transcripts from {}", cli.transcripts.display()))?;
    if let Some(filter) = &cli.filter {
        transcripts.retain(|t| t.name.contains(filter.as_str()));
    }
    if transcripts.is_empty() {
        bail!(
            "no transcripts to replay in {}{}",
            cli.transcripts.display(),
            cli.filter
                .as_ref()
                .map(|f| format!(" matching {f:?}"))
                .unwrap_or_default()
        );
    }
    let (passed, failed) = replay_all(&transcripts, transport.as_ref(), cli.jobs.max(1))?;
    writeln!(io::stdout(), "{passed} passed, {failed} failed")?;
    Ok(failed == 0)
}

/// Replays on `jobs` worker threads and prints results in name order as they become ready.
fn replay_all(
    transcripts: &[Transcript],
    transport: &dyn Transport,
    jobs: usize,
) -> Result<(usize, usize)> {
    let next = AtomicUsize::new(0);
    let (done_tx, done_rx) = mpsc::channel::<(usize, Result<(), Failure>, Duration)>();
    std::thread::scope(|scope| {
        for _ in 0..jobs.min(transcripts.len()) {
            let done_tx = done_tx.clone();
            let next = &next;
            scope.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(transcript) = transcripts.get(i) else {
                    return;
                };
                let start = Instant::now();
                let outcome = replay(transcript, transport);
                if done_tx.send((i, outcome, start.elapsed())).is_err() {
                    return;
                }
            });
        }
        drop(done_tx);

        let mut results: Vec<Option<(Result<(), Failure>, Duration)>> =
            (0..transcripts.len()).map(|_| None).collect();
        let (mut printed, mut passed, mut failed) = (0, 0, 0);
        let mut out = io::stdout().lock();
        for (i, outcome, elapsed) in done_rx {
            results[i] = Some((outcome, elapsed));
            while let Some(Some((outcome, elapsed))) = results.get_mut(printed).map(Option::take) {
                let name = &transcripts[printed].name;
                let ms = elapsed.as_millis();
                match outcome {
                    Ok(()) => {
                        passed += 1;
                        writeln!(out, "ok   {name} ({ms} ms)")?;
                    }
                    Err(failure) => {
                        failed += 1;
                        writeln!(out, "FAIL {name} ({ms} ms)")?;
                        for line in failure.to_string().lines() {
                            writeln!(out, "    {line}")?;
                        }
                    }
                }
                out.flush()?;
                printed += 1;
            }
        }
        Ok((passed, failed))
    })
}
