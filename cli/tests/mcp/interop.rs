//! What servers in the wild answer that the reference clients tolerate, and so must execbox:
//! one test per case, each against a small streamable HTTP server of our own that answers
//! `initialize`, `tools/list` and `tools/call` properly and misbehaves in one way only (the
//! official conformance suite's `initialize` and `tools_call` servers do two of these too).

use super::*;

use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};

/// How the server answers a notification (a POST without an `id`).
#[derive(Clone, Copy)]
enum Notified {
    /// HTTP 500 with a plain-text body (the stateless TypeScript examples' "Already connected").
    ServerError,
    /// HTTP 200 with a JSON-RPC result that has no `id`.
    JsonBody,
    /// HTTP 400 with a JSON-RPC error.
    JsonRpcError,
    /// HTTP 200 with `text/plain`.
    PlainText,
    /// HTTP 401 with a challenge, to everything but `initialize` (as servers that let anyone
    /// initialize do): tolerated for the notification, and the next request says to sign in.
    SignIn,
}

/// A streamable HTTP MCP server that answers notifications as `notified` says; `GET` (the
/// server-sent events stream) is 405, `DELETE` (ending the session) 404. Its URL, and the count
/// of notifications it received.
async fn misbehaving_server(notified: Notified) -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let notifications = Arc::new(AtomicUsize::new(0));
    let counted = notifications.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let counted = counted.clone();
            tokio::spawn(async move {
                let _ = serve_connection(stream, notified, counted).await;
            });
        }
    });
    (url, notifications)
}

async fn serve_connection(
    stream: tokio::net::TcpStream,
    notified: Notified,
    notifications: Arc<AtomicUsize>,
) -> std::io::Result<()> {
    let mut stream = BufReader::new(stream);
    loop {
        let mut head = String::new();
        if stream.read_line(&mut head).await? == 0 {
            return Ok(());
        }
        let method = head.split_whitespace().next().unwrap_or("").to_owned();
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            stream.read_line(&mut line).await?;
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0; length];
        stream.read_exact(&mut body).await?;
        let (status, content_type, answer) = match method.as_str() {
            "POST" => {
                let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                answer_post(&message, notified, &notifications)
            }
            "GET" => ("405 Method Not Allowed", "text/plain", String::new()),
            _ => ("404 Not Found", "text/plain", String::new()),
        };
        let mut response = format!(
            "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n",
            answer.len()
        );
        if status.starts_with("401") {
            response.push_str("www-authenticate: Bearer realm=\"interop\"\r\n");
        }
        response.push_str("\r\n");
        response.push_str(&answer);
        stream.get_mut().write_all(response.as_bytes()).await?;
    }
}

fn answer_post(
    message: &Value,
    notified: Notified,
    notifications: &AtomicUsize,
) -> (&'static str, &'static str, String) {
    let initialize = message.get("method").and_then(Value::as_str) == Some("initialize");
    if matches!(notified, Notified::SignIn) && !initialize {
        if message.get("id").is_none() {
            notifications.fetch_add(1, Ordering::SeqCst);
        }
        return ("401 Unauthorized", "application/json", "{}".into());
    }
    let Some(id) = message.get("id") else {
        notifications.fetch_add(1, Ordering::SeqCst);
        return match notified {
            Notified::ServerError => (
                "500 Internal Server Error",
                "text/plain",
                "Error: Already connected to a transport".into(),
            ),
            Notified::JsonBody => (
                "200 OK",
                "application/json",
                json!({"jsonrpc": "2.0", "result": {}}).to_string(),
            ),
            Notified::JsonRpcError => (
                "400 Bad Request",
                "application/json",
                json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "Bad Request: no id"}})
                    .to_string(),
            ),
            Notified::PlainText | Notified::SignIn => ("200 OK", "text/plain", "ok".into()),
        };
    };
    let result = match message.get("method").and_then(Value::as_str) {
        Some("initialize") => json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "interop", "version": "1.0.0"}
        }),
        Some("tools/list") => json!({"tools": [{
            "name": "shout",
            "description": "Says the text louder",
            "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
        }]}),
        Some("tools/call") => {
            let text = message["params"]["arguments"]["text"]
                .as_str()
                .unwrap_or("");
            json!({"content": [{"type": "text", "text": text.to_uppercase()}]})
        }
        _ => json!({}),
    };
    (
        "200 OK",
        "application/json",
        json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string(),
    )
}

/// execbox keeps a server that answers notifications as `notified` says, and its tool works.
async fn tolerated(h: Harness, notified: Notified) -> Result<(), String> {
    let (url, notifications) = misbehaving_server(notified).await;
    let config = h.config(json!({"odd": {"url": url}}));
    let mcp = h.start(&["--config", config.to_str().unwrap()]).await?;
    let value = mcp.value("return await odd.shout({ text: 'hi' })").await?;
    check!(value == json!("HI"), "{value}; stderr: {}", h.stderr());
    check!(
        notifications.load(Ordering::SeqCst) >= 1,
        "the server saw no notification"
    );
    Ok(())
}

pub async fn an_http_500_answering_a_notification_is_tolerated(h: Harness) -> Result<(), String> {
    tolerated(h, Notified::ServerError).await
}

pub async fn a_json_body_answering_a_notification_is_tolerated(h: Harness) -> Result<(), String> {
    tolerated(h, Notified::JsonBody).await
}

pub async fn a_json_rpc_error_answering_a_notification_is_tolerated(
    h: Harness,
) -> Result<(), String> {
    tolerated(h, Notified::JsonRpcError).await
}

pub async fn plain_text_answering_a_notification_is_tolerated(h: Harness) -> Result<(), String> {
    tolerated(h, Notified::PlainText).await
}

/// A 401 answering `notifications/initialized` is left to the next request, whose 401 makes
/// the server unavailable saying to sign in (not "Transport channel closed").
pub async fn a_401_answering_a_notification_asks_for_a_sign_in(h: Harness) -> Result<(), String> {
    let (url, _) = misbehaving_server(Notified::SignIn).await;
    let config = h.config(json!({"odd": {"url": url}}));
    let mcp = h.start(&["--config", config.to_str().unwrap()]).await?;
    let answer = mcp.exec("return await odd.shout({ text: 'hi' })").await?;
    check!(answer.is_error, "{}", answer.text);
    check!(
        answer.text.contains("needs a sign-in")
            && answer.text.contains(&format!(
                "execbox mcp login odd --config {}",
                config.display()
            )),
        "{}",
        answer.text
    );
    Ok(())
}
