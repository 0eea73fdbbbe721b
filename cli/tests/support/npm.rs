//! Locked npm packages the tests run (Prism, the MCP conformance suite, reference servers):
//! `npm ci` of a `package.json` and `package-lock.json` kept under `cli/tests/` into
//! `target/tmp/NAME`, once per lock file, bounded in time.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long `npm ci` may take (a cold cache downloads about 40 MB).
const INSTALL_WITHIN: Duration = Duration::from_secs(300);

/// The folder of `package` installed into `target/tmp/into` (with `node_modules`), installing it
/// on first use; `None` (with a note on stderr) when npm is missing outside CI; under `CI=true`
/// a missing npm fails, as does a failed install anywhere. `who` names the tests in messages.
pub fn installed(
    once: &'static OnceLock<Result<PathBuf, String>>,
    package: &Path,
    into: &str,
    who: &str,
) -> Option<&'static Path> {
    match once.get_or_init(|| install(package, into, who)) {
        Ok(dir) => Some(dir.as_path()),
        Err(why) if std::env::var_os("CI").is_none() && why.starts_with("npm is not installed") => {
            eprintln!("skipping: {why}");
            None
        }
        Err(why) => panic!("{why}"),
    }
}

fn install(package: &Path, into: &str, who: &str) -> Result<PathBuf, String> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(into);
    std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let lock = std::fs::read(package.join("package-lock.json")).unwrap();
    let installed_lock = dir.join("node_modules/.installed-lock.json");
    if std::fs::read(&installed_lock).ok().as_deref() == Some(lock.as_slice()) {
        return Ok(dir);
    }
    for file in ["package.json", "package-lock.json"] {
        std::fs::copy(package.join(file), dir.join(file))
            .map_err(|e| format!("copy {file}: {e}"))?;
    }
    let log = dir.join("npm.log");
    let file = std::fs::File::create(&log).map_err(|e| e.to_string())?;
    let mut child = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(file.try_clone().map_err(|e| e.to_string())?)
        .stderr(file)
        .spawn()
        .map_err(|e| format!("npm is not installed ({e}): {who} need Node.js and npm"))?;
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if started.elapsed() > INSTALL_WITHIN {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "npm ci in {} did not finish within {INSTALL_WITHIN:?}",
                dir.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    if !status.success() {
        return Err(format!(
            "npm ci in {} failed ({status}): {}",
            dir.display(),
            std::fs::read_to_string(&log).unwrap_or_default()
        ));
    }
    std::fs::write(&installed_lock, &lock).map_err(|e| e.to_string())?;
    Ok(dir)
}
