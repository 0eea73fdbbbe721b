//! A real PostgreSQL server for tests: `initdb` in a temporary folder, `postgres` on a free
//! loopback port, removed on drop. As root, both run as the `postgres` user (they refuse to
//! run as root). The binaries are `$EXECBOX_PG_BIN`, else the newest
//! `/usr/lib/postgresql/*/bin`, else `initdb` on the `PATH`.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::{Pg, PgUrl, PoolOptions};

/// A PostgreSQL server of the test's own; stopped and its folder removed on drop.
pub struct TestServer {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    user: Option<(u32, u32)>,
    child: Option<Child>,
}

/// Whether tests can start a server here: `Err` says why not. Under `CI=true` a missing server
/// is a failure, not a skip (see [`TestServer::start_or_skip`]).
pub fn available() -> Result<(), String> {
    binaries().map(|_| ())
}

fn binaries() -> Result<PathBuf, String> {
    if let Ok(dir) = std::env::var("EXECBOX_PG_BIN") {
        let dir = PathBuf::from(dir);
        return if dir.join("initdb").exists() {
            Ok(dir)
        } else {
            Err(format!("EXECBOX_PG_BIN={} has no initdb", dir.display()))
        };
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    if let Some((_, bin)) = found.pop() {
        return Ok(bin);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .find(|d| d.join("initdb").exists() && d.join("postgres").exists())
        .ok_or_else(|| "no PostgreSQL server binaries (initdb, postgres): install the Debian package `postgresql` or set EXECBOX_PG_BIN".to_string())
}

/// The uid and gid of `postgres` when we are root (the server refuses to run as root).
fn run_as() -> Result<Option<(u32, u32)>, String> {
    let me = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .unwrap_or(0);
    if me != 0 {
        return Ok(None);
    }
    let passwd = std::fs::read_to_string("/etc/passwd").map_err(|e| e.to_string())?;
    passwd
        .lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            (fields.first() == Some(&"postgres") && fields.len() > 3)
                .then(|| Some((fields[2].parse().ok()?, fields[3].parse().ok()?)))
                .flatten()
        })
        .map(Some)
        .ok_or_else(|| {
            "running as root and there is no `postgres` user to run the server as".into()
        })
}

static NEXT: AtomicUsize = AtomicUsize::new(0);

impl TestServer {
    /// Starts a server, or `None` after saying why on stderr when this machine has none,
    /// unless `CI=true`, where that panics: CI must run the PostgreSQL tests.
    pub fn start_or_skip() -> Option<TestServer> {
        match TestServer::start() {
            Ok(server) => Some(server),
            Err(e) if std::env::var("CI").as_deref() != Ok("true") => {
                eprintln!("skipped: no PostgreSQL for this test: {e}");
                None
            }
            Err(e) => panic!("cannot start PostgreSQL (required under CI=true): {e}"),
        }
    }

    /// Starts a server in a new temporary folder.
    pub fn start() -> Result<TestServer, String> {
        let bin = binaries()?;
        let user = run_as()?;
        let dir = std::env::temp_dir().join(format!(
            "execbox-pg-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .map_err(|e| format!("chown {}: {e}", dir.display()))?;
        }
        let data = dir.join("data");
        let output = command(&bin.join("initdb"), user)
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                "postgres",
                "-A",
                "trust",
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
            ])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("initdb: {e}"))?;
        if !output.status.success() {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        let port = free_port()?;
        let mut server = TestServer {
            bin,
            dir,
            port,
            user,
            child: None,
        };
        server.resume()?;
        Ok(server)
    }

    /// The URL of the `postgres` database.
    pub fn url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres?sslmode=disable",
            self.port
        )
    }

    /// A new, empty database `name` (lower-case letters, digits, `_`) and its URL.
    pub fn database(&self, name: &str) -> String {
        assert!(name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'));
        let pg = self.pg();
        let statement = format!("CREATE DATABASE {name}");
        pg.block(move |client| async move { client.batch_execute(&statement).await })
            .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
        format!(
            "postgres://postgres@127.0.0.1:{}/{name}?sslmode=disable",
            self.port
        )
    }

    /// A small pool on the `postgres` database, for the test's own statements.
    pub fn pg(&self) -> Pg {
        let url = PgUrl::parse(&self.url()).expect("a valid URL");
        Pg::new(
            &url,
            PoolOptions {
                max_size: 2,
                ..PoolOptions::default()
            },
        )
        .expect("a pool")
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server at once, keeping its data: SIGKILL to the postmaster and every
    /// backend, as a crash of its machine would; returns once none of them is left (so no
    /// connection made before survives, and a [`TestServer::resume`] finds no process still
    /// attached to the old shared memory, which PostgreSQL would refuse to start beside).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let postmaster = child.id();
            // Each backend is a process group of its own (PostgreSQL's children call setsid),
            // so killing the postmaster's group misses them: they are found as its children,
            // the postmaster stopped first so that it starts no new one meanwhile, and
            // killed one by one.
            signal("STOP", &[postmaster]);
            let mut pids = children_of(postmaster);
            pids.push(postmaster);
            signal("KILL", &pids);
            let _ = Command::new("sh")
                .args(["-c", "kill -KILL -\"$1\"", "sh", &postmaster.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let _ = child.kill();
            let _ = child.wait();
            let deadline = Instant::now() + Duration::from_secs(10);
            while (group_alive(postmaster) || pids.iter().any(|&pid| alive(pid)))
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stalls the server: SIGSTOP to the postmaster and every process it started (each
    /// backend is a process group of its own), so connections stay open and the kernel still
    /// acknowledges what is sent, but nothing answers, as with a server frozen or swapped
    /// out. It goes on (SIGCONT) when the guard drops, whether the test passed or panicked.
    pub fn stall(&self) -> Stalled {
        let mut pids = Vec::new();
        if let Some(postmaster) = self.child.as_ref().map(Child::id) {
            // The postmaster first, so it starts no new backend meanwhile.
            signal("STOP", &[postmaster]);
            pids.push(postmaster);
            pids.extend(children_of(postmaster));
            signal("STOP", &pids[1..]);
        }
        Stalled { pids }
    }

    /// Starts the server again on the same data and port (after [`TestServer::kill`]).
    pub fn resume(&mut self) -> Result<(), String> {
        let log = std::fs::File::create(self.dir.join("server.log"))
            .map_err(|e| format!("server.log: {e}"))?;
        if let Some((uid, gid)) = self.user {
            let _ = std::os::unix::fs::chown(self.dir.join("server.log"), Some(uid), Some(gid));
        }
        let child = command(&self.bin.join("postgres"), self.user)
            // A group of its own, so that `kill` takes its backends with it.
            .process_group(0)
            .arg("-D")
            .arg(self.dir.join("data"))
            .arg("-k")
            .arg(&self.dir)
            .args(["-p", &self.port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
            .args(["-c", "full_page_writes=off", "-c", "max_connections=300"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("postgres: {e}"))?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        let pg = self.pg();
        loop {
            match pg.check() {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() > deadline => {
                    let log =
                        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
                    return Err(format!("postgres did not start: {e}\n{log}"));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    let log =
                        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
                    return Err(format!("postgres exited ({status}):\n{log}"));
                }
            }
        }
    }

    /// The folder of its data and log.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A server stalled by [`TestServer::stall`]; it goes on when this drops.
#[must_use = "the server goes on when the guard drops"]
pub struct Stalled {
    pids: Vec<u32>,
}

impl Drop for Stalled {
    fn drop(&mut self) {
        signal("CONT", &self.pids);
    }
}

/// Sends `SIG{name}` to `pids`.
fn signal(name: &str, pids: &[u32]) {
    if pids.is_empty() {
        return;
    }
    let _ = Command::new("kill")
        .arg(format!("-{name}"))
        .args(pids.iter().map(u32::to_string))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// The processes whose parent is `parent` (read from `/proc`).
fn children_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // After the command's closing parenthesis: state, ppid.
            let ppid = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?;
            (ppid == parent.to_string()).then_some(pid)
        })
        .collect()
}

fn command(program: &Path, user: Option<(u32, u32)>) -> Command {
    let mut command = Command::new(program);
    command.env("LC_ALL", "C.UTF-8");
    if let Some((uid, gid)) = user {
        command.uid(uid).gid(gid);
        command.env("HOME", "/tmp");
    }
    command
}

/// Whether a process of group `group` is still there (read from `/proc`).
/// Whether process `pid` exists and is not a zombie (a zombie holds no memory any more).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // After the command's closing parenthesis: the state.
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z")
    })
}

fn group_alive(group: u32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|entry| {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            return false;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return false;
        };
        // After the command's closing parenthesis: state, ppid, pgrp.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        fields.first() != Some(&"Z") && fields.get(2) == Some(&group.to_string().as_str())
    })
}

/// A loopback port no other server of this process was given: a server that is down (between
/// [`TestServer::kill`] and [`TestServer::resume`]) keeps its port, and another test's server
/// starting meanwhile must not take it (its clients would reach the wrong server).
fn free_port() -> Result<u16, String> {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for _ in 0..100 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        if !given.contains(&port) {
            given.push(port);
            return Ok(port);
        }
    }
    Err("no free loopback port that no other test server was given".into())
}
