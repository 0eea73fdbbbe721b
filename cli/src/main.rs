//! `execbox`: run model-written JavaScript against tools from the command line.
//!
//! Exit status: 0 the execution succeeded, 1 it failed, 2 bad usage or configuration,
//! 130 cancelled by Ctrl-C, 143 stopped by SIGTERM. `capabilities run` exits 1 as well when
//! the start is refused; `capabilities check` exits 2 when a configuration is invalid.

mod args;
mod capabilities;
mod logging;
mod mcp_command;
mod programs;
mod run;
mod serve;
mod signals;
mod size;
mod telemetry;

use std::io::Write;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use execbox_host::{model_prompt, RuntimeOptions};

use crate::args::{CheckArgs, Cli, Command, CompletionsArgs, TypesArgs};
use crate::telemetry::Telemetry;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Before any runtime; the runner (the sandbox, whose stdout is protocol only) never
    // exports. Dropped at the end of `main`, which sends the last spans.
    let mut telemetry = match &cli.command {
        Command::Runner(_) | Command::Completions(_) => Telemetry::off(),
        _ => match Telemetry::from_env() {
            Ok(telemetry) => telemetry,
            Err(e) => {
                eprintln!("execbox: {}", report(&e));
                return ExitCode::from(2);
            }
        },
    };
    let traces = telemetry.layer();
    match &cli.command {
        Command::Runner(args) => execbox_runner::init_tracing(args.log_format),
        Command::Run(args) => args.diagnostics.init(traces),
        Command::Types(args) => args.diagnostics.init(traces),
        Command::Check(args) => args.diagnostics.init(traces),
        Command::Mcp(args) => args.diagnostics.init(traces),
        Command::Capabilities(command) => command.common().diagnostics.init(traces),
        Command::Executions(command) => command.common().diagnostics.init(traces),
        Command::Serve(args) => args.common.diagnostics.init(traces),
        Command::Completions(_) => {}
    }
    // Every tools file this process reads may declare `openapi:` providers.
    execbox_host::ToolsFile::register_kind(&execbox_openapi::OpenApiKind);
    let outcome = match cli.command {
        // With --listen, each session is served by `execbox runner` in stdio mode.
        Command::Runner(args) => execbox_runner::run(&args, || {
            execbox_runner::ChildCommand::current_exe().map(|c| c.arg("runner"))
        })
        .map(|()| ExitCode::SUCCESS),
        Command::Types(args) => types(&args),
        Command::Check(args) => check(&args),
        Command::Run(args) => run::run(args),
        Command::Mcp(args) => mcp_command::run(args),
        Command::Capabilities(command) => capabilities::capabilities(command),
        Command::Executions(command) => capabilities::executions(command),
        Command::Serve(args) => serve::serve(args),
        Command::Completions(args) => completions(&args),
    };
    match outcome {
        Ok(code) => code,
        Err(e) => {
            eprintln!("execbox: {}", report(&e));
            ExitCode::from(2)
        }
    }
}

/// An error and its causes on one line, each cause once: a cause whose text its parent
/// already includes is not repeated.
fn report(error: &anyhow::Error) -> String {
    let mut text = error.to_string();
    for cause in error.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

fn types(args: &TypesArgs) -> anyhow::Result<ExitCode> {
    let mut set = run::load_tools(Some(&args.tools))?;
    if let Some(path) = &args.policy.policy {
        // Only who sees what: no audit log or state file is opened to print declarations.
        let policy = execbox_policy::Policy::load(path)?;
        let principal = policy.principal(args.policy.principal.as_deref())?;
        let limits = std::sync::Arc::new(execbox_policy::RateLimits::in_memory());
        set = set.visible_to(&execbox_policy::Enforcement::new(principal, limits));
    }
    let text = if args.prompt {
        let options = RuntimeOptions {
            timeout_ms: args.timeout_ms,
            memory_limit_bytes: args.memory_limit_bytes,
            ..RuntimeOptions::default()
        };
        model_prompt(&set, &options)
    } else {
        format!("{}\n", set.declarations())
    };
    // A broken pipe (the reader is gone) is a clean exit.
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
    Ok(ExitCode::SUCCESS)
}

fn check(args: &CheckArgs) -> anyhow::Result<ExitCode> {
    let set = run::load_tools(Some(&args.tools))?;
    // Schemas compiled at a tool's first call (an OpenAPI provider's) are compiled now.
    set.check_schemas()
        .map_err(|e| anyhow::anyhow!("invalid tools in {}: {e}", args.tools.display()))?;
    let providers = set.manifests();
    let tools: usize = providers.iter().map(|p| p.tools.len()).sum();
    let names: Vec<&str> = providers.iter().map(|p| p.name.as_str()).collect();
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    println!(
        "{}: ok: {} provider{} ({}), {tools} tool{}",
        args.tools.display(),
        providers.len(),
        plural(providers.len()),
        names.join(", "),
        plural(tools),
    );
    Ok(ExitCode::SUCCESS)
}

fn completions(args: &CompletionsArgs) -> anyhow::Result<ExitCode> {
    let mut command = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut command, "execbox", &mut out);
    let _ = std::io::stdout().lock().write_all(&out);
    Ok(ExitCode::SUCCESS)
}
