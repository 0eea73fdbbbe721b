//! The official MCP conformance suite's client scenarios with execbox as the client: the suite
//! serves each scenario's server and runs `tests/conformance/client.mjs`, which signs in with
//! `execbox mcp login` where the scenario needs it and calls the server's tools through
//! `execbox mcp`; a scenario passes when the adapter exits 0 and no check fails or warns.

use super::*;

// Each module that runs the suite or its packages includes the support file on its own.
#[allow(dead_code, clippy::duplicate_mod)]
#[path = "../support/conformance.rs"]
mod conformance;

/// The adapter the suite runs as its client (`node client.mjs URL`).
const ADAPTER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/conformance/client.mjs");
/// The suite's `--timeout` for the client; the adapter bounds itself below it (50 s) and the
/// harness bounds the whole trial (90 s).
const CLIENT_TIMEOUT_MS: u64 = 60_000;
/// The suite's own start and stop on top of the client's time.
const SUITE_WITHIN: Duration = Duration::from_secs(80);

/// One trial per scenario, so each reports on its own and fits the harness's bound.
macro_rules! scenarios {
    ($($(#[$attr:meta])* $name:ident => $scenario:literal),* $(,)?) => {
        $(
            $(#[$attr])*
            pub async fn $name(h: Harness) -> Result<(), String> {
                client_scenario(h, $scenario).await
            }
        )*
    };
}

scenarios! {
    conformance_client_initialize => "initialize",
    conformance_client_tools_call => "tools_call",
    conformance_client_auth_metadata_default => "auth/metadata-default",
    conformance_client_auth_metadata_var1 => "auth/metadata-var1",
    conformance_client_auth_basic_cimd => "auth/basic-cimd",
    conformance_client_auth_2025_03_26_oauth_metadata_backcompat => "auth/2025-03-26-oauth-metadata-backcompat",
    conformance_client_auth_2025_03_26_oauth_endpoint_fallback => "auth/2025-03-26-oauth-endpoint-fallback",
    conformance_client_auth_scope_from_www_authenticate => "auth/scope-from-www-authenticate",
    conformance_client_auth_scope_from_scopes_supported => "auth/scope-from-scopes-supported",
    conformance_client_auth_scope_omitted_when_undefined => "auth/scope-omitted-when-undefined",
    conformance_client_auth_scope_step_up => "auth/scope-step-up",
    conformance_client_auth_scope_retry_limit => "auth/scope-retry-limit",
    conformance_client_auth_token_endpoint_auth_basic => "auth/token-endpoint-auth-basic",
    conformance_client_auth_token_endpoint_auth_post => "auth/token-endpoint-auth-post",
    conformance_client_auth_token_endpoint_auth_none => "auth/token-endpoint-auth-none",
    conformance_client_auth_client_credentials_jwt => "auth/client-credentials-jwt",
    conformance_client_auth_client_credentials_basic => "auth/client-credentials-basic",
}

// Scenarios execbox refuses on purpose: metadata-var2 and -var3. Their authorization server
// is found at `ROOT/tenant1` (the resource's metadata says so) but its metadata names `ROOT` as
// its `issuer`; RFC 8414 §3.3 says such metadata MUST NOT be used (the defence against an
// authorization server answering for another), and the MCP SDK for Rust holds to it where the
// TypeScript SDK does not check. These trials pin the refusal: nothing is registered, no
// browser is opened, no code or token is asked for, and the adapter says why.
pub async fn conformance_client_auth_metadata_var2_is_refused_for_its_issuer(
    h: Harness,
) -> Result<(), String> {
    refused_for_its_issuer(h, "auth/metadata-var2").await
}

pub async fn conformance_client_auth_metadata_var3_is_refused_for_its_issuer(
    h: Harness,
) -> Result<(), String> {
    refused_for_its_issuer(h, "auth/metadata-var3").await
}

async fn refused_for_its_issuer(h: Harness, scenario: &str) -> Result<(), String> {
    let Some((output, results, checks)) = run_scenario(&h, scenario).await? else {
        return Ok(());
    };
    let client = std::fs::read_to_string(results.join("stderr.txt")).unwrap_or_default();
    let reached: Vec<&str> = checks
        .iter()
        .filter(|c| c["status"] == "SUCCESS")
        .filter_map(|c| c["id"].as_str())
        .filter(|id| {
            matches!(
                *id,
                "client-registration" | "authorization-request" | "token-request"
            )
        })
        .collect();
    check!(
        client.contains("Authorization server issuer mismatch") && reached.is_empty(),
        "{scenario}: expected login to refuse the metadata before registering; reached \
         {reached:?}\n--- the client's stderr ---\n{client}\n{}",
        said(&output)
    );
    Ok(())
}

/// `conformance client --scenario S` in the trial's folder, with the adapter as the client.
async fn client_scenario(h: Harness, scenario: &str) -> Result<(), String> {
    let Some((output, results, checks)) = run_scenario(&h, scenario).await? else {
        return Ok(());
    };
    let text = serde_json::to_string_pretty(&checks).unwrap_or_default();
    let bad: Vec<String> = checks
        .iter()
        .filter(|c| matches!(c["status"].as_str(), Some("FAILURE" | "WARNING")))
        .map(|c| {
            format!(
                "{} {}: {} {}",
                c["status"].as_str().unwrap_or_default(),
                c["id"].as_str().unwrap_or_default(),
                c["description"].as_str().unwrap_or_default(),
                c.get("errorMessage")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
            )
        })
        .collect();
    let passed = checks.iter().any(|c| c["status"] == "SUCCESS");
    if output.status.success() && bad.is_empty() && passed {
        return Ok(());
    }
    let client = |file: &str| std::fs::read_to_string(results.join(file)).unwrap_or_default();
    Err(format!(
        "{scenario}: the suite exited with {}; checks failing or warning: {bad:#?}{}\n\
         --- checks.json ---\n{text}\n--- the client's stdout ---\n{}\n--- the client's stderr ---\n{}\n{}",
        output.status,
        if passed { "" } else { " (and none succeeded)" },
        client("stdout.txt"),
        client("stderr.txt"),
        said(&output),
    ))
}

/// Runs the suite's client `scenario` with the adapter as the client: its output, the folder of
/// its results and its checks; `None` when npm is missing outside CI.
async fn run_scenario(
    h: &Harness,
    scenario: &str,
) -> Result<Option<(std::process::Output, PathBuf, Vec<Value>)>, String> {
    let Some(npm) = tokio::task::spawn_blocking(conformance::installed)
        .await
        .map_err(|e| e.to_string())?
    else {
        return Ok(None);
    };
    let run = Command::new("node")
        .arg(conformance::suite(npm))
        .args(["client", "--scenario", scenario, "--command"])
        // The suite splits the command on spaces and appends the server's URL.
        .arg(format!("node {ADAPTER}"))
        .args(["--timeout", &CLIENT_TIMEOUT_MS.to_string()])
        .current_dir(&h.dir)
        .env("EXECBOX_BIN", EXECBOX)
        .env("CONFORMANCE_NODE_MODULES", npm.join("node_modules"))
        .env_remove("RUST_LOG")
        .env_remove("EXECBOX_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(SUITE_WITHIN, run)
        .await
        .map_err(|_| format!("the suite did not finish {scenario} within {SUITE_WITHIN:?}"))?
        .map_err(|e| format!("cannot run the conformance suite with node: {e}"))?;
    let results = results_of(&h.dir.join("results")).ok_or_else(|| {
        format!(
            "{scenario}: the suite wrote no checks.json\n{}",
            said(&output)
        )
    })?;
    let text = std::fs::read_to_string(results.join("checks.json")).map_err(|e| e.to_string())?;
    let checks: Vec<Value> = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    Ok(Some((output, results, checks)))
}

/// The folder holding the run's `checks.json` (`results/<scenario>-<time>/`; an `auth/`
/// scenario's name makes it one folder deeper).
fn results_of(dir: &std::path::Path) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.join("checks.json").is_file() {
            return Some(path);
        }
        if path.is_dir() {
            if let Some(found) = results_of(&path) {
                return Some(found);
            }
        }
    }
    None
}

fn said(output: &std::process::Output) -> String {
    format!(
        "--- the suite's stdout ---\n{}\n--- the suite's stderr ---\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}
