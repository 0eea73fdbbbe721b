//! Paused `execute_code` programs of `execbox mcp`: kept as executions in the state database
//! (`StorePauses`, the MCP server's [`DurablePauses`]) and resumed by whoever approves them
//! (`McpPrograms`, the capability manager's [`ProgramTools`]), which starts the MCP servers and
//! tools file the program was served with.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use execbox_capabilities::{
    CapabilityManager, ExecutionStore, ManagerOptions, PausedProgram, ProgramToolSet, ProgramTools,
    Registry, RegistryRoots, ReplicaOptions,
};
use execbox_host::{BoxFuture, Executor, ToolsFile};
use execbox_mcp::{DurablePauses, McpConfig, PausedExecution, UpstreamOptions, Upstreams};
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
    /// `--startup-timeout`, seconds.
    pub startup_timeout_secs: u64,
}

impl Origin {
    /// The origin of `execbox mcp --config CONFIG --tools TOOLS`, with absolute paths (an
    /// approver may run elsewhere).
    pub fn of(config: Option<&Path>, tools: Option<&Path>, startup_timeout_secs: u64) -> Origin {
        let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        Origin {
            config: config.map(absolute),
            tools: tools.map(absolute),
            startup_timeout_secs,
        }
    }
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
            let manager = inner
                .manager()
                .await
                .map_err(|e| format!("the state database {} cannot be opened: {e}", inner.db))?;
            let origin = serde_json::to_value(&inner.origin).unwrap_or(Value::Null);
            let record = manager
                .pause_program(PausedProgram {
                    name: PROGRAM.to_string(),
                    front_end: FRONT_END.to_string(),
                    code: paused.code,
                    origin,
                    principal: paused.principal,
                    ledger: paused.ledger,
                    call: paused.call,
                    logs: paused.logs,
                    timeout_ms: paused.timeout_ms,
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
        format!(
            "an operator runs `execbox executions approve {id}{db}`, or `execbox executions \
             deny {id}{db} --reason TEXT`"
        )
    }
}

/// Starts the tools of paused `execute_code` programs when they are approved: the MCP
/// servers and the tools file they were served with, read again from their files.
pub struct McpPrograms {
    policy: Option<Policy>,
}

impl McpPrograms {
    /// With `policy` (the approving process's): it names the tools a grant may use.
    pub fn new(policy: Option<Policy>) -> McpPrograms {
        McpPrograms { policy }
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
        Box::pin(async move {
            if front_end != FRONT_END {
                return Err(format!(
                    "it was paused by `{front_end}`, whose programs this execbox cannot resume"
                ));
            }
            let origin = origin.map_err(|e| format!("its recorded origin is unreadable: {e}"))?;
            let config = match &origin.config {
                Some(path) => McpConfig::load(path).map_err(|e| e.to_string())?,
                None => McpConfig::default(),
            };
            let local = match &origin.tools {
                Some(path) => ToolsFile::load(path).map_err(|e| e.to_string())?,
                None => Vec::new(),
            };
            let options = UpstreamOptions {
                startup_timeout: Duration::from_secs(origin.startup_timeout_secs.max(1)),
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
