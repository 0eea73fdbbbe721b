//! Paused `execute_code` programs of `execbox mcp`: kept as executions in the state database
//! (`StorePauses`, the MCP server's [`DurablePauses`]) and resumed by whoever approves them
//! (`McpPrograms`, the capability manager's [`ProgramTools`]), which starts the MCP servers and
//! tools file the program was served with.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use execbox_capabilities::{
    program_result, CapabilityErrorCode, CapabilityManager, ExecutionRecord, ExecutionStatus,
    ExecutionStore, KeptProgram, ManagerOptions, ProgramToolSet, ProgramTools, Registry,
    RegistryRoots, ReplicaOptions, PROGRAM_TYPE,
};
use execbox_host::{BoxFuture, Executor, ToolsFile};
use execbox_mcp::{
    DurablePauses, KeptState, McpConfig, PausedExecution, UpstreamOptions, Upstreams,
};
use execbox_policy::{Enforcement, Policy, StoreLocation};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The front end a paused program records, and the name it runs under.
const FRONT_END: &str = "mcp";
const PROGRAM: &str = "execute_code";

/// What a paused program's tools are: the files `execbox mcp` served it with.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Origin {
    /// `--config`, absolute.
    pub config: Option<PathBuf>,
    /// `--tools`, absolute.
    pub tools: Option<PathBuf>,
    /// The SHA-256 of the config's content when `execbox mcp` read it (hex).
    #[serde(default)]
    pub config_sha256: Option<String>,
    /// The SHA-256 of the tools file's content (hex).
    #[serde(default)]
    pub tools_sha256: Option<String>,
    /// `--startup-timeout`, seconds.
    pub startup_timeout_secs: u64,
}

/// The longest startup timeout a resumed program's servers get, in seconds.
const MAX_STARTUP_TIMEOUT_SECS: u64 = 3_600;

impl Origin {
    /// The origin of `execbox mcp --config CONFIG --tools TOOLS`, with absolute paths (an
    /// approver may run elsewhere) and the digests of their content now.
    pub fn of(
        config: Option<&Path>,
        tools: Option<&Path>,
        startup_timeout_secs: u64,
    ) -> anyhow::Result<Origin> {
        let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        let digest = |p: Option<&Path>| -> anyhow::Result<Option<String>> {
            p.map(|p| sha256_of(p).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", p.display())))
                .transpose()
        };
        Ok(Origin {
            config: config.map(absolute),
            tools: tools.map(absolute),
            config_sha256: digest(config)?,
            tools_sha256: digest(tools)?,
            startup_timeout_secs,
        })
    }
}

/// The SHA-256 of a file's content, in hex.
fn sha256_of(path: &Path) -> std::io::Result<String> {
    let bytes = std::fs::read(path)?;
    let digest = ring::digest::digest(&ring::digest::SHA256, &bytes);
    Ok(digest.as_ref().iter().map(|b| format!("{b:02x}")).collect())
}

/// Checks one file of a paused program's origin against what the approver named: the same
/// file (`flag` names it), with the content it had when the program was served.
fn confirmed(
    what: &str,
    flag: &str,
    recorded: Option<&PathBuf>,
    digest: Option<&String>,
    named: Option<&PathBuf>,
) -> Result<(), String> {
    let same = |a: &Path, b: &Path| match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    };
    match (recorded, named) {
        (None, None) => Ok(()),
        (Some(recorded), None) => Err(format!(
            "it was served with the {what} {}, and approving it starts what that file names; \
             confirm with {flag} {}",
            recorded.display(),
            recorded.display()
        )),
        (None, Some(named)) => Err(format!(
            "it was served without a {what}, but {flag} {} was given; leave it out",
            named.display()
        )),
        (Some(recorded), Some(named)) if !same(recorded, named) => Err(format!(
            "it was served with the {what} {}, not {} ({flag})",
            recorded.display(),
            named.display()
        )),
        (Some(recorded), Some(_)) => {
            let now = sha256_of(recorded)
                .map_err(|e| format!("cannot read its {what} {}: {e}", recorded.display()))?;
            if digest != Some(&now) {
                return Err(format!(
                    "its {what} {} changed since it was served (or its record names no \
                     digest of it), so what it would start is not what it ran with; deny it, \
                     and run the program again",
                    recorded.display()
                ));
            }
            Ok(())
        }
    }
}

/// Whether an approver may approve `record` with the files named (`--mcp-config`,
/// `--mcp-tools`): anything but a paused program of `execbox mcp` may; such a program only
/// with the config and tools file it was served with, unchanged. `Err`: a usage error naming
/// the flags it needs, the execution left waiting.
pub fn approvable(
    record: &ExecutionRecord,
    config: Option<&PathBuf>,
    tools: Option<&PathBuf>,
) -> Result<(), String> {
    if record.capability_type != PROGRAM_TYPE
        || record.executor != FRONT_END
        || record.status != ExecutionStatus::AwaitingApproval
    {
        return Ok(());
    }
    // An unreadable origin is the resume's to report.
    let Some(origin) = record
        .params
        .get("origin")
        .and_then(|o| serde_json::from_value::<Origin>(o.clone()).ok())
    else {
        return Ok(());
    };
    let problems: Vec<String> = [
        confirmed(
            "MCP config",
            "--mcp-config",
            origin.config.as_ref(),
            origin.config_sha256.as_ref(),
            config,
        ),
        confirmed(
            "tools file",
            "--mcp-tools",
            origin.tools.as_ref(),
            origin.tools_sha256.as_ref(),
            tools,
        ),
    ]
    .into_iter()
    .filter_map(Result::err)
    .collect();
    if problems.is_empty() {
        return Ok(());
    }
    let id = &record.execution_id;
    let mut flags = String::new();
    if let Some(config) = &origin.config {
        flags.push_str(&format!(" --mcp-config {}", config.display()));
    }
    if let Some(tools) = &origin.tools {
        flags.push_str(&format!(" --mcp-tools {}", tools.display()));
    }
    let needs = match flags.is_empty() {
        true => "no --mcp-config nor --mcp-tools".to_string(),
        false => format!("`execbox executions approve {id}{flags}`"),
    };
    Err(format!(
        "execution `{id}` is an `{}` program paused by `execbox mcp`; approving it starts the \
         MCP servers and tools it was served with, so it needs {needs} ({}). Nothing was \
         decided: it is still waiting for approval",
        record.capability,
        problems.join("; ")
    ))
}

/// `execbox mcp`'s keeper of paused programs: the state database, opened when the first
/// program pauses (a server whose programs never pause never touches it).
#[derive(Clone)]
pub struct StorePauses(Arc<Inner>);

struct Inner {
    db: StoreLocation,
    roots: RegistryRoots,
    origin: Origin,
    enforcement: Enforcement,
    executor: Arc<dyn Executor>,
    manager: tokio::sync::OnceCell<CapabilityManager>,
}

impl std::fmt::Debug for StorePauses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StorePauses")
            .field("db", &self.0.db)
            .field("origin", &self.0.origin)
            .finish_non_exhaustive()
    }
}

impl StorePauses {
    /// Keeps paused programs of `origin` in `db`, recorded (and audited) under `enforcement`.
    pub fn new(
        db: StoreLocation,
        roots: RegistryRoots,
        origin: Origin,
        enforcement: Enforcement,
        executor: Arc<dyn Executor>,
    ) -> StorePauses {
        StorePauses(Arc::new(Inner {
            db,
            roots,
            origin,
            enforcement,
            executor,
            manager: tokio::sync::OnceCell::new(),
        }))
    }
}

impl Inner {
    async fn manager(&self) -> Result<&CapabilityManager, String> {
        self.manager
            .get_or_try_init(|| async {
                let db = self.db.clone();
                let store = tokio::task::spawn_blocking(move || {
                    ExecutionStore::open_at(&db, &ReplicaOptions::default())
                })
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?;
                Ok(CapabilityManager::new(
                    Registry::load(self.roots.clone()),
                    store,
                    self.executor.clone(),
                    ManagerOptions {
                        enforcement: self.enforcement.clone(),
                        ..ManagerOptions::default()
                    },
                ))
            })
            .await
    }
}

impl DurablePauses for StorePauses {
    fn pause(&self, paused: PausedExecution) -> BoxFuture<Result<String, String>> {
        let inner = self.0.clone();
        Box::pin(async move {
            // The model reads this: the database is named in the log only.
            let manager = inner.manager().await.map_err(|e| {
                tracing::error!(db = %inner.db, "cannot open the state database to keep a paused program: {e}");
                "the state database is unavailable".to_string()
            })?;
            // Bounded in the manager (count and ledger bytes per principal): a model told a
            // program waits cannot fill the queue of approvers.
            let origin = serde_json::to_value(&inner.origin).unwrap_or(Value::Null);
            let record = manager
                .pause_program(KeptProgram {
                    name: PROGRAM.to_string(),
                    front_end: FRONT_END.to_string(),
                    code: paused.code,
                    origin,
                    timeout_ms: paused.timeout_ms,
                    paused: paused.program,
                })
                .await
                .map_err(|e| e.message)?;
            Ok(record.execution_id)
        })
    }

    fn how_to_decide(&self, id: &str) -> String {
        let db = match &self.0.db {
            StoreLocation::Sqlite(path) => format!(" --db {}", path.display()),
            _ => " --db <the same postgres:// URL>".to_string(),
        };
        let mut files = String::new();
        if let Some(config) = &self.0.origin.config {
            files.push_str(&format!(" --mcp-config {}", config.display()));
        }
        if let Some(tools) = &self.0.origin.tools {
            files.push_str(&format!(" --mcp-tools {}", tools.display()));
        }
        format!(
            "an operator runs `execbox executions approve {id}{db}{files}`, or `execbox \
             executions deny {id}{db} --reason TEXT`"
        )
    }

    fn state(
        &self,
        id: &str,
        principal: Option<&str>,
    ) -> BoxFuture<Result<Option<KeptState>, String>> {
        let inner = self.0.clone();
        let (id, principal) = (id.to_string(), principal.map(str::to_string));
        Box::pin(async move {
            // Nothing ever paused into a file that does not exist: it is not created to say so.
            if let (None, StoreLocation::Sqlite(path)) = (inner.manager.get(), &inner.db) {
                if !path.exists() {
                    return Ok(None);
                }
            }
            let manager = inner.manager().await.map_err(|e| {
                tracing::error!(db = %inner.db, "cannot open the state database to read a paused program: {e}");
                "the state database is unavailable".to_string()
            })?;
            let record = manager.store().get(&id).await.map_err(|e| {
                tracing::error!(db = %inner.db, execution = %id, "cannot read a paused program: {e}");
                "the state database is unavailable".to_string()
            })?;
            Ok(record
                .filter(|r| {
                    r.capability_type == PROGRAM_TYPE
                        && r.executor == FRONT_END
                        && r.principal == principal
                })
                .map(|r| kept_state(&r)))
        })
    }
}

/// Where the kept program `record` is, as its model is told.
fn kept_state(record: &ExecutionRecord) -> KeptState {
    if let (ExecutionStatus::AwaitingApproval, Some(pending)) =
        (record.status, &record.pending_approval)
    {
        return KeptState::Waiting {
            tool: pending.tool.clone(),
            input: pending.input.clone(),
        };
    }
    if !record.status.is_terminal() {
        return KeptState::Running;
    }
    if let Some(result) = program_result(record) {
        return KeptState::Done(Box::new(result));
    }
    let why = record
        .error
        .as_ref()
        .map_or_else(|| format!("it is {}", record.status), |e| e.message.clone());
    match record.error.as_ref().map(|e| e.code) {
        Some(CapabilityErrorCode::ApprovalDenied) => KeptState::Denied(why),
        _ => KeptState::Failed(why),
    }
}

/// Starts the tools of paused `execute_code` programs when they are approved: the MCP
/// servers and the tools file they were served with, read again from their files, once the
/// approver has named them (`--mcp-config`, `--mcp-tools`) and they are unchanged.
pub struct McpPrograms {
    policy: Option<Policy>,
    config: Option<PathBuf>,
    tools: Option<PathBuf>,
}

impl McpPrograms {
    /// With `policy` (the approving process's: it names the tools a grant may use), and the
    /// config and tools file the approver named.
    pub fn new(
        policy: Option<Policy>,
        config: Option<PathBuf>,
        tools: Option<PathBuf>,
    ) -> McpPrograms {
        McpPrograms {
            policy,
            config,
            tools,
        }
    }
}

/// The upstreams of a resumed program, shut down when it ends.
struct Running(Upstreams);

impl Drop for Running {
    fn drop(&mut self) {
        let upstreams = self.0.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { upstreams.shutdown().await });
        }
    }
}

impl ProgramTools for McpPrograms {
    fn tools(&self, front_end: &str, origin: &Value) -> BoxFuture<Result<ProgramToolSet, String>> {
        let policy = self.policy.clone();
        let front_end = front_end.to_string();
        let origin = serde_json::from_value::<Origin>(origin.clone());
        let (named_config, named_tools) = (self.config.clone(), self.tools.clone());
        Box::pin(async move {
            if front_end != FRONT_END {
                return Err(format!(
                    "it was paused by `{front_end}`, whose programs this execbox cannot resume"
                ));
            }
            let origin = origin.map_err(|e| format!("its recorded origin is unreadable: {e}"))?;
            confirmed(
                "MCP config",
                "--mcp-config",
                origin.config.as_ref(),
                origin.config_sha256.as_ref(),
                named_config.as_ref(),
            )?;
            confirmed(
                "tools file",
                "--mcp-tools",
                origin.tools.as_ref(),
                origin.tools_sha256.as_ref(),
                named_tools.as_ref(),
            )?;
            let config = match &origin.config {
                Some(path) => McpConfig::load(path).map_err(|e| e.to_string())?,
                None => McpConfig::default(),
            };
            let local = match &origin.tools {
                Some(path) => ToolsFile::load(path).map_err(|e| e.to_string())?,
                None => Vec::new(),
            };
            let options = UpstreamOptions {
                startup_timeout: Duration::from_secs(
                    origin
                        .startup_timeout_secs
                        .clamp(1, MAX_STARTUP_TIMEOUT_SECS),
                ),
                policy,
                ..UpstreamOptions::default()
            };
            let upstreams = Upstreams::start(&config, local, options)
                .await
                .map_err(|e| e.to_string())?;
            Ok(ProgramToolSet {
                tools: upstreams.tools(),
                keep: Box::new(Running(upstreams)),
            })
        })
    }
}
