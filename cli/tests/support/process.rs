//! Processes seen from outside: `/proc/PID/stat` and `status`, pid files, signals, and waiting
//! for a process to end.

use std::path::Path;
use std::time::{Duration, Instant};

/// The fields of `/proc/PID/stat` after the command name (state, ppid, ...), or `None` when
/// there is no such process. The name stands in parentheses and may itself hold spaces and
/// `)`, so the fields start after the LAST `)`.
pub fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// The state letter of `pid` (`R`, `S`, `Z`, `X`, ...; `?` if unreadable), or `None` when there
/// is no such process.
pub fn state(pid: u32) -> Option<char> {
    let fields = stat_fields(pid)?;
    Some(fields.first().and_then(|s| s.chars().next()).unwrap_or('?'))
}

/// The parent of `pid`.
pub fn parent(pid: u32) -> Option<u32> {
    stat_fields(pid)?.get(1)?.parse().ok()
}

/// Gone entirely: no such process, or dead and reaped (`X`). A zombie is not gone: nobody
/// reaped it.
pub fn is_gone(pid: u32) -> bool {
    matches!(state(pid), None | Some('X'))
}

/// Not running: gone, or a zombie waiting to be reaped.
pub fn is_dead(pid: u32) -> bool {
    matches!(state(pid), None | Some('Z' | 'X'))
}

/// What `/proc` says about a process, for a failure message.
pub fn describe(pid: u32) -> String {
    match state(pid) {
        None => "gone".to_owned(),
        Some('Z') => "a zombie (exited, never reaped)".to_owned(),
        Some(s) => format!("state {s}"),
    }
}

/// A field of `/proc/PID/status` (`VmRSS`, `VmHWM`, `Threads`), as a number.
pub fn status_field(pid: u32, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with(key) && l[key.len()..].starts_with(':'))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
}

/// The pids of `pid`'s child processes.
pub fn children(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|&child| parent(child) == Some(pid))
        .collect()
}

/// VmRSS of `pid` and all its children, in KiB.
pub fn tree_rss(pid: u32) -> u64 {
    std::iter::once(pid)
        .chain(children(pid))
        .filter_map(|p| status_field(p, "VmRSS"))
        .sum()
}

/// Sends `signal` to `pid` with kill(2).
#[allow(unsafe_code)]
pub fn signal(pid: u32, signal: libc::c_int) -> std::io::Result<()> {
    // SAFETY: kill(2) takes two integers and touches no memory of ours.
    let sent = unsafe { libc::kill(pid as libc::pid_t, signal) };
    if sent == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The pids in a file of one pid per line (none when there is no file yet).
pub fn read_pids(path: &Path) -> Vec<u32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// The first pid in a pid file, once one is there.
pub fn read_pid(path: &Path) -> Option<u32> {
    read_pids(path).first().copied()
}

/// Checks `done` every 10 ms until it holds or `within` has passed (then once more); whether
/// it held.
pub async fn eventually(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + within;
    while Instant::now() < until {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    done()
}

/// [`eventually`] for a test without a runtime: sleeps the thread between checks.
pub fn eventually_blocking(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + within;
    while Instant::now() < until {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    done()
}

/// Waits up to `within` for [`is_gone`] (reaped, not a zombie).
pub async fn wait_gone(pid: u32, within: Duration) -> bool {
    eventually(within, || is_gone(pid)).await
}

/// Waits up to `within` for [`is_dead`] (a zombie will do).
pub async fn wait_dead(pid: u32, within: Duration) -> bool {
    eventually(within, || is_dead(pid)).await
}

/// Waits up to `within` for a pid file to hold a pid, and returns it; panics if it never does.
pub async fn wait_for_pid(path: &Path, within: Duration) -> u32 {
    let mut pid = None;
    eventually(within, || {
        pid = read_pid(path);
        pid.is_some()
    })
    .await;
    pid.unwrap_or_else(|| panic!("no pid in {} within {within:?}", path.display()))
}
