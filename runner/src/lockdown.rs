//! The OS lockdown of the runner process (Linux): Landlock, rlimits, then a seccomp allowlist.
//!
//! The guest is hostile from its first instruction, so each transport locks the whole process
//! down after start-up and before it reads the first byte of guest input. QuickJS is the first
//! wall; this is the second, for the day a bug in the engine lets guest code run native code.
//! The lockdown has two steps because Landlock restricts only the calling thread and the threads
//! it spawns later (restricting all threads needs Landlock ABI 8; this machine has 7), while
//! seccomp reaches every thread at once (TSYNC):
//!
//! 0. [`begin`] first drops every **capability** (bounding, ambient, effective, permitted and
//!    inheritable sets), so a runner started as root holds no privilege a bug could use.
//! 1. [`begin`], on the main thread before any other thread exists: a **Landlock** domain that
//!    handles every filesystem right, TCP bind and connect (ABI 4+) and the abstract-socket and
//!    signal scopes (ABI 6+), with no rule granting any of them. Landlock must exist (the rights
//!    of ABI 1 are a hard requirement); rights newer than the kernel are dropped, all others are
//!    enforced. It also sets `no_new_privs`.
//! 2. [`Pending::finish`], once the transport has bound its listener and spawned the threads it
//!    needs up front: **rlimits** (no core dumps; at most [`Mode::max_open_files`] files; in
//!    stdio mode, whose threads all exist by then, no new processes or threads either), then a
//!    **seccomp** filter on all threads (TSYNC): the [`Mode`]'s allowlist, and any other syscall
//!    kills the process with SIGSYS. rlimits come before seccomp so that `prlimit64` need not
//!    stay allowed.
//!
//! Two deliberate exceptions to "kill": in WebSocket mode `clone3` fails with `ENOSYS` (seccomp
//! cannot read its flags, and glibc then falls back to `clone`, allowed only with
//! `CLONE_THREAD`; stdio mode allows neither), and `open`/`openat` fail with `EACCES` (glibc's
//! malloc opens `/proc/sys/vm/overcommit_memory` the first time a thread's heap shrinks, long
//! after start-up; Landlock would refuse it too). `mmap` and `mprotect` may not ask for
//! `PROT_EXEC`, `prctl` may only name a thread, `fcntl` may only read descriptor flags (std's
//! debug-build check before a close), and `tgkill` may only signal this process (so an
//! `abort()` still ends as SIGABRT). A syscall through another ABI (i386 `int 0x80`, x32) is
//! killed too.
//!
//! The allowlists were derived by tracing both modes (`strace -f`) under the runner's test
//! suites (the conformance transcripts over stdio and WebSocket included), keeping what runs
//! after the lockdown, plus what rarer paths need: `brk`, every clock and sleep the vDSO
//! usually answers (QuickJS's `Date` calls `gettimeofday`; a machine whose vDSO lacks a clock
//! makes them real syscalls), and what `abort()` and signal delivery use (`getpid`, `tgkill`,
//! `rt_sigreturn`).
//!
//! [`close_inherited_fds`] closes every descriptor above 2 that the runner inherited, so a
//! careless parent cannot hand the guest's process a file, socket or pipe.
//!
//! What the lockdown does NOT cover: the CPU and memory limits of an execution (the engine
//! enforces those), the files and sockets the runner already holds (stdin/stdout, the listener
//! and its connections), and systems other than Linux on x86_64 or aarch64, where it cannot be
//! applied and the runner refuses to start unless given `--insecure-no-sandbox`.

// Without the `cli` feature only stdio mode is used (by `serve_stdio`); the supervisor's mode
// and the probes stay compiled and unit-tested all the same.
#![cfg_attr(not(feature = "cli"), allow(dead_code))]

/// Which transport is being locked down; each has its own allowlist and file limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// One NDJSON session on stdin/stdout. Its threads all exist before [`Pending::finish`], so
    /// it may create no thread (nor process) afterwards.
    Stdio,
    /// The allowlist of a process that serves connections on a listener bound before the
    /// lockdown and creates threads (never processes). No transport uses it since `--listen`
    /// became a supervisor of stdio runners ([`Mode::Supervisor`]); the `--lockdown-probe`
    /// actions run under it (it is stdio's allowlist plus threads and sockets).
    WebSocket {
        /// `--max-sessions`, which sizes the file limit.
        max_sessions: usize,
    },
    /// The `--listen` supervisor ([`crate::listen`]): runs no guest code, but parses network
    /// input and starts one stdio runner process per session. Its Landlock domain grants read
    /// and execute on the child executable and the system library directories
    /// ([`SUPERVISOR_LIBRARY_DIRS`]), reading files under `/proc` (the memory figure of
    /// `/metrics`) and nothing else (no other file, no TCP bind or connect);
    /// its rlimits forbid core dumps and bound open files; its seccomp allowlist (inherited by
    /// the session processes, whose own filters stack on it) admits serving connections,
    /// starting and reaping processes, and what a runner does before its own lockdown; any
    /// other syscall fails with EPERM. [`begin_supervisor`] starts it, [`Pending::finish`]
    /// completes it.
    Supervisor {
        /// `--max-sessions`, which sizes the file limit.
        max_sessions: usize,
    },
}

/// Where the dynamic loader finds the libraries of a child runner (read and execute only).
pub(crate) const SUPERVISOR_LIBRARY_DIRS: &[&str] = &["/lib", "/lib64", "/usr/lib", "/usr/lib64"];

impl Mode {
    /// RLIMIT_NOFILE under the lockdown: 64 in stdio mode; 4 per session plus 64 over WebSocket.
    pub(crate) fn max_open_files(self) -> u64 {
        match self {
            Mode::Stdio => 64,
            Mode::WebSocket { max_sessions } => {
                (max_sessions as u64).saturating_mul(4).saturating_add(64)
            }
            // Per session: the connection, the child's stdin and stdout, a pidfd; plus pending
            // handshakes, warm children and the runtime's own descriptors.
            Mode::Supervisor { max_sessions } => {
                (max_sessions as u64).saturating_mul(4).saturating_add(128)
            }
        }
    }
}

/// Why the OS lockdown could not be applied. The runner refuses to start without it, unless
/// told to with `--insecure-no-sandbox` ([`Lockdown::Off`]); each message says so.
#[derive(Debug, thiserror::Error)]
pub enum LockdownError {
    /// There is no lockdown on this system: it exists only on Linux, on x86_64 and aarch64.
    #[error(
        "cannot apply the OS lockdown, refusing to start: it exists only on Linux (x86_64, \
         aarch64) (--insecure-no-sandbox runs without it, at your own risk)"
    )]
    Unsupported,
    /// One of its steps failed.
    #[error(
        "cannot apply the OS lockdown, refusing to start: {step}: {cause} \
         (--insecure-no-sandbox runs without it, at your own risk)"
    )]
    Failed {
        /// What was being done, e.g. `Landlock is unavailable (it needs Linux 5.13+ ...)`.
        step: String,
        /// Why it failed: the system's error, with its causes.
        cause: String,
    },
}

impl LockdownError {
    /// `step` failed because of `cause` (its whole chain of sources is kept in the text).
    fn failed(step: impl Into<String>, cause: impl std::fmt::Display) -> LockdownError {
        LockdownError::Failed {
            step: step.into(),
            cause: cause.to_string(),
        }
    }
}

/// `?` with the step that failed, for any error.
trait Step<T> {
    fn step(self, step: impl Into<String>) -> Result<T, LockdownError>;
}

impl<T, E: std::error::Error> Step<T> for Result<T, E> {
    fn step(self, step: impl Into<String>) -> Result<T, LockdownError> {
        self.map_err(|e| {
            let mut cause = e.to_string();
            let mut source = e.source();
            while let Some(inner) = source {
                cause.push_str(&format!(": {inner}"));
                source = inner.source();
            }
            LockdownError::failed(step, cause)
        })
    }
}

/// Whether a transport locks the process down before reading guest input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lockdown {
    /// Apply the lockdown; refuse to serve if it cannot be applied. The default.
    Enforce,
    /// Run without it (`--insecure-no-sandbox`).
    Off,
}

impl Lockdown {
    /// Runs [`begin`] for `mode` when enforcing; `None` when off.
    pub(crate) fn begin(self, mode: Mode) -> Result<Option<Pending>, LockdownError> {
        match self {
            Lockdown::Enforce => begin(mode).map(Some),
            Lockdown::Off => Ok(None),
        }
    }

    /// Runs [`begin_supervisor`] when enforcing; `None` when off.
    pub(crate) fn begin_supervisor(
        self,
        max_sessions: usize,
        child_program: &std::path::Path,
    ) -> Result<Option<Pending>, LockdownError> {
        match self {
            Lockdown::Enforce => begin_supervisor(max_sessions, child_program).map(Some),
            Lockdown::Off => Ok(None),
        }
    }
}

/// A lockdown whose Landlock step is in force on this thread; [`Pending::finish`] completes it.
#[derive(Debug)]
#[must_use = "the lockdown is incomplete until `finish` is called"]
pub(crate) struct Pending {
    mode: Mode,
}

impl Pending {
    /// Sets the rlimits and installs the seccomp allowlist on every thread of the process.
    pub(crate) fn finish(self) -> Result<(), LockdownError> {
        imp::finish(self.mode)?;
        tracing::debug!(mode = ?self.mode, "OS lockdown complete");
        Ok(())
    }
}

/// Drops every capability and applies the Landlock step on the calling thread. Call it before
/// the process has any other thread: threads that already exist keep their capabilities and
/// are not restricted by Landlock.
pub(crate) fn begin(mode: Mode) -> Result<Pending, LockdownError> {
    imp::drop_capabilities()?;
    if let Mode::Supervisor { .. } = mode {
        return Err(LockdownError::failed(
            "Landlock",
            "the supervisor's lockdown starts with `begin_supervisor`",
        ));
    }
    imp::landlock()?;
    Ok(Pending { mode })
}

/// Closes every file descriptor above 2. Call it first thing, before the process opens
/// anything of its own: whatever a parent let the runner inherit is gone.
pub(crate) fn close_inherited_fds() {
    imp::close_inherited_fds();
}

/// The Landlock step of [`Mode::Supervisor`], on the calling thread (call it before the process
/// has any other thread): read and execute on `child_program` and the system library
/// directories, nothing else. [`Pending::finish`] then sets its rlimits.
pub(crate) fn begin_supervisor(
    max_sessions: usize,
    child_program: &std::path::Path,
) -> Result<Pending, LockdownError> {
    imp::drop_capabilities()?;
    imp::landlock_supervisor(child_program)?;
    Ok(Pending {
        mode: Mode::Supervisor { max_sessions },
    })
}

/// Both steps at once, for a process that has only the calling thread.
pub(crate) fn lock_down(mode: Mode) -> Result<(), LockdownError> {
    begin(mode)?.finish()
}

/// An action tried by the hidden `--lockdown-probe` flag, so tests can check the lockdown from
/// outside. Each probe runs in its own process and reports through its exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    /// Full lockdown, then nothing: exits 0.
    None,
    /// Full lockdown, then spawn and join a thread: exits 0.
    Thread,
    /// Full lockdown, then `abort()`: dies of SIGABRT, not SIGSYS.
    Abort,
    /// Full lockdown, then open `/etc/hostname`: exits [`PROBE_DENIED`] (seccomp's EACCES).
    Open,
    /// Full lockdown, then create a TCP socket: dies of SIGSYS.
    Socket,
    /// Full lockdown, then `fork()`: dies of SIGSYS.
    Fork,
    /// Full lockdown, then run `/bin/true`: dies of SIGSYS.
    Spawn,
    /// Landlock only, then open `/etc/hostname`: exits [`PROBE_DENIED`].
    LandlockOpen,
    /// Landlock only, then connect to 127.0.0.1:1: exits [`PROBE_DENIED`] (not "refused").
    LandlockConnect,
    /// Full lockdown, then every time syscall as a real syscall (not through the vDSO):
    /// exits 0.
    Clocks,
}

/// The probes by their `--lockdown-probe` names.
const PROBE_NAMES: [(&str, Probe); 10] = [
    ("none", Probe::None),
    ("thread", Probe::Thread),
    ("abort", Probe::Abort),
    ("open", Probe::Open),
    ("socket", Probe::Socket),
    ("fork", Probe::Fork),
    ("spawn", Probe::Spawn),
    ("landlock-open", Probe::LandlockOpen),
    ("landlock-connect", Probe::LandlockConnect),
    ("clocks", Probe::Clocks),
];

/// The values `--lockdown-probe` accepts.
pub(crate) const PROBES: [&str; 10] = {
    let mut names = [""; 10];
    let mut i = 0;
    while i < names.len() {
        names[i] = PROBE_NAMES[i].0;
        i += 1;
    }
    names
};

/// Exit status of a probe whose action was refused with EACCES or EPERM.
const PROBE_DENIED: i32 = 3;
/// Exit status of a probe whose action failed with any other error.
const PROBE_FAILED: i32 = 4;

/// Applies the lockdown (WebSocket mode's, the larger allowlist) or only its Landlock step, tries
/// the probe's action and returns the exit status to report: 0 if the action succeeded,
/// [`PROBE_DENIED`] or [`PROBE_FAILED`] if it failed, 1 if the lockdown could not be applied
/// (or `name` is no probe's).
pub(crate) fn probe(name: &str) -> i32 {
    let Some(&(_, probe)) = PROBE_NAMES.iter().find(|(n, _)| *n == name) else {
        eprintln!("execbox-runner: no lockdown probe is called {name:?}");
        return 1;
    };
    let mode = Mode::WebSocket { max_sessions: 1 };
    // Like the server, whose runtime threads exist before its lockdown: glibc's first thread
    // start installs a signal handler (rt_sigaction), which the allowlist does not allow.
    if std::thread::spawn(|| ()).join().is_err() {
        return PROBE_FAILED;
    }
    let locked = match probe {
        Probe::LandlockOpen | Probe::LandlockConnect => begin(mode).map(drop),
        _ => lock_down(mode),
    };
    if let Err(e) = locked {
        eprintln!("execbox-runner: {e:#}");
        return 1;
    }
    let outcome = match probe {
        Probe::None => Ok(()),
        Probe::Thread => std::thread::Builder::new()
            .name("probe".into())
            .spawn(|| ())
            .and_then(|t| {
                t.join()
                    .map_err(|_| std::io::Error::other("thread panicked"))
            }),
        Probe::Abort => std::process::abort(),
        Probe::Open | Probe::LandlockOpen => std::fs::File::open("/etc/hostname").map(drop),
        Probe::Socket => std::net::TcpListener::bind("127.0.0.1:0").map(drop),
        Probe::Fork => imp::fork_and_exit_child(),
        Probe::Spawn => std::process::Command::new("/bin/true").status().map(drop),
        Probe::LandlockConnect => std::net::TcpStream::connect("127.0.0.1:1").map(drop),
        Probe::Clocks => imp::raw_clock_syscalls(),
    };
    match outcome {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("execbox-runner: probe {probe:?}: {e}");
            match e.kind() {
                std::io::ErrorKind::PermissionDenied => PROBE_DENIED,
                _ => PROBE_FAILED,
            }
        }
    }
}

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
mod imp {
    use std::collections::BTreeMap;

    use landlock::{
        path_beneath_rules, Access, AccessFs, AccessNet, CompatLevel, Compatible, LandlockStatus,
        RestrictionStatus, Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus,
        Scope, ABI,
    };
    use seccompiler::{
        BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };

    use super::{LockdownError, Mode, Step as _};

    /// The newest Landlock ABI the `landlock` crate knows; the kernel's may be older.
    const NEWEST_ABI: ABI = ABI::V9;

    /// What a missing Landlock (or one without the rights of ABI 1) fails with.
    const LANDLOCK_MISSING: &str =
        "Landlock is unavailable (it needs Linux 5.13+ with Landlock enabled)";

    /// A ruleset that handles every filesystem right (those of ABI 1 are a hard requirement,
    /// newer ones are dropped on older kernels), TCP bind and connect, and the scopes.
    fn ruleset() -> Result<RulesetCreated, LockdownError> {
        let ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessFs::from_all(ABI::V1))
            .step(LANDLOCK_MISSING)?;
        let handled = || {
            ruleset
                .set_compatibility(CompatLevel::BestEffort)
                .handle_access(AccessFs::from_all(NEWEST_ABI))?
                .handle_access(AccessNet::from_all(NEWEST_ABI))?
                .scope(Scope::from_all(NEWEST_ABI))?
                .create()
        };
        handled().step("cannot build the Landlock ruleset")
    }

    /// Fails unless Landlock is enforced and `no_new_privs` set.
    fn enforced(status: &RestrictionStatus) -> Result<(), LockdownError> {
        if status.ruleset == RulesetStatus::NotEnforced || !status.no_new_privs {
            return Err(LockdownError::failed(
                "Landlock",
                format!("it is not enforced ({status:?})"),
            ));
        }
        Ok(())
    }

    pub(super) fn landlock() -> Result<(), LockdownError> {
        let status = ruleset()?
            .restrict_self()
            .step("cannot restrict the runner with Landlock")?;
        enforced(&status)?;
        if let LandlockStatus::Available { effective_abi, .. } = status.landlock {
            tracing::debug!(abi = ?effective_abi, ruleset = ?status.ruleset, "Landlock enforced");
        }
        Ok(())
    }

    /// Like [`landlock`], with read and execute granted on the child program and the library
    /// directories (those that exist).
    pub(super) fn landlock_supervisor(
        child_program: &std::path::Path,
    ) -> Result<(), LockdownError> {
        let program = child_program
            .canonicalize()
            .step(format!("cannot resolve {}", child_program.display()))?;
        let read_exec = AccessFs::Execute | AccessFs::ReadFile;
        let ruleset = ruleset()?;
        let restricted = || {
            ruleset
                .add_rules(path_beneath_rules([program.as_path()], read_exec))?
                .add_rules(path_beneath_rules(
                    super::SUPERVISOR_LIBRARY_DIRS,
                    read_exec,
                ))?
                // `/proc/PID/status` of itself and its runner processes, for /metrics' memory
                // figure: reading files only, no directory listing, nothing executed.
                .add_rules(path_beneath_rules(["/proc"], AccessFs::ReadFile))?
                .restrict_self()
        };
        let status = restricted().step("cannot restrict the supervisor with Landlock")?;
        enforced(&status)
    }

    pub(super) fn finish(mode: Mode) -> Result<(), LockdownError> {
        set_rlimit(libc::RLIMIT_CORE, 0).step("cannot set RLIMIT_CORE")?;
        set_rlimit(libc::RLIMIT_NOFILE, mode.max_open_files()).step("cannot set RLIMIT_NOFILE")?;
        if mode == Mode::Stdio {
            // NPROC counts threads too (of the whole user, and not for root); only stdio mode,
            // whose threads all exist by now, can afford it. WebSocket mode relies on seccomp.
            set_rlimit(libc::RLIMIT_NPROC, 0).step("cannot set RLIMIT_NPROC")?;
        }
        seccomp(mode).step("cannot install the seccomp filter")
    }

    /// Installs `mode`'s filters on every thread (TSYNC).
    fn seccomp(mode: Mode) -> Result<(), seccompiler::Error> {
        let arch = TargetArch::try_from(std::env::consts::ARCH)?;
        for filter in filters(mode, arch)? {
            let program: BpfProgram = filter.try_into()?;
            seccompiler::apply_filter_all_threads(&program)?;
        }
        Ok(())
    }

    /// The seccomp filters of `mode`, in the order they are installed: the syscalls each
    /// errno filter answers with its error, then the allowlist and what anything outside it
    /// gets. Filters stack: for each syscall the kernel takes the strictest verdict of all of
    /// them, so an errno filter turns a syscall the allowlist lets through into that error
    /// (and never saves one it kills). The allowlist goes last: it forbids installing filters.
    ///
    /// - stdio: `open`/`openat` fail with EACCES; anything else outside the allowlist kills
    ///   the process, `clone3` among them (so it needs no filter of its own).
    /// - WebSocket (the probes): the same, and `clone3` fails with ENOSYS, so that glibc falls
    ///   back to `clone`, which the allowlist admits for threads only.
    /// - The supervisor, inherited by every session process it starts (whose own filters then
    ///   stack on it): `clone3` fails with ENOSYS; no errno filter for `open`, which the
    ///   session processes' loader needs (Landlock confines it to the program and the
    ///   libraries); anything outside the allowlist fails with EPERM rather than killing the
    ///   process, which serves every session.
    fn filters(mode: Mode, arch: TargetArch) -> Result<Vec<SeccompFilter>, seccompiler::Error> {
        const CLONE3: (&[i64], i32) = (&[libc::SYS_clone3], libc::ENOSYS);
        const OPEN_DENIED: (&[i64], i32) = (OPEN, libc::EACCES);
        let (errnos, allowed, otherwise): (&[(&[i64], i32)], _, _) = match mode {
            Mode::Stdio => (&[OPEN_DENIED], allowlist(mode)?, SeccompAction::KillProcess),
            Mode::WebSocket { .. } => (
                &[CLONE3, OPEN_DENIED],
                allowlist(mode)?,
                SeccompAction::KillProcess,
            ),
            Mode::Supervisor { .. } => (
                &[CLONE3],
                supervisor_allowlist()?,
                SeccompAction::Errno(libc::EPERM as u32),
            ),
        };
        let mut filters = errnos
            .iter()
            .map(|&(syscalls, errno)| only(syscalls, errno, arch))
            .collect::<Result<Vec<_>, _>>()?;
        filters.push(SeccompFilter::new(
            allowed,
            otherwise,
            SeccompAction::Allow,
            arch,
        )?);
        Ok(filters)
    }

    /// What the supervisor does after its lockdown (serve connections; start, signal and reap
    /// session processes) and what a session process does before its own (the dynamic loader,
    /// std's start-up, installing its lockdown); derived with `strace -f` under
    /// `runner/tests/listen.rs` and the conformance transcripts over WebSocket. A session
    /// process's own allowlist ([`BOTH`]) is included, so stacking never narrows it.
    const SUPERVISOR: &[i64] = &[
        // Serving connections on the listener bound before the lockdown.
        libc::SYS_accept4,
        libc::SYS_setsockopt,
        libc::SYS_recvfrom,
        libc::SYS_sendto,
        libc::SYS_writev,
        libc::SYS_shutdown,
        libc::SYS_close,
        libc::SYS_epoll_ctl,
        libc::SYS_epoll_pwait,
        #[cfg(target_arch = "x86_64")]
        libc::SYS_epoll_wait,
        libc::SYS_ppoll,
        #[cfg(target_arch = "x86_64")]
        libc::SYS_poll,
        libc::SYS_restart_syscall,
        // Starting, signalling and reaping session processes (clone3 fails with ENOSYS).
        libc::SYS_clone,
        libc::SYS_clone3,
        libc::SYS_execve,
        libc::SYS_pipe2,
        libc::SYS_dup3,
        #[cfg(target_arch = "x86_64")]
        libc::SYS_dup2,
        libc::SYS_wait4,
        libc::SYS_waitid,
        libc::SYS_kill,
        libc::SYS_tgkill,
        libc::SYS_pidfd_open,
        libc::SYS_pidfd_send_signal,
        libc::SYS_rt_sigaction,
        // A session process before its lockdown: the loader and std's start-up...
        libc::SYS_faccessat,
        libc::SYS_faccessat2,
        #[cfg(target_arch = "x86_64")]
        libc::SYS_access,
        libc::SYS_newfstatat,
        libc::SYS_fstat,
        libc::SYS_pread64,
        libc::SYS_lseek,
        libc::SYS_mmap,
        libc::SYS_mprotect,
        #[cfg(target_arch = "x86_64")]
        libc::SYS_arch_prctl,
        libc::SYS_set_tid_address,
        // ... and its own lockdown: closing what it inherited, dropping capabilities (it holds
        // none: the supervisor dropped them), then rlimits, Landlock and seccomp.
        libc::SYS_close_range,
        libc::SYS_capget,
        libc::SYS_capset,
        libc::SYS_prlimit64,
        libc::SYS_landlock_create_ruleset,
        libc::SYS_landlock_add_rule,
        libc::SYS_landlock_restrict_self,
        libc::SYS_seccomp,
    ];

    fn supervisor_allowlist() -> Result<BTreeMap<i64, Vec<SeccompRule>>, seccompiler::Error> {
        let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BOTH
            .iter()
            .chain(SUPERVISOR)
            .map(|&nr| (nr, Vec::new()))
            .collect();
        // isatty() (tracing's colour check) is the only ioctl. (TCGETS's type varies by libc.)
        #[allow(clippy::unnecessary_cast)]
        let tcgets = libc::TCGETS as u64;
        rules.insert(libc::SYS_ioctl, vec![rule(1, SeccompCmpOp::Eq, tcgets)?]);
        // Descriptor flags (non-blocking pipes, close-on-exec), nothing else.
        let fcntl = [libc::F_GETFD, libc::F_SETFD, libc::F_GETFL, libc::F_SETFL];
        rules.insert(
            libc::SYS_fcntl,
            fcntl
                .iter()
                .map(|&cmd| rule(1, SeccompCmpOp::Eq, cmd as u64))
                .collect::<Result<_, _>>()?,
        );
        // Thread names, no_new_privs (set by each session process's Landlock step) and the
        // capability sets a session process empties.
        let prctl = [
            libc::PR_SET_NAME,
            libc::PR_SET_NO_NEW_PRIVS,
            libc::PR_CAP_AMBIENT,
            libc::PR_CAPBSET_DROP,
        ];
        rules.insert(
            libc::SYS_prctl,
            prctl
                .iter()
                .map(|&op| rule(0, SeccompCmpOp::Eq, op as u64))
                .collect::<Result<_, _>>()?,
        );
        Ok(rules)
    }

    #[cfg(target_env = "gnu")]
    type Resource = libc::__rlimit_resource_t;
    #[cfg(not(target_env = "gnu"))]
    type Resource = libc::c_int;

    /// Lowers both the soft and the hard limit (never raises the hard one).
    fn set_rlimit(resource: Resource, value: u64) -> std::io::Result<()> {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `limit` is a valid, writable rlimit for the duration of the call.
        #[allow(unsafe_code)]
        let got = unsafe { libc::getrlimit(resource, &mut limit) };
        if got != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let value = value.min(limit.rlim_max);
        let limit = libc::rlimit {
            rlim_cur: value,
            rlim_max: value,
        };
        // SAFETY: `limit` is a valid rlimit for the duration of the call.
        #[allow(unsafe_code)]
        let set = unsafe { libc::setrlimit(resource, &limit) };
        if set != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// The syscalls that open a path by name, answered with EACCES.
    #[cfg(target_arch = "x86_64")]
    const OPEN: &[i64] = &[libc::SYS_open, libc::SYS_openat];
    #[cfg(target_arch = "aarch64")]
    const OPEN: &[i64] = &[libc::SYS_openat];

    /// Syscalls both modes need after the lockdown, with any arguments.
    const BOTH: &[i64] = &[
        // I/O on the descriptors the runner already holds (stdio, tracing on stderr).
        libc::SYS_read,
        libc::SYS_write,
        // Memory (mmap and mprotect are below, without PROT_EXEC).
        libc::SYS_munmap,
        libc::SYS_madvise,
        libc::SYS_mremap,
        libc::SYS_brk,
        // Synchronisation, time and scheduling (the clocks are usually in the vDSO).
        libc::SYS_futex,
        libc::SYS_sched_yield,
        libc::SYS_sched_getaffinity,
        libc::SYS_clock_gettime,
        libc::SYS_clock_getres,
        libc::SYS_gettimeofday,
        #[cfg(target_arch = "x86_64")]
        libc::SYS_time,
        libc::SYS_clock_nanosleep,
        libc::SYS_nanosleep,
        libc::SYS_getrandom,
        // Thread start and end (stdio's threads may still be starting when seccomp arrives).
        libc::SYS_rseq,
        libc::SYS_set_robust_list,
        libc::SYS_gettid,
        libc::SYS_getpid,
        libc::SYS_sigaltstack,
        libc::SYS_rt_sigprocmask,
        libc::SYS_rt_sigreturn,
        libc::SYS_exit,
        libc::SYS_exit_group,
        // Allowed here, refused with EACCES by a filter stacked on top (see the module docs).
        libc::SYS_openat,
        #[cfg(target_arch = "x86_64")]
        libc::SYS_open,
    ];

    /// What WebSocket mode adds: serving connections on the listener and one thread per session.
    const WEBSOCKET: &[i64] = &[
        // Allowed here, refused with ENOSYS by a filter stacked on top; `clone` is below.
        libc::SYS_clone3,
        libc::SYS_accept4,
        libc::SYS_setsockopt,
        libc::SYS_recvfrom,
        libc::SYS_sendto,
        libc::SYS_close,
        libc::SYS_epoll_ctl,
        #[cfg(target_arch = "x86_64")]
        libc::SYS_epoll_wait,
        #[cfg(target_arch = "aarch64")]
        libc::SYS_epoll_pwait,
    ];

    fn allowlist(mode: Mode) -> Result<BTreeMap<i64, Vec<SeccompRule>>, seccompiler::Error> {
        let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
            BOTH.iter().map(|&nr| (nr, Vec::new())).collect();
        if let Mode::WebSocket { .. } = mode {
            rules.extend(WEBSOCKET.iter().map(|&nr| (nr, Vec::new())));
            // New threads only: a clone without CLONE_THREAD would be a new process.
            let thread = libc::CLONE_THREAD as u64;
            rules.insert(
                libc::SYS_clone,
                vec![rule(0, SeccompCmpOp::MaskedEq(thread), thread)?],
            );
            // With debug assertions, std checks that a descriptor is open before closing it.
            let getfd = libc::F_GETFD as u64;
            rules.insert(libc::SYS_fcntl, vec![rule(1, SeccompCmpOp::Eq, getfd)?]);
        }
        let no_exec = SeccompCmpOp::MaskedEq(libc::PROT_EXEC as u64);
        rules.insert(libc::SYS_mmap, vec![rule(2, no_exec.clone(), 0)?]);
        rules.insert(libc::SYS_mprotect, vec![rule(2, no_exec, 0)?]);
        rules.insert(
            libc::SYS_prctl,
            vec![rule(0, SeccompCmpOp::Eq, libc::PR_SET_NAME as u64)?],
        );
        let pid = u64::from(std::process::id());
        rules.insert(libc::SYS_tgkill, vec![rule(0, SeccompCmpOp::Eq, pid)?]);
        Ok(rules)
    }

    fn rule(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompRule, seccompiler::Error> {
        let condition = SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value)?;
        Ok(SeccompRule::new(vec![condition])?)
    }

    /// A filter that fails `syscalls` with `errno` and lets everything else through.
    fn only(
        syscalls: &[i64],
        errno: i32,
        arch: TargetArch,
    ) -> Result<SeccompFilter, seccompiler::Error> {
        let rules = syscalls.iter().map(|&nr| (nr, Vec::new())).collect();
        Ok(SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(errno as u32),
            arch,
        )?)
    }

    pub(super) fn close_inherited_fds() {
        // SAFETY: close_range only closes descriptors; nothing of this process holds one above
        // 2 yet (it is called first thing in a transport).
        #[allow(unsafe_code)]
        let closed = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
        if closed != 0 {
            // Kernels before 5.9: close them one by one.
            let max = match std::fs::read_dir("/proc/self/fd") {
                Ok(entries) => entries
                    .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
                    .max()
                    .unwrap_or(2),
                Err(_) => 1024,
            };
            for fd in 3..=max {
                // SAFETY: as above; closing a descriptor that is not open is harmless (EBADF).
                #[allow(unsafe_code)]
                unsafe {
                    libc::close(fd);
                }
            }
        }
    }

    /// Capability sets as `capget`/`capset` take them (version 3: two 32-bit words each).
    #[repr(C)]
    struct CapHeader {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Default, Clone, Copy)]
    struct CapData {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

    pub(super) fn drop_capabilities() -> Result<(), LockdownError> {
        let mut header = CapHeader {
            version: CAPABILITY_VERSION_3,
            pid: 0,
        };
        let mut data = [CapData::default(); 2];
        // SAFETY: header and data are valid, writable and of the layout version 3 expects.
        #[allow(unsafe_code)]
        let got = unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
        if got != 0 {
            return Err(std::io::Error::last_os_error()).step("cannot read capabilities");
        }
        let held = data
            .iter()
            .any(|d| d.effective != 0 || d.permitted != 0 || d.inheritable != 0);
        // SAFETY: plain prctl calls with integer arguments.
        #[allow(unsafe_code)]
        unsafe {
            // Ambient capabilities would survive an exec; there is none to keep.
            libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_CLEAR_ALL,
                0,
                0,
                0,
            );
        }
        if held {
            // The bounding set needs CAP_SETPCAP to shrink, so it goes before the rest. A
            // capability the kernel does not know fails with EINVAL: that is the end.
            for cap in 0..64 {
                // SAFETY: as above.
                #[allow(unsafe_code)]
                let dropped = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
                if dropped != 0 {
                    // EINVAL: past the last capability. EPERM: no CAP_SETPCAP to shrink it;
                    // the bounding set only limits what an exec could gain, and seccomp
                    // forbids exec, so the sets below are what matters.
                    break;
                }
            }
            let mut header = CapHeader {
                version: CAPABILITY_VERSION_3,
                pid: 0,
            };
            let none = [CapData::default(); 2];
            // SAFETY: as for capget; the data is read, not written.
            #[allow(unsafe_code)]
            let set = unsafe { libc::syscall(libc::SYS_capset, &mut header, none.as_ptr()) };
            if set != 0 {
                return Err(std::io::Error::last_os_error()).step("cannot drop capabilities");
            }
        }
        Ok(())
    }

    pub(super) fn raw_clock_syscalls() -> std::io::Result<()> {
        let mut tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 0,
        };
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: each call writes only into the local structs passed.
        #[allow(unsafe_code)]
        let results = unsafe {
            [
                libc::syscall(libc::SYS_gettimeofday, &mut tv, std::ptr::null_mut::<u8>()),
                libc::syscall(libc::SYS_clock_gettime, libc::CLOCK_REALTIME, &mut ts),
                libc::syscall(libc::SYS_clock_gettime, libc::CLOCK_MONOTONIC, &mut ts),
                libc::syscall(libc::SYS_clock_getres, libc::CLOCK_MONOTONIC, &mut ts),
                #[cfg(target_arch = "x86_64")]
                libc::syscall(libc::SYS_time, std::ptr::null_mut::<libc::time_t>()),
            ]
        };
        if results.iter().any(|&r| r < 0) {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    pub(super) fn fork_and_exit_child() -> std::io::Result<()> {
        // SAFETY: the child calls only `_exit`, which is async-signal-safe.
        #[allow(unsafe_code)]
        let pid = unsafe { libc::fork() };
        match pid {
            -1 => Err(std::io::Error::last_os_error()),
            // SAFETY: `_exit` ends the child at once, running nothing of the parent's.
            #[allow(unsafe_code)]
            0 => unsafe { libc::_exit(0) },
            _ => Ok(()),
        }
    }

    #[cfg(test)]
    mod tests {
        use super::{allowlist, filters, supervisor_allowlist, Mode};

        #[test]
        fn supervisor_allowlist_keeps_every_runner_syscall_and_no_new_sockets() {
            let supervisor = supervisor_allowlist().unwrap();
            // A session process's filter stacks on the supervisor's: the supervisor's must
            // admit everything a runner's admits.
            let stdio = allowlist(Mode::Stdio).unwrap();
            assert!(stdio.keys().all(|nr| supervisor.contains_key(nr)));
            for forbidden in [
                libc::SYS_socket,
                libc::SYS_socketpair,
                libc::SYS_connect,
                libc::SYS_bind,
                libc::SYS_listen,
                libc::SYS_ptrace,
                libc::SYS_process_vm_readv,
                libc::SYS_mount,
                libc::SYS_unshare,
                libc::SYS_setns,
                libc::SYS_bpf,
                libc::SYS_io_uring_setup,
                libc::SYS_userfaultfd,
                libc::SYS_perf_event_open,
                libc::SYS_keyctl,
            ] {
                assert!(
                    !supervisor.contains_key(&forbidden),
                    "syscall {forbidden} is allowed"
                );
            }
            eprintln!("supervisor allowlist: {} syscalls", supervisor.len());
        }

        #[test]
        fn each_mode_stacks_only_the_filters_that_change_a_verdict() {
            let arch = std::env::consts::ARCH.try_into().unwrap();
            // Stdio: EACCES for open, then the allowlist (which kills clone3 by itself).
            assert_eq!(filters(Mode::Stdio, arch).unwrap().len(), 2);
            // WebSocket: ENOSYS for clone3 too, whose fallback (`clone`) it admits.
            let ws = Mode::WebSocket { max_sessions: 1 };
            assert_eq!(filters(ws, arch).unwrap().len(), 3);
            // The supervisor: ENOSYS for clone3, then its allowlist (EPERM for the rest).
            let supervisor = Mode::Supervisor { max_sessions: 1 };
            assert_eq!(filters(supervisor, arch).unwrap().len(), 2);
        }

        #[test]
        fn stdio_allowlist_is_a_subset_of_websockets() {
            let stdio = allowlist(Mode::Stdio).unwrap();
            let ws = allowlist(Mode::WebSocket { max_sessions: 1 }).unwrap();
            assert!(stdio.keys().all(|nr| ws.contains_key(nr)));
            assert!(
                !stdio.contains_key(&libc::SYS_clone) && !stdio.contains_key(&libc::SYS_clone3)
            );
            for forbidden in [
                libc::SYS_socket,
                libc::SYS_connect,
                libc::SYS_bind,
                libc::SYS_listen,
            ] {
                assert!(
                    !ws.contains_key(&forbidden),
                    "syscall {forbidden} is allowed"
                );
            }
            for forbidden in [libc::SYS_execve, libc::SYS_execveat, libc::SYS_ptrace] {
                assert!(
                    !ws.contains_key(&forbidden),
                    "syscall {forbidden} is allowed"
                );
            }
        }
    }
}

#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
mod imp {
    use super::{LockdownError, Mode};

    const UNSUPPORTED: &str = "the OS lockdown exists only on Linux (x86_64, aarch64)";

    pub(super) fn landlock() -> Result<(), LockdownError> {
        Err(LockdownError::Unsupported)
    }

    pub(super) fn landlock_supervisor(
        _child_program: &std::path::Path,
    ) -> Result<(), LockdownError> {
        Err(LockdownError::Unsupported)
    }

    pub(super) fn finish(_mode: Mode) -> Result<(), LockdownError> {
        Err(LockdownError::Unsupported)
    }

    pub(super) fn fork_and_exit_child() -> std::io::Result<()> {
        Err(std::io::Error::other(UNSUPPORTED))
    }

    pub(super) fn raw_clock_syscalls() -> std::io::Result<()> {
        Err(std::io::Error::other(UNSUPPORTED))
    }

    pub(super) fn drop_capabilities() -> Result<(), LockdownError> {
        Err(LockdownError::Unsupported)
    }

    pub(super) fn close_inherited_fds() {}
}
