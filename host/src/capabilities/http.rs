//! The capabilities HTTP API (feature `serve`): an axum [`Router`] over a
//! [`CapabilityManager`], with bearer-token authentication as a layer.
//!
//! | method and path | answer |
//! |---|---|
//! | `GET /v1/capabilities` | `{capabilities: [...]}`, each with its `source` (`project`, `global`, `builtin`) |
//! | `GET /v1/executors` | `{executors: [...]}`, each with its `source` |
//! | `POST /v1/executions` `{capability, type?, params?, timeoutMs?, parentId?}` | `202 {executionId, status}` |
//! | `GET /v1/executions?status=&parentId=&capability=&limit=` | `{executions: [...]}`, newest first |
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

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
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

/// Who may call the API: see the module docs.
#[derive(Clone, Debug, Default)]
pub struct ServeAuth {
    policy: Option<Policy>,
}

impl ServeAuth {
    /// Authenticates with the bearer tokens of `policy` when it has any; anonymous callers
    /// otherwise.
    pub fn new(policy: Option<Policy>) -> ServeAuth {
        ServeAuth { policy }
    }

    /// Whether every request needs a bearer token.
    pub fn requires_token(&self) -> bool {
        self.policy.as_ref().is_some_and(Policy::has_tokens)
    }
}

/// The caller of a request, as the auth layer decided.
#[derive(Clone)]
struct Caller(Option<Principal>);

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
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
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
        limit: q.limit,
    };
    let executions = state.manager.list(&filter).await?;
    Ok(Json(json!({"executions": executions})).into_response())
}

async fn get_execution(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let record = state.manager.get(&id).await?;
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
    Path(id): Path<String>,
    query: Result<Query<WaitQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(|e| invalid(format!("{e}; the only parameter is timeoutMs")))?;
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

async fn stop(State(state): State<AppState>, Path(id): Path<String>) -> Result<Response, ApiError> {
    Ok(Json(state.manager.stop(&id).await?).into_response())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StopQuery {
    parent_id: Option<String>,
}

async fn stop_for_parent(
    State(state): State<AppState>,
    query: Result<Query<StopQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(|e| invalid(format!("{e}; pass ?parentId=ID")))?;
    let parent = q
        .parent_id
        .filter(|p| !p.is_empty())
        .ok_or_else(|| invalid("parentId is required: POST /v1/executions/stop?parentId=ID"))?;
    let stopped = state.manager.stop_all_for_parent(&parent).await?;
    Ok(Json(json!({"stopped": stopped})).into_response())
}

async fn events(State(state): State<AppState>) -> Response {
    let receiver = state.manager.subscribe();
    let stream = futures_util::stream::unfold(receiver, |mut receiver| async move {
        let sse = match receiver.recv().await {
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
        Some((Ok::<_, Infallible>(sse), receiver))
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}
