//! Rate limits and the audit log in PostgreSQL, with real `execbox run` processes: processes
//! sharing `--state postgres://...` admit exactly the limit between them, and a database that
//! is down refuses rate-limited calls with a clear message.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use execbox_pg::testing::TestServer;
use execbox_pg::{Pg, PgUrl, PoolOptions};
use serde_json::json;

use super::support::cli::{command, text, wait_output};
use super::support::temp::TempDir;
use super::{run, tools};

/// A tools file with `quota.take` (10 per hour), echoing its input.
fn limited_tools(dir: &Path) -> PathBuf {
    let path = dir.join("limited.yaml");
    let yaml = json!({
        "version": 1,
        "providers": {"quota": {"tools": {"take": {
            "command": "python3",
            "args": ["-c", "import json, sys; print(json.dumps(json.load(sys.stdin)['input']))"],
            "rate_limit": {"requests": 10, "window": "1h"},
        }}}}
    });
    std::fs::write(&path, yaml.to_string()).unwrap();
    path
}

#[test]
fn four_runs_sharing_a_postgres_state_admit_exactly_the_limit_between_them() {
    let Some(server) = TestServer::start_or_skip() else {
        return;
    };
    let url = server.database("four_runs");
    let dir = TempDir::new("policy-pg-four");
    let tools = limited_tools(dir.path());
    // Four processes at once, six calls each: 24 calls against 10 per hour.
    let code = "let ok = 0; for (let i = 0; i < 6; i++) { \
                try { await quota.take({ i }); ok++ } catch (e) { \
                  if (e.reason !== 'rate_limited') throw e } } ok";
    let children: Vec<_> = (0..4)
        .map(|_| {
            let mut child = command(&[
                "run",
                "-",
                "--tools",
                tools.to_str().unwrap(),
                "--state",
                &url,
                "--audit-log",
                &url,
            ])
            .spawn()
            .unwrap();
            child
                .stdin
                .take()
                .unwrap()
                .write_all(code.as_bytes())
                .unwrap();
            child
        })
        .collect();
    let mut admitted = 0;
    for child in children {
        let out = wait_output(child, Duration::from_secs(120));
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
        admitted += stdout
            .trim()
            .parse::<u32>()
            .unwrap_or_else(|_| panic!("{stdout}"));
    }
    assert_eq!(admitted, 10);
    // Each decision is a row of the audit log in the same database.
    let pg = Pg::new(&PgUrl::parse(&url).unwrap(), PoolOptions::default()).unwrap();
    let outcomes: Vec<(String, i64)> = pg
        .block(|c| async move {
            let rows = c
                .query(
                    "SELECT line::jsonb ->> 'outcome', count(*) FROM audit_events \
                     WHERE event = 'tool_call' GROUP BY 1 ORDER BY 1",
                    &[],
                )
                .await?;
            Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
        })
        .unwrap();
    assert_eq!(
        outcomes,
        [("ok".to_string(), 10), ("rate_limited".to_string(), 14)]
    );
}

#[test]
fn a_run_with_its_postgres_state_down_refuses_rate_limited_calls_clearly() {
    // A port nothing listens on: the database is down.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://execbox:s3cret@127.0.0.1:{port}/execbox?sslmode=disable");
    let dir = TempDir::new("policy-pg-down");
    let tools = tools(dir.path());
    let t = tools.to_str().unwrap();
    // A call without a rate limit needs no database; the rate-limited one is refused.
    let (status, out, err) = run(
        &["run", "-", "--tools", t, "--state", &url],
        "const n = (await mail.list({ n: 1 })).n; let r = 'admitted'; \
         try { await weather.get({}) } catch (e) { r = [n, e.reason ?? null, e.message] } r",
    );
    assert_eq!(status, Some(0), "{err}");
    let out: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|_| panic!("{out}"));
    assert_eq!(
        out,
        json!([
            1,
            null,
            "weather.get: the call was refused because the rate-limit store is unavailable \
             (the host cannot count calls of this tool now); try again later"
        ])
    );
    // The operator's log names the database, never its password.
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
    assert!(!err.contains("s3cret"), "{err}");
    // Uncaught, the refusal ends the run with the same words.
    let (status, _, err) = run(
        &["run", "-", "--tools", t, "--state", &url],
        "await weather.get({})",
    );
    assert_eq!(status, Some(1), "{err}");
    assert!(
        err.contains(
            "weather.get: the call was refused because the rate-limit store is unavailable"
        ),
        "{err}"
    );
}
