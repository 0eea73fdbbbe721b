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

/// A rate-limited call while the state database is stalled (SIGSTOP of the server and its
/// backends: the run's pooled connection stays open, nothing answers, and the server's own
/// `statement_timeout` cannot fire) is refused within the store's 5 s call deadline, failing
/// closed, instead of waiting until the program's own time limit; the password of the URL
/// (with `/` and `?`) never shows on stderr.
#[test]
fn a_rate_limited_call_is_refused_within_the_deadline_while_the_database_is_stalled() {
    let Some(server) = TestServer::start_or_skip() else {
        return;
    };
    // The test server trusts any password: one with `/` and `?`, as base64 ones have.
    let url = server.database("stalled_runs").replacen(
        "postgres://postgres@",
        "postgres://postgres:Zq9/Xk?Wv+Yj==@",
        1,
    );
    let dir = TempDir::new("policy-pg-stalled");
    let (entered, go) = (dir.join("entered"), dir.join("go"));
    // `quota.take({first: true})` says it runs, then waits for `go`, before answering.
    let script = format!(
        "import json, os, sys, time\n\
         i = json.load(sys.stdin)['input']\n\
         if i.get('first'):\n    open({entered:?}, 'w').close()\n    \
         while not os.path.exists({go:?}): time.sleep(0.02)\n\
         print(json.dumps(i))\n",
        entered = entered.to_str().unwrap(),
        go = go.to_str().unwrap(),
    );
    let tools = dir.join("gated.yaml");
    let yaml = json!({
        "version": 1,
        "providers": {"quota": {"tools": {"take": {
            "command": "python3",
            "args": ["-c", script],
            "rate_limit": {"requests": 10, "window": "1h"},
        }}}}
    });
    std::fs::write(&tools, yaml.to_string()).unwrap();
    let code = "await quota.take({ first: true }); let r = 'admitted'; \
                try { await quota.take({}) } catch (e) { r = [e.reason ?? null, e.message] } r";
    let mut child = command(&[
        "run",
        "-",
        "--tools",
        tools.to_str().unwrap(),
        "--state",
        &url,
        "--timeout-ms",
        "60000",
    ])
    .spawn()
    .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(code.as_bytes())
        .unwrap();
    // The first call was admitted (its connection is in the pool) and runs: stall the
    // database, then let the call answer.
    let asked = std::time::Instant::now();
    while !entered.exists() {
        assert!(
            asked.elapsed() < Duration::from_secs(30),
            "the first call never ran"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let stalled = server.stall();
    std::fs::write(&go, "").unwrap();
    let released = std::time::Instant::now();
    let out = wait_output(child, Duration::from_secs(90));
    let took = released.elapsed();
    drop(stalled);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let answer: serde_json::Value =
        serde_json::from_str(&stdout).unwrap_or_else(|_| panic!("{stdout}\n{stderr}"));
    assert_eq!(
        answer,
        json!([
            null,
            "quota.take: the call was refused because the rate-limit store is unavailable \
             (the host cannot count calls of this tool now); try again later"
        ]),
        "{stderr}"
    );
    // The 5 s deadline, with room for a loaded machine; the program's limit is 60 s.
    assert!(took < Duration::from_secs(15), "{took:?}");
    assert!(
        stderr.contains("postgres://postgres:***@127.0.0.1:"),
        "{stderr}"
    );
    for part in ["Zq9", "Xk?Wv", "Yj=="] {
        assert!(!stderr.contains(part), "{stderr}");
    }
}

/// A `--state` URL that cannot be used is refused naming what is wrong, and never repeats
/// its password (the flag's parser used to echo the value as given).
#[test]
fn an_unusable_state_url_is_refused_without_its_password() {
    let (status, _, err) = run(
        &[
            "run",
            "-",
            "--state",
            "postgres://u:Zq9/Xk?Wv@h:notaport/db",
        ],
        "1",
    );
    assert_eq!(status, Some(2), "{err}");
    assert!(err.contains("--state"), "{err}");
    assert!(err.contains("postgres://u:***@h/db"), "{err}");
    assert!(err.contains("port"), "{err}");
    for part in ["Zq9", "Xk?Wv"] {
        assert!(!err.contains(part), "{err}");
    }
}
