//! The official MCP conformance suite's server scenarios against `execbox mcp --http`, with the
//! reference `everything` server behind it: what a client sees of an upstream through execbox
//! (initialize, tools, logging, resources, prompts) must pass as the server itself would.

use super::*;

#[allow(dead_code)]
#[path = "../support/conformance.rs"]
mod conformance_support;

/// How long one scenario may take.
const SCENARIO_TIME: Duration = Duration::from_secs(60);

/// Runs `scenario` of the suite against `execbox mcp --http` serving the `everything` server;
/// the suite must exit 0 and no check of `results/*/checks.json` may be a failure or warning.
async fn server_scenario(h: Harness, scenario: &str) -> Result<(), String> {
    let Some(npm) = tokio::task::spawn_blocking(conformance_support::installed)
        .await
        .map_err(|e| e.to_string())?
    else {
        return Ok(());
    };
    let everything = conformance_support::everything_server(npm);
    let suite = conformance_support::suite(npm);
    let config = h.config(json!({
        "everything": {"command": "node", "args": [everything, "stdio"]}
    }));
    let (_server, url) = start_http_open(&h, &["--config", config.to_str().unwrap()]).await?;
    let run = Command::new("node")
        .arg(&suite)
        .args(["server", "--url", &url, "--scenario", scenario])
        .current_dir(&h.dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(SCENARIO_TIME, run)
        .await
        .map_err(|_| format!("the suite's {scenario} did not end within {SCENARIO_TIME:?}"))?
        .map_err(|e| format!("cannot run the suite: {e}"))?;
    let said = format!(
        "--- suite stdout ---\n{}\n--- suite stderr ---\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let checks = checks(&h.dir.join("results"));
    let bad: Vec<&Value> = checks
        .iter()
        .filter(|c| matches!(c["status"].as_str(), Some("FAILURE" | "WARNING")))
        .collect();
    check!(
        output.status.success() && bad.is_empty() && !checks.is_empty(),
        "{scenario}: exit {:?}, failures and warnings {}\n--- checks ---\n{}\n{said}",
        output.status.code(),
        serde_json::to_string_pretty(&bad).unwrap_or_default(),
        serde_json::to_string_pretty(&checks).unwrap_or_default()
    );
    Ok(())
}

/// Every check of every `checks.json` under `results`.
fn checks(results: &std::path::Path) -> Vec<Value> {
    let mut all = Vec::new();
    let Ok(runs) = std::fs::read_dir(results) else {
        return all;
    };
    for run in runs.flatten() {
        let Ok(text) = std::fs::read_to_string(run.path().join("checks.json")) else {
            continue;
        };
        match serde_json::from_str::<Value>(&text) {
            Ok(Value::Array(items)) => all.extend(items),
            Ok(other) => all.push(other),
            Err(e) => all.push(json!({"status": "FAILURE", "unreadable": e.to_string()})),
        }
    }
    all
}

/// `execbox mcp ARGS --http 127.0.0.1:0` without a token (loopback), and its URL.
async fn start_http_open(h: &Harness, args: &[&str]) -> Result<(Child, String), String> {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--http", "127.0.0.1:0"]);
    let child = h.command(&all).spawn().map_err(|e| e.to_string())?;
    let mut url = None;
    let found = h
        .wait_for(|h| {
            let stderr = h.stderr();
            let whole = &stderr[..stderr.rfind('\n').map_or(0, |end| end + 1)];
            url = whole
                .lines()
                .find_map(|l| l.strip_prefix("execbox mcp: serving ").map(str::to_owned));
            url.is_some()
        })
        .await;
    check!(found, "no address in stderr");
    Ok((child, url.unwrap_or_default()))
}

pub async fn conformance_server_initialize(h: Harness) -> Result<(), String> {
    server_scenario(h, "server-initialize").await
}

pub async fn conformance_server_tools_list(h: Harness) -> Result<(), String> {
    server_scenario(h, "tools-list").await
}

pub async fn conformance_server_logging_set_level(h: Harness) -> Result<(), String> {
    server_scenario(h, "logging-set-level").await
}

pub async fn conformance_server_resources_list(h: Harness) -> Result<(), String> {
    server_scenario(h, "resources-list").await
}

pub async fn conformance_server_prompts_list(h: Harness) -> Result<(), String> {
    server_scenario(h, "prompts-list").await
}
