//! Signing in to an OAuth-protected MCP server end to end: a real one built from the official
//! TypeScript SDK's server auth (`tests/conformance/oauth-server.mjs`, access tokens good for
//! 2 s, rotating refresh tokens), `execbox mcp login` with a browser that follows the redirects
//! to execbox's loopback listener, then `execbox mcp` calling it across expiry, revocation, a
//! token endpoint that stalls or is down, and `logout`.

use std::os::unix::fs::PermissionsExt as _;

use super::*;

// Each module that runs the suite or its packages includes the support file on its own.
#[allow(dead_code, clippy::duplicate_mod)]
#[path = "../support/conformance.rs"]
mod conformance;

const SERVER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/conformance/oauth-server.mjs"
);
const BROWSER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/conformance/browser.mjs");
/// The upstream's name in mcp.json, hence the namespace and `execbox mcp login oauthy`.
const NAME: &str = "oauthy";
const LOGIN: &str = "execbox mcp login oauthy";
/// How long an access token lives unless a test says otherwise.
const TTL_MS: u64 = 2000;

/// The running OAuth-protected MCP server; stopped (its stdin closed, then killed) on drop.
struct OAuthServer {
    _child: Child,
    mcp: String,
    control: String,
    events: PathBuf,
}

impl OAuthServer {
    /// Starts the server; `None` when npm is missing outside CI (the tests then pass, saying so).
    async fn start(h: &Harness) -> Result<Option<OAuthServer>, String> {
        let Some(npm) = tokio::task::spawn_blocking(conformance::installed)
            .await
            .map_err(|e| e.to_string())?
        else {
            return Ok(None);
        };
        let events = h.dir.join("oauth-events.jsonl");
        let log = std::fs::File::create(h.dir.join("oauth-server.log")).unwrap();
        let mut child = Command::new("node")
            .arg(SERVER)
            .env("OAUTH_EVENTS", &events)
            .env("OAUTH_TOKEN_TTL_MS", TTL_MS.to_string())
            .env("CONFORMANCE_NODE_MODULES", npm.join("node_modules"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start node {SERVER}: {e}"))?;
        let stdout = child.stdout.take().unwrap();
        let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
        let first = tokio::time::timeout(WAIT, lines.next_line())
            .await
            .map_err(|_| "the OAuth server did not start in time".to_string())?
            .map_err(|e| e.to_string())?
            .ok_or_else(|| {
                format!(
                    "the OAuth server exited: {}",
                    std::fs::read_to_string(h.dir.join("oauth-server.log")).unwrap_or_default()
                )
            })?;
        let started: Value = serde_json::from_str(&first).map_err(|e| format!("{first}: {e}"))?;
        Ok(Some(OAuthServer {
            _child: child,
            mcp: started["mcp"].as_str().unwrap_or_default().to_owned(),
            control: started["control"].as_str().unwrap_or_default().to_owned(),
            events: events.clone(),
        }))
    }

    /// What the server recorded, one JSON value per grant, registration, call...
    fn events(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.events)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    fn grants(&self, grant: &str) -> usize {
        self.events()
            .iter()
            .filter(|e| e["event"] == "grant" && e["grant"] == grant)
            .count()
    }

    /// Every access and refresh token the server issued.
    fn tokens(&self) -> Vec<String> {
        self.events()
            .iter()
            .filter(|e| e["event"] == "grant")
            .flat_map(|e| [e["access_token"].clone(), e["refresh_token"].clone()])
            .filter_map(|t| t.as_str().map(str::to_owned))
            .collect()
    }

    /// `POST /control/WHAT` (revoke, ttl?ms=N, token?mode=ok|stall|down).
    async fn control(&self, what: &str) -> Result<(), String> {
        let url = format!("{}/{what}", self.control);
        let response = reqwest::Client::new()
            .post(&url)
            .timeout(WAIT)
            .send()
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        check!(
            response.status().is_success(),
            "{url}: {}",
            response.status()
        );
        Ok(())
    }

    fn config(&self, h: &Harness) -> PathBuf {
        h.config(json!({ NAME: { "url": self.mcp } }))
    }
}

/// The user's state folder of this test (`XDG_STATE_HOME`), where the tokens go.
fn state(h: &Harness) -> PathBuf {
    h.dir.join("state")
}

/// `execbox mcp login|logout oauthy --config CONFIG ARGS`, bounded: (exit code, stdout, stderr).
async fn sign(
    h: &Harness,
    what: &str,
    config: &std::path::Path,
    args: &[&str],
) -> Result<(Option<i32>, String, String), String> {
    let run = Command::new(EXECBOX)
        .args(["mcp", what, NAME, "--config"])
        .arg(config)
        .args(args)
        .env("XDG_STATE_HOME", state(h))
        .env("EXECBOX_HOME", h.dir.join("home"))
        .env("BROWSER", format!("node {BROWSER}"))
        .env("RUST_LOG", "trace")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(45), run)
        .await
        .map_err(|_| format!("execbox mcp {what} did not end within 45 s"))?
        .map_err(|e| e.to_string())?;
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    // Kept with execbox mcp's stderr, where the token check reads.
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(h.dir.join("stderr.log"))
        .unwrap();
    std::io::Write::write_all(&mut log, format!("--- {what} ---\n{stderr}\n").as_bytes()).unwrap();
    Ok((
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr,
    ))
}

/// `execbox mcp --config CONFIG ARGS` signed in through this test's state folder, logging at
/// trace level, with a client connected.
async fn start_signed_in(
    h: &Harness,
    config: &std::path::Path,
    args: &[&str],
) -> Result<Mcp, String> {
    let mut command = h.command(&["--config", config.to_str().unwrap()]);
    command
        .args(args)
        .env("XDG_STATE_HOME", state(h))
        .env("RUST_LOG", "trace");
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot start execbox: {e}"))?;
    let stdout = child.stdout.take().unwrap();
    let stdin = child.stdin.take().unwrap();
    let events = Events::default();
    let client = tokio::time::timeout(WAIT, events.clone().serve((stdout, stdin)))
        .await
        .map_err(|_| "execbox mcp did not initialize in time".to_string())?
        .map_err(|e| format!("cannot initialize: {e}"))?;
    Ok(Mcp {
        client,
        child,
        events,
    })
}

/// The index's line about our server.
async fn index_line(mcp: &Mcp) -> Result<String, String> {
    let description = mcp.description().await?;
    Ok(description
        .lines()
        .find(|l| l.starts_with(&format!("{NAME} (")))
        .unwrap_or_default()
        .to_owned())
}

/// Every file under `dir`, with its mode.
fn files_under(dir: &std::path::Path) -> Vec<(PathBuf, u32)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let mode = entry
            .metadata()
            .map(|m| m.permissions().mode())
            .unwrap_or(0);
        if path.is_dir() {
            found.extend(files_under(&path));
        } else {
            found.push((path, mode & 0o777));
        }
    }
    found
}

/// Before a sign-in the namespace is unavailable, saying to run `execbox mcp login oauthy`.
async fn needs_a_sign_in(h: &Harness, config: &std::path::Path) -> Result<(), String> {
    let mcp = start_signed_in(h, config, &[]).await?;
    let line = index_line(&mcp).await?;
    check!(
        line.contains("UNAVAILABLE") && line.contains(LOGIN),
        "the index should say the server needs `{LOGIN}`: {line:?}"
    );
    let refused = mcp
        .exec(&format!("return await {NAME}.whoami({{}})"))
        .await?;
    check!(
        refused.is_error
            && refused.structured["error"]["code"] == "tool_error"
            && refused.text.contains(LOGIN),
        "a call before signing in: {}",
        refused.text
    );
    mcp.stop().await?;
    Ok(())
}

/// `return await oauthy.whoami({})` must work; the client it names.
async fn whoami(mcp: &Mcp) -> Result<Value, String> {
    let value = mcp
        .value(&format!("return await {NAME}.whoami({{}})"))
        .await?;
    check!(value["client_id"].is_string(), "{value}");
    Ok(value)
}

pub async fn oauth_sign_in_survives_expiry_and_revocation_and_logout_forgets_it(
    h: Harness,
) -> Result<(), String> {
    let Some(server) = OAuthServer::start(&h).await? else {
        return Ok(());
    };
    let config = server.config(&h);
    needs_a_sign_in(&h, &config).await?;

    let (code, stdout, stderr) = sign(&h, "login", &config, &[]).await?;
    check!(
        code == Some(0),
        "login exited with {code:?}\n{stdout}\n{stderr}"
    );
    check!(
        stdout.contains(NAME) || stdout.contains(&server.mcp),
        "login's stdout should say whom it signed in to: {stdout:?}"
    );
    check!(
        server.grants("authorization_code") == 1,
        "{:?}",
        server.events()
    );
    let files = files_under(&state(&h).join("execbox"));
    check!(
        !files.is_empty(),
        "no token file under {}",
        state(&h).display()
    );
    for (path, mode) in &files {
        check!(
            *mode == 0o600,
            "{} has mode {mode:o}, not 600",
            path.display()
        );
    }
    for dir in [state(&h).join("execbox"), state(&h).join("execbox/oauth")] {
        let mode = std::fs::metadata(&dir)
            .map(|m| m.permissions().mode() & 0o777)
            .unwrap_or(0);
        check!(
            mode & 0o077 == 0,
            "{} has mode {mode:o}: others may read it",
            dir.display()
        );
    }

    let mcp = start_signed_in(&h, &config, &[]).await?;
    let line = index_line(&mcp).await?;
    check!(!line.contains("UNAVAILABLE"), "{line}");
    let first = whoami(&mcp).await?;

    // Expired: the next call refreshes first (or on the 401) and works.
    tokio::time::sleep(Duration::from_millis(TTL_MS + 500)).await;
    check!(whoami(&mcp).await? == first, "the client changed");
    check!(
        server.grants("refresh_token") >= 1,
        "no refresh after the access token expired: {:?}",
        server.events()
    );

    // Revoked long before it expires (an hour: no refresh ahead of expiry can explain it): the
    // 401 alone must make execbox refresh.
    server.control("ttl?ms=3600000").await?;
    tokio::time::sleep(Duration::from_millis(TTL_MS + 500)).await;
    whoami(&mcp).await?;
    let refreshed = server.grants("refresh_token");
    server.control("revoke").await?;
    whoami(&mcp).await?;
    check!(
        server.grants("refresh_token") == refreshed + 1,
        "a call after the access token was revoked (HTTP 401) should refresh once: {:?}",
        server.events()
    );
    mcp.stop().await?;

    // The tokens are secrets: not in any log, even at trace level.
    let logged = h.stderr();
    check!(
        logged.contains("TRACE"),
        "RUST_LOG=trace did not log: {logged}"
    );
    for token in server.tokens() {
        check!(
            !logged.contains(&token),
            "a token is in execbox's stderr: {token}"
        );
    }

    let (code, stdout, stderr) = sign(&h, "logout", &config, &[]).await?;
    check!(
        code == Some(0),
        "logout exited with {code:?}\n{stdout}\n{stderr}"
    );
    for (path, _) in files_under(&state(&h)) {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        for token in server.tokens() {
            check!(
                !text.contains(&token),
                "{} still holds a token after logout",
                path.display()
            );
        }
    }
    needs_a_sign_in(&h, &config).await?;
    Ok(())
}

/// What a message about a token endpoint that is down must say (any of these).
const DOWN: &[&str] = &[
    "refused",
    "cannot connect",
    "could not connect",
    "unreachable",
];
/// What a message about a token endpoint that never answers must say (any of these).
const STALLED: &[&str] = &["timed out", "timeout", "did not answer", "no answer"];

/// A call whose access token must be refreshed while the token endpoint is `mode`: an error
/// naming the server's sign-in and why it failed (`cause`: any of those words), not a hang and
/// not the program's timeout.
async fn refresh_fails_clearly(
    mcp: &Mcp,
    server: &OAuthServer,
    mode: &str,
    cause: &[&str],
    within: Duration,
) -> Result<(), String> {
    server.control(&format!("token?mode={mode}")).await?;
    tokio::time::sleep(Duration::from_millis(TTL_MS + 500)).await;
    let started = Instant::now();
    let params = CallToolRequestParams::new("execute_code").with_arguments(args(
        json!({ "code": format!("return await {NAME}.whoami({{}})") }),
    ));
    let result = tokio::time::timeout(within, mcp.client.call_tool(params))
        .await
        .map_err(|_| format!("token endpoint {mode}: no answer within {within:?}"))?
        .map_err(|e| e.to_string())?;
    let failed = answer(result);
    let message = failed.structured["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_lowercase();
    check!(
        failed.is_error
            && failed.structured["error"]["code"] == "tool_error"
            && message.contains(&format!("\"{NAME}\""))
            && (message.contains("sign") || message.contains("token"))
            && cause.iter().any(|c| message.contains(c)),
        "token endpoint {mode}: after {:?}, not an error naming the server, its sign-in and \
         why it failed (one of {cause:?}): {}",
        started.elapsed(),
        failed.text
    );
    Ok(())
}

// rmcp keeps only the Display of oauth2's `RequestTokenError::Request` ("Request failed"):
// execbox's own OAuth HTTP client says why (refused, or no answer within 30 s).
pub async fn oauth_a_token_endpoint_stalled_or_down_fails_calls_clearly_in_bounded_time(
    h: Harness,
) -> Result<(), String> {
    let Some(server) = OAuthServer::start(&h).await? else {
        return Ok(());
    };
    let config = server.config(&h);
    let (code, stdout, stderr) = sign(&h, "login", &config, &[]).await?;
    check!(
        code == Some(0),
        "login exited with {code:?}\n{stdout}\n{stderr}"
    );
    // The program's own limit above the token endpoint's, so it cannot hide a hang.
    let mcp = start_signed_in(&h, &config, &["--timeout-ms", "80000"]).await?;
    whoami(&mcp).await?;
    refresh_fails_clearly(&mcp, &server, "down", DOWN, Duration::from_secs(15)).await?;
    refresh_fails_clearly(&mcp, &server, "stall", STALLED, Duration::from_secs(45)).await?;
    // Back up: the refresh token was never spent, so the next call works.
    server.control("token?mode=ok").await?;
    whoami(&mcp).await?;
    mcp.stop().await?;
    Ok(())
}

// The token endpoint never answers: after 30 s the login ends, saying so.
pub async fn oauth_login_against_a_stalled_token_endpoint_ends_in_bounded_time(
    h: Harness,
) -> Result<(), String> {
    let Some(server) = OAuthServer::start(&h).await? else {
        return Ok(());
    };
    let config = server.config(&h);
    server.control("token?mode=stall").await?;
    let started = Instant::now();
    let (code, stdout, stderr) = sign(&h, "login", &config, &["--timeout-ms", "5000"]).await?;
    let said = stderr.to_lowercase();
    check!(
        code.is_some_and(|c| c != 0)
            && said.contains("token")
            && STALLED.iter().any(|c| said.contains(c)),
        "login against a stalled token endpoint exited with {code:?}, not saying that the token \
         endpoint did not answer (one of {STALLED:?})\n{stdout}\n{stderr}"
    );
    // It got as far as the token endpoint: the browser came back with a code.
    let events = server.events();
    check!(
        events.iter().any(|e| e["event"] == "authorize")
            && events.iter().any(|e| e["event"] == "stalled"),
        "login never reached the token endpoint: {events:?}"
    );
    check!(
        started.elapsed() < Duration::from_secs(40),
        "login took {:?}",
        started.elapsed()
    );
    Ok(())
}
