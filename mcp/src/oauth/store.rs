//! Where sign-ins are kept: one file per server URL in the user's state folder
//! (`$XDG_STATE_HOME/execbox/oauth`, else `~/.local/state/execbox/oauth`), readable by the
//! user only (folder 0700, files 0600), written whole (a temporary file renamed over it),
//! and read again before each use, so a `login` in another terminal reaches a running
//! `execbox mcp`. A refresh holds a lock on the file's `.lock` companion, so two `execbox mcp`
//! processes signed in to one server do not both spend one refresh token.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rmcp::transport::auth::{
    AuthError, AuthorizationMetadata, CredentialRefreshGuard, CredentialStore, StoredCredentials,
};
use serde::{Deserialize, Serialize};

/// The folder of the token files.
pub fn token_dir() -> Result<PathBuf, String> {
    let state =
        match std::env::var_os("XDG_STATE_HOME") {
            Some(dir) if Path::new(&dir).is_absolute() => PathBuf::from(dir),
            _ => match std::env::var_os("HOME") {
                Some(home) if !home.is_empty() => Path::new(&home).join(".local/state"),
                _ => return Err(
                    "neither XDG_STATE_HOME nor HOME is set: there is no folder to keep sign-ins \
                     in; set XDG_STATE_HOME"
                        .into(),
                ),
            },
        };
    Ok(state.join("execbox").join("oauth"))
}

/// What is kept of one sign-in.
#[derive(Clone, Default, Serialize, Deserialize)]
pub(crate) struct Entry {
    /// The server's URL (the file's name is its digest).
    pub server_url: String,
    /// The client and its tokens.
    pub credentials: Option<StoredCredentials>,
    /// The authorization server found at sign-in (its token endpoint refreshes the tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<AuthorizationMetadata>,
    /// The secret of a client registered dynamically as a confidential client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// Scopes a call was refused for (HTTP 403 `insufficient_scope`): the next sign-in asks
    /// for them too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub step_up: Vec<String>,
}

/// The token file of one server URL; a [`CredentialStore`] for the MCP SDK.
#[derive(Clone)]
pub(crate) struct TokenFile {
    path: PathBuf,
    url: String,
}

impl TokenFile {
    /// The file for `url` in [`token_dir`].
    pub fn for_url(url: &str) -> Result<TokenFile, String> {
        Ok(TokenFile::in_dir(&token_dir()?, url))
    }

    /// The file for `url` in `dir`.
    pub fn in_dir(dir: &Path, url: &str) -> TokenFile {
        let digest = ring::digest::digest(&ring::digest::SHA256, url.as_bytes());
        let name: String = digest.as_ref()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        TokenFile {
            path: dir.join(format!("{name}.json")),
            url: url.to_owned(),
        }
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The entry, if there is one for this URL.
    pub fn read(&self) -> Result<Option<Entry>, String> {
        let Some(text) = read_private(&self.path)? else {
            return Ok(None);
        };
        let entry: Entry = serde_json::from_str(&text).map_err(|e| {
            format!(
                "{} is damaged ({e}); run `execbox mcp logout` for this server and sign in again",
                self.path.display()
            )
        })?;
        // Two URLs with one digest are not expected; never hand one server another's tokens.
        Ok((entry.server_url == self.url).then_some(entry))
    }

    /// Changes the entry (a new one if there is none) and writes it, holding the file's
    /// `.writing` lock from the read to the rename (not the refresh lock: the MCP SDK saves
    /// while it holds that one).
    pub fn update(&self, change: impl FnOnce(&mut Entry)) -> Result<(), String> {
        let _writing = FileLock::acquire(&self.path.with_extension("writing"), WRITE_WAIT)?;
        let mut entry = self.read()?.unwrap_or_else(|| Entry {
            server_url: self.url.clone(),
            ..Entry::default()
        });
        change(&mut entry);
        self.write(&entry)
    }

    /// Forgets the sign-in; `true` when there was one.
    pub fn remove(&self) -> Result<bool, String> {
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(format!("cannot remove {}: {e}", self.path.display())),
        }
    }

    fn write(&self, entry: &Entry) -> Result<(), String> {
        let dir = self.path.parent().expect("a token file has a folder");
        create_private_dir(dir)?;
        let text = serde_json::to_vec_pretty(entry).map_err(|e| e.to_string())?;
        // A name nobody can guess or share: two writers never write one temporary file, and
        // one planted in advance is never opened (`create_new`).
        let mut nonce = [0u8; 8];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut nonce)
            .map_err(|_| "no randomness for a temporary file's name".to_string())?;
        let nonce: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
        let temp = dir.join(format!(
            ".{}.{}.{nonce}.tmp",
            self.path.file_name().unwrap_or_default().to_string_lossy(),
            std::process::id()
        ));
        write_private(&temp, &text)
            .and_then(|()| std::fs::rename(&temp, &self.path))
            .map_err(|e| {
                let _ = std::fs::remove_file(&temp);
                format!("cannot write {}: {e}", self.path.display())
            })
    }

    fn lock_path(&self) -> PathBuf {
        self.path.with_extension("lock")
    }
}

fn create_private_dir(dir: &Path) -> Result<(), String> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt as _;
        builder.mode(0o700);
    }
    builder
        .create(dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    check_private_dir(dir)
}

/// The effective user ID of this process.
#[cfg(unix)]
#[allow(unsafe_code)]
fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions, cannot fail and touches no memory of ours.
    unsafe { libc::geteuid() }
}

/// Refuses a folder of another user; closes one of ours that others may enter.
#[cfg(unix)]
fn check_private_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let meta = std::fs::metadata(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    if !meta.is_dir() {
        return Err(format!(
            "{} is not a folder; remove it, or set XDG_STATE_HOME to a folder of yours",
            dir.display()
        ));
    }
    if meta.uid() != euid() {
        return Err(format!(
            "{} belongs to another user, who could read or replace sign-ins kept there; remove \
             it, or set XDG_STATE_HOME to a folder of yours",
            dir.display()
        ));
    }
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(|e| {
            format!(
                "{} is open to other users and cannot be closed ({e}); run `chmod 700 {}`",
                dir.display(),
                dir.display()
            )
        })?;
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private_dir(_dir: &Path) -> Result<(), String> {
    Ok(())
}

/// Options that open `path` without following a symbolic link, creating it (0600) if asked.
fn private_options(create: bool) -> std::fs::OpenOptions {
    let mut options = std::fs::OpenOptions::new();
    if create {
        options.write(true).create_new(true);
    } else {
        options.read(true);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600).custom_flags(libc::O_NOFOLLOW);
    }
    options
}

/// A token file can hold this much; a larger one is not ours.
const MAX_TOKEN_FILE_BYTES: u64 = 1024 * 1024;

/// The text of a token file of ours; `None` when there is none.
fn read_private(path: &Path) -> Result<Option<String>, String> {
    use std::io::Read as _;
    let file = match private_options(false).open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(format!(
                "cannot read {} ({e}); if it is a link, remove it and sign in again",
                path.display()
            ))
        }
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        let meta = file
            .metadata()
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        if meta.uid() != euid() || meta.mode() & 0o022 != 0 {
            return Err(format!(
                "{} belongs to another user or others may change it, so its sign-in is not \
                 trusted; remove it and sign in again",
                path.display()
            ));
        }
    }
    let mut text = String::new();
    file.take(MAX_TOKEN_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if text.len() as u64 > MAX_TOKEN_FILE_BYTES {
        return Err(format!(
            "{} is larger than a sign-in can be; remove it and sign in again",
            path.display()
        ));
    }
    Ok(Some(text))
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut file = private_options(true).open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

fn store_error(message: String) -> AuthError {
    AuthError::CredentialStoreError(message)
}

#[async_trait::async_trait]
impl CredentialStore for TokenFile {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        let file = self.clone();
        let entry = tokio::task::spawn_blocking(move || file.read())
            .await
            .map_err(|e| store_error(e.to_string()))?
            .map_err(store_error)?;
        Ok(entry.and_then(|e| e.credentials))
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let file = self.clone();
        tokio::task::spawn_blocking(move || file.update(|e| e.credentials = Some(credentials)))
            .await
            .map_err(|e| store_error(e.to_string()))?
            .map_err(store_error)
    }

    async fn clear(&self) -> Result<(), AuthError> {
        let file = self.clone();
        tokio::task::spawn_blocking(move || file.update(|e| e.credentials = None))
            .await
            .map_err(|e| store_error(e.to_string()))?
            .map_err(store_error)
    }

    async fn acquire_refresh_guard(&self) -> Result<Option<CredentialRefreshGuard>, AuthError> {
        let path = self.lock_path();
        let lock = tokio::task::spawn_blocking(move || FileLock::acquire(&path, LOCK_WAIT))
            .await
            .map_err(|e| store_error(e.to_string()))?
            .map_err(store_error)?;
        Ok(Some(CredentialRefreshGuard::new(lock)))
    }
}

/// How long a refresh waits for another process's refresh of the same sign-in (each of its
/// requests is bounded at 30 s).
const LOCK_WAIT: Duration = Duration::from_secs(65);

/// How long a change of the entry waits for another's (each takes milliseconds).
const WRITE_WAIT: Duration = Duration::from_secs(10);

/// An exclusive lock on a file (`flock` on Unix), released when dropped (or when the process
/// ends).
struct FileLock(std::fs::File);

impl FileLock {
    fn acquire(path: &Path, within: Duration) -> Result<FileLock, String> {
        if let Some(dir) = path.parent() {
            create_private_dir(dir)?;
        }
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(false);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            options.mode(0o600).custom_flags(libc::O_NOFOLLOW);
        }
        let file = options.open(path).map_err(|e| {
            format!(
                "cannot open {} ({e}); if it is a link, remove it",
                path.display()
            )
        })?;
        let started = std::time::Instant::now();
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(FileLock(file)),
                Err(std::fs::TryLockError::WouldBlock) => {}
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(format!("cannot lock {}: {e}", path.display()))
                }
            }
            if started.elapsed() > within {
                return Err(format!(
                    "another execbox has been refreshing this sign-in for over {}s ({} is locked)",
                    within.as_secs(),
                    path.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("execbox-store-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn entries_are_private_per_url_and_survive_a_reread() {
        let dir = temp_dir("private");
        let a = TokenFile::in_dir(&dir, "https://a.example/mcp");
        let b = TokenFile::in_dir(&dir, "https://b.example/mcp");
        assert_ne!(a.path(), b.path());
        assert!(a.read().unwrap().is_none());
        a.update(|e| e.step_up = vec!["repo".into()]).unwrap();
        let entry = a.read().unwrap().unwrap();
        assert_eq!(entry.server_url, "https://a.example/mcp");
        assert_eq!(entry.step_up, ["repo"]);
        assert!(b.read().unwrap().is_none());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(a.path()), 0o600);
            assert_eq!(mode(&dir), 0o700);
        }
        assert!(a.remove().unwrap());
        assert!(!a.remove().unwrap());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_damaged_file_says_what_to_do() {
        let dir = temp_dir("damaged");
        let a = TokenFile::in_dir(&dir, "https://a.example/mcp");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(a.path(), "{not json").unwrap();
        let error = a.read().err().unwrap();
        assert!(error.contains("execbox mcp logout"), "{error}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn concurrent_changes_are_never_lost_nor_torn() {
        // Before: one temporary file per process and no lock from read to rename, so a
        // step-up written beside a refresh could put back the tokens the refresh had spent,
        // or two writers could rename a half-written file into place.
        let dir = temp_dir("concurrent");
        let file = TokenFile::in_dir(&dir, "https://a.example/mcp");
        let writers: Vec<_> = (0..8)
            .map(|w| {
                let file = file.clone();
                std::thread::spawn(move || {
                    for i in 0..20 {
                        file.update(|e| e.step_up.push(format!("s{w}.{i}")))
                            .unwrap();
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.join().unwrap();
        }
        let entry = file.read().unwrap().unwrap();
        assert_eq!(entry.step_up.len(), 160, "{:?}", entry.step_up);
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    #[test]
    fn links_and_files_of_others_in_the_state_folder_are_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = temp_dir("links");
        let victim = temp_dir("links-victim");
        std::fs::create_dir_all(&victim).unwrap();
        let target = victim.join("bashrc");
        std::fs::write(&target, "kept\n").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
        // A folder others may enter is closed on the next write.
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let file = TokenFile::in_dir(&dir, "https://a.example/mcp");
        // A link planted at the lock files: never opened, the target untouched.
        std::os::unix::fs::symlink(&target, file.lock_path()).unwrap();
        std::os::unix::fs::symlink(&target, file.path().with_extension("writing")).unwrap();
        let error = file.update(|e| e.step_up.push("x".into())).unwrap_err();
        assert!(error.contains("link"), "{error}");
        assert!(FileLock::acquire(&file.lock_path(), Duration::from_millis(10)).is_err());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "kept\n");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        std::fs::remove_file(file.path().with_extension("writing")).unwrap();
        // A link planted as the token file: not read (its "tokens" are not ours).
        std::fs::write(
            &target,
            serde_json::json!({"server_url": "https://a.example/mcp"}).to_string(),
        )
        .unwrap();
        std::os::unix::fs::symlink(&target, file.path()).unwrap();
        let error = file.read().err().unwrap();
        assert!(error.contains("link"), "{error}");
        std::fs::remove_file(file.path()).unwrap();
        // A file or folder of another user (only root can make one here).
        if euid() == 0 {
            std::fs::write(
                file.path(),
                serde_json::to_vec(&Entry {
                    server_url: "https://a.example/mcp".into(),
                    ..Entry::default()
                })
                .unwrap(),
            )
            .unwrap();
            std::fs::set_permissions(file.path(), std::fs::Permissions::from_mode(0o600)).unwrap();
            std::os::unix::fs::chown(file.path(), Some(65534), None).unwrap();
            let error = file.read().err().unwrap();
            assert!(error.contains("another user"), "{error}");
            std::fs::remove_file(file.path()).unwrap();
            std::os::unix::fs::chown(&dir, Some(65534), None).unwrap();
            let error = file.update(|_| {}).unwrap_err();
            assert!(error.contains("belongs to another user"), "{error}");
        }
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&victim);
    }

    #[test]
    fn the_refresh_lock_is_exclusive_and_bounded() {
        let dir = temp_dir("lock");
        let path = dir.join("x.lock");
        let held = FileLock::acquire(&path, Duration::from_secs(1)).unwrap();
        let second = FileLock::acquire(&path, Duration::from_millis(200));
        assert!(second.err().unwrap().contains("is locked"));
        drop(held);
        FileLock::acquire(&path, Duration::from_secs(1)).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
