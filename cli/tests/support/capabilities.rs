//! Capability roots on disk (project, global), capabilities and executors written into them,
//! and a manager over them with warm `execbox runner` processes.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use execbox_capabilities::{
    CapabilityManager, ExecutionStore, ManagerOptions, Registry, RegistryRoots,
};
use execbox_host::{PoolOptions, PooledExecutor, ProcessExecutor};

use super::runners::runner;
use super::temp::TempDir;

/// A root folder (`.execbox/` of a project, or a global root) being written by a test.
pub struct Root(pub PathBuf);

impl Root {
    /// The root at `dir` (created).
    pub fn new(dir: PathBuf) -> Root {
        std::fs::create_dir_all(&dir).expect("create a root");
        Root(dir)
    }

    /// Writes `capabilities/NAME/capability.yaml` and the other `files` (name, text).
    pub fn capability(&self, name: &str, yaml: &str, files: &[(&str, &str)]) -> PathBuf {
        let dir = self.0.join("capabilities").join(name);
        std::fs::create_dir_all(&dir).expect("create a capability folder");
        std::fs::write(dir.join("capability.yaml"), yaml).expect("write capability.yaml");
        for (file, text) in files {
            std::fs::write(dir.join(file), text).expect("write a capability file");
        }
        dir
    }

    /// Writes `executors/NAME/executor.yaml` for an external executor running `sh run.sh`
    /// (through `/bin/sh`, so writing the script never races an `exec`), for `types`.
    pub fn sh_executor(&self, name: &str, types: &[&str], script: &str) -> PathBuf {
        let dir = self.0.join("executors").join(name);
        std::fs::create_dir_all(&dir).expect("create an executor folder");
        let run = dir.join("run.sh");
        std::fs::write(&run, script).expect("write run.sh");
        let yaml = format!(
            "name: {name}\nversion: 1.0.0\ndescription: test executor {name}\nsupportedTypes: [{}]\ncommand: /bin/sh\nargs: [{:?}]\n",
            types.join(", "),
            run.display().to_string()
        );
        std::fs::write(dir.join("executor.yaml"), yaml).expect("write executor.yaml");
        dir
    }

    /// Writes `executors/NAME/executor.yaml` as given.
    pub fn executor_yaml(&self, name: &str, yaml: &str) -> PathBuf {
        let dir = self.0.join("executors").join(name);
        std::fs::create_dir_all(&dir).expect("create an executor folder");
        std::fs::write(dir.join("executor.yaml"), yaml).expect("write executor.yaml");
        dir
    }
}

/// A project (with `.execbox/`) and a global root in one temporary folder.
pub struct Roots {
    pub temp: TempDir,
    pub project: Root,
    pub global: Root,
}

impl Roots {
    pub fn new(name: &str) -> Roots {
        let temp = TempDir::new(name);
        let project = Root::new(temp.join("project/.execbox"));
        let global = Root::new(temp.join("global"));
        Roots {
            temp,
            project,
            global,
        }
    }

    /// The project folder (holding `.execbox/`).
    pub fn project_dir(&self) -> PathBuf {
        self.temp.join("project")
    }

    /// Both roots.
    pub fn roots(&self) -> RegistryRoots {
        RegistryRoots {
            project: Some(self.project.0.clone()),
            global: Some(self.global.0.clone()),
        }
    }

    /// A manager over both roots, a store in the temp folder, warm runners.
    pub fn manager(&self, options: ManagerOptions) -> CapabilityManager {
        let store = ExecutionStore::open(self.temp.join("state.db")).expect("open the store");
        manager_with(Registry::load(self.roots()), store, options)
    }
}

/// A manager with two warm `execbox runner` processes.
pub fn manager_with(
    registry: Registry,
    store: ExecutionStore,
    mut options: ManagerOptions,
) -> CapabilityManager {
    if options.nested_executor.is_none() {
        options.nested_executor = Some(Arc::new(
            ProcessExecutor::new(runner()).expect("a process executor"),
        ));
    }
    let pool = PooledExecutor::new(
        runner(),
        PoolOptions {
            size: 2,
            ..PoolOptions::default()
        },
    )
    .expect("a pooled executor");
    CapabilityManager::new(registry, store, Arc::new(pool), options)
}

/// A pid read from `file`, waiting up to 10 s for it to be written.
pub fn read_pid(file: &Path) -> u32 {
    for _ in 0..1000 {
        if let Ok(text) = std::fs::read_to_string(file) {
            if let Ok(pid) = text.trim().parse() {
                return pid;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("no pid in {}", file.display());
}

/// Whether the process `pid` exists (a zombie counts as gone).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z')
        }
    }
}

/// Waits up to `within` for `pid` to be gone; true if it is.
pub fn gone_within(pid: u32, within: Duration) -> bool {
    let end = std::time::Instant::now() + within;
    loop {
        if !alive(pid) {
            return true;
        }
        if std::time::Instant::now() > end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `execbox serve --listen 127.0.0.1:0 ARGS...`, killed (SIGKILL) and reaped when dropped.
pub struct Server {
    pub child: std::process::Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
}

impl Server {
    /// Starts it in `cwd` with `EXECBOX_HOME=home` and reads its URL from its first line.
    pub fn start(cwd: &Path, home: &Path, args: &[&str]) -> Server {
        Server::start_with_env(cwd, home, args, &[])
    }

    /// The same, with `env` set too.
    pub fn start_with_env(cwd: &Path, home: &Path, args: &[&str], env: &[(&str, &str)]) -> Server {
        use std::io::BufRead;
        let mut child = std::process::Command::new(super::runners::EXECBOX)
            .args(["serve", "--listen", "127.0.0.1:0", "--pool", "2"])
            .args(args)
            .current_dir(cwd)
            .env("EXECBOX_HOME", home)
            .env_remove("RUST_LOG")
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start execbox serve");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("piped stdout"))
            .read_line(&mut line)
            .expect("read the server's URL");
        assert!(
            line.starts_with("http://127.0.0.1:"),
            "first line: {line:?}"
        );
        Server {
            child,
            url: line.trim().to_owned(),
        }
    }

    /// `URL/PATH`.
    pub fn at(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    /// SIGKILL, and reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}
