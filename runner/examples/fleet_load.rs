//! Sizing figures for one `--listen` runner: `cargo run --release -p execbox-runner --example fleet_load -- ws://127.0.0.1:PORT`
//! (start it with `--max-sessions 64`; no token). Prints sessions/s, executions/s and the
//! resident memory (`/metrics`) idle, with 16 idle sessions and with 16 busy ones.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn exec(ws: &mut Ws, code: &str) {
    let m = serde_json::json!({"type": "execute", "id": "x", "code": code, "providers": []});
    ws.send(Message::text(m.to_string())).await.unwrap();
    while let Some(Ok(f)) = ws.next().await {
        if f.to_text().unwrap_or("").contains("\"done\"") {
            return;
        }
    }
}

fn rss_mib(url: &str) -> f64 {
    let mut s = std::net::TcpStream::connect(url.trim_start_matches("ws://")).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\n\r\n").unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    let line = body
        .lines()
        .find_map(|l| l.strip_prefix("execbox_resident_memory_bytes "))
        .unwrap();
    line.trim().parse::<f64>().unwrap() / 1048576.0
}

#[tokio::main]
async fn main() {
    let url = std::env::args().nth(1).expect("ws://HOST:PORT");
    let (clients, window) = (4, Duration::from_secs(5));
    for (what, per_session) in [
        ("sessions/s (one execution each)", 1),
        ("executions/s (warm sessions)", u32::MAX),
    ] {
        let began = Instant::now();
        let tasks = (0..clients).map(|_| {
            let url = url.clone();
            tokio::spawn(async move {
                let mut n = 0u64;
                while began.elapsed() < window {
                    let mut ws = tokio_tungstenite::connect_async(&url).await.unwrap().0;
                    for _ in 0..per_session {
                        exec(&mut ws, "1 + 1").await;
                        n += 1;
                        if began.elapsed() >= window {
                            break;
                        }
                    }
                    let _ = ws.close(None).await;
                }
                n
            })
        });
        let total: u64 = futures_util::future::join_all(tasks)
            .await
            .into_iter()
            .map(Result::unwrap)
            .sum();
        println!(
            "{what}: {:.0}",
            total as f64 / began.elapsed().as_secs_f64()
        );
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = rss_mib(&url);
    let mut open = Vec::new();
    for _ in 0..16 {
        let mut ws = tokio_tungstenite::connect_async(&url).await.unwrap().0;
        exec(&mut ws, "1").await;
        open.push(ws);
    }
    let sixteen_idle = rss_mib(&url);
    let busy = "const a = []; for (let i = 0; i < 2e5; i++) a.push({i}); const t = Date.now(); while (Date.now() - t < 3000) {}";
    let handles: Vec<_> = open
        .into_iter()
        .map(|mut ws| {
            tokio::spawn(async move {
                exec(&mut ws, busy).await;
                ws
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let sixteen_busy = rss_mib(&url);
    futures_util::future::join_all(handles).await;
    println!("RSS idle {idle:.1} MiB; +16 idle sessions {:.1} MiB each; busy (200k objects) {:.1} MiB each",
        (sixteen_idle - idle) / 16.0, (sixteen_busy - idle) / 16.0);
}
