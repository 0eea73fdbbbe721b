//! `execbox-conformance`: replays the golden transcripts against a runner (one line per transcript), or benchmarks it (`bench`).

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{ArgGroup, Args, Parser, Subcommand};
use execbox_conformance::{
    load_dir, replay, run_bench, BenchOptions, BenchTarget, Failure, StdioRunner, Transcript,
    Transport, WsRunner, TRANSCRIPTS_DIR,
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
  execbox-conformance --runner ./runner --transcripts ./my-transcripts --jobs 1
  execbox-conformance bench --runner target/release/execbox-runner";

const BENCH_AFTER_HELP: &str = "\
Measures, through one sequential driver: the trivial execution round trip (`execute` of `1 + 1`
on a warm runner, to its `done`), the tool call round trip (a `tool_result` sent to the next
`tool_call` received, in a loop of awaited `t.echo` calls), executions per second (sequential,
one runner) and spawn to first `done` (--runner; with --ws, connect to first `done`).
Prints a Markdown table, or with --json exactly one object with the keys trivial_p50_us,
trivial_p99_us, tool_call_p50_us, tool_call_p99_us, exec_per_s, spawn_to_first_done_ms.

With --ws, EXECBOX_TOKEN (when set) is sent as `Authorization: Bearer TOKEN`.

Exit status: 0 when the benchmark ran, 2 when it could not (the runner failed to start, sent
something that is not a protocol message, or answered wrongly) or on a usage error.

Examples:
  execbox-conformance bench --runner target/release/execbox-runner
  execbox-conformance bench --runner \"node stdio-adapter.mjs\" --iterations 1000 --spawns 10
  execbox-conformance bench --ws ws://127.0.0.1:7070 --quick --json";

/// Command-line flags.
#[derive(Parser, Debug)]
#[command(
    name = "execbox-conformance",
    version,
    about = "Check an execbox runner against the protocol's golden transcripts",
    after_help = AFTER_HELP,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    group(ArgGroup::new("target").required(true).args(["runner", "ws"]))
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Sub>,
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
    /// Leave out an optional tier (an area, e.g. `typescript`) the runner does not claim;
    /// repeatable.
    #[arg(long, value_name = "AREA")]
    without: Vec<String>,
    /// How many transcripts replay at once.
    #[arg(long, value_name = "N", default_value_t = 4)]
    jobs: usize,
}

/// Subcommands; without one, the flags above replay transcripts.
#[derive(Subcommand, Debug)]
enum Sub {
    /// Time a runner: round trips, executions per second, spawn to first done.
    #[command(after_help = BENCH_AFTER_HELP)]
    Bench(BenchArgs),
}

/// Flags of `bench`.
#[derive(Args, Debug)]
#[command(group(ArgGroup::new("bench_target").required(true).args(["runner", "ws"])))]
struct BenchArgs {
    /// Runner command line, split like a shell would; one warm process, then one per spawn.
    #[arg(long, value_name = "\"CMD ARGS\"")]
    runner: Option<String>,
    /// WebSocket URL of a listening runner; one warm connection, then one per spawn.
    #[arg(long, value_name = "ws://ADDR")]
    ws: Option<String>,
    /// Measured trivial executions, and measured tool calls [default: 5000; --quick: 200].
    #[arg(long, value_name = "N")]
    iterations: Option<usize>,
    /// Measured spawns (or connections) to first done [default: 50; --quick: 5].
    #[arg(long, value_name = "N")]
    spawns: Option<usize>,
    /// Small counts, for smoke tests.
    #[arg(long)]
    quick: bool,
    /// Print exactly one JSON object instead of a Markdown table.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(Sub::Bench(args)) = &cli.command {
        return match bench(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("execbox-conformance bench: {e:#}");
                ExitCode::from(2)
            }
        };
    }
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

/// Runs the benchmark and prints its table or JSON object.
fn bench(args: &BenchArgs) -> Result<()> {
    let target = match (&args.runner, &args.ws) {
        (Some(line), None) => BenchTarget::Stdio(
            StdioRunner::from_command_line(line)
                .context("reading --runner")?
                .command,
        ),
        (None, Some(url)) => BenchTarget::Ws {
            url: url.clone(),
            token: std::env::var("EXECBOX_TOKEN")
                .ok()
                .filter(|t| !t.is_empty()),
        },
        _ => bail!("give exactly one of --runner and --ws"),
    };
    let mut options = if args.quick {
        BenchOptions::quick()
    } else {
        BenchOptions::default()
    };
    if let Some(n) = args.iterations {
        options.executions = n;
        options.tool_calls = n;
    }
    if let Some(n) = args.spawns {
        options.spawns = n;
    }
    let report = run_bench(&target, &options)?;
    let text = if args.json {
        report.to_json()
    } else {
        report.to_markdown()
    };
    let mut out = io::stdout().lock();
    writeln!(out, "{}", text.trim_end())?;
    out.flush()?;
    Ok(())
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
    for area in &cli.without {
        let prefix = format!("{}/", area.trim_end_matches('/'));
        transcripts.retain(|t| !t.name.starts_with(&prefix));
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
