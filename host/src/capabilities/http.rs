//! The capabilities HTTP API (feature `serve`): an axum [`Router`] over a
//! [`CapabilityManager`], with bearer-token authentication as a layer.
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
//! | `POST /v1/executions/stop?parentId=` | `200 {stopped: [...]}`: its children, each with its tree stopped |
//! | `GET /v1/events` | Server-Sent Events: `event: started` (`completed`, `failed`, `timeout`, `stopped`), `data:` the event as JSON |
//!
//! Errors are `{error: {code, message}}` with the capability codes: `400 INVALID_REQUEST`,
//! `401 UNAUTHORIZED`, `403 PERMISSION_DENIED`, `404 CAPABILITY_NOT_FOUND` and
//! `EXECUTION_NOT_FOUND`, `413 INVALID_REQUEST` (a body over [`MAX_REQUEST_BODY_BYTES`]),
//! `422 EXECUTOR_NOT_FOUND`, `503 REGISTRY_NOT_INITIALIZED`.
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
//! ([`ServeAuth::allow_hosts`]; DNS rebinding gets `403`), a request with an `Origin` is
//! refused unless that origin is allowed ([`ServeAuth::allow_origins`]), and a start needs
//! `Content-Type: application/json` (`415`), which a page cannot send without a preflight.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;

use super::manager::CapabilityManager;
use super::types::{
    CapabilityError, CapabilityErrorCode, ExecutionFilter, ExecutionStatus, StartRequest,
};
use crate::policy::{Policy, Principal};

/// The largest request body accepted (1 MiB).
pub const MAX_REQUEST_BODY_BYTES: usize = 1024 * 1024;

/// The default and the longest long poll of `/wait`.
const DEFAULT_WAIT: Duration = Duration::from_secs(30);
const MAX_WAIT: Duration = Duration::from_secs(300);

/// The permission that lets a principal see and stop every execution, not only its own.
pub const ADMIN_PERMISSION: &str = "executions:admin";

/// Who may call the API: see the module docs.
#[derive(Clone, Debug, Default)]
pub struct ServeAuth {
    policy: Option<Policy>,
    /// `Host` values accepted besides loopback names (`name` or `name:port`).
    hosts: Vec<String>,
    /// `Origin` values accepted (`https://app.example.com`); none by default.
    origins: Vec<String>,
}

impl ServeAuth {
    /// Authenticates with the bearer tokens of `policy` when it has any; anonymous callers
    /// otherwise.
    pub fn new(policy: Option<Policy>) -> ServeAuth {
        ServeAuth {
            policy,
            hosts: Vec::new(),
            origins: Vec::new(),
        }
    }

    /// Also accepts these `Host` values (a name, or `name:port`), e.g. the address a
    /// non-loopback server listens on or the name clients reach it by.
    pub fn allow_hosts(mut self, hosts: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.hosts
            .extend(hosts.into_iter().map(|h| h.into().to_ascii_lowercase()));
        self
    }

    /// Accepts requests carrying these `Origin` values (`scheme://host[:port]`).
    pub fn allow_origins(mut self, origins: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.origins
            .extend(origins.into_iter().map(|o| o.into().to_ascii_lowercase()));
        self
    }

    /// Whether the `Host` header `host` names this server.
    fn host_allowed(&self, host: &str) -> bool {
        let host = host.trim().to_ascii_lowercase();
        let name = match host.strip_prefix('[') {
            Some(rest) => rest.split(']').next().unwrap_or_default().to_string(),
            None => host
                .rsplit_once(':')
                .map_or(host.as_str(), |(n, _)| n)
                .to_string(),
        };
        matches!(name.as_str(), "localhost" | "127.0.0.1" | "::1")
            || self.hosts.iter().any(|h| *h == host || *h == name)
    }

    /// Whether every request needs a bearer token.
    pub fn requires_token(&self) -> bool {
        self.policy.as_ref().is_some_and(Policy::has_tokens)
    }
}

/// The caller of a request, as the auth layer decided.
#[derive(Clone)]
struct Caller(Option<Principal>);

impl Caller {
    /// Whether the caller may see and stop an execution `owner` started: an anonymous
    /// caller (no tokens) and an admin see all, a principal its own.
    fn sees(&self, owner: Option<&str>) -> bool {
        match &self.0 {
            None => true,
            Some(p) if p.holds(ADMIN_PERMISSION) => true,
            Some(p) => p.name().is_some() && p.name() == owner,
        }
    }

    /// The principal to narrow lists to, if any.
    fn scope(&self) -> Option<String> {
        match &self.0 {
            Some(p) if !p.holds(ADMIN_PERMISSION) => Some(p.name().unwrap_or_default().to_string()),
            _ => None,
        }
    }
}

/// An execution the caller may see, or `404` as if it did not exist.
async fn visible(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<super::types::ExecutionRecord, ApiError> {
    let record = state.manager.get(id).await?;
    if caller.sees(record.principal.as_deref()) {
        Ok(record)
    } else {
        Err(CapabilityError::new(
            CapabilityErrorCode::ExecutionNotFound,
            format!("no execution `{id}` of yours; GET /v1/executions lists them"),
        )
        .into())
    }
}

fn refused(status: StatusCode, message: &str) -> Response {
    let body = json!({"error": {"code": "INVALID_REQUEST", "message": message}});
    (status, Json(body)).into_response()
}

/// An error answer: `{error: {code, message}}`.
struct ApiError(StatusCode, CapabilityError);

impl From<CapabilityError> for ApiError {
    fn from(e: CapabilityError) -> Self {
        let status = match e.code {
            CapabilityErrorCode::CapabilityNotFound | CapabilityErrorCode::ExecutionNotFound => {
                StatusCode::NOT_FOUND
            }
            CapabilityErrorCode::ExecutorNotFound => StatusCode::UNPROCESSABLE_ENTITY,
            CapabilityErrorCode::InvalidRequest
            | CapabilityErrorCode::InvalidCapabilityConfig
            | CapabilityErrorCode::InvalidExecutorConfig => StatusCode::BAD_REQUEST,
            CapabilityErrorCode::PermissionDenied => StatusCode::FORBIDDEN,
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
    auth: ServeAuth,
}

/// The API over `manager`, authenticated as `auth` says, with request bodies bounded by
/// [`MAX_REQUEST_BODY_BYTES`]. Serve it with `axum::serve`.
pub fn capabilities_router(manager: CapabilityManager, auth: ServeAuth) -> Router {
    let state = AppState { manager, auth };
    Router::new()
        .route("/v1/capabilities", get(list_capabilities))
        .route("/v1/executors", get(list_executors))
        .route("/v1/executions", post(start).get(list_executions))
        .route("/v1/executions/stop", post(stop_for_parent))
        .route("/v1/executions/{id}", get(get_execution))
        .route("/v1/executions/{id}/wait", get(wait))
        .route("/v1/executions/{id}/stop", post(stop))
        .route("/v1/events", get(events))
        .fallback(|| async {
            ApiError(
                StatusCode::NOT_FOUND,
                CapabilityError::new(
                    CapabilityErrorCode::InvalidRequest,
                    "no such endpoint; the API is under /v1 (see the README)",
                ),
            )
        })
        .layer(middleware::from_fn_with_state(state.clone(), authenticate))
        .layer(DefaultBodyLimit::max(MAX_REQUEST_BODY_BYTES))
        .with_state(state)
}

/// The auth layer: the caller comes from the bearer token alone.
async fn authenticate(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| request.uri().authority().map(|a| a.as_str()));
    match host {
        Some(host) if state.auth.host_allowed(host) => {}
        Some(host) => {
            return refused(
                StatusCode::FORBIDDEN,
                &format!(
                    "Host {host:?} is not this server's; start it with --allow-host to accept it"
                ),
            )
        }
        None => return refused(StatusCode::BAD_REQUEST, "the request has no Host header"),
    }
    if let Some(origin) = request.headers().get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or_default().to_ascii_lowercase();
        if !state.auth.origins.contains(&origin) {
            return refused(
                StatusCode::FORBIDDEN,
                &format!("requests from the browser origin {origin:?} are refused; start the server with --allow-origin to accept them"),
            );
        }
    }
    let caller = match &state.auth.policy {
        Some(policy) if policy.has_tokens() => {
            let token = request
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::trim);
            let principal = token.and_then(|t| policy.principal_for_token(t).ok());
            match principal {
                Some(p) => Caller(Some(p)),
                None => {
                    let message = if token.is_some() {
                        "the bearer token belongs to no principal of the policy"
                    } else {
                        "missing `Authorization: Bearer TOKEN`; this server needs a token of the policy"
                    };
                    let body = json!({"error": {"code": "UNAUTHORIZED", "message": message}});
                    let mut response = (StatusCode::UNAUTHORIZED, Json(body)).into_response();
                    response
                        .headers_mut()
                        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                    return response;
                }
            }
        }
        _ => Caller(None),
    };
    request.extensions_mut().insert(caller);
    next.run(request).await
}

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
    let json_body = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if !json_body {
        return Err(ApiError(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            CapabilityError::new(
                CapabilityErrorCode::InvalidRequest,
                "send the start request as JSON, with Content-Type: application/json",
            ),
        ));
    }
    let body = body.map_err(|e| {
        ApiError(
            e.status(),
            CapabilityError::new(
                CapabilityErrorCode::InvalidRequest,
                format!("{e}; a request body is at most {MAX_REQUEST_BODY_BYTES} bytes"),
            ),
        )
    })?;
    let request: StartRequest = serde_json::from_slice(&body).map_err(|e| {
        invalid(format!(
            "the body is not a start request ({e}); send {{\"capability\": NAME, \"type\"?: TYPE, \"params\"?: {{...}}, \"timeoutMs\"?: N, \"parentId\"?: ID}}"
        ))
    })?;
    // A parent that is an execution must be one of the caller's (an agent's own id, which is
    // no execution, is free).
    if let Some(parent) = &request.parent_id {
        if let Ok(record) = state.manager.get(parent).await {
            if !caller.sees(record.principal.as_deref()) {
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
    let filter = ExecutionFilter {
        status,
        parent_id: q.parent_id.filter(|s| !s.is_empty()),
        capability: q.capability.filter(|s| !s.is_empty()),
        principal: caller.scope(),
        limit: q.limit,
    };
    let executions = state.manager.list(&filter).await?;
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
    visible(&state, &caller, &id).await?;
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
    let stopped = match caller.scope() {
        None => state.manager.stop_all_for_parent(&parent).await?,
        // Only the caller's own children (each with its whole tree).
        Some(principal) => {
            let children = state
                .manager
                .list(&ExecutionFilter {
                    parent_id: Some(parent.clone()),
                    principal: Some(principal),
                    ..Default::default()
                })
                .await?;
            let live = children.into_iter().filter(|c| !c.status.is_terminal());
            let stops = live.map(|c| {
                let manager = state.manager.clone();
                async move { manager.stop(&c.execution_id).await }
            });
            futures_util::future::join_all(stops)
                .await
                .into_iter()
                .collect::<Result<Vec<_>, _>>()?
        }
    };
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
    receiver: &mut tokio::sync::broadcast::Receiver<super::types::ExecutionEvent>,
    caller: &Caller,
) -> Result<super::types::ExecutionEvent, RecvError> {
    loop {
        let event = receiver.recv().await?;
        if caller.sees(event.principal.as_deref()) {
            return Ok(event);
        }
    }
}
