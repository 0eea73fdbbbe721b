//! The one process supervisor: every process the host starts for a tool, an executor or an
//! upstream server, and everything those start, is ours to stop.
//!
//! [`spawn`] starts a command in a process group of its own (so a terminal's Ctrl-C reaches us,
//! not it), killed when the child handle drops, and marks it with [`SUPERVISOR_ENV`] (a value
//! unique to this process and this group), which its descendants inherit. The returned
//! [`ProcessGroup`] kills, when asked ([`ProcessGroup::kill`]) and when dropped:
//! - the whole process group (`kill(-pgid, SIGKILL)`);
//! - every process that carries the group's marker, wherever it is now: a descendant that
//!   called `setsid` (or `setpgid`) left the group, and one whose parent died was re-parented
//!   to init, but both still carry the marker;
//! - every descendant of those, by parent links, marker or not.
//!
//! Each process found is stopped first (SIGSTOP) and the search repeated until it finds no one
//! new; a process that left the group is killed with its whole new group when every member of
//! that group is ours; then all are killed.
//!
//! [`kill_all`] does the same for every group this process started, for an exit that cannot
//! wait; [`kill_marked`] finds the processes of a dead owner by a variable of its choosing (the
//! capability store's recovery uses `EXECBOX_EXECUTION_ID`).
//!
//! How far it reaches: on Linux the sweep reads `/proc` (only processes started after the
//! group, so it stays cheap on a busy machine); elsewhere it kills the process group only. A
//! descendant that both leaves the group and hides its mark (an `exec` with an empty
//! environment, or a process title written over its environment) and whose parent has exited
//! escapes the sweep, and so can a chain of processes that each fork and exit faster than one
//! look at `/proc` (each living well under a millisecond). A cgroup v2 per group would
//! catch it too, where the host is given a delegated cgroup; these machines run cgroup v1, so
//! the sweep is the mechanism, and the limit is documented in SECURITY.md.

use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

use tokio::process::{Child, Command};

/// The variable that marks every supervised process and its descendants:
/// `<our pid>.<our start time>.<group number>`.
pub const SUPERVISOR_ENV: &str = "EXECBOX_SUPERVISOR";

/// A signal the supervisor sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM, to the process group only: a request to stop, which it may handle.
    Term,
    /// SIGKILL, to the group, the processes that left it, and their descendants.
    Kill,
}

/// One supervised process group. Killed (with everything that left it) by
/// [`ProcessGroup::kill`] and when dropped.
#[derive(Debug)]
pub struct ProcessGroup {
    /// The group's id, the leader's pid; `None` when the child had no pid.
    pgid: Option<u32>,
    /// `<SUPERVISOR_ENV>=<value>`, as it appears in `/proc/<pid>/environ`.
    marker: String,
    /// When the leader started (clock ticks after boot); nothing older is of the group.
    since: u64,
    /// The key in the registry of live groups.
    key: u64,
    /// Killed already: dropping it need not look again.
    killed: std::sync::atomic::AtomicBool,
}

/// Starts `command` supervised: its own process group, killed on drop, marked with
/// [`SUPERVISOR_ENV`] (set last, so the command's own environment cannot override it).
pub fn spawn(command: &mut Command) -> io::Result<(Child, ProcessGroup)> {
    let key = NEXT_GROUP.fetch_add(1, Ordering::Relaxed);
    let value = format!("{}{key}", process_prefix());
    command.env(SUPERVISOR_ENV, &value).kill_on_drop(true);
    #[cfg(unix)]
    command.process_group(0);
    let child = command.spawn()?;
    // Every descendant starts at or after the leader; an unreadable leader (gone already)
    // means looking at every process.
    let since = child.id().and_then(read_stat).map_or(0, |s| s.start);
    let group = ProcessGroup {
        pgid: child.id(),
        marker: format!("{SUPERVISOR_ENV}={value}"),
        since,
        key,
        killed: Default::default(),
    };
    live().insert(key, (group.pgid, group.marker.clone(), since));
    Ok((child, group))
}

impl ProcessGroup {
    /// The group's id (its leader's pid), if the child had one.
    pub fn id(&self) -> Option<u32> {
        self.pgid
    }

    /// Sends `signal`: [`Signal::Term`] to the group; [`Signal::Kill`] as [`ProcessGroup::kill`].
    pub fn signal(&self, signal: Signal) {
        match signal {
            Signal::Term => {
                if let Some(pgid) = self.pgid {
                    signal_group(pgid, Signal::Term);
                }
            }
            Signal::Kill => {
                self.kill();
            }
        }
    }

    /// Kills the group, every process that left it, and their descendants; returns how many
    /// processes outside the group were killed.
    pub fn kill(&self) -> usize {
        self.killed.store(true, Ordering::Relaxed);
        kill_group(self.pgid, &self.marker, self.since)
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if !self.killed.load(Ordering::Relaxed) {
            self.kill();
        }
        live().remove(&self.key);
    }
}

/// Kills every group this process started and has not yet dropped, and every process that
/// still carries a marker of this process; for an exit that cannot wait (a second Ctrl-C,
/// SIGTERM). Returns how many groups were live.
pub fn kill_all() -> usize {
    let groups: Vec<(Option<u32>, String, u64)> = live().values().cloned().collect();
    for (pgid, marker, since) in &groups {
        kill_group(*pgid, marker, *since);
    }
    // Groups already dropped were swept then; this catches what started since.
    sweep(
        &Match::Prefix(format!("{SUPERVISOR_ENV}={}", process_prefix())),
        None,
        0,
    );
    groups.len()
}

/// Kills every process whose environment has `variable=value`, and their descendants;
/// returns how many were killed. For processes a dead owner left behind.
pub fn kill_marked(variable: &str, value: &str) -> usize {
    sweep(&Match::Exact(format!("{variable}={value}")), None, 0)
}

/// Whether a process that carries `variable=value` exists (and may be read).
pub fn any_marked(variable: &str, value: &str) -> bool {
    let wanted = Match::Exact(format!("{variable}={value}"));
    snapshot(0).iter().any(|p| environ_matches(p.pid, &wanted))
}

static NEXT_GROUP: AtomicU64 = AtomicU64::new(1);

type Registry = HashMap<u64, (Option<u32>, String, u64)>;

fn live() -> MutexGuard<'static, Registry> {
    static LIVE: OnceLock<Mutex<Registry>> = OnceLock::new();
    LIVE.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// `<pid>.<start time>.`: unique to this process among every process that ever ran here.
fn process_prefix() -> &'static str {
    static PREFIX: OnceLock<String> = OnceLock::new();
    PREFIX.get_or_init(|| {
        let pid = std::process::id();
        let start = read_stat(pid).map_or(0, |s| s.start);
        format!("{pid}.{start}.")
    })
}

fn kill_group(pgid: Option<u32>, marker: &str, since: u64) -> usize {
    if let Some(pgid) = pgid {
        signal_group(pgid, Signal::Kill);
    }
    sweep(&Match::Exact(marker.to_owned()), pgid, since)
}

enum Match {
    Exact(String),
    Prefix(String),
}

/// One process as `/proc/<pid>/stat` describes it.
#[derive(Clone, Copy, Debug)]
struct ProcStat {
    pid: u32,
    ppid: u32,
    pgrp: u32,
    start: u64,
}

/// Kills every process started at or after `since` that matches `wanted` in its environment,
/// is in group `pgid`, or descends from one that does; returns how many outside the group.
///
/// A process that forks between our look at `/proc` and our signal would slip past a plain
/// kill (its child, re-parented when it dies, may carry on forking). So each one found is
/// first stopped (SIGSTOP: a stopped process cannot fork or exit by itself, so its children
/// stay linked to it), and the look is repeated until it finds no one new, within a time
/// budget; then every stopped process is killed. Never this process.
fn sweep(wanted: &Match, pgid: Option<u32>, since: u64) -> usize {
    let me = std::process::id();
    let deadline = std::time::Instant::now() + SWEEP_BUDGET;
    let mut stopped: HashSet<u32> = HashSet::new();
    let mut outside_group: HashSet<u32> = HashSet::new();
    let mut confirmed = false;
    loop {
        let procs = snapshot(since);
        let in_group = |p: &ProcStat| Some(p.pgrp) == pgid;
        let mut targets: HashSet<u32> = procs
            .iter()
            .filter(|p| p.pid != me)
            .filter(|p| stopped.contains(&p.pid) || in_group(p) || environ_matches(p.pid, wanted))
            .map(|p| p.pid)
            .collect();
        // Descendants by parent links, to a fixed point.
        loop {
            let before = targets.len();
            for p in &procs {
                if p.pid != me && targets.contains(&p.ppid) {
                    targets.insert(p.pid);
                }
            }
            if targets.len() == before {
                break;
            }
        }
        let new: Vec<u32> = targets.difference(&stopped).copied().collect();
        if new.is_empty() {
            // Something left the group: look once more a moment later, since a process in
            // the middle of `exec` shows no environment, and one whose parent just died no
            // parent link, for an instant.
            if outside_group.is_empty() || confirmed {
                break;
            }
            confirmed = true;
            std::thread::sleep(std::time::Duration::from_millis(10));
            continue;
        }
        confirmed = false;
        // A process that left the group usually leads a group of its own (`setsid`), which
        // its children share however fast they fork away: that group is killed at once, in
        // one step the kernel does not let a fork slip through, when every member of it is
        // ours (never a group some other process of the session is in).
        let mut groups_killed = HashSet::new();
        for p in procs
            .iter()
            .filter(|p| targets.contains(&p.pid) && !in_group(p))
        {
            let ours = procs
                .iter()
                .filter(|q| q.pgrp == p.pgrp)
                .all(|q| targets.contains(&q.pid));
            if ours && groups_killed.insert(p.pgrp) {
                signal_group(p.pgrp, Signal::Kill);
            }
        }
        for &pid in &new {
            signal_pid(pid, libc_signal::STOP);
            stopped.insert(pid);
            if procs.iter().any(|p| p.pid == pid && !in_group(p)) {
                outside_group.insert(pid);
            }
        }
        if std::time::Instant::now() >= deadline {
            tracing::warn!(
                stopped = stopped.len(),
                "supervised processes kept appearing; killing those found"
            );
            break;
        }
    }
    for &pid in &stopped {
        signal_pid(pid, libc_signal::KILL);
    }
    if !outside_group.is_empty() {
        tracing::debug!(
            killed = outside_group.len(),
            "killed supervised processes outside their group"
        );
    }
    outside_group.len()
}

/// How long one sweep may keep finding new processes before it kills those it has.
const SWEEP_BUDGET: std::time::Duration = std::time::Duration::from_secs(2);

/// The processes started at or after `since` (clock ticks after boot).
#[cfg(target_os = "linux")]
fn snapshot(since: u64) -> Vec<ProcStat> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(read_stat)
        .filter(|s| s.start >= since)
        .collect()
}

#[cfg(not(target_os = "linux"))]
fn snapshot(_since: u64) -> Vec<ProcStat> {
    Vec::new()
}

#[cfg(target_os = "linux")]
fn read_stat(pid: u32) -> Option<ProcStat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name (field 2) may hold spaces and parentheses: fields resume after the last ')'.
    let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    // Field 3 (state) is index 0: ppid is field 4, pgrp field 5, starttime field 22.
    Some(ProcStat {
        pid,
        ppid: fields.get(1)?.parse().ok()?,
        pgrp: fields.get(2)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

#[cfg(not(target_os = "linux"))]
fn read_stat(_pid: u32) -> Option<ProcStat> {
    None
}

fn environ_matches(pid: u32, wanted: &Match) -> bool {
    let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
        return false;
    };
    environ.split(|&b| b == 0).any(|var| match wanted {
        Match::Exact(m) => var == m.as_bytes(),
        Match::Prefix(p) => var.starts_with(p.as_bytes()),
    })
}

#[cfg(unix)]
#[allow(unsafe_code)]
fn signal_group(pgid: u32, signal: Signal) {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return;
    };
    let signal = match signal {
        Signal::Term => libc::SIGTERM,
        Signal::Kill => libc::SIGKILL,
    };
    // SAFETY: getpgrp(2) and kill(2) have no memory-safety preconditions. Never 0 or 1
    // (`kill(-1)` is every process we may signal), never our own group.
    unsafe {
        if pgid <= 1 || pgid == libc::getpgrp() {
            return;
        }
        libc::kill(-pgid, signal);
    }
}

#[cfg(not(unix))]
fn signal_group(_pgid: u32, _signal: Signal) {}

/// The signals a sweep sends, as numbers (`libc` off Unix has none).
mod libc_signal {
    #[cfg(unix)]
    pub const STOP: i32 = libc::SIGSTOP;
    #[cfg(unix)]
    pub const KILL: i32 = libc::SIGKILL;
    #[cfg(not(unix))]
    pub const STOP: i32 = 19;
    #[cfg(not(unix))]
    pub const KILL: i32 = 9;
}

#[cfg(unix)]
#[allow(unsafe_code)]
fn signal_pid(pid: u32, signal: i32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    if pid <= 1 {
        return;
    }
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe {
        libc::kill(pid, signal);
    }
}

#[cfg(not(unix))]
fn signal_pid(_pid: u32, _signal: i32) {}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    fn alive(pid: u32) -> bool {
        read_stat(pid).is_some_and(|_| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| !s[s.rfind(')').unwrap() + 1..].trim_start().starts_with('Z'))
        })
    }

    async fn wait_dead(pid: u32) -> bool {
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            if !alive(pid) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    #[tokio::test]
    async fn a_setsid_grandchild_is_killed_with_its_group() {
        let dir = std::env::temp_dir().join(format!("execbox-supervisor-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pidfile = dir.join("grandchild.pid");
        let _ = std::fs::remove_file(&pidfile);
        // The child starts a grandchild in a new session (out of the group), which writes its
        // pid and sleeps; the child then waits too.
        let script = format!(
            "setsid sh -c 'echo $$ > {}; exec sleep 60' & sleep 60",
            pidfile.display()
        );
        let (mut child, group) = spawn(Command::new("sh").args(["-c", &script])).unwrap();
        let until = Instant::now() + Duration::from_secs(5);
        let grandchild = loop {
            if let Some(pid) = std::fs::read_to_string(&pidfile)
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok())
            {
                break pid;
            }
            assert!(Instant::now() < until, "the grandchild never started");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let stat = read_stat(grandchild).unwrap();
        assert_ne!(Some(stat.pgrp), group.id(), "the grandchild left the group");
        assert_eq!(
            group.kill(),
            1,
            "the grandchild, outside the group, was killed"
        );
        let _ = child.wait().await;
        assert!(wait_dead(grandchild).await, "the setsid grandchild is gone");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn a_fan_out_of_setsid_descendants_is_killed() {
        let dir = std::env::temp_dir().join(format!("execbox-fan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pids = dir.join("pids");
        // 20 grandchildren, each in a session of its own, some of them with children.
        let script = format!(
            "for i in $(seq 20); do setsid sh -c 'echo $$ >> {pids}; sleep 60 & exec sleep 60' & done; wait",
            pids = pids.display()
        );
        let (mut child, group) = spawn(Command::new("sh").args(["-c", &script])).unwrap();
        let until = Instant::now() + Duration::from_secs(5);
        let started = loop {
            let found: Vec<u32> = std::fs::read_to_string(&pids)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect();
            if found.len() == 20 {
                break found;
            }
            assert!(Instant::now() < until, "the fan-out never started");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(group.kill() >= 20);
        let _ = child.wait().await;
        for pid in started {
            assert!(wait_dead(pid).await, "{pid} outlived the kill");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
