//! Phase 1: many executions of the mix on one warm stdio runner, with its RSS sampled.

use std::time::Duration;

use super::{
    cancel_line, catalog, choose_fault, pick, rss_baseline, run_case, Case, Failure, Fault,
    FaultKind, Host, Ran, Report, Rng, Rss, Scale, StdioRunner, RSS_GROWTH_BOUND_KIB,
};
use crate::support::process::status_field;

/// `scale.stdio_executions` executions of the mixed catalog (every case once first, then a
/// weighted random mix with random cancel points) on ONE stdio runner, sampling its RSS.
pub(crate) async fn stdio_soak(scale: &Scale) -> Report {
    const PHASE: &str = "one stdio runner";
    let began = std::time::Instant::now();
    let mut report = Report::default();
    let cases: Vec<Case> = catalog()
        .into_iter()
        .filter(|c| c.fault != FaultKind::Disconnect)
        .collect();
    let mut rng = Rng::new(scale.seed);
    let mut runner = StdioRunner::spawn(&[]);
    report.pids.push(runner.pid);
    let mut host = Host::default();
    let mut rss = Rss {
        warmup: scale.rss_warmup,
        ..Rss::default()
    };
    let mut executions = 0u64;
    let mut next_sample = scale.rss_every;
    let mut next_progress = scale.stdio_executions / 10;
    let mut i = 0usize;
    while executions < scale.stdio_executions {
        let case = cases.get(i).unwrap_or_else(|| pick(&cases, &mut rng));
        let fault = choose_fault(case, &mut rng);
        let id = format!("s{i}");
        i += 1;
        let mut violations = Vec::new();
        let result = run_case(
            &mut runner.peer,
            &id,
            case,
            &fault,
            &mut host,
            &mut violations,
        )
        .await;
        let clean = violations.is_empty();
        for v in violations {
            report.violation(format!("{PHASE} {id} ({}): {v}", case.name));
        }
        match result {
            Ok(Ran::Done(classes)) => {
                for class in &classes {
                    report.outcome(PHASE, class);
                    executions += 1;
                }
                match fault {
                    Fault::Cancel(_) => report.fault("cancel (stdio)", 1, u64::from(clean)),
                    Fault::Concurrent => report.fault(
                        "second execute while one is active (stdio)",
                        1,
                        u64::from(clean),
                    ),
                    _ => {}
                }
            }
            Ok(Ran::Disconnected) | Err(Failure::Refused) => {
                report.violation(format!("{PHASE} {id}: a stdio session cannot disconnect"));
                break;
            }
            Err(Failure::Lost(why)) => {
                // The runner's state is unknown from here on: stop the phase.
                let diagnosis = runner.diagnose();
                report.lose(format!("{PHASE}: {why}; {diagnosis}"));
                break;
            }
        }
        if report.violations.len() > 100 {
            report.violation(format!("{PHASE}: stopped after 100 violations"));
            break;
        }
        host.flush_stale(&runner.peer, &mut report);
        if rng.chance(1) {
            // A cancel for the execution that just ended must be ignored.
            runner.peer.send(cancel_line(&id));
            report.fault("stale cancel after done", 1, 0);
        }
        if executions >= next_sample {
            next_sample += scale.rss_every;
            if let Some(kib) = status_field(runner.pid, "VmRSS") {
                rss.samples.push((executions, kib));
            }
        }
        if next_progress > 0 && executions >= next_progress {
            next_progress += scale.stdio_executions / 10;
            eprintln!(
                "soak: stdio runner: {executions} executions in {:.0?}, RSS {} KiB",
                began.elapsed(),
                rss.samples.last().map_or(0, |s| s.1)
            );
        }
    }
    if let Err(e) = runner.peer.expect_silence(Duration::from_millis(300)).await {
        report.violation(format!("{PHASE}: after the last done: {e}"));
    }
    report.stale_survived();
    rss.peak_kib = status_field(runner.pid, "VmHWM").unwrap_or(0);
    if let Err(e) = runner.finish().await {
        report.violation(format!("{PHASE}: {e}"));
    }
    if let (Some(baseline), Some(last)) = (rss_baseline(&rss), rss.samples.last()) {
        if last.1 > baseline.1 + RSS_GROWTH_BOUND_KIB {
            report.violation(format!(
                "{PHASE}: RSS grew from {} KiB after {} executions to {} KiB after {}, over the {} KiB bound",
                baseline.1, baseline.0, last.1, last.0, RSS_GROWTH_BOUND_KIB
            ));
        }
    }
    report.rss = Some(rss);
    report.measure(
        "one stdio runner: executions, wall time",
        format!("{executions} in {:.1?}", began.elapsed()),
    );
    report.check_orphans().await;
    report
}
