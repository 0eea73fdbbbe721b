//! The approval console of `execbox serve` (feature `serve`): a page at `/console` where an
//! approver signs in with a bearer token, watches the calls waiting for it live, and approves
//! or denies each, bound to the call shown.
//!
//! | method and path | answer |
//! |---|---|
//! | `GET /console` | the page (`index.html`), `console.js`, `console.css`: public, nothing in them is data |
//! | `POST /console/sign-in` `{token}` | `200 {principal, csrf, expiresInS, approves}` and the session cookie; `401` for a token the policy does not know |
//! | `GET /console/session` | the same, for the session's cookie (`403` without one) |
//! | `POST /console/sign-out` | ends the session, clears the cookie |
//! | `GET /console/pending` | `{entries: [...]}`: the calls the principal may decide (see [`Entry`]) |
//! | `GET /console/events` | Server-Sent Events: `event: pending`, `data: {entries}` at once and whenever it changes |
//! | `POST /console/executions/{id}/approve`, `/deny`, `GET .../wait` | the API's own handlers (`serve.rs`), with the session's principal as the caller |
//!
//! **Security.** Every request passes the one front door; under `/console` the door's cookie
//! sessions ([`execbox_http::Sessions`], [`execbox_http::FrontDoor::cookie_sessions`]) stand
//! for the bearer token: the cookie is HttpOnly, SameSite=Strict, `Path=/console`, `Secure`
//! unless the page was reached by a loopback name; a request that changes something needs the
//! server's own `Origin` and the session's CSRF token in `x-execbox-csrf` (`403` otherwise).
//! The token is checked once, at sign-in, by the policy (`principal_for_token`), and never
//! kept. Every page answer carries a Content-Security-Policy of `default-src 'self'` with no
//! inline script or style ([`CONTENT_SECURITY_POLICY`]); every text the page shows is escaped
//! for display here (`execbox_policy::escape_for_display`, long values by both ends) and set
//! with `textContent` there.

mod ledger;

use std::convert::Infallible;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use execbox_http::{Session, Sessions};
use execbox_policy::{escape_for_display, shown_input, Principal, MAX_SHOWN_INPUT_CHARS};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;

use crate::manager::CapabilityManager;
use crate::records::{ExecutionFilter, ExecutionStatus};

/// Where the console lives; its session cookie is sent here only.
pub(crate) const PATH: &str = "/console";

/// The paths under [`PATH`] that need no session: the page, its assets, the sign-in.
pub(crate) const PUBLIC: [&str; 5] = [
    "/console",
    "/console/",
    "/console/console.js",
    "/console/console.css",
    "/console/sign-in",
];

/// The Content-Security-Policy of every console answer: nothing but the server's own
/// script, style and connections; no inline script or style, no frames, no plugins.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; \
     form-action 'self'; frame-ancestors 'none'";

/// The most executions waiting for approval the console shows at once (newest first).
const MAX_ENTRIES: u32 = 50;

/// How often the live list is read again even when no event came (decisions taken by other
/// replicas, whose events this one does not hear).
const REFRESH: Duration = Duration::from_secs(10);

/// The longest bearer token read at sign-in.
const MAX_TOKEN_BYTES: usize = 4096;

const INDEX_HTML: &str = include_str!("assets/index.html");
const CONSOLE_JS: &str = include_str!("assets/console.js");
const CONSOLE_CSS: &str = include_str!("assets/console.css");

/// The sessions of one server's console.
pub(crate) fn sessions() -> Sessions<Principal> {
    Sessions::new(PATH)
}

#[derive(Clone)]
struct ConsoleState {
    manager: CapabilityManager,
    sessions: Sessions<Principal>,
}

/// The console's own routes (the decisions and the wait are the API's, mounted by
/// `serve.rs`); `caller_key` counts its event streams as the API's.
pub(crate) fn router(
    manager: CapabilityManager,
    sessions: Sessions<Principal>,
    caller_key: execbox_http::CallerKey<Principal>,
) -> Router {
    let state = ConsoleState { manager, sessions };
    Router::new()
        .route(PATH, get(page))
        .route("/console/", get(page))
        .route("/console/console.js", get(script))
        .route("/console/console.css", get(style))
        .route("/console/sign-in", post(sign_in))
        .route("/console/session", get(session))
        .route("/console/sign-out", post(sign_out))
        .route("/console/pending", get(pending))
        .route(
            "/console/events",
            execbox_http::long_requests(get(events), caller_key),
        )
        .with_state(state)
}

/// Adds the console's security headers to every answer under [`PATH`] (the API's handlers
/// mounted there included).
pub(crate) async fn security_headers(request: Request, next: Next) -> Response {
    let ours = request.uri().path() == PATH || request.uri().path().starts_with("/console/");
    let mut response = next.run(request).await;
    if ours {
        let headers = response.headers_mut();
        for (name, value) in [
            ("content-security-policy", CONTENT_SECURITY_POLICY),
            ("x-content-type-options", "nosniff"),
            ("x-frame-options", "DENY"),
            ("referrer-policy", "no-referrer"),
            ("cache-control", "no-store"),
            ("cross-origin-opener-policy", "same-origin"),
        ] {
            headers.insert(name, HeaderValue::from_static(value));
        }
    }
    response
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

async fn page() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

async fn script() -> Response {
    asset("text/javascript; charset=utf-8", CONSOLE_JS)
}

async fn style() -> Response {
    asset("text/css; charset=utf-8", CONSOLE_CSS)
}

/// An error answer in the API's shape.
fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    (
        status,
        Json(json!({"error": {"code": code, "message": message.into()}})),
    )
        .into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SignIn {
    token: String,
}

/// Who is signed in, for the page.
fn signed_in(state: &ConsoleState, session: &Session<Principal>) -> serde_json::Value {
    json!({
        "principal": session.caller.name().map(escape_for_display),
        "csrf": session.csrf,
        "expiresInS": session.expires.saturating_duration_since(Instant::now()).as_secs(),
        "approves": session.caller.holds(approve_permission(state)),
    })
}

fn approve_permission(state: &ConsoleState) -> &str {
    state
        .manager
        .policy()
        .map_or(execbox_policy::DEFAULT_APPROVE_PERMISSION, |p| {
            p.approve_permission()
        })
}

/// `POST /console/sign-in {token}`: the policy's principal for the bearer token gets a
/// session; the token is not kept.
async fn sign_in(
    State(state): State<ConsoleState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let json_body = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().starts_with("application/json"));
    if !json_body {
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "INVALID_REQUEST",
            "send {\"token\": \"...\"} with Content-Type: application/json",
        );
    }
    let Ok(body) = body else {
        return error(
            StatusCode::BAD_REQUEST,
            "INVALID_REQUEST",
            "the body could not be read",
        );
    };
    let Ok(SignIn { token }) = serde_json::from_slice::<SignIn>(&body) else {
        return error(
            StatusCode::BAD_REQUEST,
            "INVALID_REQUEST",
            "send {\"token\": \"...\"}: the bearer token of a principal of the server's policy",
        );
    };
    let Some(policy) = state.manager.policy().filter(|p| p.has_tokens()) else {
        return error(
            StatusCode::FORBIDDEN,
            "FORBIDDEN",
            "this server's policy gives no bearer tokens (token_sha256), so nobody can sign in \
             to its console",
        );
    };
    let principal = match token.len() <= MAX_TOKEN_BYTES {
        true => policy.principal_for_token(token.trim()).ok(),
        false => None,
    };
    drop(token);
    let Some(principal) = principal else {
        return error(
            StatusCode::UNAUTHORIZED,
            "UNAUTHORIZED",
            "this token is not valid here",
        );
    };
    let session = match state.sessions.open(principal) {
        Ok(session) => session,
        Err(refusal) => return execbox_http::refusal_response(&refusal),
    };
    let cookie = state
        .sessions
        .set_cookie(&session, execbox_http::needs_secure_cookie(&headers));
    tracing::info!(
        principal = session.caller.name().unwrap_or_default(),
        "signed in to the console"
    );
    let mut response = Json(signed_in(&state, &session)).into_response();
    response.headers_mut().insert(header::SET_COOKIE, cookie);
    response
}

/// `GET /console/session`: who the cookie's session is, and its CSRF token.
async fn session(
    State(state): State<ConsoleState>,
    Extension(session): Extension<Session<Principal>>,
) -> Response {
    Json(signed_in(&state, &session)).into_response()
}

/// `POST /console/sign-out`: ends the session and clears its cookie.
async fn sign_out(
    State(state): State<ConsoleState>,
    Extension(session): Extension<Session<Principal>>,
    headers: HeaderMap,
) -> Response {
    state.sessions.close(&session.id);
    let mut response = Json(json!({"signedOut": true})).into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        state
            .sessions
            .clear_cookie(execbox_http::needs_secure_cookie(&headers)),
    );
    response
}

/// A call waiting for a decision, as the console shows it: every text escaped for display.
#[derive(Serialize, PartialEq, Debug)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Entry {
    execution_id: String,
    capability: String,
    /// Who started it.
    started_by: Option<String>,
    created_ms: u64,
    source: ledger::Source,
    /// The calls that ran before the pending one, with their answers.
    ran: Vec<ledger::RanCall>,
    pending: Pending,
}

/// The pending call of an [`Entry`].
#[derive(Serialize, PartialEq, Debug)]
#[serde(rename_all = "camelCase")]
struct Pending {
    call: u32,
    tool: String,
    /// Its input as the terminal prompt shows it: pretty JSON, escaped, a long one by both
    /// ends.
    input: String,
    input_sha256: String,
    permission: String,
    rule: Option<String>,
    reason: Option<String>,
    /// The roles or principals the rule names as its approvers (the principal is one).
    approvers: Vec<String>,
    since_ms: u64,
}

/// The calls `me` may decide now, newest first.
async fn entries(state: &ConsoleState, me: &Principal) -> Vec<Entry> {
    let filter = ExecutionFilter {
        status: Some(ExecutionStatus::AwaitingApproval),
        limit: Some(MAX_ENTRIES),
        ..Default::default()
    };
    let Ok(listed) = state.manager.list(&filter).await else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for summary in listed {
        let Ok(record) = state.manager.get(&summary.execution_id).await else {
            continue;
        };
        // The server's own check of a decision: the console lists what it would accept.
        let may = record.pending_approval.is_some()
            && state
                .manager
                .may_decide(&record.execution_id, &record, Some(me))
                .is_ok();
        if !may {
            continue;
        }
        let Some(pending) = record.pending_approval.clone() else {
            continue;
        };
        let ran = ledger::ran_calls(&state.manager, &record.execution_id, pending.call)
            .await
            .unwrap_or_default();
        out.push(Entry {
            execution_id: record.execution_id.clone(),
            capability: escape_for_display(&record.capability),
            started_by: record.principal.as_deref().map(escape_for_display),
            created_ms: record.created_ms,
            source: ledger::source(&state.manager, &record).await,
            ran,
            pending: Pending {
                call: pending.call,
                tool: escape_for_display(&pending.tool),
                input: shown_input(&pending.input, MAX_SHOWN_INPUT_CHARS),
                input_sha256: pending.input_sha256,
                permission: escape_for_display(&pending.permission),
                rule: pending.rule.as_deref().map(escape_for_display),
                reason: pending.reason.as_deref().map(escape_for_display),
                approvers: pending
                    .approvers
                    .iter()
                    .map(|a| escape_for_display(a))
                    .collect(),
                since_ms: pending.since_ms,
            },
        });
    }
    out
}

/// `GET /console/pending`: the calls the session's principal may decide.
async fn pending(
    State(state): State<ConsoleState>,
    Extension(session): Extension<Session<Principal>>,
) -> Response {
    Json(json!({"entries": entries(&state, &session.caller).await})).into_response()
}

/// `GET /console/events`: the list at once, then again whenever an execution changes (or
/// every [`REFRESH`]) and the list with it; ends with the session.
async fn events(
    State(state): State<ConsoleState>,
    Extension(session): Extension<Session<Principal>>,
) -> Response {
    let receiver = state.manager.subscribe();
    let start = (state, session, receiver, None::<String>, true);
    let stream = futures_util::stream::unfold(
        start,
        |(state, session, mut receiver, mut last, first)| async move {
            loop {
                if !first {
                    let changed = tokio::select! {
                        event = receiver.recv() => !matches!(event, Err(RecvError::Closed)),
                        () = tokio::time::sleep(REFRESH) => true,
                    };
                    if !changed {
                        return None;
                    }
                }
                // A session signed out (or expired) hears nothing more.
                state.sessions.find(&session.id)?;
                let list = entries(&state, &session.caller).await;
                let data = json!({"entries": list}).to_string();
                if last.as_deref() != Some(data.as_str()) {
                    last = Some(data.clone());
                    let event = Event::default().event("pending").data(data);
                    return Some((
                        Ok::<_, Infallible>(event),
                        (state, session, receiver, last, false),
                    ));
                }
            }
        },
    );
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}
