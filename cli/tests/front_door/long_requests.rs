//! Long requests of `execbox serve` (event streams, waits) are bounded per principal and never
//! take the connection slots other principals need (review finding M4 of the attacker's
//! review): with `--max-connections 16`, a token holding no permission opened 16
//! `GET /v1/events` streams and every other caller's request was closed on accept.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::capabilities::Roots;
use crate::support::runners::EXECBOX;
use crate::{read_answer, sha256_hex, Answer};

/// Long requests one principal may hold (`--max-long-requests-per-principal`).
const PER_PRINCIPAL: usize = 6;
/// `--max-connections`: a quarter (4) is kept for short requests, so 12 long ones in all.
const CONNECTIONS: usize = 16;
const LONG_IN_ALL: usize = 12;

struct Serve {
    addr: String,
    child: Child,
    _roots: Roots,
}

impl Drop for Serve {
    /// SIGTERM, so the server stops the sleeping execution; SIGKILL if it is still there
    /// 10 s later.
    fn drop(&mut self) {
        let pid = libc::pid_t::try_from(self.child.id()).unwrap_or(0);
        // SAFETY: kill(2) with a pid of our own child, which is not reaped yet.
        #[allow(unsafe_code)]
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn token(name: &str) -> String {
    format!("token-of-{name}")
}

/// `execbox serve` with three principals holding no permission (alice, bob, carol) and a
/// capability `sleep` whose executions run for a minute.
fn serve() -> Serve {
    let roots = Roots::new("front-door-long-requests");
    roots
        .project
        .sh_executor("sleeper", &["sleep"], "cat >/dev/null\nsleep 60 & wait\n");
    roots.project.capability(
        "sleep",
        "name: sleep\ntype: sleep\ntimeout_ms: 120000\n",
        &[],
    );
    let policy = roots.temp.join("policy.yaml");
    let principals: String = ["alice", "bob", "carol"]
        .iter()
        .map(|name| {
            format!(
                "  {name}: {{ token_sha256: [{}] }}\n",
                sha256_hex(&token(name))
            )
        })
        .collect();
    std::fs::write(&policy, format!("version: 1\nprincipals:\n{principals}")).unwrap();
    let mut child = Command::new(EXECBOX)
        .args(["serve", "--listen", "127.0.0.1:0", "--pool", "1"])
        .args(["--project", roots.project_dir().to_str().unwrap()])
        .args(["--db", roots.temp.join("state.db").to_str().unwrap()])
        .args(["--policy", policy.to_str().unwrap()])
        .args(["--max-connections", &CONNECTIONS.to_string()])
        .args([
            "--max-long-requests-per-principal",
            &PER_PRINCIPAL.to_string(),
        ])
        .env("EXECBOX_HOME", &roots.global.0)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let line = crate::first_line(child.stdout.take().unwrap());
    let addr = line.trim().strip_prefix("http://").unwrap().to_owned();
    Serve {
        addr,
        child,
        _roots: roots,
    }
}

/// Sends `method path` as `who` on a new connection, and returns it unread.
fn open(server: &Serve, who: &str, method: &str, path: &str, body: &str) -> TcpStream {
    let mut stream = TcpStream::connect(&server.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        server.addr,
        token(who),
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream
}

/// The head of an event stream's answer (its body never ends): the status, or the whole
/// answer when it is a refusal.
fn stream_head(stream: &mut TcpStream) -> Answer {
    let mut raw = Vec::new();
    let mut chunk = [0u8; 1024];
    while !raw.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => raw.extend_from_slice(&chunk[..n]),
        }
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status: u16 = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    if status == 200 {
        return Answer {
            status,
            head: text.to_ascii_lowercase(),
            body: String::new(),
        };
    }
    // A refusal has a length: read the rest of it.
    let mut rest = read_answer(stream);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    rest.status = status;
    rest.head = head.to_ascii_lowercase();
    rest.body = format!("{body}{}", rest.body);
    rest
}

/// A refusal in the door's one shape, `429 TOO_MANY_REQUESTS`, whose message says `says`.
fn assert_too_many(answer: &Answer, says: &str, what: &str) {
    assert_eq!(answer.status, 429, "{what}: {answer:?}");
    let body: serde_json::Value = serde_json::from_str(&answer.body)
        .unwrap_or_else(|_| panic!("{what}: not the error shape: {answer:?}"));
    assert_eq!(body["error"]["code"], "TOO_MANY_REQUESTS", "{what}: {body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(says), "{what}: {message}");
}

/// A short request of `who`, answered in full within a few seconds.
fn short(server: &Serve, who: &str) -> (Answer, Duration) {
    let started = Instant::now();
    let mut stream = TcpStream::connect(&server.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let head = format!(
        "GET /v1/capabilities HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\
         Connection: close\r\n\r\n",
        server.addr,
        token(who)
    );
    let _ = stream.write_all(head.as_bytes());
    let answer = read_answer(&mut stream);
    (answer, started.elapsed())
}

#[test]
fn one_principal_holding_its_long_requests_leaves_room_for_the_others() {
    let server = serve();
    // alice starts an execution that runs for a minute, and waits on it.
    let mut started = open(
        &server,
        "alice",
        "POST",
        "/v1/executions",
        r#"{"capability":"sleep"}"#,
    );
    let answer = read_answer(&mut started);
    assert_eq!(answer.status, 202, "{answer:?}");
    let id = serde_json::from_str::<serde_json::Value>(&answer.body).unwrap()["executionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let wait_path = format!("/v1/executions/{id}/wait?timeoutMs=120000");
    let mut wait = open(&server, "alice", "GET", &wait_path, "");

    // alice opens event streams until one is refused: with her wait, she holds her bound.
    let mut held = Vec::new();
    let refused = loop {
        assert!(
            held.len() <= CONNECTIONS,
            "alice holds {} event streams, none refused",
            held.len()
        );
        let mut stream = open(&server, "alice", "GET", "/v1/events", "");
        let answer = stream_head(&mut stream);
        match answer.status {
            200 => held.push(stream),
            _ => break answer,
        }
    };
    // The wait is a long request too: either it came first (and alice's streams stopped at
    // one fewer), or it is the one refused.
    wait.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut byte = [0u8; 1];
    match held.len() {
        n if n == PER_PRINCIPAL - 1 => match wait.read(&mut byte) {
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            other => panic!("alice's wait is not held: {other:?}"),
        },
        n if n == PER_PRINCIPAL => {
            wait.set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            assert_too_many(
                &read_answer(&mut wait),
                "principal `alice` already holds 6",
                "alice's wait past her bound",
            );
        }
        n => panic!(
            "alice held {n} event streams besides her wait, expected at most {PER_PRINCIPAL}"
        ),
    }
    assert_too_many(
        &refused,
        &format!("principal `alice` already holds {PER_PRINCIPAL} long requests (event streams and waits)"),
        "alice's stream past her bound",
    );
    // Another wait of hers is refused as well, before anything is looked up.
    let mut again = open(&server, "alice", "GET", &wait_path, "");
    assert_too_many(
        &read_answer(&mut again),
        "principal `alice` already holds",
        "another wait of alice's",
    );

    // bob, who holds no permission either, takes what is left for long requests.
    let mut bobs = Vec::new();
    while PER_PRINCIPAL + bobs.len() < LONG_IN_ALL {
        let mut stream = open(&server, "bob", "GET", "/v1/events", "");
        let answer = stream_head(&mut stream);
        assert_eq!(
            answer.status,
            200,
            "bob's stream {}: {answer:?}",
            bobs.len()
        );
        bobs.push(stream);
    }
    // carol's stream would take a slot kept for short requests.
    let mut carols = open(&server, "carol", "GET", "/v1/events", "");
    assert_too_many(
        &stream_head(&mut carols),
        &format!("the server holds {LONG_IN_ALL} long requests"),
        "carol's stream past the server's share",
    );
    // And every principal's short requests are still answered, at once.
    for who in ["carol", "bob", "alice", "carol"] {
        let (answer, took) = short(&server, who);
        assert_eq!(
            answer.status, 200,
            "{who}'s GET while 12 streams are held: {answer:?}"
        );
        assert!(took < Duration::from_secs(5), "{who}'s GET took {took:?}");
    }
    drop((held, bobs));
}
