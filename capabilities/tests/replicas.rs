//! Managers of replicas sharing a real PostgreSQL (started by the test): a manager hears the
//! other replicas however its build was timed, and a stop is applied however its caller
//! behaved. This binary has an allocator of its own ([`SlowWhileFlagged`]) that makes one
//! thread slow on purpose, as a loaded machine makes it slow by chance.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use execbox_capabilities::{
    CapabilityManager, ExecutionStatus, ExecutionStore, ManagerOptions, Registry, RegistryRoots,
    ReplicaOptions, StartRequest,
};
use execbox_host::{Executor, ProcessExecutor, RunnerCommand};
use execbox_pg::testing::TestServer;
use execbox_pg::{Pg, PgUrl, PoolOptions};
use execbox_policy::StoreLocation;

/// The system allocator, except that on a thread that set [`SLOW`] every allocation first
/// sleeps 20 ms: building a manager there takes long enough for whatever it started meanwhile
/// to run, and for a notification to arrive, before it is built.
struct SlowWhileFlagged;

thread_local! {
    static SLOW: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: every call is handed to the system allocator unchanged; the sleep before it
// allocates nothing.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for SlowWhileFlagged {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if SLOW.with(Cell::get) {
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: the caller's layout, as the caller gave it.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: allocated by `System` with this layout (see `alloc`).
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: SlowWhileFlagged = SlowWhileFlagged;

/// A fresh folder for one test, removed first if a run before left it.
fn folder(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "execbox-capabilities-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A registry with `nap`: an external executor that sleeps 30 s.
fn registry(dir: &Path) -> Registry {
    let root = dir.join(".execbox");
    let executor = root.join("executors/napper");
    std::fs::create_dir_all(&executor).unwrap();
    std::fs::write(
        executor.join("run.sh"),
        "cat >/dev/null\nsleep 30\necho '{}'\n",
    )
    .unwrap();
    std::fs::write(
        executor.join("executor.yaml"),
        format!(
            "name: napper\nversion: 1.0.0\ndescription: sleeps\nsupportedTypes: [nap]\ncommand: /bin/sh\nargs: [{:?}]\n",
            executor.join("run.sh").display().to_string()
        ),
    )
    .unwrap();
    let capability = root.join("capabilities/nap");
    std::fs::create_dir_all(&capability).unwrap();
    std::fs::write(
        capability.join("capability.yaml"),
        "name: nap\ntype: nap\ntimeout_ms: 600000\n",
    )
    .unwrap();
    Registry::load(RegistryRoots {
        project: Some(root),
        global: None,
    })
}

/// Joins the database at `url` as replica `name`.
fn replica(url: &str, name: &str) -> ExecutionStore {
    ExecutionStore::open_at(
        &StoreLocation::parse(url).unwrap(),
        &ReplicaOptions {
            name: Some(name.into()),
            timeout: Duration::from_secs(30),
        },
    )
    .unwrap()
}

/// The managers' executor of scripts: none runs in these tests, only the external `nap`.
fn executor() -> Arc<dyn Executor> {
    Arc::new(ProcessExecutor::new(RunnerCommand::new("/bin/false")).unwrap())
}

fn manager(registry: Registry, store: ExecutionStore) -> CapabilityManager {
    CapabilityManager::new(registry, store, executor(), ManagerOptions::default())
}

/// Starts `nap` and waits (at most 20 s) until it runs.
async fn running_nap(manager: &CapabilityManager) -> String {
    let id = manager
        .start(StartRequest::new("nap", serde_json::json!({})), None)
        .await
        .unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    while manager.get(&id).await.unwrap().status != ExecutionStatus::Running {
        assert!(Instant::now() < until, "{id} never ran");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    id
}

/// A replica whose manager was slow to build, so that notifications arrived while it was
/// being built, still hears the others: a stop asked through another replica is applied at
/// once. (Its hearing used to start inside the build, hear a first notification, find no
/// manager yet, take it for gone and end: that replica then never heard a stop again, and a
/// stop asked through another replica waited 60 s for a program that ran to its end.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_built_slowly_hears_the_stops_other_replicas_ask() {
    let Some(server) = TestServer::start_or_skip() else {
        return;
    };
    let url = server.database("built_slowly");
    let dir = folder("built-slowly");
    // Another replica's news, every few milliseconds, while the slow one is built.
    let notifying = {
        let pg = Pg::new(&PgUrl::parse(&url).unwrap(), PoolOptions::default()).unwrap();
        tokio::spawn(async move {
            loop {
                let _ = pg
                    .run(|c| async move {
                        c.batch_execute(
                            r#"SELECT pg_notify('execbox_events', '{"r": "elsewhere", "id": "nothing"}')"#,
                        )
                        .await
                    })
                    .await;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let slow = {
        let (url, dir) = (url.clone(), dir.clone());
        tokio::task::spawn_blocking(move || {
            let (registry, store, executor) = (registry(&dir), replica(&url, "slow"), executor());
            SLOW.with(|s| s.set(true));
            let built =
                CapabilityManager::new(registry, store, executor, ManagerOptions::default());
            SLOW.with(|s| s.set(false));
            built
        })
        .await
        .unwrap()
    };
    notifying.abort();
    let other = {
        let url = url.clone();
        let registry = registry(&dir);
        tokio::task::spawn_blocking(move || manager(registry, replica(&url, "other")))
            .await
            .unwrap()
    };
    let id = running_nap(&slow).await;
    let asked = Instant::now();
    let stopped = tokio::time::timeout(Duration::from_secs(10), other.stop(&id))
        .await
        .unwrap_or_else(|_| panic!("the stop asked through the other replica is not applied within 10 s: the slow replica does not hear it"))
        .unwrap();
    assert_eq!(stopped.status, ExecutionStatus::Stopped, "{stopped:?}");
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "{:?}",
        asked.elapsed()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A stop whose caller goes away at its first step (an HTTP client that hung up) still
/// stops the execution: a stop asked again returns it `stopped` at once, rather than waiting
/// for an end that the first stop never brought about.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_dropped_by_its_caller_at_once_still_stops_the_execution() {
    let Some(server) = TestServer::start_or_skip() else {
        return;
    };
    let url = server.database("dropped_stop");
    let dir = folder("dropped-stop");
    let only = {
        let registry = registry(&dir);
        tokio::task::spawn_blocking(move || manager(registry, replica(&url, "only")))
            .await
            .unwrap()
    };
    let id = running_nap(&only).await;
    // Polled once (it then waits on the database), and dropped.
    let dropped = tokio::time::timeout(Duration::ZERO, only.stop(&id)).await;
    assert!(dropped.is_err(), "the stop ended at its first poll");
    let stopped = tokio::time::timeout(Duration::from_secs(10), only.stop(&id))
        .await
        .expect("the stop asked again is applied within 10 s")
        .unwrap();
    assert_eq!(stopped.status, ExecutionStatus::Stopped, "{stopped:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
