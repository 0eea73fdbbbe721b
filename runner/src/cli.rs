//! Command-line surface of the runner, shared by `execbox-runner` and `execbox runner`.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use execbox_protocol::DEFAULT_MAX_MESSAGE_BYTES;

use crate::ceilings::Ceilings;
use crate::listen::{ChildCommand, ListenOptions};
use crate::lockdown::Lockdown;
use crate::session::SessionLimits;

/// Flags of the runner. With none, it serves one NDJSON session on stdin/stdout.
#[derive(Debug, Clone, Args)]
pub struct RunnerArgs {
    /// Serve WebSocket on ADDR (e.g. 127.0.0.1:0) instead of stdio; prints `ws://HOST:PORT` on
    /// one stdout line once bound. Each connection is one session, served by its own
    /// locked-down runner process (this program in stdio mode). A non-loopback ADDR needs a
    /// token (--token-file or EXECBOX_TOKEN) or --insecure-no-auth.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,

    /// With --listen: at most N concurrent sessions; further connections are closed after the
    /// upgrade with close code 1013 (try again later).
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub max_sessions: usize,

    /// With --listen: close a connection that has not completed its WebSocket upgrade within MS.
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    pub handshake_timeout_ms: u64,

    /// With --listen: close (1001) a session with no execution in flight and no frame from the
    /// client for MS. A client waiting on a long execution or tool call is not idle.
    #[arg(long, value_name = "MS", default_value_t = 300_000)]
    pub idle_timeout_ms: u64,

    /// With --listen: require `Authorization: Bearer TOKEN` (or the subprotocols `execbox` and
    /// `execbox.bearer.TOKEN`) on every upgrade, TOKEN being this file's content (one trailing
    /// newline trimmed). Without it, the EXECBOX_TOKEN environment variable is used if set.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,

    /// With --listen: accept upgrade requests carrying this browser `Origin`
    /// (scheme://host[:port], matched on scheme, host and port; `:*` for any port;
    /// repeatable). Requests with any other Origin header are refused with 403.
    #[arg(long, value_name = "ORIGIN")]
    pub allow_origin: Vec<String>,

    /// DANGEROUS: with --listen on a non-loopback address, serve without a token: anyone who
    /// can reach the port can run code.
    #[arg(long)]
    pub insecure_no_auth: bool,

    /// Refuse any message (line or frame) larger than N bytes, before parsing it. With --listen,
    /// passed to each session's runner; a frame over N + 4 KiB closes the session with 1009.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_MESSAGE_BYTES)]
    pub max_message_bytes: usize,

    /// Tool calls of one execution sent and not yet answered, at most; further calls wait in
    /// the sandbox (in call order, counted against its memory limit) until results arrive.
    #[arg(long, value_name = "N", default_value_t = crate::session::DEFAULT_MAX_PENDING_TOOL_CALLS as u32,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_pending_tool_calls: u32,

    /// The largest `timeoutMs` an execute may ask for; one asking more is refused with a
    /// `validation_error` naming this flag. At least the default `timeoutMs` (5000). With
    /// --listen, passed to each session's runner.
    #[arg(long, value_name = "MS", default_value_t = crate::ceilings::DEFAULT_MAX_TIMEOUT_MS)]
    pub max_timeout_ms: u64,

    /// The largest `memoryLimitBytes` (the guest's heap) an execute may ask for; one asking
    /// more is refused with a `validation_error` naming this flag. At least the default
    /// `memoryLimitBytes` (67108864). With --listen, passed to each session's runner: size it
    /// so --max-sessions guests fit the memory the runner has.
    #[arg(long, value_name = "BYTES", default_value_t = crate::ceilings::DEFAULT_MAX_MEMORY_LIMIT_BYTES)]
    pub max_memory_limit_bytes: u64,

    /// The largest `maxLogLines` an execute may ask for; one asking more is refused with a
    /// `validation_error` naming this flag. At least the default `maxLogLines` (100). With
    /// --listen, passed to each session's runner.
    #[arg(long, value_name = "N", default_value_t = crate::ceilings::DEFAULT_MAX_LOG_LINES)]
    pub max_log_lines: u64,

    /// The largest `maxLogChars` an execute may ask for (kept logs live in the runner's own
    /// memory, outside the guest's limit); one asking more is refused with a
    /// `validation_error` naming this flag. At least the default `maxLogChars` (64000). With
    /// --listen, passed to each session's runner.
    #[arg(long, value_name = "N", default_value_t = crate::ceilings::DEFAULT_MAX_LOG_CHARS)]
    pub max_log_chars: u64,

    /// DANGEROUS: serve without the OS lockdown (Landlock, seccomp, rlimits), which is otherwise
    /// installed before any guest input is read, and without which the runner refuses to start.
    /// QuickJS still confines the guest, but a bug in the engine would then give guest code
    /// the runner's full access to files, the network and process creation. Only for
    /// debugging, or where the lockdown cannot be applied (not Linux, no Landlock, no seccomp).
    /// With --listen, neither the supervisor nor the session runners lock down.
    #[arg(long)]
    pub insecure_no_sandbox: bool,

    /// With --listen: after SIGTERM (or SIGINT), let sessions run on for up to DURATION
    /// (`30s`, `500ms`, `2m`; a bare number is seconds), then cancel the executions still in
    /// flight (each gets its `timeout` done) and exit 0. A second signal ends at once.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub drain_timeout: Duration,

    /// How diagnostics on stderr are written: `text` (one line per event) or `json` (one JSON
    /// object per line, for log collectors).
    #[arg(long, value_name = "FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Test only (tests/lockdown.rs): apply the OS lockdown, try ACTION, and exit with a status
    /// saying how it went. Hidden: not an interface, and `run` does nothing else with it.
    #[doc(hidden)]
    #[arg(long, value_name = "ACTION", hide = true,
          value_parser = clap::builder::PossibleValuesParser::new(crate::lockdown::PROBES))]
    pub lockdown_probe: Option<String>,
}

/// The format of the diagnostics on stderr (`--log-format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line (tracing-subscriber's JSON formatter).
    Json,
}

impl Default for RunnerArgs {
    /// The defaults of the flags: one stdio session, locked down.
    fn default() -> RunnerArgs {
        RunnerArgs {
            listen: None,
            max_sessions: 64,
            handshake_timeout_ms: 10_000,
            idle_timeout_ms: 300_000,
            token_file: None,
            allow_origin: Vec::new(),
            insecure_no_auth: false,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            max_pending_tool_calls: crate::session::DEFAULT_MAX_PENDING_TOOL_CALLS as u32,
            max_timeout_ms: crate::ceilings::DEFAULT_MAX_TIMEOUT_MS,
            max_memory_limit_bytes: crate::ceilings::DEFAULT_MAX_MEMORY_LIMIT_BYTES,
            max_log_lines: crate::ceilings::DEFAULT_MAX_LOG_LINES,
            max_log_chars: crate::ceilings::DEFAULT_MAX_LOG_CHARS,
            insecure_no_sandbox: false,
            drain_timeout: Duration::from_secs(30),
            log_format: LogFormat::Text,
            lockdown_probe: None,
        }
    }
}

/// Runs the runner with parsed flags until its transport ends. Unless `insecure_no_sandbox`
/// is set, the process locks itself down (Landlock, seccomp and rlimits on Linux) before it
/// reads any input, and fails if it cannot.
///
/// With `--listen`, `child` says how to start the stdio runner that serves each session
/// (usually [`ChildCommand::current_exe`], plus `runner` inside `execbox`); it is not called
/// in stdio mode.
pub fn run(
    args: &RunnerArgs,
    child: impl FnOnce() -> std::io::Result<ChildCommand>,
) -> anyhow::Result<()> {
    if let Some(action) = &args.lockdown_probe {
        std::process::exit(crate::lockdown::probe(action));
    }
    let ceilings = Ceilings {
        timeout_ms: args.max_timeout_ms,
        memory_limit_bytes: args.max_memory_limit_bytes,
        max_log_lines: args.max_log_lines,
        max_log_chars: args.max_log_chars,
    };
    ceilings.check_flags().map_err(anyhow::Error::msg)?;
    let limits = SessionLimits {
        max_message_bytes: args.max_message_bytes,
        max_pending_tool_calls: args.max_pending_tool_calls as usize,
        ceilings,
    };
    let lockdown = if args.insecure_no_sandbox {
        tracing::warn!(
            "--insecure-no-sandbox: running WITHOUT the OS lockdown; an engine bug would give \
             guest code this process's full access to files, network and processes"
        );
        Lockdown::Off
    } else {
        Lockdown::Enforce
    };
    match &args.listen {
        None => Ok(crate::stdio::serve(limits, lockdown)?),
        Some(addr) => {
            let child =
                child().map_err(|e| anyhow::anyhow!("cannot locate the runner program: {e}"))?;
            let options = ListenOptions {
                max_sessions: args.max_sessions,
                max_message_bytes: args.max_message_bytes,
                max_pending_tool_calls: args.max_pending_tool_calls,
                ceilings,
                handshake_timeout: Duration::from_millis(args.handshake_timeout_ms),
                idle_timeout: Duration::from_millis(args.idle_timeout_ms),
                auth: crate::listen::Auth {
                    token: crate::listen::load_token(args.token_file.as_deref())?,
                    allowed_origins: execbox_http::Origins::parse(&args.allow_origin)
                        .map_err(|e| anyhow::anyhow!("--allow-origin {e}"))?,
                },
                insecure_no_auth: args.insecure_no_auth,
                insecure_no_sandbox: args.insecure_no_sandbox,
                drain_timeout: args.drain_timeout,
            };
            crate::listen::serve(addr, options, child, lockdown, |bound| {
                let mut stdout = std::io::stdout().lock();
                let _ = writeln!(stdout, "ws://{bound}");
                let _ = stdout.flush();
                tracing::info!("listening on ws://{bound}");
            })
        }
    }
}

/// Sends `tracing` output to stderr in `format`, filtered by `RUST_LOG` (default: warnings,
/// and with `--listen` also the supervisor's info lines: one per session, the drain).
pub fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,execbox_runner::listen=info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
        LogFormat::Json => builder.json().with_ansi(false).try_init(),
    };
}

/// A duration flag: `500ms`, `30s`, `2m`, or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let n: u64 = number
        .parse()
        .map_err(|_| DurationError::NotADuration(text.to_owned()))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n.saturating_mul(60))),
        _ => Err(DurationError::UnknownUnit {
            unit: unit.to_owned(),
            text: text.to_owned(),
        }),
    }
}

/// Why a duration flag does not parse.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// No leading number.
    #[error("expected a duration like 30s, 500ms or 2m, got {0:?}")]
    NotADuration(String),
    /// A number with a unit other than `ms`, `s` or `m`.
    #[error("unknown unit {unit:?} in {text:?}: use ms, s or m (e.g. 30s, 500ms, 2m)")]
    UnknownUnit {
        /// The unit given.
        unit: String,
        /// The whole flag value.
        text: String,
    },
}

#[cfg(test)]
mod tests {
    use super::{parse_duration, RunnerArgs};
    use clap::Parser;
    use std::time::Duration;

    #[test]
    fn default_args_are_what_no_flags_parse_to() {
        // execbox-runner skips clap when it has no arguments, using `RunnerArgs::default()`.
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            runner: RunnerArgs,
        }
        let parsed = Cli::try_parse_from(["execbox-runner"]).unwrap().runner;
        assert_eq!(
            format!("{parsed:?}"),
            format!("{:?}", RunnerArgs::default())
        );
    }

    #[test]
    fn durations_read_with_their_unit() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("2h")
            .unwrap_err()
            .to_string()
            .contains("unknown unit"));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("").is_err());
    }
}
