//! File descriptors: every server raises its soft `RLIMIT_NOFILE` to the hard limit at start
//! ([`raise_open_files_limit`]), and takes no more connections than it can open while keeping
//! room for everything else it opens ([`connection_cap`]).
//!
//! A connection cap above what the process can open is no cap: once `accept` fails with
//! `EMFILE`, half-sent request heads hold every descriptor and no newcomer is even accepted,
//! so eviction ([`ConnectionSlots`](crate::ConnectionSlots)) never gets its chance.
//!
//! Plain `std` and `libc`: the runner's listener uses it without the `server` feature.

/// Descriptors kept for everything but connections, at least: state files and database
/// connections, runner and tool processes' pipes, the async runtime's own.
const MIN_HEADROOM: u64 = 128;

/// The open-files limit of this process after [`raise_open_files_limit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenFiles {
    /// The soft limit before.
    pub was: u64,
    /// The soft limit now (the hard one, unless raising it failed).
    pub soft: u64,
    /// The hard limit.
    pub hard: u64,
}

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit (the soft one is often 1,024
/// for the sake of `select`, which no server here uses), so a server can hold as many
/// connections as it is allowed to. Call it at start, before the process opens connections,
/// and (in the runner) before its lockdown, which forbids `setrlimit` and may lower both
/// limits after it. An unlimited hard limit raises the soft one to `fs.nr_open`'s usual
/// 1,048,576. Processes started afterwards inherit the raised soft limit.
///
/// # Errors
/// When the limits cannot be read or set; the process keeps its limit, and
/// [`connection_cap`] sizes connections by it all the same.
#[cfg(unix)]
pub fn raise_open_files_limit() -> std::io::Result<OpenFiles> {
    let (was, hard) = current()?;
    // An unlimited hard limit cannot be the soft one for RLIMIT_NOFILE (the kernel caps it at
    // fs.nr_open).
    let target = if hard == libc::RLIM_INFINITY {
        1 << 20
    } else {
        hard
    };
    if was >= target {
        return Ok(OpenFiles {
            was,
            soft: was,
            hard,
        });
    }
    let limit = libc::rlimit {
        rlim_cur: target as libc::rlim_t,
        rlim_max: hard as libc::rlim_t,
    };
    // SAFETY: `limit` is a valid rlimit for the duration of the call.
    #[allow(unsafe_code)]
    let set = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
    if set != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(OpenFiles {
        was,
        soft: target,
        hard,
    })
}

/// This process's soft `RLIMIT_NOFILE` now, if it can be read (and is not unlimited).
pub fn open_files_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        current()
            .ok()
            .map(|(soft, _)| soft)
            .filter(|&soft| soft != libc::RLIM_INFINITY)
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// The soft and hard `RLIMIT_NOFILE`.
#[cfg(unix)]
fn current() -> std::io::Result<(u64, u64)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid, writable rlimit for the duration of the call.
    #[allow(unsafe_code)]
    let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    if got != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // rlim_t is u64 on Linux, not on every unix.
    #[allow(clippy::useless_conversion)]
    Ok((u64::from(limit.rlim_cur), u64::from(limit.rlim_max)))
}

/// How many connections a server may hold at once: `requested`, but never more than the
/// descriptors left under `open_files` (the soft `RLIMIT_NOFILE`, [`open_files_limit`]) once a
/// quarter of them, and at least 128, are kept for everything else the process opens (files,
/// database connections, child processes' pipes); with fewer than 256, half of them. At least
/// one; `requested` alone when the limit is unknown.
///
/// ```
/// use execbox_http::connection_cap;
/// assert_eq!(connection_cap(512, Some(256)), 128);
/// assert_eq!(connection_cap(512, Some(1024)), 512);
/// assert_eq!(connection_cap(4096, Some(1024)), 768);
/// assert_eq!(connection_cap(512, Some(100)), 50);
/// assert_eq!(connection_cap(512, None), 512);
/// ```
pub fn connection_cap(requested: usize, open_files: Option<u64>) -> usize {
    let Some(limit) = open_files else {
        return requested.max(1);
    };
    let headroom = (limit / 4).max(MIN_HEADROOM).min(limit / 2);
    let usable = usize::try_from(limit - headroom).unwrap_or(usize::MAX);
    requested.min(usable).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_leave_room_for_everything_else() {
        assert_eq!(connection_cap(512, Some(256)), 128);
        assert_eq!(connection_cap(512, Some(1024)), 512);
        assert_eq!(connection_cap(10_000, Some(1024)), 768);
        assert_eq!(connection_cap(10_000, Some(1 << 20)), 10_000);
        assert_eq!(connection_cap(64, Some(100)), 50);
        assert_eq!(connection_cap(64, Some(1)), 1);
        assert_eq!(connection_cap(0, None), 1);
    }

    #[cfg(unix)]
    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let raised = raise_open_files_limit().unwrap();
        assert!(raised.soft >= raised.was);
        assert_eq!(open_files_limit(), Some(raised.soft));
        // Raising again changes nothing.
        assert_eq!(raise_open_files_limit().unwrap().soft, raised.soft);
    }
}
