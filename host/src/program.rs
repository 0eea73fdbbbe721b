//! The one lookup of a program by name on `PATH`, for everything execbox starts: command
//! tools (checked in `tools_file.rs` and found again in `command_tool.rs`), the runner
//! (`runner_process.rs`) and upstream MCP servers (`execbox-mcp`).
//!
//! # The rule
//!
//! A bare name (no `/`) is looked for in each folder of `PATH`, in order; the first regular
//! file there that this process may execute is the program. **Empty and relative entries of
//! `PATH` are ignored.** POSIX reads an empty entry (`PATH=/usr/bin:` or `::`) as the current
//! folder, and a relative one (`bin`, `.`) against it; but the current folder of a host is
//! wherever it happened to be started (a desktop MCP client starts `execbox mcp` in `/` or in
//! a project someone cloned), so a program found there is one anybody who can write that folder
//! planted, run with the host's privileges in place of the one meant. Go's `os/exec` refuses
//! such results for the same reason. A program in such a folder is still run when named by its
//! path (`./tool`, `bin/tool`).
//!
//! A candidate that exists but is a folder or not executable is skipped, and the first such
//! reason is kept for the error ([`NotOnPath::skipped`]), so "found, but not executable" is
//! told apart from "not there".

use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};

/// A bare name that no folder of a `PATH` holds as a program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotOnPath {
    /// The first candidate of that name that exists but cannot be run, and why (from
    /// [`check_executable`]), if any.
    pub skipped: Option<String>,
    /// Whether the `PATH` had empty or relative entries, which were not searched.
    pub ignored: bool,
}

impl NotOnPath {
    /// `; empty and relative entries of PATH are not searched` when there were some, for the
    /// end of a message; else nothing.
    pub fn ignored_note(&self) -> &'static str {
        if self.ignored {
            "; empty and relative entries of PATH are not searched"
        } else {
            ""
        }
    }
}

/// The program `name` (a bare name, without `/`) in the first absolute folder of `path` (a
/// `PATH` value) that holds it as a file this process may execute. Empty and relative entries
/// are ignored (see the module's documentation). A `name` with a `/` is never looked up: it is
/// not found.
pub fn search_path(name: &OsStr, path: &OsStr) -> Result<PathBuf, NotOnPath> {
    let mut skipped = None;
    let ignored = std::env::split_paths(path).any(|dir| !dir.is_absolute());
    let mut parts = Path::new(name).components();
    let bare = matches!(
        (parts.next(), parts.next()),
        (Some(Component::Normal(_)), None)
    );
    if !bare || has_slash(name) {
        return Err(NotOnPath { skipped, ignored });
    }
    for dir in std::env::split_paths(path).filter(|dir| dir.is_absolute()) {
        let candidate = dir.join(name);
        match check_executable(&candidate) {
            Ok(()) => return Ok(candidate),
            Err(why) if candidate.exists() => {
                skipped.get_or_insert(why);
            }
            Err(_) => {}
        }
    }
    Err(NotOnPath { skipped, ignored })
}

/// [`search_path`] on this process's `PATH` (none: nothing is found).
pub fn search_own_path(name: &OsStr) -> Result<PathBuf, NotOnPath> {
    search_path(name, &std::env::var_os("PATH").unwrap_or_default())
}

/// Whether `path` is a regular file this process may execute.
pub fn is_executable(path: &Path) -> bool {
    check_executable(path).is_ok()
}

/// `Ok` when `path` is a regular file this process may execute; else why not, naming it
/// (`/x does not exist`, `/x is a directory, not a program`, `/x is not executable (...)`).
pub fn check_executable(path: &Path) -> Result<(), String> {
    let shown = path.display();
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!("{shown} does not exist"));
        }
        Err(e) => return Err(format!("{shown} cannot be inspected: {e}")),
    };
    if meta.is_dir() {
        return Err(format!("{shown} is a directory, not a program"));
    }
    if !meta.is_file() {
        return Err(format!("{shown} is not a regular file, not a program"));
    }
    if !may_execute(path) {
        return Err(format!(
            "{shown} is not executable (make it so with `chmod +x`, or run it through its \
             interpreter)"
        ));
    }
    Ok(())
}

#[cfg(unix)]
fn has_slash(name: &OsStr) -> bool {
    use std::os::unix::ffi::OsStrExt;
    name.as_bytes().contains(&b'/')
}

#[cfg(not(unix))]
fn has_slash(name: &OsStr) -> bool {
    name.to_string_lossy().contains(['/', '\\'])
}

#[cfg(unix)]
#[allow(unsafe_code)]
fn may_execute(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c_path` is a NUL-terminated string that outlives the call; access(2) only reads
    // it, and answers for this process's real ids, as exec would check them.
    unsafe { libc::access(c_path.as_ptr(), libc::X_OK) == 0 }
}

#[cfg(not(unix))]
fn may_execute(path: &Path) -> bool {
    path.is_file()
}

#[cfg(all(test, unix))]
mod tests {
    use std::ffi::OsString;
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    /// A fresh folder with `name` in it, made executable or not.
    fn folder_with(tag: &str, name: &str, executable: bool) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "execbox-program-{tag}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(name);
        std::fs::write(&file, "#!/bin/sh\n").unwrap();
        let mode = if executable { 0o755 } else { 0o644 };
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
        dir
    }

    fn joined(dirs: &[&OsStr]) -> OsString {
        dirs.join(OsStr::new(":"))
    }

    #[test]
    fn the_first_absolute_folder_holding_an_executable_wins() {
        let first = folder_with("first", "tool", true);
        let second = folder_with("second", "tool", true);
        let path = joined(&[
            OsStr::new("/nonexistent"),
            first.as_os_str(),
            second.as_os_str(),
        ]);
        assert_eq!(
            search_path(OsStr::new("tool"), &path),
            Ok(first.join("tool"))
        );
    }

    #[test]
    fn empty_entries_are_not_the_current_folder() {
        // A test runs in its crate's folder, which holds `Cargo.toml` and `src`: searched as
        // POSIX has it, they would be seen (and reported as not programs).
        let cwd = std::env::current_dir().unwrap();
        assert!(cwd.join("Cargo.toml").is_file() && cwd.join("src").is_dir());
        for name in ["Cargo.toml", "src"] {
            for path in [
                "",
                ":",
                "::/nonexistent",
                "/nonexistent:",
                "/nonexistent::/also-not",
            ] {
                let found = search_path(OsStr::new(name), OsStr::new(path));
                assert_eq!(
                    found.map_err(|e| e.skipped),
                    Err(None),
                    "{name} on {path:?}"
                );
            }
        }
    }

    #[test]
    fn relative_entries_are_ignored_even_when_they_hold_the_program() {
        let dir = folder_with("relative", "tool", true);
        let relative = relative_to(&std::env::current_dir().unwrap(), &dir);
        assert!(relative.join("tool").is_file(), "{}", relative.display());
        assert_eq!(
            search_path(OsStr::new("tool"), relative.as_os_str()),
            Err(NotOnPath {
                skipped: None,
                ignored: true
            }),
        );
        // The same folder written absolutely is searched.
        assert_eq!(
            search_path(OsStr::new("tool"), dir.as_os_str()),
            Ok(dir.join("tool"))
        );
        for path in [".", "./", "src", "../host"] {
            let found = search_path(OsStr::new("Cargo.toml"), OsStr::new(path));
            assert_eq!(found.map_err(|e| e.skipped), Err(None), "PATH={path:?}");
        }
    }

    #[test]
    fn a_non_executable_file_is_skipped_and_said_why() {
        let plain = folder_with("plain", "tool", false);
        let real = folder_with("real", "tool", true);
        let path = joined(&[plain.as_os_str(), real.as_os_str()]);
        assert_eq!(
            search_path(OsStr::new("tool"), &path),
            Ok(real.join("tool"))
        );
        let alone = search_path(OsStr::new("tool"), plain.as_os_str()).unwrap_err();
        let why = alone.skipped.expect("the file was seen");
        assert!(why.contains("is not executable"), "{why}");
        assert!(
            why.contains(&plain.join("tool").display().to_string()),
            "{why}"
        );
    }

    #[test]
    fn a_folder_of_that_name_is_not_a_program() {
        let outer = folder_with("dir", "other", true);
        std::fs::create_dir_all(outer.join("tool")).unwrap();
        let e = search_path(OsStr::new("tool"), outer.as_os_str()).unwrap_err();
        let why = e.skipped.expect("the folder was seen");
        assert!(why.ends_with("is a directory, not a program"), "{why}");
        assert!(!is_executable(&outer));
    }

    #[test]
    fn only_bare_names_are_looked_up() {
        for name in ["", "bin/sh", "/bin/sh", "./sh", ".", ".."] {
            assert!(
                search_path(OsStr::new(name), OsStr::new("/bin:/usr/bin")).is_err(),
                "{name:?}"
            );
        }
        assert!(search_path(OsStr::new("sh"), OsStr::new("/bin:/usr/bin")).is_ok());
    }

    /// `to` relative to `from` (`../../tmp/x`).
    fn relative_to(from: &Path, to: &Path) -> PathBuf {
        let mut up = PathBuf::new();
        for _ in from.components().skip(1) {
            up.push("..");
        }
        up.join(to.strip_prefix("/").unwrap())
    }
}
