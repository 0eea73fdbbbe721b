//! A real local HTTP server for the OpenAPI provider's tests: an API, a token endpoint, a
//! second origin for redirects, and helpers to build and call a provider.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use execbox_host::{ToolContext, ToolError};
use execbox_openapi::{OpenApiConfig, OpenApiProvider};
use serde_json::{json, Value};

/// Every wait of a test is bounded by this.
pub const WAIT: Duration = Duration::from_secs(20);

/// One request the server saw.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub query: String,
    pub headers: BTreeMap<String, String>,
    pub body: String,
}

/// What the server records.
#[derive(Default)]
pub struct Server {
    pub seen: Mutex<Vec<Seen>>,
    pub token_requests: AtomicUsize,
    /// `host:port` of the other origin, for the cross-origin redirect.
    pub other: Mutex<String>,
}

impl Server {
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn last(&self) -> Seen {
        self.seen()
            .last()
            .cloned()
            .expect("a request reached the server")
    }
}

/// Starts the API server and a second one (another origin); returns the state and both
/// addresses.
pub async fn start() -> (Arc<Server>, SocketAddr, Arc<Server>, SocketAddr) {
    let other = Arc::new(Server::default());
    let other_addr = listen(other.clone()).await;
    let api = Arc::new(Server::default());
    *api.other.lock().unwrap() = other_addr.to_string();
    let api_addr = listen(api.clone()).await;
    (api, api_addr, other, other_addr)
}

async fn listen(state: Arc<Server>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().fallback(handle).with_state(state);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

/// A port nothing listens on (bound, then closed).
pub async fn closed_port() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().port()
}

fn json_response(status: StatusCode, value: Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

async fn handle(State(state): State<Arc<Server>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    let headers: BTreeMap<String, String> = parts
        .headers
        .iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let seen = Seen {
        method: parts.method.to_string(),
        path: parts.uri.path().to_string(),
        query: parts.uri.query().unwrap_or("").to_string(),
        headers: headers.clone(),
        body: String::from_utf8_lossy(&body).into_owned(),
    };
    let path = seen.path.clone();
    let query = seen.query.clone();
    if !path.starts_with("/token") {
        state.seen.lock().unwrap().push(seen.clone());
    }
    let auth = headers.get("authorization").cloned().unwrap_or_default();
    match path.as_str() {
        p if p.starts_with("/v1/echo") => json_response(
            StatusCode::OK,
            json!({"method": seen.method, "path": p, "query": query, "body": seen.body, "authorization": auth}),
        ),
        "/v1/text" => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            "hello\n",
        )
            .into_response(),
        "/v1/binary" => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "image/png")],
            vec![0u8; 300],
        )
            .into_response(),
        "/v1/empty" => StatusCode::NO_CONTENT.into_response(),
        "/v1/bad-json" => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            "{oops",
        )
            .into_response(),
        p if p.starts_with("/v1/status/") => {
            let code: u16 = p["/v1/status/".len()..].parse().unwrap();
            let mut headers = HeaderMap::new();
            if let Some(retry) = query.strip_prefix("retry=") {
                let retry = decode(retry.split('&').next().unwrap());
                headers.insert(header::RETRY_AFTER, retry.parse().unwrap());
            }
            // An unhelpful server that echoes what it got, credentials included.
            let text = format!(
                "denied: uri={} authorization={auth} x-api-key={}",
                parts.uri,
                headers_get(&seen.headers, "x-api-key")
            );
            (StatusCode::from_u16(code).unwrap(), headers, text).into_response()
        }
        "/v1/big" => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            format!("\"{}\"", "x".repeat(4000)),
        )
            .into_response(),
        "/v1/big-stream" => {
            let chunks = (0..64).map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![b'y'; 1024])));
            Response::builder()
                .header(header::CONTENT_TYPE, "text/plain")
                .body(Body::from_stream(futures_util::stream::iter(chunks)))
                .unwrap()
        }
        "/v1/slow" => {
            // Never answers: the client's time limit must end the call.
            std::future::pending::<()>().await;
            unreachable!()
        }
        "/v1/redirect-same" => redirect("/v1/echo/landed".to_string()),
        "/v1/redirect-other" => redirect(format!(
            "http://{}/v1/echo/stolen",
            state.other.lock().unwrap()
        )),
        "/v1/redirect-loop" => redirect("/v1/redirect-loop".to_string()),
        p if p.starts_with("/token") => token(&state, p, &headers, &seen.body).await,
        _ => json_response(StatusCode::NOT_FOUND, json!({"message": "Not Found"})),
    }
}

/// Percent-decoding, the test's own.
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            out.push(u8::from_str_radix(&text[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

fn headers_get(headers: &BTreeMap<String, String>, name: &str) -> String {
    headers.get(name).cloned().unwrap_or_default()
}

fn redirect(location: String) -> Response {
    (StatusCode::FOUND, [(header::LOCATION, location)]).into_response()
}

/// The client id and secret the token endpoint accepts.
pub const CLIENT_ID: &str = "execbox-client";

async fn token(
    state: &Server,
    path: &str,
    headers: &BTreeMap<String, String>,
    body: &str,
) -> Response {
    let n = state.token_requests.fetch_add(1, Ordering::SeqCst) + 1;
    let secret = std::env::var("EXECBOX_TEST_CLIENT_SECRET").unwrap_or_default();
    let expected = format!("Basic {}", execbox_basic(&format!("{CLIENT_ID}:{secret}")));
    if headers.get("authorization") != Some(&expected)
        || !body.contains("grant_type=client_credentials")
    {
        return json_response(
            StatusCode::UNAUTHORIZED,
            json!({"error": "invalid_client", "got": headers.get("authorization")}),
        );
    }
    match path {
        "/token" => json_response(
            StatusCode::OK,
            json!({"access_token": format!("tok-{n}"), "token_type": "Bearer", "expires_in": 3600}),
        ),
        "/token-expired" => json_response(
            StatusCode::OK,
            json!({"access_token": format!("tok-{n}"), "token_type": "Bearer", "expires_in": 0}),
        ),
        "/token-not-json" => (StatusCode::OK, "<html>sign in</html>").into_response(),
        "/token-no-access" => json_response(StatusCode::OK, json!({"token_type": "Bearer"})),
        "/token-slow" => {
            std::future::pending::<()>().await;
            unreachable!()
        }
        _ => json_response(StatusCode::NOT_FOUND, json!({})),
    }
}

/// Base64 the test's own way (not the crate's), to check the crate's.
fn execbox_basic(text: &str) -> String {
    const T: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let b = text.as_bytes();
    let mut out = String::new();
    for c in b.chunks(3) {
        let n = c
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, x)| n | (u32::from(*x) << (16 - 8 * i)));
        for i in 0..4 {
            out.push(if i <= c.len() {
                T[(n >> (18 - 6 * i)) as usize & 63] as char
            } else {
                '='
            });
        }
    }
    out
}

/// The document every call test uses: one operation per server behaviour.
pub fn document() -> Value {
    let get =
        |id: &str| json!({"get": {"operationId": id, "responses": {"200": {"description": "ok"}}}});
    json!({
        "openapi": "3.1.0",
        "info": {"title": "Test API", "version": "1"},
        "paths": {
            "/echo/{id}": {
                "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
                "get": {
                    "operationId": "echo/get",
                    "parameters": [
                        {"name": "tags", "in": "query", "schema": {"type": "array", "items": {"type": "string"}}},
                        {"name": "pipes", "in": "query", "style": "pipeDelimited", "explode": false, "schema": {"type": "array", "items": {"type": "string"}}},
                        {"name": "X-Trace", "in": "header", "schema": {"type": "string"}}
                    ]
                },
                "post": {
                    "operationId": "echo/post",
                    "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object"}}}}
                }
            },
            "/text": get("text"),
            "/binary": get("binary"),
            "/empty": get("empty"),
            "/bad-json": get("bad_json"),
            "/status/{code}": {"get": {"operationId": "status", "parameters": [
                {"name": "code", "in": "path", "required": true, "schema": {"type": "integer"}},
                {"name": "retry", "in": "query", "schema": {"type": "string"}}
            ]}},
            "/big": get("big"),
            "/big-stream": get("big_stream"),
            "/slow": get("slow"),
            "/redirect-same": get("redirect_same"),
            "/redirect-other": get("redirect_other"),
            "/redirect-loop": get("redirect_loop")
        }
    })
}

/// A provider over [`document`] at `addr`, with `edit` applied to its configuration.
pub fn provider(addr: SocketAddr, edit: impl FnOnce(&mut OpenApiConfig)) -> OpenApiProvider {
    try_provider(addr, edit).unwrap_or_else(|e| panic!("{e}"))
}

pub fn try_provider(
    addr: SocketAddr,
    edit: impl FnOnce(&mut OpenApiConfig),
) -> Result<OpenApiProvider, execbox_openapi::OpenApiError> {
    let doc = execbox_openapi::Document::from_value(document(), "test.json").unwrap();
    let mut config = OpenApiConfig::new("test.json");
    config.base_url = Some(format!("http://{addr}/v1"));
    edit(&mut config);
    OpenApiProvider::from_document("api", &doc, &config, Path::new(env!("CARGO_TARGET_TMPDIR")))
}

/// Calls tool `name` (its original name) with `input`, bounded by [`WAIT`].
pub async fn call(
    provider: &OpenApiProvider,
    name: &str,
    input: Value,
) -> Result<Value, ToolError> {
    let tool = provider
        .provider()
        .tools()
        .iter()
        .find(|t| t.name() == name)
        .unwrap_or_else(|| panic!("no tool {name}"));
    tokio::time::timeout(WAIT, tool.handler().call(input, ToolContext::new("test")))
        .await
        .expect("the call ended within the test's bound")
}
