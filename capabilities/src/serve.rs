//! The capabilities HTTP API (feature `serve`): an axum [`Router`] over a
//! [`CapabilityManager`], behind the one HTTP front door (`execbox-http`).
//!
//! | method and path | answer |
//! |---|---|
//! | `GET /v1/capabilities` | `{capabilities: [...]}`, each with its `source` (`project`, `global`, `builtin`) |
//! | `GET /v1/executors` | `{executors: [...]}`, each with its `source` |
//! | `POST /v1/executions` `{capability, type?, params?, timeoutMs?, parentId?}` | `202 {executionId, status}` |
//! | `GET /v1/executions?status=&parentId=&capability=&limit=` | `{executions: [...]}`, newest first, as summaries (no `params`, `result`, `additionalContext`: get one execution for those) |
//! | `GET /v1/executions/{id}` | the execution, with its `history` |
//! | `GET /v1/executions/{id}/wait?timeoutMs=` | `200` and the outcome `{success, executionId, status, result, additionalContext, error, capabilityPath}` once it ended; `202 {executionId, status}` if it still runs after `timeoutMs` (default 30 s, at most 5 min) |
//! | `POST /v1/executions/{id}/stop` | `200`, the execution once stopped (or as it ended) |
//! | `POST /v1/executions/{id}/approve` `{call, inputSha256?}` | `200`, the execution once its call `call` (`pendingApproval.call`) is approved and it resumed; `409 DECISION_MISMATCH` when another call waits now (nothing is decided); a retry of a decision taken answers the execution as it is |
//! | `POST /v1/executions/{id}/deny` `{call, inputSha256?, reason?}` | `200`, the execution, failed `APPROVAL_DENIED`; `409` as for `/approve` |
//! | `POST /v1/executions/stop?parentId=` | `200 {stopped: [...]}`: its children, each with its tree stopped |
//! | `GET /v1/events` | Server-Sent Events: `event: started` (`completed`, `failed`, `timeout`, `stopped`), `data:` the event as JSON |
//! | `/console` | the approval console, a page signed in to with a bearer token (`console/mod.rs`, docs/console.md) |
//!
//! Errors are `{error: {code, message}}` with the capability codes: `400 INVALID_REQUEST`,
//! `403 PERMISSION_DENIED`, `404 CAPABILITY_NOT_FOUND` and `EXECUTION_NOT_FOUND`,
//! `409 NOT_AWAITING_APPROVAL` and `DECISION_MISMATCH`, `422 EXECUTOR_NOT_FOUND`,
//! `429 TOO_MANY_EXECUTIONS` (a start, or a resume after an approval, past a bound on the
//! executions running at once: the server's, the principal's or the tree's),
//! `503 REGISTRY_NOT_INITIALIZED`; refusals at the door have the
//! same shape with the door's codes (`401 UNAUTHORIZED`, `403 FORBIDDEN`,
//! `413 PAYLOAD_TOO_LARGE` for a body over [`MAX_REQUEST_BODY_BYTES`], `400 BAD_REQUEST`,
//! `429 TOO_MANY_REQUESTS`; see `execbox-http`).
//!
//! **Long requests.** `GET /v1/events` and `GET /v1/executions/{id}/wait` hold their
//! connection for as long as they last, so they are long requests of the door
//! ([`execbox_http::long_requests`]): at most so many of one principal at once (anonymous
//! callers are one; `execbox serve --max-long-requests-per-principal`), never the last quarter
//! of the connection slots, which short requests keep; past either, `429 TOO_MANY_REQUESTS`
//! saying which.
//!
//! **Authentication.** When the policy gives principals bearer tokens (`token_sha256`),
//! every request needs `Authorization: Bearer TOKEN`, and the caller is the principal the
//! token belongs to (nothing else the request says changes who it is); a missing or unknown
//! token is `401` with `WWW-Authenticate: Bearer`. Without tokens, callers are anonymous and
//! hold the policy's `default_permissions` (everything without a policy): serve that on
//! loopback only, which `execbox serve` enforces.
//!
//! **Whose executions.** A caller with a token sees, waits for and stops only the
//! executions its principal started (another's is `404`, as if it did not exist), gets only
//! their events, and may name only its own executions as `parentId`; a principal holding
//! [`ADMIN_PERMISSION`] sees and stops all. Anonymous callers (no tokens) are one caller.
//!
//! **Browsers.** A web page must not drive the API through the user's browser: the `Host`
//! must be a loopback name, the address listened on, or one allowed
//! ([`FrontDoor::hosts`]; DNS rebinding gets `403`), a request with an `Origin` is refused
//! unless that origin's scheme, host and port are allowed ([`FrontDoor::origins`]), and a
//! start needs `Content-Type: application/json` (`415`), which a page cannot send without a
//! preflight.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use execbox_host::trace;
use execbox_http::FrontDoor;
use execbox_policy::{Policy, Principal};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;
use tracing::Instrument as _;

use super::console;
use super::manager::{CallRef, CapabilityManager, Decision};
use super::records::{
    CapabilityError, CapabilityErrorCode, ExecutionFilter, ExecutionStatus, StartRequest,
};

/// The largest request body accepted (1 MiB).
pub const MAX_REQUEST_BODY_BYTES: usize = 1024 * 1024;

/// The default and the longest long poll of `/wait`.
const DEFAULT_WAIT: Duration = Duration::from_secs(30);
const MAX_WAIT: Duration = Duration::from_secs(300);

/// The permission that lets a principal see and stop every execution, not only its own.
pub const ADMIN_PERMISSION: &str = "executions:admin";

/// The caller of a request, as the door decided: the principal its bearer token belongs to,
/// or `None` when the policy gives no tokens (anonymous callers, one caller).
type Caller = execbox_http::Caller<Principal>;

/// The door of the API for `policy`: every request needs a bearer token of one of its
/// principals when it gives any (`token_sha256`), and is anonymous otherwise; loopback hosts
/// only and no browser origin until [`FrontDoor::hosts`] and [`FrontDoor::origins`] say
/// more; bodies of at most [`MAX_REQUEST_BODY_BYTES`].
pub fn serve_door(policy: Option<&Policy>) -> FrontDoor<Principal> {
    let door = FrontDoor::new().max_body_bytes(MAX_REQUEST_BODY_BYTES);
    match policy {
        Some(policy) if policy.has_tokens() => {
            let policy = policy.clone();
            door.tokens(Arc::new(move |token: &str| {
                policy.principal_for_token(token).ok()
            }))
        }
        _ => door,
    }
}

/// Who a caller is for counting its long requests: its principal's name; anonymous callers
/// (no tokens) are one caller, `""`.
fn caller_key(caller: &Caller) -> String {
    caller
        .0
        .as_ref()
        .and_then(|p| p.name())
        .unwrap_or_default()
        .to_owned()
}

/// Whether the caller may see and stop an execution `owner` started: an anonymous caller
/// (no tokens) and an admin see all, a principal its own.
fn sees(caller: &Caller, owner: Option<&str>) -> bool {
    match &caller.0 {
        None => true,
        Some(p) if p.holds(ADMIN_PERMISSION) => true,
        Some(p) => p.name().is_some() && p.name() == owner,
    }
}

/// The principal to narrow lists to, if any.
fn scope(caller: &Caller) -> Option<String> {
    match &caller.0 {
        Some(p) if !p.holds(ADMIN_PERMISSION) => Some(p.name().unwrap_or_default().to_string()),
        _ => None,
    }
}

/// An execution the caller may see (its own, any for an admin, any paused one for an
/// approver), or `404` as if it did not exist.
async fn visible(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<super::records::ExecutionRecord, ApiError> {
    let unseen = || -> ApiError {
        CapabilityError::new(
            CapabilityErrorCode::ExecutionNotFound,
            format!("no execution `{id}` of yours; GET /v1/executions lists them"),
        )
        .into()
    };
    // One answer whether it does not exist or is not the caller's to see: no oracle.
    let record = match state.manager.get(id).await {
        Ok(record) => record,
        Err(e) if e.code == CapabilityErrorCode::ExecutionNotFound => return Err(unseen()),
        Err(e) => return Err(e.into()),
    };
    // An approver sees every execution that waits for its decision, as it lists them, and
    // those it decided (so that a retried decision is answered).
    let decided_by_caller = caller
        .0
        .as_ref()
        .and_then(Principal::name)
        .is_some_and(|me| record.decisions.iter().any(|d| d.by.as_deref() == Some(me)));
    let decides = (record.status == ExecutionStatus::AwaitingApproval
        && decides_for(state, caller, &record))
        || decided_by_caller;
    if sees(caller, record.principal.as_deref()) || decides {
        Ok(record)
    } else {
        Err(unseen())
    }
}

/// An error answer: `{error: {code, message}}`.
struct ApiError(StatusCode, CapabilityError);

impl From<CapabilityError> for ApiError {
    fn from(e: CapabilityError) -> Self {
        let status =
            match e.code {
                CapabilityErrorCode::CapabilityNotFound
                | CapabilityErrorCode::ExecutionNotFound => StatusCode::NOT_FOUND,
                CapabilityErrorCode::ExecutorNotFound => StatusCode::UNPROCESSABLE_ENTITY,
                CapabilityErrorCode::InvalidRequest
                | CapabilityErrorCode::InvalidCapabilityConfig
                | CapabilityErrorCode::InvalidExecutorConfig => StatusCode::BAD_REQUEST,
                CapabilityErrorCode::PermissionDenied => StatusCode::FORBIDDEN,
                CapabilityErrorCode::TooManyExecutions => StatusCode::TOO_MANY_REQUESTS,
                CapabilityErrorCode::NotAwaitingApproval
                | CapabilityErrorCode::DecisionMismatch => StatusCode::CONFLICT,
                CapabilityErrorCode::RegistryNotInitialized => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
        ApiError(status, e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.0,
            Json(json!({"error": {"code": self.1.code, "message": self.1.message}})),
        )
            .into_response()
    }
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError(
        StatusCode::BAD_REQUEST,
        CapabilityError::new(CapabilityErrorCode::InvalidRequest, message),
    )
}

#[derive(Clone)]
struct AppState {
    manager: CapabilityManager,
}

/// The API over `manager`, behind `door` (build it with [`serve_door`]): nothing reaches a
/// handler unchecked. Serve it with [`execbox_http::serve`].
pub fn capabilities_router(manager: CapabilityManager, door: FrontDoor<Principal>) -> Router {
    let sessions = console::sessions();
    let state = AppState {
        manager: manager.clone(),
    };
    let router = Router::new()
        .route("/v1/capabilities", get(list_capabilities))
        .route("/v1/executors", get(list_executors))
        .route("/v1/executions", post(start).get(list_executions))
        .route("/v1/executions/stop", post(stop_for_parent))
        .route("/v1/executions/{id}", get(get_execution))
        .route(
            "/v1/executions/{id}/wait",
            execbox_http::long_requests(get(wait), caller_key),
        )
        .route("/v1/executions/{id}/stop", post(stop))
        .route("/v1/executions/{id}/approve", post(approve))
        .route("/v1/executions/{id}/deny", post(deny))
        .route(
            "/v1/events",
            execbox_http::long_requests(get(events), caller_key),
        )
        // The console's decisions and waits are the API's, its session's principal the caller.
        .route("/console/executions/{id}/approve", post(approve))
        .route("/console/executions/{id}/deny", post(deny))
        .route(
            "/console/executions/{id}/wait",
            execbox_http::long_requests(get(wait), caller_key),
        )
        .fallback(|| async {
            ApiError(
                StatusCode::NOT_FOUND,
                CapabilityError::new(
                    CapabilityErrorCode::InvalidRequest,
                    "no such endpoint; the API is under /v1 (see docs/capabilities.md)",
                ),
            )
        })
        .with_state(state)
        .merge(console::router(manager, sessions.clone(), caller_key))
        .layer(axum::middleware::from_fn(console::security_headers))
        .layer(axum::middleware::from_fn(traced));
    door.cookie_sessions(sessions, console::PUBLIC)
        .guard(router)
}

/// Runs a request that passed the door in an `execbox.http.request` span, whose parent is the
/// caller's W3C `traceparent` header when it sends one: an execution started by the request
/// is part of the caller's trace.
async fn traced(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let span = tracing::info_span!(
        target: trace::TARGET,
        "execbox.http.request",
        otel.kind = "server",
        http.request.method = %request.method(),
        url.path = %request.uri().path(),
        http.response.status_code = tracing::field::Empty,
    );
    if let Some(parent) = request
        .headers()
        .get(TRACEPARENT)
        .and_then(|v| v.to_str().ok())
    {
        trace::set_parent(&span, parent);
    }
    let response = next.run(request).instrument(span.clone()).await;
    span.record("http.response.status_code", response.status().as_u16());
    response
}

/// The W3C Trace Context header naming the caller's span.
const TRACEPARENT: &str = "traceparent";

async fn list_capabilities(State(state): State<AppState>) -> Response {
    Json(json!({"capabilities": state.manager.registry().capabilities()})).into_response()
}

async fn list_executors(State(state): State<AppState>) -> Response {
    Json(json!({"executors": state.manager.registry().executors()})).into_response()
}

async fn start(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = match json_body(&headers, body) {
        Ok(body) => body,
        Err(refusal) => return Ok(*refusal),
    };
    let request: StartRequest = serde_json::from_slice(&body).map_err(|e| {
        invalid(format!(
            "the body is not a start request ({e}); send {{\"capability\": NAME, \"type\"?: TYPE, \"params\"?: {{...}}, \"timeoutMs\"?: N, \"parentId\"?: ID}}"
        ))
    })?;
    // A parent that is an execution must be one of the caller's (an agent's own id, which is
    // no execution, is free).
    if let Some(parent) = &request.parent_id {
        if let Ok(record) = state.manager.get(parent).await {
            if !sees(&caller, record.principal.as_deref()) {
                return Err(ApiError(
                    StatusCode::FORBIDDEN,
                    CapabilityError::new(
                        CapabilityErrorCode::PermissionDenied,
                        format!("parentId `{parent}` is an execution of another principal; name one of yours, or your own id"),
                    ),
                ));
            }
        }
    }
    let id = state.manager.start(request, caller.0).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"executionId": id, "status": ExecutionStatus::Starting})),
    )
        .into_response())
}

/// The body of a request that must be JSON: `415` without `Content-Type:
/// application/json` (which a web page cannot send without a preflight), the door's `413`
/// for one over [`MAX_REQUEST_BODY_BYTES`].
fn json_body(
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Bytes, Box<Response>> {
    let json_body = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if !json_body {
        return Err(Box::new(
            ApiError(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                CapabilityError::new(
                    CapabilityErrorCode::InvalidRequest,
                    "send the request body as JSON, with Content-Type: application/json",
                ),
            )
            .into_response(),
        ));
    }
    let body = match body {
        // A chunked body past the door's limit: the door's answer, as for an announced one.
        Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return Err(Box::new(execbox_http::refusal_response(
                &execbox_http::Refusal::too_large(MAX_REQUEST_BODY_BYTES),
            )))
        }
        body => body,
    };
    body.map_err(|e| {
        Box::new(
            ApiError(
                e.status(),
                CapabilityError::new(
                    CapabilityErrorCode::InvalidRequest,
                    format!("{e}; a request body is at most {MAX_REQUEST_BODY_BYTES} bytes"),
                ),
            )
            .into_response(),
        )
    })
}

/// The body of `POST /v1/executions/{id}/approve` and `/deny`: the call decided, as GET
/// shows it in `pendingApproval` (`call`, required; `inputSha256`, optional), and for a
/// denial its reason. `/approve` also takes `"approve": false` (a denial), as it did before
/// `/deny` existed.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct DecisionBody {
    #[serde(default)]
    call: Option<u32>,
    #[serde(default)]
    input_sha256: Option<String>,
    #[serde(default)]
    approve: Option<bool>,
    #[serde(default)]
    reason: Option<String>,
}

/// The longest denial reason kept.
const MAX_REASON_CHARS: usize = 2000;

/// What a decision's body must be, for its error messages.
const DECISION_SHAPE: &str = "send {\"call\": N} to approve (N is `pendingApproval.call` of GET \
     /v1/executions/ID, the call you were shown; add \"inputSha256\" to be sure of its input too), \
     or {\"call\": N, \"reason\": \"...\"} to POST .../deny";

/// `POST /v1/executions/{id}/approve`: approves the call a paused execution waits on, if it
/// is the call the body names (see [`decide_call`]).
async fn approve(
    state: State<AppState>,
    caller: Extension<Caller>,
    id: Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    decide_call(state, caller, id, headers, body, false).await
}

/// `POST /v1/executions/{id}/deny`: denies the call a paused execution waits on, if it is
/// the call the body names (see [`decide_call`]).
async fn deny(
    state: State<AppState>,
    caller: Extension<Caller>,
    id: Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    decide_call(state, caller, id, headers, body, true).await
}

/// Decides the call a paused execution waits on, if the body names that call; a decision
/// for any other call is `409 DECISION_MISMATCH` and changes nothing, and a decision sent
/// again for a call decided the same way already (a retry) answers `200` with the execution
/// as it is now. The caller must hold the policy's approve permission
/// (`executions:approve` by default) and, unless the policy allows it, must not have
/// started the execution; one who may not see the execution gets `404`, as if it did not
/// exist (an approver sees the executions that wait for a decision and those it decided).
async fn decide_call(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
    deny: bool,
) -> Result<Response, ApiError> {
    let body = match json_body(&headers, body) {
        Ok(body) => body,
        Err(refusal) => return Ok(*refusal),
    };
    let body: DecisionBody = serde_json::from_slice(&body).map_err(|e| {
        invalid(format!(
            "the body is not a decision ({e}); {DECISION_SHAPE}"
        ))
    })?;
    let Some(call) = body.call.filter(|&n| n > 0) else {
        return Err(invalid(format!(
            "the body must name the call it decides, a number from 1; {DECISION_SHAPE}"
        )));
    };
    if let Some(digest) = &body.input_sha256 {
        if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(invalid(format!(
                "inputSha256 must be 64 hexadecimal digits (`pendingApproval.inputSha256`), got \
                 {} characters",
                digest.chars().count()
            )));
        }
    }
    let denies = match (deny, body.approve) {
        (true, Some(true)) => {
            return Err(invalid(format!(
                "\"approve\": true does not go to /deny; {DECISION_SHAPE}"
            )))
        }
        (true, _) | (false, Some(false)) => true,
        (false, _) => false,
    };
    if !denies && body.reason.is_some() {
        return Err(invalid(format!(
            "a reason goes with a denial only; {DECISION_SHAPE}"
        )));
    }
    if body
        .reason
        .as_ref()
        .is_some_and(|r| r.chars().count() > MAX_REASON_CHARS)
    {
        return Err(invalid(format!(
            "reason is longer than {MAX_REASON_CHARS} characters; say it shorter"
        )));
    }
    visible(&state, &caller, &id).await?;
    let decision = match denies {
        false => Decision::Approve,
        true => Decision::Deny {
            reason: body.reason,
        },
    };
    let named = CallRef {
        call,
        input_sha256: body.input_sha256,
    };
    let record = state
        .manager
        .decide(&id, &named, decision, caller.0)
        .await?;
    Ok(Json(record).into_response())
}

/// Whether the caller is one who decides the call `record` waits on (or waited on): one of
/// the approvers the policy rule that asked names, or, when it names none, a holder of the
/// approve permission.
fn decides_for(
    state: &AppState,
    caller: &Caller,
    record: &super::records::ExecutionRecord,
) -> bool {
    let approvers = record
        .pending_approval
        .as_ref()
        .map_or(&[][..], |p| p.approvers.as_slice());
    match (&caller.0, approvers.is_empty()) {
        (None, _) => true,
        (Some(p), false) => p.is_one_of(approvers),
        (Some(_), true) => approves(state, caller),
    }
}

/// Whether the caller holds the approve permission (and so sees paused executions of
/// everyone).
fn approves(state: &AppState, caller: &Caller) -> bool {
    let permission = state
        .manager
        .policy()
        .map_or(execbox_policy::DEFAULT_APPROVE_PERMISSION, |p| {
            p.approve_permission()
        });
    match &caller.0 {
        None => true,
        Some(p) => p.holds(permission),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ListQuery {
    status: Option<String>,
    parent_id: Option<String>,
    capability: Option<String>,
    limit: Option<u32>,
}

async fn list_executions(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(|e| {
        invalid(format!(
            "{e}; the filters are status, parentId, capability and limit"
        ))
    })?;
    let status = q
        .status
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<ExecutionStatus>())
        .transpose()
        .map_err(invalid)?;
    // An approver sees every execution that waits for its decision.
    let awaiting = status == Some(ExecutionStatus::AwaitingApproval);
    let principal = match scope(&caller) {
        Some(_) if awaiting => None,
        scope => scope,
    };
    let filter = ExecutionFilter {
        status,
        parent_id: q.parent_id.filter(|s| !s.is_empty()),
        capability: q.capability.filter(|s| !s.is_empty()),
        principal,
        limit: q.limit,
    };
    let mut executions = state.manager.list(&filter).await?;
    if awaiting && filter.principal.is_none() {
        executions
            .retain(|r| sees(&caller, r.principal.as_deref()) || decides_for(&state, &caller, r));
    }
    Ok(Json(json!({"executions": executions})).into_response())
}

async fn get_execution(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let record = visible(&state, &caller, &id).await?;
    let mut value = serde_json::to_value(&record).unwrap_or_default();
    value["history"] = serde_json::to_value(state.manager.history(&id).await?).unwrap_or_default();
    Ok(Json(value).into_response())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct WaitQuery {
    timeout_ms: Option<u64>,
}

async fn wait(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    query: Result<Query<WaitQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(|e| invalid(format!("{e}; the only parameter is timeoutMs")))?;
    // An execution live here whose owner the caller sees needs no read of the store; any
    // other is read once, and one that has ended is answered from that read.
    let seen_live = state
        .manager
        .live_owner(&id)
        .is_some_and(|owner| sees(&caller, owner.as_deref()));
    if !seen_live {
        let record = visible(&state, &caller, &id).await?;
        if record.status.is_terminal() {
            return Ok(Json(record.outcome()).into_response());
        }
    }
    let timeout = q
        .timeout_ms
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_WAIT)
        .min(MAX_WAIT);
    match state.manager.wait(&id, Some(timeout)).await? {
        Some(outcome) => Ok(Json(outcome).into_response()),
        None => {
            let record = state.manager.get(&id).await?;
            Ok((
                StatusCode::ACCEPTED,
                Json(json!({"executionId": id, "status": record.status})),
            )
                .into_response())
        }
    }
}

async fn stop(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    visible(&state, &caller, &id).await?;
    Ok(Json(state.manager.stop(&id).await?).into_response())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StopQuery {
    parent_id: Option<String>,
}

async fn stop_for_parent(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<StopQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(|e| invalid(format!("{e}; pass ?parentId=ID")))?;
    let parent = q
        .parent_id
        .filter(|p| !p.is_empty())
        .ok_or_else(|| invalid("parentId is required: POST /v1/executions/stop?parentId=ID"))?;
    // From the store, so that children another replica runs are stopped too (by it); a
    // scoped caller only its own children. Each stop takes the child's whole tree.
    let children = state
        .manager
        .list(&ExecutionFilter {
            parent_id: Some(parent.clone()),
            principal: scope(&caller),
            ..Default::default()
        })
        .await?;
    let live = children.into_iter().filter(|c| !c.status.is_terminal());
    let stops = live.map(|c| {
        let manager = state.manager.clone();
        async move { manager.stop(&c.execution_id).await }
    });
    let stopped = futures_util::future::join_all(stops)
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Json(json!({"stopped": stopped})).into_response())
}

async fn events(State(state): State<AppState>, Extension(caller): Extension<Caller>) -> Response {
    let receiver = state.manager.subscribe();
    let stream =
        futures_util::stream::unfold((receiver, caller), |(mut receiver, caller)| async move {
            let sse = match next_visible(&mut receiver, &caller).await {
                Ok(event) => Event::default()
                    .event(event.event.as_str())
                    .id(event.execution_id.clone())
                    .json_data(&event)
                    .unwrap_or_else(|_| Event::default().comment("unserializable event")),
                Err(RecvError::Lagged(n)) => Event::default()
                    .event("lagged")
                    .data(format!("{{\"missed\":{n}}}")),
                Err(RecvError::Closed) => return None,
            };
            Some((Ok::<_, Infallible>(sse), (receiver, caller)))
        });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// The next event the caller may see (the others are skipped, not hinted at).
async fn next_visible(
    receiver: &mut tokio::sync::broadcast::Receiver<super::records::ExecutionEvent>,
    caller: &Caller,
) -> Result<super::records::ExecutionEvent, RecvError> {
    loop {
        let event = receiver.recv().await?;
        if sees(caller, event.principal.as_deref()) {
            return Ok(event);
        }
    }
}
