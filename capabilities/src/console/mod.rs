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
//! (and named `__Secure-execbox_session`)
//! unless the page was reached by a loopback name; a request that changes something needs the
//! server's own `Origin` and the session's CSRF token in `x-execbox-csrf` (`403` otherwise).
//! The token is checked once, at sign-in, by the policy (`principal_for_token`), and never
//! kept. Every page answer carries a Content-Security-Policy of `default-src 'self'` with no
//! inline script or style ([`CONTENT_SECURITY_POLICY`]); every text the page shows is escaped
//! for display here (`execbox_policy::escape_for_display`, long values by both ends) and set
//! with `textContent` there.

mod ledger;

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, Request, State};
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
use tokio::sync::broadcast::error::{RecvError, TryRecvError};

use crate::manager::CapabilityManager;
use crate::records::{
    ExecutionEvent, ExecutionEventKind, ExecutionFilter, ExecutionRecord, ExecutionStatus,
};

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
const MAX_ENTRIES: usize = 50;

/// The most executions waiting for approval read to find the [`MAX_ENTRIES`] a principal
/// may decide (newest first): calls reserved to other approvers do not hide one's own
/// behind them.
const MAX_SCANNED: u32 = 1000;

/// The most built entries kept in the cache all sessions share.
const CACHED_ENTRIES: usize = 256;

/// The least time between two recomputations of one event stream's list: a burst of
/// events is answered once.
const DEBOUNCE: Duration = Duration::from_millis(250);

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
    cache: Arc<EntryCache>,
}

/// The entries built for the console, shared by every session: one per execution, built
/// (its record, source and ledger read) once per `(execution_id, updated_ms)`, and at most
/// [`CACHED_ENTRIES`] of them (the least recently used goes first). What each principal may
/// decide is filtered per session, from the list's summaries, and is cheap.
#[derive(Default)]
struct EntryCache {
    entries: Mutex<HashMap<String, Cached>>,
    clock: AtomicU64,
    /// How many entries were built (each read one record, its source and its ledger).
    builds: AtomicU64,
}

struct Cached {
    updated_ms: u64,
    entry: Entry,
    used: u64,
}

impl EntryCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Cached>> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The entry built for `id` at `updated_ms`.
    fn get(&self, id: &str, updated_ms: u64) -> Option<Entry> {
        let tick = self.clock.fetch_add(1, Ordering::Relaxed);
        let mut all = self.lock();
        let cached = all.get_mut(id).filter(|c| c.updated_ms == updated_ms)?;
        cached.used = tick;
        Some(cached.entry.clone())
    }

    fn put(&self, id: &str, updated_ms: u64, entry: Entry) {
        let tick = self.clock.fetch_add(1, Ordering::Relaxed);
        let mut all = self.lock();
        if !all.contains_key(id) && all.len() >= CACHED_ENTRIES {
            let oldest = all
                .iter()
                .min_by_key(|(_, c)| c.used)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                all.remove(&oldest);
            }
        }
        all.insert(
            id.to_owned(),
            Cached {
                updated_ms,
                entry,
                used: tick,
            },
        );
    }
}

/// The console's own routes (the decisions and the wait are the API's, mounted by
/// `serve.rs`); `caller_key` counts its event streams as the API's.
pub(crate) fn router(
    manager: CapabilityManager,
    sessions: Sessions<Principal>,
    caller_key: execbox_http::CallerKey<Principal>,
) -> Router {
    let state = ConsoleState {
        manager,
        sessions,
        cache: Arc::default(),
    };
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
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
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
        // Never the token; the address, to find who tries tokens.
        let remote = peer.map_or_else(
            || "unknown".to_owned(),
            |Extension(ConnectInfo(a))| a.to_string(),
        );
        let forwarded = headers
            .get("x-forwarded-for")
            .and_then(|v| v.to_str().ok())
            .map(escape_for_display);
        tracing::warn!(
            remote = %remote,
            forwarded_for = forwarded.as_deref().unwrap_or_default(),
            "a console sign-in was refused: the token is not valid here"
        );
        return error(
            StatusCode::UNAUTHORIZED,
            "UNAUTHORIZED",
            "this token is not valid here",
        );
    };
    let owner = principal.name().unwrap_or_default().to_owned();
    let session = match state.sessions.open(&owner, principal) {
        Ok(session) => session,
        Err(refusal) => {
            tracing::warn!(
                principal = owner,
                "a console sign-in was refused: {refusal}"
            );
            return execbox_http::refusal_response(&refusal);
        }
    };
    let cookie = state
        .sessions
        .set_cookie(&session, execbox_http::needs_secure_cookie(&headers));
    tracing::debug!(principal = owner, "signed in to the console");
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
#[derive(Serialize, PartialEq, Debug, Clone)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Entry {
    execution_id: String,
    capability: String,
    /// Who started it.
    started_by: Option<String>,
    created_ms: u64,
    source: ledger::Source,
    /// The last calls that ran before the pending one (at most
    /// [`ledger::MAX_SHOWN_CALLS`]), with their answers.
    ran: Vec<ledger::RanCall>,
    /// How many calls ran before those of `ran` (not shown).
    earlier_calls: u32,
    pending: Pending,
}

/// The pending call of an [`Entry`].
#[derive(Serialize, PartialEq, Debug, Clone)]
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

/// The calls `me` may decide now, newest first: the newest [`MAX_SCANNED`] executions
/// waiting for approval are filtered by the server's own check of a decision (on the list's
/// summaries, which carry the pending call), and the first [`MAX_ENTRIES`] are shown, each
/// from the shared cache (built once per `(execution_id, updated_ms)`).
async fn entries(state: &ConsoleState, me: &Principal) -> Vec<Entry> {
    let filter = ExecutionFilter {
        status: Some(ExecutionStatus::AwaitingApproval),
        limit: Some(MAX_SCANNED),
        ..Default::default()
    };
    let Ok(listed) = state.manager.list(&filter).await else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for summary in listed {
        if out.len() >= MAX_ENTRIES {
            break;
        }
        // The server's own check of a decision: the console lists what it would accept.
        let may = summary.pending_approval.is_some()
            && state
                .manager
                .may_decide(&summary.execution_id, &summary, Some(me))
                .is_ok();
        if !may {
            continue;
        }
        if let Some(entry) = state.cache.get(&summary.execution_id, summary.updated_ms) {
            out.push(entry);
            continue;
        }
        let Ok(record) = state.manager.get(&summary.execution_id).await else {
            continue;
        };
        // Checked again on the full record: it may have changed since the list.
        let may = record.pending_approval.is_some()
            && state
                .manager
                .may_decide(&record.execution_id, &record, Some(me))
                .is_ok();
        if !may {
            continue;
        }
        let Some(entry) = build(state, &record).await else {
            continue;
        };
        state
            .cache
            .put(&record.execution_id, record.updated_ms, entry.clone());
        out.push(entry);
    }
    out
}

/// The entry of a paused `record`: its source and ledger read, every text escaped.
async fn build(state: &ConsoleState, record: &ExecutionRecord) -> Option<Entry> {
    let pending = record.pending_approval.clone()?;
    state.cache.builds.fetch_add(1, Ordering::Relaxed);
    let (ran, earlier_calls) =
        ledger::ran_calls(&state.manager, &record.execution_id, pending.call)
            .await
            .unwrap_or_default();
    Some(Entry {
        execution_id: record.execution_id.clone(),
        capability: escape_for_display(&record.capability),
        started_by: record.principal.as_deref().map(escape_for_display),
        created_ms: record.created_ms,
        source: ledger::source(&state.manager, record).await,
        ran,
        earlier_calls,
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
    })
}

/// Whether `event` may change a list that shows the executions `shown`: an execution that
/// pauses (or paused), or one that is shown. Another execution's event changes nothing.
fn concerns(event: &ExecutionEvent, shown: &HashSet<String>) -> bool {
    event.event == ExecutionEventKind::AwaitingApproval
        || event.status == ExecutionStatus::AwaitingApproval
        || shown.contains(&event.execution_id)
}

/// `GET /console/pending`: the calls the session's principal may decide.
async fn pending(
    State(state): State<ConsoleState>,
    Extension(session): Extension<Session<Principal>>,
) -> Response {
    Json(json!({"entries": entries(&state, &session.caller).await})).into_response()
}

/// When a list computed at `computed` is read again without an event.
fn refresh_at(computed: Option<Instant>) -> tokio::time::Instant {
    tokio::time::Instant::from_std(computed.unwrap_or_else(Instant::now) + REFRESH)
}

/// One event stream's state.
struct Stream {
    state: ConsoleState,
    session: Session<Principal>,
    receiver: tokio::sync::broadcast::Receiver<ExecutionEvent>,
    /// The last list sent.
    last: Option<String>,
    /// The executions it showed.
    shown: HashSet<String>,
    /// When the list was last computed; `None` before the first.
    computed: Option<Instant>,
}

/// `GET /console/events`: the list at once, then again when an event may change it (an
/// execution pauses, or one shown changes: [`concerns`]; other executions' events are
/// ignored) or every [`REFRESH`], at most once per [`DEBOUNCE`], and sent when it changed;
/// ends with the session. Entries come from the cache all sessions share.
async fn events(
    State(state): State<ConsoleState>,
    Extension(session): Extension<Session<Principal>>,
) -> Response {
    let receiver = state.manager.subscribe();
    let start = Stream {
        state,
        session,
        receiver,
        last: None,
        shown: HashSet::new(),
        computed: None,
    };
    let stream = futures_util::stream::unfold(start, |mut s| async move {
        loop {
            if s.computed.is_some() {
                let changed = tokio::select! {
                    event = s.receiver.recv() => match event {
                        Ok(event) => Some(concerns(&event, &s.shown)),
                        Err(RecvError::Lagged(_)) => Some(true),
                        Err(RecvError::Closed) => None,
                    },
                    () = tokio::time::sleep_until(refresh_at(s.computed)) => Some(true),
                };
                match changed {
                    None => return None,
                    Some(false) => continue,
                    Some(true) => {}
                }
                // A burst is answered once: wait out the rest of the debounce, and take the
                // events that came meanwhile as this one.
                if let Some(at) = s.computed {
                    tokio::time::sleep(DEBOUNCE.saturating_sub(at.elapsed())).await;
                }
                while let Ok(_) | Err(TryRecvError::Lagged(_)) = s.receiver.try_recv() {}
            }
            // A session signed out (or expired) hears nothing more.
            s.state.sessions.find(&s.session.id)?;
            let list = entries(&s.state, &s.session.caller).await;
            s.computed = Some(Instant::now());
            s.shown = list.iter().map(|e| e.execution_id.clone()).collect();
            let data = json!({"entries": list}).to_string();
            if s.last.as_deref() != Some(data.as_str()) {
                s.last = Some(data.clone());
                let event = Event::default().event("pending").data(data);
                return Some((Ok::<_, Infallible>(event), s));
            }
        }
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use execbox_host::{
        ApprovalAsk, Executor, Ledger, LedgerCall, PausedCall, PausedProgram, ProcessExecutor,
        RunnerCommand,
    };
    use execbox_policy::{Enforcement, Policy};
    use serde_json::json;

    use super::*;
    use crate::{ExecutionStore, KeptProgram, ManagerOptions, Registry, RegistryRoots};

    fn manager(name: &str) -> (CapabilityManager, Policy) {
        let dir = std::env::temp_dir().join(format!(
            "execbox-console-unit-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let policy = Policy::builder()
            .principal("alice", Vec::<String>::new(), Vec::<String>::new())
            .principal("ops", Vec::<String>::new(), ["executions:approve"])
            .principal("ops2", Vec::<String>::new(), ["executions:approve"])
            .role("finance", ["executions:approve"])
            .principal("fin", ["finance"], Vec::<String>::new())
            .build()
            .unwrap();
        let executor: Arc<dyn Executor> =
            Arc::new(ProcessExecutor::new(RunnerCommand::new("/bin/false")).unwrap());
        let manager = CapabilityManager::new(
            Registry::load(RegistryRoots::default()),
            ExecutionStore::open(dir.join("state.db")).unwrap(),
            executor,
            ManagerOptions {
                enforcement: Enforcement::unrestricted().with_policy(policy.clone()),
                ..Default::default()
            },
        );
        (manager, policy)
    }

    /// A program of alice's paused at call `ran + 1` (`mail.send`), `ran` calls having run.
    async fn paused(manager: &CapabilityManager, ran: usize, asked: ApprovalAsk) -> String {
        let mut ledger = Ledger::new();
        for i in 0..ran {
            ledger.calls.push(
                serde_json::from_value::<LedgerCall>(json!({
                    "tool": "notes.add", "input": {"n": i}, "answer": {"result": {"noted": i}}
                }))
                .unwrap(),
            );
        }
        let input = json!({"to": "bob@example.com"});
        ledger.calls.push(
            serde_json::from_value::<LedgerCall>(json!({"tool": "mail.send", "input": input}))
                .unwrap(),
        );
        let call = PausedCall::new(ran as u32, "mail.send", input).asked(asked);
        let program = KeptProgram {
            name: "execute_code".into(),
            front_end: "mcp".into(),
            code: "await mail.send({to: 'bob@example.com'});".into(),
            origin: json!({}),
            timeout_ms: 10_000,
            paused: PausedProgram::new("p1", Some("alice".into()), call, ledger, Vec::new()),
        };
        manager.pause_program(program).await.unwrap().execution_id
    }

    fn event(id: &str, kind: ExecutionEventKind, status: ExecutionStatus) -> ExecutionEvent {
        ExecutionEvent {
            event: kind,
            execution_id: id.into(),
            capability: "execute_code".into(),
            parent_id: None,
            principal: None,
            status,
            error: None,
            logs: Vec::new(),
            at_ms: 0,
        }
    }

    #[tokio::test]
    async fn each_entry_is_built_once_for_every_session_and_other_executions_change_nothing() {
        let (manager, policy) = manager("cache");
        let state = ConsoleState {
            manager: manager.clone(),
            sessions: sessions(),
            cache: Arc::default(),
        };
        let ops = policy.principal(Some("ops")).unwrap();
        let ops2 = policy.principal(Some("ops2")).unwrap();
        let id = paused(&manager, 25, ApprovalAsk::default()).await;
        let mine = entries(&state, &ops).await;
        assert_eq!(mine.len(), 1);
        assert_eq!(state.cache.builds.load(Ordering::Relaxed), 1);
        // The last 20 calls that ran, and how many ran before them.
        assert_eq!(mine[0].ran.len(), ledger::MAX_SHOWN_CALLS);
        assert_eq!(mine[0].earlier_calls, 5);
        assert_eq!(mine[0].ran[0].call, 6);
        let shown = serde_json::to_value(&mine[0]).unwrap();
        assert_eq!(shown["earlierCalls"], 5);
        // Another session, and the same one again: from the cache, no ledger read again.
        assert_eq!(entries(&state, &ops2).await, mine);
        assert_eq!(entries(&state, &ops).await, mine);
        assert_eq!(state.cache.builds.load(Ordering::Relaxed), 1);
        // A call only finance may decide is not built for ops.
        let theirs = paused(
            &manager,
            1,
            ApprovalAsk::by_rule("r", None, vec!["finance".into()]),
        )
        .await;
        assert_eq!(entries(&state, &ops).await, mine);
        assert_eq!(state.cache.builds.load(Ordering::Relaxed), 1);
        let fin = policy.principal(Some("fin")).unwrap();
        assert_eq!(entries(&state, &fin).await[0].execution_id, theirs);
        assert_eq!(state.cache.builds.load(Ordering::Relaxed), 2);

        // An event of an execution that neither pauses nor is shown does not recompute.
        let shown: HashSet<String> = [id.clone()].into();
        let done = ExecutionStatus::Completed;
        assert!(!concerns(
            &event("other", ExecutionEventKind::Completed, done),
            &shown
        ));
        assert!(!concerns(
            &event(
                "other",
                ExecutionEventKind::Started,
                ExecutionStatus::Running
            ),
            &shown
        ));
        assert!(concerns(
            &event(&id, ExecutionEventKind::Completed, done),
            &shown
        ));
        assert!(concerns(
            &event(
                "new",
                ExecutionEventKind::AwaitingApproval,
                ExecutionStatus::AwaitingApproval
            ),
            &shown
        ));
    }

    #[test]
    fn the_cache_is_bounded_and_keyed_by_the_update() {
        let cache = EntryCache::default();
        let entry = |id: &str| Entry {
            execution_id: id.into(),
            capability: String::new(),
            started_by: None,
            created_ms: 0,
            source: ledger::Source {
                from: "none",
                code: String::new(),
                params: None,
            },
            ran: Vec::new(),
            earlier_calls: 0,
            pending: Pending {
                call: 1,
                tool: String::new(),
                input: String::new(),
                input_sha256: String::new(),
                permission: String::new(),
                rule: None,
                reason: None,
                approvers: Vec::new(),
                since_ms: 0,
            },
        };
        for i in 0..CACHED_ENTRIES + 10 {
            cache.put(&format!("e{i}"), 1, entry(&format!("e{i}")));
        }
        assert_eq!(cache.lock().len(), CACHED_ENTRIES);
        assert!(cache.get("e0", 1).is_none());
        let last = format!("e{}", CACHED_ENTRIES + 9);
        assert!(cache.get(&last, 1).is_some());
        assert!(cache.get(&last, 2).is_none());
    }
}
