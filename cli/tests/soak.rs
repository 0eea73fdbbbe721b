//! The soak and fault suite, short version: every check of `cargo bench -p execbox-cli --bench soak`
//! scaled down to seconds (2,000 executions on one runner, 8 WebSocket sessions, a few kills, each
//! bad input once). `SOAK_SEED` repeats a run; the seed is printed with each table.

#[path = "support/soak/mod.rs"]
mod soak;
mod support;

use soak::{Report, Scale};

fn scale() -> Scale {
    Scale::new("short", soak::seed_from_env())
}

fn finish(report: &Report, what: &str, scale: &Scale) {
    println!(
        "{}",
        report.markdown(&format!(
            "{what} ({} scale, seed {:#x})",
            scale.name, scale.seed
        ))
    );
    report.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_warm_runner_holds_mixed_executions_with_flat_rss() {
    let scale = scale();
    finish(&soak::stdio_soak(&scale).await, "one stdio runner", &scale);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_sessions_survive_disconnects_and_cancels_and_leave_none_stuck() {
    let scale = scale();
    finish(&soak::ws_storm(&scale).await, "WebSocket storm", &scale);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_killed_mid_tool_call_is_internal_error_and_executors_recover() {
    let scale = scale();
    finish(&soak::kills(&scale).await, "killed runners", &scale);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_inputs_leave_the_runner_answering() {
    let scale = scale();
    finish(&soak::bad_inputs(&scale).await, "bad inputs", &scale);
}
