//! Tool calls a program started but did not await, still running when its `done` came: by
//! default they finish (within the time limit) before the result is returned, with every
//! executor kind; `Unawaited::Cancel` stops them; a time limit cuts them short; and a log line
//! names them whatever became of them. Also the host's other note: what log truncation took.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use execbox_host::{
    ExecuteRequest, Executor, InProcessExecutor, PoolOptions, PooledExecutor, ProcessExecutor,
    Provider, Tool, ToolContext, ToolError, ToolSet, Unawaited, WsExecutor,
};
use serde_json::{json, Value};

use crate::support::runners::{runner, ListeningRunner};

const TWO_PUTS: &str = "store.put({ key: 'a' }); store.put({ key: 'b' }); return 'queued'";

const FINISHED: &str = "[execbox] 2 tool calls were not awaited: store.put ×2; they finished after the program returned — await them";

/// `store.put` writes its key after `delay` (or fails for key "bad"); `store.hang` waits
/// until cancelled. Returns the tools and what `put` wrote.
fn store(delay: Duration) -> (ToolSet, Arc<Mutex<Vec<String>>>) {
    store_in("store", delay)
}

/// [`store`]'s tools in the namespace `provider`.
fn store_in(provider: &str, delay: Duration) -> (ToolSet, Arc<Mutex<Vec<String>>>) {
    let written = Arc::new(Mutex::new(Vec::new()));
    let sink = written.clone();
    let put = Tool::new("put", move |input: Value, ctx: ToolContext| {
        let sink = sink.clone();
        async move {
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = ctx.cancel.cancelled() => return Err(ToolError::cancelled()),
            }
            let key = input["key"].as_str().unwrap_or_default().to_owned();
            if key == "bad" {
                return Err(ToolError::tool("disk full"));
            }
            sink.lock().unwrap().push(key);
            Ok(json!(true))
        }
    });
    let hang = Tool::new("hang", |_input: Value, ctx: ToolContext| async move {
        ctx.cancel.cancelled().await;
        Err::<Value, _>(ToolError::cancelled())
    });
    let tools = ToolSet::new(vec![Provider::new(provider).tool(put).tool(hang)]).unwrap();
    (tools, written)
}

fn written(sink: &Arc<Mutex<Vec<String>>>) -> Vec<String> {
    let mut keys = sink.lock().unwrap().clone();
    keys.sort();
    keys
}

fn one_engine() -> InProcessExecutor {
    InProcessExecutor::new(PoolOptions {
        size: 1,
        prewarm: false,
        ..PoolOptions::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unawaited_calls_finish_before_the_result_with_every_executor_and_are_named() {
    let mut listening = ListeningRunner::start(&[], &[]);
    let executors: Vec<(&str, Box<dyn Executor>)> = vec![
        ("process", Box::new(ProcessExecutor::new(runner()).unwrap())),
        (
            "pooled",
            Box::new(
                PooledExecutor::new(
                    runner(),
                    PoolOptions {
                        size: 1,
                        prewarm: false,
                        ..PoolOptions::default()
                    },
                )
                .unwrap(),
            ),
        ),
        ("in-process", Box::new(one_engine())),
        (
            "websocket",
            Box::new(WsExecutor::new(listening.url.as_str()).unwrap()),
        ),
    ];
    for (kind, executor) in executors {
        let (tools, sink) = store(Duration::from_millis(200));
        let result = executor
            .execute(ExecuteRequest::new(TWO_PUTS).tools(&tools))
            .await;
        assert_eq!(result.value(), Some(json!("queued")), "{kind}: {result:?}");
        assert_eq!(written(&sink), ["a", "b"], "{kind}: both writes landed");
        assert_eq!(
            result.logs.last().map(String::as_str),
            Some(FINISHED),
            "{kind}"
        );
    }
    listening.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unawaited_calls_are_cancelled_when_asked_and_still_named() {
    let (tools, sink) = store(Duration::from_secs(2));
    let result = one_engine()
        .execute(
            ExecuteRequest::new(TWO_PUTS)
                .tools(&tools)
                .unawaited(Unawaited::Cancel),
        )
        .await;
    assert_eq!(result.value(), Some(json!("queued")), "{result:?}");
    assert!(written(&sink).is_empty());
    assert_eq!(
        result.logs.last().map(String::as_str),
        Some("[execbox] 2 tool calls were not awaited: store.put ×2; they were cancelled when the program returned — await them")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unawaited_calls_outliving_the_time_limit_are_cancelled_and_named() {
    let (tools, sink) = store(Duration::from_millis(50));
    let code = "store.put({ key: 'bad' }); store.hang({}); store.put({ key: 'a' }); return 1";
    let result = one_engine()
        .execute(
            ExecuteRequest::new(code)
                .tools(&tools)
                .timeout(Duration::from_millis(1500)),
        )
        .await;
    assert_eq!(result.value(), Some(json!(1)), "{result:?}");
    assert_eq!(written(&sink), ["a"]);
    assert_eq!(
        result.logs.last().map(String::as_str),
        Some("[execbox] 3 tool calls were not awaited: store.put ×2, store.hang; store.put ×2 finished after the program returned (1 failed: store.put: disk full); store.hang was cancelled at the time limit — await them")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn awaited_calls_are_not_named() {
    let (tools, sink) = store(Duration::from_millis(10));
    let code = "await store.put({ key: 'a' }); console.log('hi'); return 2";
    let result = one_engine()
        .execute(ExecuteRequest::new(code).tools(&tools))
        .await;
    assert_eq!(result.value(), Some(json!(2)), "{result:?}");
    assert_eq!(written(&sink), ["a"]);
    assert_eq!(result.logs, ["hi"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_still_waiting_for_a_slot_when_done_comes_start_finish_and_are_never_answered() {
    // One call at a time: when `done` comes, one call runs and two wait. All three run to
    // their end; none of their results reaches the runner.
    let (tools, sink) = store_in("t", Duration::from_millis(100));
    let (mut connection, mut runner) = super::scripted_connection(execbox_host::SessionTimings {
        max_concurrent_tool_calls: 1,
        ..execbox_host::SessionTimings::default()
    });
    let script = async {
        let id = runner.accept().await;
        for key in ["a", "b", "c"] {
            runner.send(execbox_protocol::Message::ToolCall(
                execbox_protocol::ToolCall {
                    call_id: format!("call-{key}"),
                    provider_name: "t".into(),
                    safe_tool_name: "put".into(),
                    input: Some(serde_json::value::to_raw_value(&json!({ "key": key })).unwrap()),
                },
            ));
        }
        runner.done(&id);
        runner
    };
    let request = ExecuteRequest::new("x").tools(&tools);
    let (result, mut runner) = tokio::join!(connection.execute(&request), script);
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(written(&sink), ["a", "b", "c"]);
    assert_eq!(
        result.logs.last().map(String::as_str),
        Some("[execbox] 3 tool calls were not awaited: t.put ×3; they finished after the program returned — await them")
    );
    assert!(
        runner.host.try_recv().is_err(),
        "the host answered a call of a finished execution"
    );
}

#[tokio::test]
async fn a_done_with_truncated_logs_gets_a_note_and_keeps_logs_truncated_in_its_json() {
    let (mut connection, mut runner) =
        super::scripted_connection(execbox_host::SessionTimings::default());
    let script = async {
        let id = runner.accept().await;
        runner.send(execbox_protocol::Message::Done(execbox_protocol::Done {
            id,
            duration_ms: 1,
            logs: vec!["0".into(), "1".into()],
            logs_truncated: Some(execbox_protocol::LogsTruncated {
                omitted_lines: 3,
                cut_line: true,
            }),
            clock: None,
            clock_overflow: false,
            outcome: Ok(Some(
                execbox_protocol::RawValue::from_string("1".to_owned()).unwrap(),
            )),
        }));
    };
    let request = ExecuteRequest::new("x").options(execbox_protocol::RuntimeOptions {
        max_log_chars: 10,
        ..execbox_protocol::RuntimeOptions::default()
    });
    let (result, ()) = tokio::join!(connection.execute(&request), script);
    assert_eq!(
        result.logs,
        [
            "0",
            "1",
            "[execbox] the last log line was cut at the 10-character log limit; 3 more log lines not shown"
        ]
    );
    let done: Value = serde_json::from_str(&result.to_done_json()).unwrap();
    assert_eq!(
        done["logsTruncated"],
        json!({"omittedLines": 3, "cutLine": true})
    );
}
