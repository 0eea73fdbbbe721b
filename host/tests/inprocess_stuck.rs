//! The in-process executor against guests stuck in one long native call: its engine threads
//! cannot be killed, so they are retired, counted, and never pile up. A binary of its own, so
//! that the stuck threads (which spin until the process exits) do not slow other tests.

use std::time::Duration;

use execbox_host::{ExecuteRequest, Executor, InProcessExecutor, PoolOptions, ToolSet};
use execbox_protocol::{ErrorCode, RuntimeOptions};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Never reaches the interrupt handler: one native call over 2^53 - 1 indices.
const STUCK: &str = "Array.prototype.reverse.call({ length: 2 ** 53 - 1 })";

async fn run(
    executor: &InProcessExecutor,
    code: &str,
    timeout_ms: u64,
) -> execbox_host::ExecuteResult {
    let options = RuntimeOptions {
        timeout_ms,
        ..RuntimeOptions::default()
    };
    executor
        .execute(
            ExecuteRequest::new(code)
                .tools(&ToolSet::empty())
                .options(options),
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stuck_engine_threads_are_retired_and_executions_fail_fast_at_the_limit() {
    let executor = InProcessExecutor::new(PoolOptions {
        size: 2,
        prewarm: false,
        ..PoolOptions::default()
    });
    // The first stuck guest: the host gives up at its deadline, the thread is retired.
    let result = run(&executor, STUCK, 100).await;
    assert_eq!(
        result.error().unwrap().code,
        ErrorCode::Timeout,
        "{result:?}"
    );
    assert_eq!(executor.stuck_threads(), 1);
    // One stuck thread of two allowed: a new engine thread serves the next execution.
    assert_eq!(run(&executor, "6 * 7", 5000).await.value(), Some(json!(42)));

    // A cancel abandons a stuck execution just as the deadline does.
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        trigger.cancel();
    });
    let options = RuntimeOptions {
        timeout_ms: 60_000,
        ..RuntimeOptions::default()
    };
    let result = executor
        .execute(
            ExecuteRequest::new(STUCK)
                .tools(&ToolSet::empty())
                .options(options)
                .cancel_on(cancel),
        )
        .await;
    assert_eq!(
        result.error().unwrap().code,
        ErrorCode::Timeout,
        "{result:?}"
    );
    assert_eq!(executor.stuck_threads(), 2);

    // Two stuck: no new engine thread, every execution fails at once with a clear message.
    for _ in 0..3 {
        let result = run(&executor, "1", 5000).await;
        let error = result.error().expect("refused");
        assert_eq!(error.code, ErrorCode::InternalError);
        assert!(
            error.message.contains(
                "in-process engine threads are stuck in native calls; use a process runner for untrusted code"
            ),
            "{}",
            error.message
        );
    }
    assert_eq!(executor.stuck_threads(), 2, "no thread was added");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_that_ends_its_execution_is_not_counted_as_stuck() {
    // Timeouts the engine itself enforces (a CPU loop), guest errors and successes retire
    // or reuse threads that are not stuck.
    let executor = InProcessExecutor::new(PoolOptions {
        size: 1,
        prewarm: false,
        ..PoolOptions::default()
    });
    for _ in 0..3 {
        let result = run(&executor, "while (true) {}", 50).await;
        assert_eq!(result.error().unwrap().code, ErrorCode::Timeout);
        assert!(run(&executor, "throw new Error('x')", 5000)
            .await
            .error()
            .is_some());
    }
    assert_eq!(
        run(&executor, "'fine'", 5000).await.value(),
        Some(json!("fine"))
    );
    assert_eq!(executor.stuck_threads(), 0);
}
