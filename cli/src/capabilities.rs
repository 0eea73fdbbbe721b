//! `execbox capabilities` and `execbox executions`: the registry, one run, and the records.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use execbox_capabilities::{
    CallRef, CapabilityManager, Decision, ExecutionFilter, ExecutionOutcome, ExecutionStore,
    ManagerOptions, Registry, RegistryRoots, ReplicaOptions, StartRequest,
};
use execbox_host::{Executor, PoolOptions, PooledExecutor, ProcessExecutor};
use execbox_policy::StoreLocation;
use serde_json::{json, Value};

use crate::args::{CapabilitiesCommand, CapabilityArgs, ExecutionsCommand};
use crate::programs::{approvable, McpPrograms};
use crate::signals::StopSignals;

/// The roots the flags and the working directory give.
pub fn roots(common: &CapabilityArgs) -> anyhow::Result<RegistryRoots> {
    roots_of(common.project.as_deref())
}

/// [`roots`] of a `--project` flag.
pub fn roots_of(project: Option<&std::path::Path>) -> anyhow::Result<RegistryRoots> {
    let cwd = std::env::current_dir().context("cannot read the working directory")?;
    if let Some(dir) = project {
        if !dir.is_dir() {
            anyhow::bail!("--project {}: no such folder", dir.display());
        }
    }
    Ok(RegistryRoots::discover(&cwd, project))
}

/// `--db` (a file or a postgres:// URL), else the project's `.execbox/state.db`, else the
/// global root's `state.db`.
pub fn db_location(
    common: &CapabilityArgs,
    roots: &RegistryRoots,
) -> anyhow::Result<StoreLocation> {
    db_location_of(common.db.as_deref(), roots)
}

/// [`db_location`] of a `--db` flag.
pub fn db_location_of(
    db: Option<&std::path::Path>,
    roots: &RegistryRoots,
) -> anyhow::Result<StoreLocation> {
    if let Some(db) = db {
        return StoreLocation::from_path(db).context("--db");
    }
    if let Some(project) = &roots.project {
        return Ok(StoreLocation::Sqlite(project.join("state.db")));
    }
    match &roots.global {
        Some(global) => Ok(StoreLocation::Sqlite(global.join("state.db"))),
        None => anyhow::bail!(
            "no project (.execbox/ in this folder or above) and no global root ($EXECBOX_HOME, \
             $XDG_CONFIG_HOME and $HOME are unset): pass --db FILE or --project DIR"
        ),
    }
}

/// A manager over the flags' roots and database, run as `options` say: `pool` warm runners
/// for scripts (a fresh process each when 0), which nested scripts share without waiting
/// (a free pooled runner, else an extra one; see `PooledExecutor::overflowing`).
pub fn manager(
    common: &CapabilityArgs,
    options: ManagerOptions,
    pool: usize,
    replica: &ReplicaOptions,
) -> anyhow::Result<CapabilityManager> {
    let roots = roots(common)?;
    let db = db_location(common, &roots)?;
    let store = ExecutionStore::open_at(&db, replica)?;
    let runner = common.diagnostics.runner_command()?;
    let (executor, nested): (Arc<dyn Executor>, Arc<dyn Executor>) = if pool == 0 {
        let fresh: Arc<dyn Executor> = Arc::new(ProcessExecutor::new(runner)?);
        (fresh.clone(), fresh)
    } else {
        let pooled = PooledExecutor::new(
            runner,
            PoolOptions {
                size: pool,
                ..PoolOptions::default()
            },
        )?;
        let nested = Arc::new(pooled.overflowing());
        (Arc::new(pooled), nested)
    };
    Ok(CapabilityManager::new(
        Registry::load(roots),
        store,
        executor,
        ManagerOptions {
            nested_executor: Some(nested),
            ..options
        },
    ))
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// Writes `text` to stdout; a broken pipe is a clean exit.
fn out(text: &str) {
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

fn pretty(value: &impl serde::Serialize) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| "null".into()) + "\n"
}

fn one_line(text: Option<&str>) -> String {
    text.unwrap_or("").lines().next().unwrap_or("").to_string()
}

pub fn capabilities(command: CapabilitiesCommand) -> anyhow::Result<ExitCode> {
    match command {
        CapabilitiesCommand::List { json, common } => {
            let registry = Registry::load(roots(&common)?);
            let capabilities = registry.capabilities();
            let executors = registry.executors();
            if json {
                out(&pretty(
                    &json!({"capabilities": capabilities, "executors": executors}),
                ));
                return Ok(ExitCode::SUCCESS);
            }
            let mut text = String::from("CAPABILITY\tTYPE\tSOURCE\tEXECUTOR\tDESCRIPTION\n");
            for c in &capabilities {
                text.push_str(&format!(
                    "{}\t{}\t{}\t{}\t{}\n",
                    c.name,
                    c.capability_type,
                    c.source.as_str(),
                    c.executor.as_deref().unwrap_or("(none)"),
                    one_line(c.description.as_deref())
                ));
            }
            text.push_str("\nEXECUTOR\tTYPES\tSOURCE\tCOMMAND\n");
            for e in &executors {
                text.push_str(&format!(
                    "{}\t{}\t{}\t{}\n",
                    e.name,
                    e.active_types.join(","),
                    e.source.as_str(),
                    e.command
                        .as_ref()
                        .map(|c| c.display().to_string())
                        .unwrap_or_else(|| "(built in)".into())
                ));
            }
            let skipped = registry.issues().len();
            if skipped > 0 {
                text.push_str(&format!(
                    "\n{skipped} invalid configuration{} skipped; `execbox capabilities check` says why\n",
                    if skipped == 1 { "" } else { "s" }
                ));
            }
            out(&text);
            Ok(ExitCode::SUCCESS)
        }
        CapabilitiesCommand::Check { json, common } => {
            let registry = Registry::load(roots(&common)?);
            let issues = registry.issues();
            if json {
                out(&pretty(&json!({"ok": issues.is_empty(), "issues": issues})));
            } else {
                let mut text = String::new();
                for i in issues {
                    text.push_str(&format!(
                        "{}: {} ({}): {}\n",
                        i.code,
                        i.path.display(),
                        i.source.as_str(),
                        i.message
                    ));
                }
                text.push_str(&format!(
                    "{} capabilities and {} executors valid, {} invalid\n",
                    registry.capabilities().len(),
                    registry.executors().len(),
                    issues.len()
                ));
                out(&text);
            }
            Ok(if issues.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            })
        }
        CapabilitiesCommand::Show { name, common } => {
            let registry = Registry::load(roots(&common)?);
            let Some(capability) = registry.capability(&name) else {
                let known: Vec<String> = registry
                    .capabilities()
                    .into_iter()
                    .map(|c| c.name)
                    .collect();
                anyhow::bail!(
                    "CAPABILITY_NOT_FOUND: no capability `{name}`; the registry has {}",
                    if known.is_empty() {
                        "none".into()
                    } else {
                        known.join(", ")
                    }
                );
            };
            out(&pretty(&capability));
            Ok(ExitCode::SUCCESS)
        }
        CapabilitiesCommand::Run {
            name,
            capability_type,
            params,
            timeout_ms,
            parent,
            json,
            common,
        } => {
            let params: Value = match &params {
                None => Value::Null,
                Some(text) => serde_json::from_str(text)
                    .with_context(|| format!("--params is not JSON: {text:?}; pass e.g. --params '{{\"repo\": \"a/b\"}}'"))?,
            };
            let enforcement = common.enforcement_options().open()?;
            let principal = enforcement
                .policy()
                .is_some()
                .then(|| enforcement.principal().clone());
            let runtime = runtime()?;
            runtime.block_on(async move {
                let options = ManagerOptions {
                    enforcement,
                    ..ManagerOptions::default()
                };
                let manager = manager(&common, options, 0, &ReplicaOptions::default())?;
                let request = StartRequest {
                    capability: name,
                    capability_type,
                    params,
                    timeout_ms,
                    parent_id: parent,
                };
                let mut signals = StopSignals::new();
                let id = match manager.start(request, principal).await {
                    Ok(id) => id,
                    Err(e) => {
                        eprintln!("execbox: {}: {}", e.code, e.message);
                        return Ok(ExitCode::from(1));
                    }
                };
                wait_and_report(&manager, &id, &mut signals, json).await
            })
        }
    }
}

pub fn executions(command: ExecutionsCommand) -> anyhow::Result<ExitCode> {
    match command {
        ExecutionsCommand::List {
            status,
            parent,
            capability,
            limit,
            json,
            common,
        } => {
            let store = ExecutionStore::open_reader(&db_location(&common, &roots(&common)?)?)?;
            let records = block_on(store.list(&ExecutionFilter {
                status,
                parent_id: parent,
                capability,
                principal: None,
                limit: Some(limit),
            }))?;
            if json {
                out(&pretty(&records));
                return Ok(ExitCode::SUCCESS);
            }
            let mut text = String::from("EXECUTION\tSTATUS\tCAPABILITY\tPARENT\tSTARTED\n");
            for r in &records {
                text.push_str(&format!(
                    "{}\t{}\t{}\t{}\t{}\n",
                    r.execution_id,
                    r.status,
                    r.capability,
                    r.parent_id.as_deref().unwrap_or("-"),
                    rfc3339(r.created_ms)
                ));
            }
            out(&text);
            Ok(ExitCode::SUCCESS)
        }
        ExecutionsCommand::Show { id, common } => {
            let store = ExecutionStore::open_reader(&db_location(&common, &roots(&common)?)?)?;
            let Some(record) = block_on(store.get(&id))? else {
                anyhow::bail!("EXECUTION_NOT_FOUND: no execution `{id}` in {}; `execbox executions list` shows the known ones", store.location());
            };
            let mut value = serde_json::to_value(&record)?;
            value["history"] = serde_json::to_value(block_on(store.history(&id))?)?;
            out(&pretty(&value));
            Ok(ExitCode::SUCCESS)
        }
        ExecutionsCommand::Approve {
            id,
            call,
            json,
            mcp_config,
            mcp_tools,
            common,
        } => decide(id, call, None, json, (mcp_config, mcp_tools), common),
        ExecutionsCommand::Deny {
            id,
            call,
            reason,
            common,
        } => {
            if reason.as_ref().is_some_and(|r| r.chars().count() > 2000) {
                anyhow::bail!("--reason is longer than 2000 characters; say it shorter");
            }
            decide(id, call, Some(reason), true, (None, None), common)
        }
    }
}

/// `executions approve` (`deny` is `Some(reason)`): decides as the flags' principal; an
/// approved execution resumes in this process and is waited for, and its outcome printed as
/// `capabilities run` prints one; a denied one's record is printed. A paused `execute_code`
/// program of `execbox mcp` resumes with the MCP config and tools file the approver named
/// (`mcp`), which must be the ones it was served with.
fn decide(
    id: String,
    call: Option<u32>,
    deny: Option<Option<String>>,
    json: bool,
    mcp: (Option<PathBuf>, Option<PathBuf>),
    common: CapabilityArgs,
) -> anyhow::Result<ExitCode> {
    let enforcement = common.enforcement_options().open()?;
    let principal = enforcement
        .policy()
        .is_some()
        .then(|| enforcement.principal().clone());
    let runtime = runtime()?;
    runtime.block_on(async move {
        let (config, tools) = mcp;
        let named_files = (config.clone(), tools.clone());
        let programs = McpPrograms::new(enforcement.policy().cloned(), config, tools);
        let options = ManagerOptions {
            enforcement,
            programs: Some(Arc::new(programs)),
            ..ManagerOptions::default()
        };
        let manager = manager(&common, options, 0, &ReplicaOptions::default())?;
        let decision = match &deny {
            None => Decision::Approve,
            Some(reason) => Decision::Deny {
                reason: reason.clone(),
            },
        };
        // A paused program of `execbox mcp` needs the files it was served with: without
        // them (or with others) approving it is a usage error, and it stays waiting.
        if deny.is_none() {
            if let Ok(record) = manager.get(&id).await {
                if let Err(message) =
                    approvable(&record, named_files.0.as_ref(), named_files.1.as_ref())
                {
                    manager.store().close().await;
                    anyhow::bail!(message);
                }
            }
        }
        let named = match named_call(&manager, &id, call, &decision).await {
            Ok(Some(named)) => named,
            Ok(None) => {
                manager.store().close().await;
                eprintln!("execbox: nothing decided");
                return Ok(ExitCode::from(1));
            }
            Err(e) => {
                manager.store().close().await;
                return Err(e);
            }
        };
        let record = match manager.decide(&id, &named, decision, principal).await {
            Ok(record) => record,
            Err(e) => {
                manager.store().close().await;
                eprintln!("execbox: {}: {}", e.code, e.message);
                return Ok(ExitCode::from(1));
            }
        };
        if deny.is_some() {
            manager.store().close().await;
            out(&pretty(&record));
            return Ok(ExitCode::SUCCESS);
        }
        let mut signals = StopSignals::new();
        wait_and_report(&manager, &id, &mut signals, json).await
    })
}

/// The call an approver decides: the one execution `id` waits on is shown on stderr (its
/// number, tool and input, escaped, a long one by both ends, and its input's SHA-256); then
/// `--call N` names it, or, on a terminal, the approver confirms that call (`Ok(None)`: they
/// did not). Without a terminal and without `--call`, nothing is decided.
async fn named_call(
    manager: &CapabilityManager,
    id: &str,
    call: Option<u32>,
    decision: &Decision,
) -> anyhow::Result<Option<CallRef>> {
    use std::io::IsTerminal as _;
    let verb = if decision.approves() {
        "approve"
    } else {
        "deny"
    };
    let record = match manager.get(id).await {
        Ok(record) => record,
        Err(e) => anyhow::bail!("{}: {}", e.code, e.message),
    };
    let Some(pending) = record.pending_approval.as_ref() else {
        // Nothing waits: the decision is still sent, so that a retry of one taken is answered
        // as the execution is, and anything else is refused with the status.
        return Ok(call.map(CallRef::number).or(Some(CallRef::number(0))));
    };
    eprintln!(
        "execbox: {id} waits on call {} of {}, with input (SHA-256 {}):\n{}",
        pending.call,
        pending.tool,
        pending.input_sha256,
        execbox_policy::shown_input(&pending.input, SHOWN_INPUT_CHARS)
    );
    if let Some(n) = call {
        // Named by number only: the input shown above is the one the store holds for that
        // number, and the store takes the execution only while that call waits.
        return Ok(Some(CallRef::number(n)));
    }
    if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
        anyhow::bail!(
            "name the call you {verb} with --call {n} (the call shown above): without a terminal \
             to confirm it on, `execbox executions {verb}` decides only a call it is told; a \
             call other than the one waiting when the decision arrives is refused",
            n = pending.call
        );
    }
    eprint!(
        "execbox: {verb} call {} of {}? [y/N] ",
        pending.call, pending.tool
    );
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer)?;
    if !matches!(answer.trim(), "y" | "Y" | "yes" | "Yes" | "YES") {
        return Ok(None);
    }
    Ok(Some(CallRef {
        call: pending.call,
        input_sha256: Some(pending.input_sha256.clone()),
    }))
}

/// How much of a call's input an approver is shown, in characters.
const SHOWN_INPUT_CHARS: usize = 2000;

/// Waits for execution `id` to end and reports it as `execbox run` does (the logs on stderr,
/// the result on stdout); Ctrl-C or SIGTERM stops the execution (its executor's process group
/// with it) before we exit with the signal's status.
async fn wait_and_report(
    manager: &CapabilityManager,
    id: &str,
    signals: &mut StopSignals,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let interrupted = tokio::select! {
        Some(status) = signals.next() => {
            eprintln!("execbox: stopping {id}");
            Some(status)
        }
        _ = manager.wait(id, None) => None,
    };
    if interrupted.is_some() {
        let _ = manager.stop(id).await;
    }
    let outcome = manager.wait(id, None).await;
    manager.store().close().await;
    let outcome = outcome?.context("the execution did not end")?;
    let code = report(id, &outcome, json);
    Ok(interrupted.map_or(code, ExitCode::from))
}

/// Prints an outcome as `capabilities run` does: the logs on stderr, the result (or the
/// whole outcome with `json`) on stdout, a failure or a pause on stderr; 0 when it completed,
/// 1 when it failed, [`AWAITING_APPROVAL_EXIT`] when it waits for approval.
fn report(id: &str, outcome: &ExecutionOutcome, json: bool) -> ExitCode {
    for line in &outcome.logs {
        eprintln!("{line}");
    }
    if json {
        out(&pretty(outcome));
    } else if let Some(result) = &outcome.result {
        out(&pretty(result));
    }
    if let Some(pending) = &outcome.pending_approval {
        // Not a failure: it waits, and this is the command that decides it.
        eprintln!(
            "execbox: {id} awaiting_approval: call {n} ({}) needs approval, and has not run; \
              decide with `execbox executions approve {id} --call {n}` or `execbox executions \
              deny {id} --call {n} --reason TEXT` (by a principal holding `{}`)",
            pending.tool,
            pending.permission,
            n = pending.call
        );
    } else if let (false, Some(e)) = (outcome.success, &outcome.error) {
        eprintln!(
            "execbox: {id} {}: {}: {}",
            outcome.status, e.code, e.message
        );
    }
    if outcome.success {
        ExitCode::SUCCESS
    } else if outcome.pending_approval.is_some() {
        ExitCode::from(AWAITING_APPROVAL_EXIT)
    } else {
        ExitCode::from(1)
    }
}

/// `capabilities run`'s exit status for an execution waiting for approval: not a failure (1),
/// and not done (0).
const AWAITING_APPROVAL_EXIT: u8 = 3;

/// Runs one store read to its end on a small runtime of its own.
fn block_on<T>(read: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime starts")
        .block_on(read)
}

/// Unix milliseconds as an RFC 3339 time in UTC (seconds).
fn rfc3339(ms: u64) -> String {
    let secs = (ms / 1000) as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn times_are_rfc3339() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::rfc3339(1_763_850_000_000), "2025-11-22T22:20:00Z");
    }
}
