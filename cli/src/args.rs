//! The flags of `execbox` and its subcommands.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use execbox_host::{RuntimeOptions, DEFAULT_MAX_CONCURRENT_TOOL_CALLS};
use execbox_policy::{EnforcementOptions, StoreLocation};

use crate::logging::{self, LogFormat};
use crate::size::parse_size;

/// Run model-written JavaScript in a sandboxed QuickJS runner, with tools the host owns.
#[derive(Debug, Parser)]
#[command(
    name = "execbox",
    version,
    after_help = "Examples:\n  \
        execbox run examples/hello.js --tools examples/tools.yaml\n  \
        echo 'await text.word_count({ text: \"a b c\" })' | execbox run - --tools examples/tools.yaml\n  \
        execbox types --tools examples/tools.yaml\n  \
        execbox check --tools examples/tools.yaml\n  \
        execbox runner --listen 127.0.0.1:7070 &  execbox run script.js --runner ws://127.0.0.1:7070\n  \
        EXECBOX_TOKEN=... execbox run script.js --runner ws://10.0.0.5:7070   # a token-protected runner\n  \
        execbox completions bash > ~/.local/share/bash-completion/completions/execbox\n\n\
        Exit status: 0 when the execution succeeded, 1 when it failed, 2 on bad usage or \
        configuration, 130 when cancelled by Ctrl-C, 143 when stopped by SIGTERM.\n\n\
        Environment: RUST_LOG filters diagnostics on stderr (e.g. RUST_LOG=execbox_host=debug; \
        it overrides -v/-q), EXECBOX_TOKEN is the bearer token for --runner, EXECBOX_RUNNER \
        is the runner binary library users' executors start."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a script; print its result as JSON on stdout and its logs on stderr.
    #[command(after_help = "Examples:\n  \
        execbox run examples/hello.js --tools examples/tools.yaml\n  \
        execbox run - --timeout-ms 500 <<< 'while (true) {}'      # fails with timeout, exit 1\n  \
        execbox run examples/hello.js --tools examples/tools.yaml --json\n\n\
        Ctrl-C cancels the execution (the guest is stopped, its tool calls are cancelled, exit \
        130); a second Ctrl-C exits at once. SIGTERM stops the execution and kills its tool \
        processes before exiting (143).")]
    Run(RunArgs),
    /// Print the TypeScript declarations of a tools file (for prompts).
    #[command(after_help = "Examples:\n  \
        execbox types --tools examples/tools.yaml\n  \
        execbox types --tools examples/tools.yaml --prompt --timeout-ms 10000")]
    Types(TypesArgs),
    /// Check a tools file without running anything: its format, and that every command
    /// exists and is executable; print a one-line summary.
    #[command(after_help = "Examples:\n  \
        execbox check --tools examples/tools.yaml\n\n\
        Exit status: 0 when the file is valid, 2 (with the error on stderr) when not.")]
    Check(CheckArgs),
    /// Serve code mode to any MCP client: execute_code and search_tools over upstream MCP
    /// servers and a tools file.
    #[command(after_help = "Examples:\n  \
        execbox mcp --config mcp.json                       # stdio, for Claude Desktop, Cursor...\n  \
        execbox mcp --config mcp.json --tools tools.yaml\n  \
        execbox mcp --config mcp.json --http 127.0.0.1:8080  # streamable HTTP at /mcp\n  \
        EXECBOX_TOKEN=... execbox mcp --config mcp.json --http 0.0.0.0:8080 --allow-host mcp.internal\n\n\
        Each server of mcp.json ({\"mcpServers\": {\"NAME\": {\"command\": ...} | {\"url\": ...}}}) \
        becomes a namespace of the sandbox; a server that fails is reported on stderr and in \
        execute_code's description, and the others keep working. Exit status: 0 when the \
        client closed the connection, 2 on bad usage or configuration, 130 after SIGINT, 143 \
        after SIGTERM (upstream processes are stopped first).")]
    Mcp(McpArgs),
    /// Capabilities: saved programs and their executors (list, check, show, run).
    #[command(subcommand)]
    Capabilities(CapabilitiesCommand),
    /// Executions of capabilities, as recorded in the state database.
    #[command(subcommand)]
    Executions(ExecutionsCommand),
    /// Serve the capabilities HTTP API (JSON, Server-Sent Events) on ADDR.
    #[command(after_help = "Examples:\n  \
        execbox serve --listen 127.0.0.1:0 --project examples/capabilities   # prints http://127.0.0.1:PORT\n  \
        execbox serve --listen 0.0.0.0:8080 --policy policy.yaml              # bearer tokens of the policy\n\n\
        Beyond loopback it refuses to start unless the policy gives principals bearer tokens \
        (token_sha256). SIGTERM or Ctrl-C stops every running execution, then exits 0.")]
    Serve(ServeArgs),
    /// Be the runner itself (the same code as `execbox-runner`).
    #[command(after_help = "Examples:\n  \
        execbox runner                          # NDJSON on stdin/stdout\n  \
        execbox runner --listen 127.0.0.1:0     # WebSocket; prints ws://127.0.0.1:PORT")]
    Runner(execbox_runner::RunnerArgs),
    /// Print a shell completion script.
    #[command(after_help = "Examples:\n  \
        execbox completions bash > ~/.local/share/bash-completion/completions/execbox\n  \
        execbox completions zsh > ~/.zfunc/_execbox\n  \
        execbox completions fish > ~/.config/fish/completions/execbox.fish")]
    Completions(CompletionsArgs),
}

/// How much `execbox` itself says on stderr.
#[derive(Debug, Args)]
pub struct Diagnostics {
    /// Say more on stderr: -v info, -vv debug (with runner and tool lines), -vvv trace.
    /// RUST_LOG, when set, overrides it.
    #[arg(short, long, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Say only errors on stderr (the guest's logs are still printed).
    #[arg(short, long, conflicts_with = "verbose")]
    pub quiet: bool,
    /// The format of diagnostic lines on stderr.
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t)]
    pub log_format: LogFormat,
}

impl Diagnostics {
    /// Installs the log subscriber these flags ask for, with the export of traces when given.
    pub fn init(&self, traces: Option<crate::telemetry::TracesLayer>) {
        logging::init(self.verbose, self.quiet, self.log_format, traces);
    }

    /// The `RUST_LOG` to give a child runner so it says as much as we do, unless `RUST_LOG`
    /// is set already (the child inherits it).
    pub fn runner_filter(&self) -> Option<&'static str> {
        if std::env::var_os("RUST_LOG").is_some() {
            return None;
        }
        Some(logging::level(self.verbose, self.quiet))
    }

    /// This binary as a runner (`execbox runner`), saying as much as we do.
    pub fn runner_command(&self) -> anyhow::Result<execbox_host::RunnerCommand> {
        use anyhow::Context as _;
        let exe = std::env::current_exe().context("cannot locate the execbox binary")?;
        let mut runner = execbox_host::RunnerCommand::new(exe).arg("runner");
        if let Some(filter) = self.runner_filter() {
            runner = runner.env("RUST_LOG", filter);
        }
        Ok(runner)
    }
}

/// Who runs the program and under which policy (see docs/policy.md).
#[derive(Debug, Args)]
pub struct PolicyArgs {
    /// The policy file (YAML): who holds which permissions, rate-limit state, audit log.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Run as this principal of the policy file; the tools it may not call do not exist.
    #[arg(long, value_name = "NAME", requires = "policy")]
    pub principal: Option<String>,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The tools file (YAML).
    #[arg(long, value_name = "FILE")]
    pub tools: PathBuf,
    #[command(flatten)]
    pub diagnostics: Diagnostics,
}

#[derive(Debug, Args)]
pub struct TypesArgs {
    /// The tools file (YAML).
    #[arg(long, value_name = "FILE")]
    pub tools: PathBuf,
    /// Print a prompt-ready preamble for a model first: how a program runs, what is missing,
    /// the error shape and the limits; the declarations then carry each tool's error codes.
    #[arg(long)]
    pub prompt: bool,
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// With --prompt: the wall-clock limit to state, in milliseconds (as `run --timeout-ms`).
    #[arg(long, value_name = "MS", default_value_t = RuntimeOptions::DEFAULT_TIMEOUT_MS, requires = "prompt")]
    pub timeout_ms: u64,
    /// With --prompt: the memory limit to state (as `run --memory-limit-bytes`).
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = parse_size, requires = "prompt")]
    pub memory_limit_bytes: u64,
    #[command(flatten)]
    pub diagnostics: Diagnostics,
}

/// `--unawaited`: what becomes of tool calls a program did not await.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum UnawaitedArg {
    /// They finish within the time limit before the result is returned.
    Finish,
    /// They are cancelled when the program returns.
    Cancel,
}

impl From<UnawaitedArg> for execbox_host::Unawaited {
    fn from(arg: UnawaitedArg) -> Self {
        match arg {
            UnawaitedArg::Finish => execbox_host::Unawaited::Finish,
            UnawaitedArg::Cancel => execbox_host::Unawaited::Cancel,
        }
    }
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The script to run, or `-` for stdin.
    #[arg(value_name = "FILE|-")]
    pub script: String,
    /// Tools file (YAML) declaring providers: command tools, OpenAPI documents.
    #[arg(long, value_name = "FILE")]
    pub tools: Option<PathBuf>,
    /// Wall-clock limit in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = RuntimeOptions::DEFAULT_TIMEOUT_MS)]
    pub timeout_ms: u64,
    /// Memory limit of the guest's runtime: bytes, or with a unit (64MiB, 512KiB, 1GiB).
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = parse_size)]
    pub memory_limit_bytes: u64,
    /// Keep at most this many log lines.
    #[arg(long, value_name = "N", default_value_t = RuntimeOptions::DEFAULT_MAX_LOG_LINES)]
    pub max_log_lines: u64,
    /// Keep at most this many log characters (UTF-16 units).
    #[arg(long, value_name = "N", default_value_t = RuntimeOptions::DEFAULT_MAX_LOG_CHARS)]
    pub max_log_chars: u64,
    /// Run at most this many tool calls at once; the others wait in arrival order.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CONCURRENT_TOOL_CALLS as u32, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent_tool_calls: u32,
    /// What becomes of tool calls the program started but did not await when it returned:
    /// `finish` lets them end (within the time limit) before the result is printed, `cancel`
    /// stops them. Either way an `[execbox]` log line names them.
    #[arg(long, value_enum, value_name = "WHAT", default_value_t = UnawaitedArg::Finish)]
    pub unawaited: UnawaitedArg,
    /// Use the runner at this WebSocket address instead of spawning one (`ws://` or `wss://`;
    /// a Service in front of many runners works: turned-away sessions are retried).
    #[arg(long, value_name = "ws://ADDR")]
    pub runner: Option<String>,
    /// With a `wss://` --runner: also trust the CA certificates in this PEM file.
    #[arg(long, value_name = "FILE", requires = "runner")]
    pub runner_ca: Option<PathBuf>,
    /// With --runner: send this file's content (one trailing newline trimmed) as the bearer
    /// token; without it, the EXECBOX_TOKEN environment variable is used if set.
    #[arg(long, value_name = "FILE", requires = "runner")]
    pub token_file: Option<PathBuf>,
    /// Print the whole `done` envelope as JSON on stdout, whatever the outcome.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub enforce: EnforceArgs,
    #[command(flatten)]
    pub diagnostics: Diagnostics,
}

/// The policy and everything that enforces it: principal, audit log, rate-limit state,
/// approvals.
#[derive(Debug, Args)]
pub struct EnforceArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Write the audit log here, overriding the policy file's `audit.file`: a file (JSON
    /// lines), or a postgres:// URL (one row per event in its `audit_events` table).
    #[arg(long, value_name = "FILE|URL", value_parser = location())]
    pub audit_log: Option<StoreLocation>,
    /// Keep rate-limit counters in this SQLite file, shared with the processes of this
    /// machine using it, or in the PostgreSQL database of a postgres:// URL, shared exactly
    /// with every process and replica using it (overrides the policy file's `state`); without
    /// either, counters last as long as the process. A database that is down refuses
    /// rate-limited calls until it is back.
    #[arg(long, value_name = "FILE|URL", value_parser = location())]
    pub state: Option<StoreLocation>,
    /// Approve every call of a tool that requires approval, without asking.
    #[arg(long)]
    pub approve_all: bool,
}

/// A store location flag: a `postgres://` URL (checked now, its password never shown), else
/// a file path.
fn location() -> LocationParser {
    LocationParser
}

/// Parses a store location flag. Not clap's `try_map`, whose error repeats the value as
/// given: a URL's password with it.
#[derive(Clone, Copy, Debug)]
pub struct LocationParser;

impl clap::builder::TypedValueParser for LocationParser {
    type Value = StoreLocation;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<StoreLocation, clap::Error> {
        StoreLocation::from_path(std::path::Path::new(value)).map_err(|e| {
            let flag = arg
                .map(|a| a.to_string())
                .unwrap_or_else(|| "the store".into());
            clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                format!("{flag}: {e}\n"),
            )
            .with_cmd(cmd)
        })
    }
}

impl EnforceArgs {
    /// The flags as the policy crate takes them.
    pub fn options(&self) -> EnforcementOptions {
        let mut options = self.policy.options();
        options.audit_log = self.audit_log.clone();
        options.state = self.state.clone();
        options.approve_all = self.approve_all;
        options
    }
}

impl PolicyArgs {
    /// The policy file and the principal, as the policy crate takes them.
    pub fn options(&self) -> EnforcementOptions {
        let mut options = EnforcementOptions::default();
        options.policy = self.policy.clone();
        options.principal = self.principal.clone();
        options
    }
}

impl CapabilityArgs {
    /// The policy file, the caller and the audit log, as the policy crate takes them.
    pub fn enforcement_options(&self) -> EnforcementOptions {
        let mut options = self.policy.options();
        options.audit_log = self.audit_log.clone();
        options.state = self.state.clone();
        options
    }
}

/// Where capabilities and executions are, who asks, and the audit log.
#[derive(Debug, Args)]
pub struct CapabilityArgs {
    /// The project folder (holding `.execbox/`); by default the first `.execbox/` found
    /// walking up from the working directory.
    #[arg(long, value_name = "DIR")]
    pub project: Option<PathBuf>,
    /// The state database of executions: a SQLite file, or a postgres:// URL that
    /// `execbox serve` replicas share; by default `.execbox/state.db` of the project, else
    /// `state.db` of the global root ($EXECBOX_HOME, else $XDG_CONFIG_HOME/execbox, else
    /// ~/.config/execbox).
    #[arg(long, value_name = "FILE|URL")]
    pub db: Option<PathBuf>,
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Write the audit log here, overriding the policy file's `audit.file`: a file (JSON
    /// lines), or a postgres:// URL (one row per event in its `audit_events` table).
    #[arg(long, value_name = "FILE|URL", value_parser = location())]
    pub audit_log: Option<StoreLocation>,
    /// Keep the rate-limit counters of scripts' tool calls here (overrides the policy file's
    /// `state`): a SQLite file, or a postgres:// URL that replicas share, so that a limit holds
    /// across all of them; without either, counters last as long as the process.
    #[arg(long, value_name = "FILE|URL", value_parser = location())]
    pub state: Option<StoreLocation>,
    #[command(flatten)]
    pub diagnostics: Diagnostics,
}

#[derive(Debug, Subcommand)]
pub enum CapabilitiesCommand {
    /// List the capabilities and executors of the three roots (project, global, built-in).
    #[command(after_help = "Examples:\n  \
        execbox capabilities list\n  \
        execbox capabilities list --json --project examples/capabilities")]
    List {
        /// Print JSON: {\"capabilities\": [...], \"executors\": [...]}.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        common: CapabilityArgs,
    },
    /// Check every capability.yaml and executor.yaml; list what is invalid and why.
    #[command(
        after_help = "Exit status: 0 when every configuration is valid, 2 when some are not \
        (each is listed with INVALID_CAPABILITY_CONFIG or INVALID_EXECUTOR_CONFIG)."
    )]
    Check {
        /// Print JSON: {\"ok\": bool, \"issues\": [{code, path, source, message}]}.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        common: CapabilityArgs,
    },
    /// Show one capability (as JSON): its schemas, permissions, folder, source and executor.
    Show {
        /// The capability's name.
        name: String,
        #[command(flatten)]
        common: CapabilityArgs,
    },
    /// Start a capability, wait for it, print its result as JSON.
    #[command(after_help = "Examples:\n  \
        execbox capabilities run word-stats --params '{\"text\": \"a b c\"}' --project examples/capabilities\n\n\
        Exit status: 0 when it completed, 1 when it failed, timed out, was stopped or refused \
        (the code and message on stderr), 2 on bad usage or configuration, 130 after Ctrl-C \
        and 143 after SIGTERM (each stops it first).")]
    Run {
        /// The capability's name.
        name: String,
        /// Require this type.
        #[arg(long = "type", value_name = "TYPE")]
        capability_type: Option<String>,
        /// The params, as JSON (checked against its input_schema).
        #[arg(long, value_name = "JSON")]
        params: Option<String>,
        /// Time limit in milliseconds (default: the capability's timeout_ms).
        #[arg(long, value_name = "MS")]
        timeout_ms: Option<u64>,
        /// The parent id (an agent's id, or an execution's).
        #[arg(long, value_name = "ID")]
        parent: Option<String>,
        /// Print the whole outcome as JSON ({success, executionId, status, result, ...}).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        common: CapabilityArgs,
    },
}

impl CapabilitiesCommand {
    /// The flags every subcommand has.
    pub fn common(&self) -> &CapabilityArgs {
        match self {
            CapabilitiesCommand::List { common, .. }
            | CapabilitiesCommand::Check { common, .. }
            | CapabilitiesCommand::Show { common, .. }
            | CapabilitiesCommand::Run { common, .. } => common,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum ExecutionsCommand {
    /// List executions, newest first.
    #[command(after_help = "Examples:\n  \
        execbox executions list --status running\n  \
        execbox executions list --parent cap_1763850000000_1a2b3c4d --json")]
    List {
        /// Only this status (starting, running, awaiting_approval, completed, failed, timeout,
        /// stopping, stopped).
        #[arg(long, value_name = "STATUS")]
        status: Option<execbox_capabilities::ExecutionStatus>,
        /// Only children of this parent.
        #[arg(long, value_name = "ID")]
        parent: Option<String>,
        /// Only executions of this capability.
        #[arg(long, value_name = "NAME")]
        capability: Option<String>,
        /// At most this many.
        #[arg(long, value_name = "N", default_value_t = 100)]
        limit: u32,
        /// Print JSON: an array of execution records.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        common: CapabilityArgs,
    },
    /// Show one execution (as JSON) with its status history.
    Show {
        /// The execution id.
        id: String,
        #[command(flatten)]
        common: CapabilityArgs,
    },
    /// Approve the call a paused execution waits on: it resumes here, from the start, its
    /// earlier tool calls answered from its ledger, runs the call, and goes on to its end
    /// (or its next pause). Prints its result as `capabilities run` does.
    #[command(after_help = "Examples:\n  \
        execbox executions list --status awaiting_approval\n  \
        execbox executions approve cap_1763850000000_1a2b3c4d --policy policy.yaml --principal ops\n  \
        execbox executions approve cap_1763850000000_1a2b3c4d --call 2   # in a script: that call only\n\n\
        It shows the call (its number, tool and input) and decides that call only: with a \
        terminal you confirm it, without one --call N must name it. A decision for another call \
        than the one waiting is refused and decides nothing.\n\n\
        The approver is --principal (the policy's default principal without it): it must hold \
        the policy's approve permission (executions:approve unless `approvals.permission` says \
        otherwise) and, unless `approvals.self_approval` is true, must not have started the \
        execution.\n\n\
        Exit status: 0 when it completed, 1 when it failed, paused again, or the approval was \
        refused (the code and message on stderr), 2 on bad usage or configuration.")]
    Approve {
        /// The execution id.
        id: String,
        /// The number of the call you approve (`pendingApproval.call`, shown by `executions
        /// show`): needed without a terminal; with one, the call is shown and you confirm it.
        /// Another call waiting instead is refused, and nothing is decided.
        #[arg(long, value_name = "N")]
        call: Option<u32>,
        /// Print the whole outcome as JSON ({success, executionId, status, result, ...}).
        #[arg(long)]
        json: bool,
        /// A paused `execute_code` program of `execbox mcp`: the MCP config it was served with
        /// (`--config`), whose servers approving it starts; it must be that file, unchanged.
        #[arg(long, value_name = "FILE")]
        mcp_config: Option<PathBuf>,
        /// A paused `execute_code` program of `execbox mcp`: the tools file it was served with
        /// (`--tools`); it must be that file, unchanged.
        #[arg(long, value_name = "FILE")]
        mcp_tools: Option<PathBuf>,
        #[command(flatten)]
        common: CapabilityArgs,
    },
    /// Deny the call a paused execution waits on: the execution fails with APPROVAL_DENIED
    /// and the call never runs. Prints the execution's record as JSON.
    #[command(after_help = "Examples:\n  \
        execbox executions deny cap_1763850000000_1a2b3c4d --reason 'not this customer'\n  \
        execbox executions deny cap_1763850000000_1a2b3c4d --call 2 --reason 'too much'\n\n\
        Exit status: 0 when it was denied, 1 when the denial was refused (the code and \
        message on stderr), 2 on bad usage or configuration.")]
    Deny {
        /// The execution id.
        id: String,
        /// The number of the call you deny (`pendingApproval.call`): needed without a
        /// terminal; with one, the call is shown and you confirm it.
        #[arg(long, value_name = "N")]
        call: Option<u32>,
        /// Why, kept in the execution's error (at most 2000 characters).
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
        #[command(flatten)]
        common: CapabilityArgs,
    },
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The address to listen on (`127.0.0.1:0` picks a free port); the first line on stdout
    /// is `http://ADDR` with the port bound.
    #[arg(long, value_name = "ADDR")]
    pub listen: String,
    /// Warm runner processes for script capabilities. Nested ones take a free one too, or
    /// else start an extra runner (their parent holds one while it waits), at most
    /// --max-live-per-tree per tree.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub pool: u16,
    /// At most this many executions run at once in the server, nested ones included; a start
    /// past it gets 429 TOO_MANY_EXECUTIONS.
    #[arg(long, value_name = "N", default_value_t = execbox_capabilities::DEFAULT_MAX_LIVE as u32, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_live: u32,
    /// At most this many executions run at once for one principal (anonymous callers are
    /// one), nested ones included, so no caller can take the whole server; past it, 429.
    #[arg(long, value_name = "N", default_value_t = execbox_capabilities::DEFAULT_MAX_LIVE_PER_PRINCIPAL as u32, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_live_per_principal: u32,
    /// At most this many executions run at once in one tree: an execution and the
    /// capabilities it starts (and theirs). Past it, 429, or an error of capabilities.run.
    #[arg(long, value_name = "N", default_value_t = execbox_capabilities::DEFAULT_MAX_LIVE_PER_TREE as u32, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_live_per_tree: u32,
    /// The longest time limit an execution may ask for (timeoutMs; a longer one gets 400);
    /// a capability whose timeout_ms is longer runs with this one: 500ms, 90s, 15m (at most
    /// 1440m).
    #[arg(long, value_name = "DURATION", default_value = "15m", value_parser = parse_max_timeout)]
    pub max_timeout: std::time::Duration,
    /// How long an execution may wait for a decision on a call that needs approval: past it,
    /// the call is denied with reason `expired` (audited), checked every minute: 7d, 12h,
    /// 30m.
    #[arg(long, value_name = "DURATION", default_value = "7d", value_parser = parse_pause_expiry)]
    pub pause_expiry: std::time::Duration,
    /// At most this many executions of one principal wait for approval at once; one more
    /// that reaches a call needing approval fails, saying so.
    #[arg(long, value_name = "N", default_value_t = execbox_capabilities::MAX_PAUSED_PER_PRINCIPAL as u32, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_paused_per_principal: u32,
    /// Also accept this Host (a name or name:port; repeatable). Loopback names are always
    /// accepted, and the address listened on when it is a specific one; others get 403.
    #[arg(long, value_name = "HOST")]
    pub allow_host: Vec<String>,
    /// Accept requests from this browser origin (e.g. https://app.example.com; repeatable).
    /// A request with any other Origin header gets 403.
    #[arg(long, value_name = "ORIGIN")]
    pub allow_origin: Vec<String>,
    /// This replica's name in a shared (postgres://) --db: shown in its executions' records
    /// and in their failure if it dies; by default HOST:PID.
    #[arg(long, value_name = "NAME")]
    pub replica_name: Option<String>,
    /// With a shared (postgres://) --db: at most this long after a replica dies (killed, its
    /// machine lost), another marks its running executions failed: 3s to 1h.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_replica_timeout)]
    pub replica_timeout: std::time::Duration,
    /// At most this many long requests (event streams, waits) of one principal at once
    /// (anonymous callers are one); past it, 429. Whatever the principals, long requests never
    /// take the last quarter of --max-connections, kept for short requests.
    #[arg(long, value_name = "N", default_value_t = execbox_http::DEFAULT_MAX_LONG_REQUESTS_PER_CALLER as u32, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub max_long_requests_per_principal: u32,
    #[command(flatten)]
    pub door: DoorArgs,
    #[command(flatten)]
    pub common: CapabilityArgs,
}

/// `--replica-timeout`: from 3 s (leases renewed every half second) to an hour.
fn parse_replica_timeout(text: &str) -> Result<std::time::Duration, String> {
    let duration = execbox_runner::parse_duration(text).map_err(|e| e.to_string())?;
    if duration < std::time::Duration::from_secs(3)
        || duration > std::time::Duration::from_secs(3600)
    {
        return Err(format!("expected at least 3s and at most 60m, got {text}"));
    }
    Ok(duration)
}

/// `--pause-expiry`: days (`7d`), hours (`12h`) or what `--max-timeout` takes; at least a
/// second, at most 365 days.
fn parse_pause_expiry(text: &str) -> Result<std::time::Duration, String> {
    let text = text.trim();
    let unit_secs = match text.chars().last() {
        Some('d') => Some(86_400),
        Some('h') => Some(3_600),
        _ => None,
    };
    let duration = match unit_secs {
        Some(unit) => {
            let n: u64 = text[..text.len() - 1]
                .parse()
                .map_err(|_| format!("expected a duration like 7d, 12h or 30m, got {text:?}"))?;
            std::time::Duration::from_secs(n.saturating_mul(unit))
        }
        None => execbox_runner::parse_duration(text).map_err(|e| e.to_string())?,
    };
    if duration < std::time::Duration::from_secs(1)
        || duration > std::time::Duration::from_secs(365 * 86_400)
    {
        return Err(format!("expected at least 1s and at most 365d, got {text}"));
    }
    Ok(duration)
}

/// `--max-timeout`: a duration of at least 1ms and at most the longest capability time
/// limit (24 hours).
fn parse_max_timeout(text: &str) -> Result<std::time::Duration, String> {
    let max = execbox_capabilities::MAX_CAPABILITY_TIMEOUT_MS;
    let duration = execbox_runner::parse_duration(text).map_err(|e| e.to_string())?;
    if duration.is_zero() || duration.as_millis() > u128::from(max) {
        return Err(format!(
            "expected at least 1ms and at most {}m (24 hours), got {text}",
            max / 60_000
        ));
    }
    Ok(duration)
}

impl ExecutionsCommand {
    /// The flags every subcommand has.
    pub fn common(&self) -> &CapabilityArgs {
        match self {
            ExecutionsCommand::List { common, .. }
            | ExecutionsCommand::Show { common, .. }
            | ExecutionsCommand::Approve { common, .. }
            | ExecutionsCommand::Deny { common, .. } => common,
        }
    }
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_flags_are_consistent() {
        super::Cli::command().debug_assert();
    }
}

/// `execbox mcp`: code mode for any MCP client.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct McpArgs {
    /// Sign in to (or out of) a server of mcp.json that asks for OAuth.
    #[command(subcommand)]
    pub account: Option<McpAccount>,
    /// The upstream MCP servers: a JSON file in the shape MCP clients use,
    /// {"mcpServers": {"NAME": {"command", "args", "env", "cwd"} | {"url", "headers"}}}.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// A tools file (YAML) whose providers join as more namespaces.
    #[arg(long, value_name = "FILE")]
    pub tools: Option<PathBuf>,
    /// Serve streamable HTTP on ADDR (at /mcp) instead of stdio; a non-loopback ADDR needs a
    /// token.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// With --http: the bearer token, this file's content (one trailing newline trimmed);
    /// without it, EXECBOX_TOKEN if set.
    #[arg(long, value_name = "FILE", requires = "http")]
    pub token_file: Option<PathBuf>,
    /// With --http: also accept this Host (a name or name:port; repeatable). Loopback names are
    /// always accepted, and the address given when it is a specific one.
    #[arg(long, value_name = "HOST", requires = "http")]
    pub allow_host: Vec<String>,
    /// With --http: accept requests from this browser origin (e.g. https://app.example.com:443,
    /// http://localhost:*; repeatable). Other Origin headers are refused.
    #[arg(long, value_name = "ORIGIN", requires = "http")]
    pub allow_origin: Vec<String>,
    /// Wall-clock limit of each program, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    pub timeout_ms: u64,
    /// Memory limit of each program's runtime: bytes, or with a unit (64MiB, 1GiB).
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = parse_size)]
    pub memory_limit_bytes: u64,
    /// Cut execute_code's answer at this many characters (with a marker saying so).
    #[arg(long, value_name = "N", default_value_t = 24_000, value_parser = clap::value_parser!(u64).range(100..))]
    pub max_output_chars: u64,
    /// Warm runner processes, and so programs run at once.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub runners: u32,
    /// Run at most this many tool calls of one program at once.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CONCURRENT_TOOL_CALLS as u32, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent_tool_calls: u32,
    /// How long an upstream server may take to start and list its tools, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    pub startup_timeout: u64,
    /// Where a program waits that reaches a call needing approval when its client can be
    /// asked neither in the answer (MCP 2026-07-28) nor through elicitation: it pauses as an
    /// execution `awaiting_approval` that `execbox executions approve ID` resumes. A SQLite
    /// file or a postgres:// URL; by default `.execbox/state.db` of the project, else
    /// `state.db` of the global root (opened when a program first pauses).
    #[arg(long, value_name = "FILE|URL")]
    pub db: Option<PathBuf>,
    /// The project folder (holding `.execbox/`) whose state database keeps paused programs;
    /// by default the first `.execbox/` found walking up from the working directory.
    #[arg(long, value_name = "DIR")]
    pub project: Option<PathBuf>,
    /// Refuse a call needing approval that nobody can answer now ("approval required")
    /// instead of pausing the program.
    #[arg(long, conflicts_with_all = ["db", "project"])]
    pub no_pause: bool,
    /// Who runs the programs and under which policy: upstream tools need the permission
    /// `server:tool` (`github:create_issue`, or `github:*`); approvals are asked of the MCP
    /// client's user (in the answer on MCP 2026-07-28, else through elicitation) unless
    /// --approve-all, and otherwise wait for an operator (see --db).
    #[command(flatten)]
    pub enforce: EnforceArgs,
    #[command(flatten)]
    pub door: DoorArgs,
    #[command(flatten)]
    pub diagnostics: Diagnostics,
}

/// `execbox mcp login|logout`: the OAuth sign-in of an HTTP server of mcp.json.
#[derive(Debug, Subcommand)]
pub enum McpAccount {
    /// Sign in to a server that asks for OAuth: opens $BROWSER on the authorization URL (and
    /// prints it), waits for the redirect on 127.0.0.1, and keeps the tokens in
    /// $XDG_STATE_HOME/execbox/oauth (readable by you only), refreshed by `execbox mcp` as
    /// they expire. Run it again when a call needs more access (step-up).
    Login {
        /// The server's name in mcp.json.
        name: String,
        /// The mcp.json that lists it.
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// How long to wait for the sign-in in the browser, in milliseconds.
        #[arg(long, value_name = "MS", default_value_t = 300_000, value_parser = clap::value_parser!(u64).range(1_000..))]
        timeout_ms: u64,
    },
    /// Forget the tokens of a server's sign-in.
    Logout {
        /// The server's name in mcp.json.
        name: String,
        /// The mcp.json that lists it.
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
    },
}

/// How an HTTP server treats connections (`execbox serve`, `execbox mcp --http`).
#[derive(Debug, Args)]
pub struct DoorArgs {
    /// A request head must arrive within this time of the connection opening (or of the
    /// previous response, for a kept-alive connection), or the connection is closed:
    /// 500ms, 10s, 1m.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = execbox_runner::parse_duration)]
    pub header_timeout: std::time::Duration,
    /// At most this many connections at once (fewer when the open-files limit is lower: a
    /// quarter of it, at least 128 descriptors, is kept for the rest). A new one past it
    /// closes the oldest without a request in progress (a half-sent head first, else an idle
    /// one), or is closed itself when every connection carries a request.
    #[arg(long, value_name = "N", default_value_t = execbox_http::DEFAULT_MAX_CONNECTIONS as u32, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub max_connections: u32,
}

impl DoorArgs {
    /// The flags as the front door takes them.
    pub fn options(&self) -> execbox_http::ServeOptions {
        execbox_http::ServeOptions {
            header_timeout: self.header_timeout,
            max_connections: self.max_connections as usize,
            ..execbox_http::ServeOptions::default()
        }
    }
}
