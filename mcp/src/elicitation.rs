//! Questions an upstream asks while execbox calls one of its tools (`elicitation/create`, or
//! the input requests of an MCP 2026-07-28 answer): taken to the client whose program made the
//! call, as its own elicitation whose message starts `[server] `, and its answer taken back.
//!
//! Which call a question belongs to: over streamable HTTP the SDK says on which call's response
//! stream it arrived ([`InboundStreamOrigin`]); otherwise (stdio) nothing on the wire ties a
//! question to a call, so it goes to the one client session whose calls are in flight on that
//! server. When calls of several sessions are in flight there, the question is refused rather
//! than risk asking the wrong person, and so is a question while no call is in flight.
//!
//! Every wait is bounded: by the execution's time limit, by the end of the call (cancelled or
//! finished), and by the upstream withdrawing its question; the client is then sent
//! `notifications/cancelled` for it. A client that cannot answer (no elicitation of that mode,
//! or MCP 2026-07-28, where a server may not ask during a call) has the upstream answered with
//! an error, and the call's failure then says why.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CancelledNotificationParam, ClientResult, ElicitRequestParams, ElicitResult, Request,
    RequestId, ServerRequest,
};
use rmcp::service::{
    ElicitationMode, InboundStreamOrigin, OriginatingRequestId, Peer, PeerRequestOptions,
    RequestContext, RoleClient, RoleServer, ServiceError,
};
use rmcp::ErrorData;
use tokio_util::sync::CancellationToken;

use execbox_policy::escape_for_display;

use super::content::one_line;
use super::offers::same_session;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The client an execution's questions go to.
pub(crate) struct Asker {
    /// Its session.
    pub peer: Peer<RoleServer>,
    /// Its `execute_code` request, so that over streamable HTTP the question travels on that
    /// request's response stream.
    pub request: RequestId,
    /// The modes it can answer now (none: it cannot be asked during a call).
    pub modes: HashSet<ElicitationMode>,
    /// When the execution's time is up.
    pub deadline: tokio::time::Instant,
}

/// The askers of the executions running now, by execution id.
#[derive(Default)]
pub(crate) struct Askers(Mutex<HashMap<String, Arc<Asker>>>);

impl Askers {
    /// Registers where execution `execution_id`'s questions go, until the guard drops.
    pub(crate) fn register(
        self: &Arc<Self>,
        execution_id: &str,
        asker: Asker,
    ) -> AskerRegistration {
        lock(&self.0).insert(execution_id.to_owned(), Arc::new(asker));
        AskerRegistration {
            askers: self.clone(),
            execution_id: execution_id.to_owned(),
        }
    }

    pub(crate) fn get(&self, execution_id: &str) -> Option<Arc<Asker>> {
        lock(&self.0).get(execution_id).cloned()
    }
}

/// Removes an execution's asker when dropped.
pub(crate) struct AskerRegistration {
    askers: Arc<Askers>,
    execution_id: String,
}

impl Drop for AskerRegistration {
    fn drop(&mut self) {
        lock(&self.askers.0).remove(&self.execution_id);
    }
}

/// A tool call in flight on an upstream connection.
pub(crate) struct Call {
    execution_id: String,
    /// Cancelled when the call ends, however it ends.
    ended: CancellationToken,
    /// Why a question of the upstream during this call was refused, for the call's failure.
    refused: Mutex<Option<String>>,
}

/// The tool calls in flight on one upstream connection, by the id of their request there.
#[derive(Default)]
pub(crate) struct InFlight(Mutex<HashMap<RequestId, Arc<Call>>>);

impl InFlight {
    /// Registers call `id` of execution `execution_id` until the guard drops.
    pub(crate) fn start(self: &Arc<Self>, id: RequestId, execution_id: &str) -> CallRegistration {
        let call = Arc::new(Call {
            execution_id: execution_id.to_owned(),
            ended: CancellationToken::new(),
            refused: Mutex::new(None),
        });
        lock(&self.0).insert(id.clone(), call.clone());
        CallRegistration {
            inflight: self.clone(),
            id,
            call,
        }
    }

    /// The calls a question belongs to: the one whose response stream it came on, else all.
    fn candidates(&self, origin: Option<&InboundStreamOrigin>) -> Vec<Arc<Call>> {
        let calls = lock(&self.0);
        if let Some(InboundStreamOrigin::OutboundRequest(id)) = origin {
            if let Some(call) = calls.get(id) {
                return vec![call.clone()];
            }
        }
        calls.values().cloned().collect()
    }
}

/// A call's place in [`InFlight`]; dropping it ends the call there and withdraws its questions.
pub(crate) struct CallRegistration {
    inflight: Arc<InFlight>,
    id: RequestId,
    call: Arc<Call>,
}

impl CallRegistration {
    /// Why a question during this call was refused, if one was.
    pub(crate) fn refusal(&self) -> Option<String> {
        lock(&self.call.refused).clone()
    }
}

impl Drop for CallRegistration {
    fn drop(&mut self) {
        lock(&self.inflight.0).remove(&self.id);
        self.call.ended.cancel();
    }
}

/// Answers the question `request` that upstream `server` asks during a call on this
/// connection (`elicitation/create`), by asking the client whose call it is.
pub(crate) async fn ask_upstream_question(
    server: &str,
    inflight: &InFlight,
    askers: &Askers,
    request: ElicitRequestParams,
    context: RequestContext<RoleClient>,
) -> Result<ElicitResult, ErrorData> {
    let calls = inflight.candidates(context.extensions.get::<InboundStreamOrigin>());
    if calls.is_empty() {
        return Err(ErrorData::invalid_request(
            format!(
                "execbox takes a question of the MCP server {server:?} to its client only during \
                 a call of one of its tools, and none is in flight"
            ),
            None,
        ));
    }
    let askers_found: Vec<Arc<Asker>> = calls
        .iter()
        .filter_map(|c| askers.get(&c.execution_id))
        .collect();
    let Some(asker) = askers_found.first().cloned() else {
        return Err(refuse(
            &calls,
            format!(
                "the MCP server {server:?} asked a question ({}), and nobody can answer it here",
                quoted(&request)
            ),
        ));
    };
    if askers_found
        .iter()
        .any(|other| !same_session(&other.peer, &asker.peer))
    {
        return Err(ErrorData::invalid_request(
            format!(
                "execbox cannot tell which of its clients a question of the MCP server {server:?} \
                 is for: calls of several clients are in flight on it; execbox asked nobody"
            ),
            None,
        ));
    }
    let ended = calls.iter().map(|c| c.ended.clone()).collect();
    ask(server, &asker, request, ended, context.ct)
        .await
        .map_err(|refusal| match refusal {
            Refusal::CannotAnswer(why) => refuse(&calls, why),
            Refusal::Failed(why) => ErrorData::internal_error(why, None),
        })
}

/// Why a question got no answer.
pub(crate) enum Refusal {
    /// The client cannot answer it: the call fails saying so.
    CannotAnswer(String),
    /// Asking failed (the client went away, the time was up, the call ended).
    Failed(String),
}

impl Refusal {
    pub(crate) fn text(&self) -> &str {
        match self {
            Refusal::CannotAnswer(why) | Refusal::Failed(why) => why,
        }
    }
}

/// Records on every call that its question was refused, and answers the upstream so.
fn refuse(calls: &[Arc<Call>], why: String) -> ErrorData {
    for call in calls {
        *lock(&call.refused) = Some(why.clone());
    }
    ErrorData::invalid_request(why, None)
}

/// The question's message, quoted for an error.
fn quoted(request: &ElicitRequestParams) -> String {
    format!("{:?}", one_line(&escape_for_display(message(request)), 200))
}

fn message(request: &ElicitRequestParams) -> &str {
    match request {
        ElicitRequestParams::FormElicitationParams { message, .. }
        | ElicitRequestParams::UrlElicitationParams { message, .. } => message,
        _ => "",
    }
}

/// Asks `asker`'s client the question `request` of upstream `server`, its message starting
/// `[server] `, until it answers, the execution's time is up, every call of `ended` has ended
/// or `withdrawn` is cancelled.
pub(crate) async fn ask(
    server: &str,
    asker: &Asker,
    mut request: ElicitRequestParams,
    ended: Vec<CancellationToken>,
    withdrawn: CancellationToken,
) -> Result<ElicitResult, Refusal> {
    let mode = match &request {
        ElicitRequestParams::FormElicitationParams { .. } => ElicitationMode::Form,
        ElicitRequestParams::UrlElicitationParams { .. } => ElicitationMode::Url,
        _ => {
            return Err(Refusal::CannotAnswer(format!(
                "the MCP server {server:?} asked a question of a kind execbox does not know"
            )))
        }
    };
    if !asker.modes.contains(&mode) {
        let what = match mode {
            ElicitationMode::Form => "a form",
            _ => "a URL to open",
        };
        return Err(Refusal::CannotAnswer(format!(
            "the MCP server {server:?} asked a question ({}) with {what}, and this MCP client \
             cannot answer questions (it did not declare elicitation of that kind, or its \
             protocol does not let a server ask during a call)",
            quoted(&request)
        )));
    }
    let shown = format!("[{server}] {}", escape_for_display(message(&request)));
    match &mut request {
        ElicitRequestParams::FormElicitationParams { message, meta, .. }
        | ElicitRequestParams::UrlElicitationParams { message, meta, .. } => {
            *message = shown;
            *meta = None;
        }
        _ => {}
    }
    let remaining = asker
        .deadline
        .saturating_duration_since(tokio::time::Instant::now());
    if remaining.is_zero() {
        return Err(Refusal::Failed(format!(
            "the MCP server {server:?} asked a question after the execution's time was up"
        )));
    }
    let mut outgoing = Request::new(request);
    outgoing
        .extensions
        .insert(OriginatingRequestId(asker.request.clone()));
    let peer = asker.peer.clone();
    // Sent from a task of its own: the SDK would tie a request sent from this handler to the
    // upstream's request instead of the client's `execute_code`.
    let sent = tokio::spawn(async move {
        peer.send_request_with_option(
            ServerRequest::ElicitRequest(outgoing),
            PeerRequestOptions::with_timeout(remaining),
        )
        .await
    })
    .await
    .map_err(|e| Refusal::Failed(format!("asking the MCP client failed: {e}")))?;
    let handle = sent.map_err(|e| {
        Refusal::Failed(format!(
            "the MCP client could not be asked the question of the MCP server {server:?}: {}",
            super::plain::plain_error(&e, 300)
        ))
    })?;
    // Withdrawn from the client however this ends without its answer, dropped included.
    let mut withdraw = WithdrawOnDrop {
        peer: Some(asker.peer.clone()),
        id: handle.id.clone(),
        why: "the call that asked it has ended",
    };
    let every_call_ended = async {
        for token in &ended {
            token.cancelled().await;
        }
    };
    let why = tokio::select! {
        answer = handle.await_response() => {
            withdraw.peer = None;
            return match answer {
                Ok(ClientResult::ElicitResult(result)) => Ok(result),
                Ok(_) => Err(Refusal::Failed(
                    "the MCP client answered the question with something else than an answer"
                        .into(),
                )),
                Err(ServiceError::Timeout { .. }) => Err(Refusal::Failed(format!(
                    "the MCP client did not answer the question of the MCP server {server:?} \
                     before the execution's time was up"
                ))),
                Err(e) => Err(Refusal::Failed(format!(
                    "the MCP client did not answer the question of the MCP server {server:?}: {}",
                    super::plain::plain_error(&e, 300)
                ))),
            };
        }
        () = every_call_ended => "the call that asked it has ended",
        () = withdrawn.cancelled() => "the MCP server withdrew it",
    };
    withdraw.why = why;
    Err(Refusal::Failed(format!(
        "the question of the MCP server {server:?} was withdrawn: {why}"
    )))
}

/// Sends the client `notifications/cancelled` for a question when dropped while armed.
struct WithdrawOnDrop {
    peer: Option<Peer<RoleServer>>,
    id: RequestId,
    why: &'static str,
}

impl Drop for WithdrawOnDrop {
    fn drop(&mut self) {
        let Some(peer) = self.peer.take() else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let cancelled =
            CancelledNotificationParam::new(Some(self.id.clone()), Some(self.why.into()));
        runtime.spawn(async move {
            let _ = peer.notify_cancelled(cancelled).await;
        });
    }
}
