//! A call the policy refuses carries why on the wire: `tool_result`'s `error.reason`
//! (`rate_limited` with `retryAfterMs`, `approval_required`, `permission_denied`), beside its
//! spec code and message. Driven through the host's real session ([`Connection`]) with a
//! scripted runner, so what is checked is the `tool_result` line a runner receives.

use std::sync::Arc;
use std::time::Duration;

use execbox_host::{
    Connection, ExecuteRequest, Provider, RunnerEvent, SessionTimings, Tool, ToolSet,
};
use execbox_policy::Enforcement;
use execbox_protocol::{Done, Message, RawValue, ToolCall};
use serde_json::{json, Value};
use tokio::sync::mpsc;

/// Runs one execution whose runner calls `provider.tool` once per entry of `calls`, one after
/// the other; returns each `tool_result` as the JSON line the runner received.
async fn tool_results(tools: &ToolSet, calls: &[(&str, &str)]) -> Vec<Value> {
    let (host_tx, mut host_rx) = mpsc::unbounded_channel::<Message>();
    let (event_tx, event_rx) = mpsc::unbounded_channel::<RunnerEvent>();
    let connection = Connection::new(
        host_tx,
        event_rx,
        Box::new(|| Box::pin(async {})),
        SessionTimings::default(),
    );
    let request = ExecuteRequest::new("// scripted")
        .tools(tools)
        .guard(Arc::new(Enforcement::unrestricted()));
    let execution = tokio::spawn(async move { connection.execute_once(&request).await });
    let Some(Message::Execute(execute)) = host_rx.recv().await else {
        panic!("the host did not send execute first");
    };
    let mut results = Vec::new();
    for (n, (provider, tool)) in calls.iter().enumerate() {
        let call = ToolCall {
            call_id: format!("c{n}"),
            provider_name: provider.to_string(),
            safe_tool_name: tool.to_string(),
            input: Some(RawValue::from_string("{}".into()).unwrap()),
        };
        event_tx
            .send(RunnerEvent::Message(Message::ToolCall(call)))
            .unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(10), host_rx.recv())
            .await
            .expect("the host answers the call")
            .expect("the session is open");
        assert!(matches!(answer, Message::ToolResult(_)), "{answer:?}");
        results.push(serde_json::from_str(&answer.encode()).unwrap());
    }
    let done = Done {
        id: execute.id,
        duration_ms: 1,
        logs: Vec::new(),
        logs_truncated: None,
        clock: None,
        clock_overflow: false,
        outcome: Ok(None),
    };
    event_tx
        .send(RunnerEvent::Message(Message::Done(done)))
        .unwrap();
    assert!(execution.await.unwrap().is_ok());
    results
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_call_carries_its_reason_and_when_to_retry_on_the_wire() {
    let limited = Tool::new("get", |_input, _ctx| async { Ok(json!(1)) })
        .rate_limit(execbox_host::RateLimit::new(1, Duration::from_secs(60)).unwrap());
    let tools = ToolSet::new(vec![Provider::new("weather").tool(limited)]).unwrap();
    let results = tool_results(&tools, &[("weather", "get"), ("weather", "get")]).await;
    assert_eq!(results[0]["ok"], true, "{results:?}");
    let error = &results[1]["error"];
    assert_eq!(error["code"], "tool_error", "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .starts_with("rate limit exceeded for weather.get: 1 per 1m; retry in "),
        "{error}"
    );
    assert_eq!(error["reason"], "rate_limited", "{error}");
    let wait = error["retryAfterMs"].as_u64().expect("retryAfterMs");
    assert!((1..=60_000).contains(&wait), "{wait}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_nobody_could_approve_carries_its_reason_on_the_wire() {
    let wipe =
        Tool::new("wipe", |_input, _ctx| async { Ok(json!("wiped")) }).requires_approval(true);
    let tools = ToolSet::new(vec![Provider::new("ops").tool(wipe)]).unwrap();
    let results = tool_results(&tools, &[("ops", "wipe")]).await;
    let error = &results[0]["error"];
    assert_eq!(error["code"], "tool_error", "{error}");
    assert_eq!(error["message"], "ops.wipe: approval required", "{error}");
    assert_eq!(error["reason"], "approval_required", "{error}");
    assert_eq!(error.get("retryAfterMs"), None, "{error}");
}
