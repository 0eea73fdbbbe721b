//! `execbox runner --listen` keeps answering its health probes while unauthenticated
//! connections flood its handshake slots (review finding M2): 64 trickling connections used
//! to make `/livez` and `/readyz` go silent, and the liveness probe would have restarted the pod.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::runners::ListeningRunner;
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message as Frame;

/// Trickling connections the attacker keeps open (more than the 64 handshake slots).
const ATTACKERS: usize = 100;
/// Probes sent while they trickle, and over how long.
const PROBES: usize = 30;
const PROBE_SPAN: Duration = Duration::from_secs(3);
/// How long one probe may take: the shipped probes' `timeoutSeconds`.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Opens a connection that starts a request head and sends one more byte of it each round,
/// never finishing it.
fn trickler(addr: &str) -> Option<TcpStream> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.set_nonblocking(true).ok()?;
    let _ = stream.write_all(b"GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ");
    Some(stream)
}

/// Keeps [`ATTACKERS`] trickling connections open until `stop`, reopening any the runner
/// closes (as an attacker would); counts the reopenings.
fn attack(addr: String, stop: Arc<AtomicBool>, reopened: Arc<AtomicUsize>) {
    let mut conns: Vec<Option<TcpStream>> = (0..ATTACKERS).map(|_| trickler(&addr)).collect();
    while !stop.load(Ordering::SeqCst) {
        for slot in &mut conns {
            let closed = match slot {
                None => true,
                Some(stream) => {
                    let wrote = stream.write(b"a");
                    let mut buf = [0u8; 256];
                    let read = stream.read(&mut buf);
                    let gone = |e: &std::io::Error| e.kind() != std::io::ErrorKind::WouldBlock;
                    // Any answer (or EOF) means the runner let go of it.
                    read.is_ok()
                        || matches!(&wrote, Err(e) if gone(e))
                        || matches!(&read, Err(e) if gone(e))
                }
            };
            if closed {
                *slot = trickler(&addr);
                reopened.fetch_add(1, Ordering::SeqCst);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One plain GET; the status line's code, or why there was none within [`PROBE_TIMEOUT`].
fn probe(addr: &str, path: &str) -> Result<u16, String> {
    let mut stream = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    stream.set_read_timeout(Some(PROBE_TIMEOUT)).unwrap();
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    let mut answer = Vec::new();
    let read = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok());
    match (status, read) {
        (Some(code), _) => Ok(code),
        (None, Err(e)) => Err(format!("no answer: {e}")),
        (None, Ok(_)) => Err(format!("closed without an answer ({} bytes)", answer.len())),
    }
}

/// Runs `1 + 1` over a real WebSocket session.
async fn one_plus_one(url: &str) -> Result<serde_json::Value, String> {
    let (mut ws, _) = tokio_tungstenite::connect_async(url)
        .await
        .map_err(|e| format!("upgrade failed: {e}"))?;
    let execute = serde_json::json!({
        "type": "execute", "id": "e1", "code": "1 + 1", "options": {}, "providers": []
    });
    ws.send(Frame::text(execute.to_string()))
        .await
        .map_err(|e| format!("send failed: {e}"))?;
    let mut messages = Vec::new();
    while let Some(Ok(frame)) = ws.next().await {
        if let Frame::Text(text) = frame {
            let message: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| format!("not JSON ({e}): {text}"))?;
            let done = message["type"] == "done";
            messages.push(message);
            if done {
                break;
            }
        }
    }
    messages
        .pop()
        .ok_or_else(|| "the session closed without a done".to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_probes_are_answered_while_100_connections_trickle_their_heads() {
    // A long handshake timeout: the trickling connections are not cut by time during the test.
    let runner = ListeningRunner::start(&["--handshake-timeout-ms", "30000"], &[]);
    let addr = runner.url.strip_prefix("ws://").unwrap().to_owned();
    let stop = Arc::new(AtomicBool::new(false));
    let reopened = Arc::new(AtomicUsize::new(0));
    let attacker = {
        let (addr, stop, reopened) = (addr.clone(), stop.clone(), reopened.clone());
        std::thread::spawn(move || attack(addr, stop, reopened))
    };
    // Let the flood fill every handshake slot first.
    std::thread::sleep(Duration::from_millis(500));
    let probes = {
        let addr = addr.clone();
        tokio::task::spawn_blocking(move || {
            let mut outcomes = Vec::new();
            for i in 0..PROBES {
                let path = ["/livez", "/readyz", "/metrics"][i % 3];
                let began = Instant::now();
                outcomes.push((path, probe(&addr, path), began.elapsed()));
                std::thread::sleep(PROBE_SPAN / PROBES as u32);
            }
            outcomes
        })
    };
    let outcomes = probes.await.unwrap();
    // A real session still works under the flood.
    let session = tokio::time::timeout(Duration::from_secs(10), one_plus_one(&runner.url))
        .await
        .unwrap_or_else(|_| Err("no done within 10 s".into()));
    stop.store(true, Ordering::SeqCst);
    attacker.join().unwrap();
    let failed: Vec<String> = outcomes
        .iter()
        .filter(|(_, outcome, _)| *outcome != Ok(200))
        .map(|(path, outcome, took)| format!("{path}: {outcome:?} after {took:?}"))
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {PROBES} probes failed while {ATTACKERS} connections trickled ({} reopened):\n{}",
        failed.len(),
        reopened.load(Ordering::SeqCst),
        failed.join("\n")
    );
    let done = session.unwrap_or_else(|e| panic!("a session under the flood: {e}"));
    assert_eq!(done["ok"], true, "{done}");
    assert_eq!(done["result"], 2, "{done}");
}
