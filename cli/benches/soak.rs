//! The soak and fault suite, full version; prints a Markdown summary and panics on any violation.
//!
//! `cargo bench -p execbox-cli --bench soak`: 100,000 executions on one warm runner, a storm of
//! 50 WebSocket sessions (400 executions each), 30 runners killed mid tool call, every bad input
//! three times; about six minutes on two cores. `SOAK_SCALE=short` runs the scale of
//! `tests/soak.rs`; `SOAK_SEED=N` repeats a run (the seed is printed).

#[path = "../tests/support/soak/mod.rs"]
mod soak;
#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Instant;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let scale = soak::Scale::new(
        &std::env::var("SOAK_SCALE").unwrap_or_default(),
        soak::seed_from_env(),
    );
    eprintln!("soak: {} scale, seed {:#x}", scale.name, scale.seed);
    let began = Instant::now();
    let mut report = soak::Report::default();
    eprintln!("soak: one stdio runner");
    report.merge(soak::stdio_soak(&scale).await);
    eprintln!("soak: WebSocket storm");
    report.merge(soak::ws_storm(&scale).await);
    eprintln!("soak: killed runners");
    report.merge(soak::kills(&scale).await);
    eprintln!("soak: bad inputs");
    report.merge(soak::bad_inputs(&scale).await);
    let title = format!(
        "Soak summary ({} scale, seed {:#x}, {:.1?})",
        scale.name,
        scale.seed,
        began.elapsed()
    );
    println!("{}", report.markdown(&title));
    report.assert_clean();
}
