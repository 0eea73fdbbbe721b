//! The pool, migrations and listener against a real PostgreSQL the test starts itself.

use std::time::Duration;

use execbox_pg::testing::TestServer;
use execbox_pg::{Migrations, Notice, Pg, PgUrl, PoolOptions};

fn pool(url: &str) -> Pg {
    Pg::new(&PgUrl::parse(url).unwrap(), PoolOptions::default()).unwrap()
}

const V2: Migrations = Migrations {
    component: "test",
    steps: &[
        "CREATE TABLE t (id INTEGER PRIMARY KEY)",
        "ALTER TABLE t ADD COLUMN name TEXT",
    ],
};

#[test]
fn migrations_run_once_each_and_a_newer_schema_is_refused() {
    let Some(server) = TestServer::start_or_skip() else {
        return;
    };
    let url = server.database("migrations");
    // Four processes' worth of pools migrating at once: each step once.
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || pool(&url).migrate(&V2))
        })
        .collect();
    for h in handles {
        h.join().unwrap().unwrap();
    }
    let pg = pool(&url);
    let version: i32 = pg
        .block(|c| async move {
            c.query_one(
                "SELECT version FROM execbox_schema WHERE component = 'test'",
                &[],
            )
            .await
            .map(|r| r.get(0))
        })
        .unwrap();
    assert_eq!(version, 2);
    pg.block(|c| async move {
        c.batch_execute("INSERT INTO t (id, name) VALUES (1, 'x')")
            .await
    })
    .unwrap();
    let older = Migrations {
        component: "test",
        steps: &V2.steps[..1],
    };
    let e = pg.migrate(&older).unwrap_err().to_string();
    assert!(
        e.contains("the test schema is at version 2, newer than this execbox's 1"),
        "{e}"
    );
}

#[test]
fn a_database_that_goes_away_is_a_clear_error_and_the_pool_recovers() {
    let Some(mut server) = TestServer::start_or_skip() else {
        return;
    };
    let url = format!(
        "postgres://postgres:s3cret@127.0.0.1:{}/postgres?sslmode=disable",
        server.port()
    );
    let pg = Pg::new(
        &PgUrl::parse(&url).unwrap(),
        PoolOptions {
            connect_timeout: Duration::from_secs(1),
            ..PoolOptions::default()
        },
    )
    .unwrap();
    pg.check().unwrap();
    server.kill();
    let e = pg.check().unwrap_err();
    assert!(e.is_unavailable(), "{e}");
    let text = e.to_string();
    assert!(text.contains("is unavailable"), "{text}");
    assert!(!text.contains("s3cret"), "{text}");
    server.resume().unwrap();
    // The broken connection is replaced on its next use.
    let mut ok = false;
    for _ in 0..20 {
        if pg.check().is_ok() {
            ok = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(ok, "the pool did not recover");
}

#[test]
fn a_listener_hears_notifications_and_resyncs_after_the_database_comes_back() {
    let Some(mut server) = TestServer::start_or_skip() else {
        return;
    };
    let pg = pool(&server.url());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut listener = pg.listen(&["execbox_test"]);
        assert_eq!(next(&mut listener).await, Notice::Resync);
        pg.run(|c| async move { c.batch_execute("NOTIFY execbox_test, 'one'").await })
            .await
            .unwrap();
        assert_eq!(
            next(&mut listener).await,
            Notice::Notification {
                channel: "execbox_test".into(),
                payload: "one".into()
            }
        );
        tokio::task::block_in_place(|| {
            server.kill();
            server.resume().unwrap();
        });
        assert_eq!(next(&mut listener).await, Notice::Resync);
        let mut sent = false;
        for _ in 0..20 {
            if pg
                .run(|c| async move { c.batch_execute("NOTIFY execbox_test, 'two'").await })
                .await
                .is_ok()
            {
                sent = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(sent);
        assert_eq!(
            next(&mut listener).await,
            Notice::Notification {
                channel: "execbox_test".into(),
                payload: "two".into()
            }
        );
    });
}

async fn next(listener: &mut execbox_pg::Listener) -> Notice {
    tokio::time::timeout(Duration::from_secs(20), listener.recv())
        .await
        .expect("a notice within 20 s")
        .expect("the listener lives")
}

/// A stalled server (SIGSTOP: connections stay open, nothing answers, and its own
/// `statement_timeout` cannot fire) fails a call within the pool's call deadline; the
/// connection that ran out of time is closed, not pooled again; the pool recovers when the
/// server goes on.
#[test]
fn a_stalled_database_fails_a_call_within_its_deadline_and_the_connection_is_not_reused() {
    let Some(server) = TestServer::start_or_skip() else {
        return;
    };
    let pg = Pg::new(
        &PgUrl::parse(&server.url()).unwrap(),
        PoolOptions {
            max_size: 1,
            connect_timeout: Duration::from_secs(1),
            call_timeout: Duration::from_secs(1),
            ..PoolOptions::default()
        },
    )
    .unwrap();
    pg.check().unwrap();
    assert_eq!(pg.connections(), 1);
    {
        let _stalled = server.stall();
        for _ in 0..2 {
            let asked = std::time::Instant::now();
            let e = pg
                .block(|c| async move { c.simple_query("SELECT 1").await.map(|_| ()) })
                .unwrap_err();
            // 1 s to connect or 1 s for the answer, with room for a loaded machine.
            assert!(
                asked.elapsed() < Duration::from_secs(4),
                "{:?}",
                asked.elapsed()
            );
            assert!(e.is_unavailable(), "{e}");
            assert!(e.to_string().contains("is unavailable"), "{e}");
            assert_eq!(
                pg.connections(),
                0,
                "a timed-out connection left in the pool"
            );
        }
        // From async code, as the stores call it.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let asked = std::time::Instant::now();
        let e = runtime
            .block_on(pg.run(|c| async move { c.simple_query("SELECT 1").await.map(|_| ()) }))
            .unwrap_err();
        assert!(e.is_unavailable(), "{e}");
        assert!(asked.elapsed() < Duration::from_secs(4));
    }
    let mut back = false;
    for _ in 0..50 {
        if pg.check().is_ok() {
            back = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(back, "the pool did not recover once the server went on");
}
