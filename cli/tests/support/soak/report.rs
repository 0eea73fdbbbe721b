//! The counts and findings of a soak run, and their Markdown summary.

use std::fmt::Write as _;
use std::time::Duration;

use super::RSS_GROWTH_BOUND_KIB;
use crate::support::process::{describe, wait_gone};

/// The outcome classes of a `done`, in table order.
const CLASSES: [&str; 8] = [
    "ok",
    "timeout",
    "memory_limit",
    "runtime_error",
    "tool_error",
    "serialization_error",
    "validation_error",
    "internal_error",
];

/// RSS samples of the soaked runner, in KiB, with the executions completed at each.
#[derive(Debug, Default, Clone)]
pub(crate) struct Rss {
    /// `(executions, VmRSS KiB)`.
    pub samples: Vec<(u64, u64)>,
    /// Executions before the baseline sample.
    pub warmup: u64,
    /// VmHWM at the end.
    pub peak_kib: u64,
}

/// Everything a phase counted, and everything that went wrong.
#[derive(Debug, Default)]
pub(crate) struct Report {
    /// `(phase, outcome class) -> executions`, in first-seen order.
    pub outcomes: Vec<((String, String), u64)>,
    /// `fault -> [injected, survived]`, in first-seen order.
    pub faults: Vec<(String, [u64; 2])>,
    /// `bad input -> [tried, runner still answered]`, in first-seen order.
    pub bad_inputs: Vec<(String, [u64; 2])>,
    /// Free-form measures for the table.
    pub measures: Vec<(String, String)>,
    /// Behaviour counted rather than asserted (either way is allowed today), in first-seen order.
    pub counters: Vec<(String, [u64; 1])>,
    /// RSS of the soaked stdio runner.
    pub rss: Option<Rss>,
    /// Every runner process seen.
    pub pids: Vec<u32>,
    /// Runner processes still present (running or zombie) at the end of their phase.
    pub orphans: Vec<u32>,
    /// Executions that never got their `done` (or whose transport died under them).
    pub lost: Vec<String>,
    /// Any other broken promise: wrong outcome, duplicate `done`, stray message, crash.
    pub violations: Vec<String>,
}

fn bump<K: PartialEq + Clone, const N: usize>(
    list: &mut Vec<(K, [u64; N])>,
    key: &K,
    add: [u64; N],
) {
    let slot = match list.iter().position(|(k, _)| k == key) {
        Some(i) => i,
        None => {
            list.push((key.clone(), [0; N]));
            list.len() - 1
        }
    };
    for (total, n) in list[slot].1.iter_mut().zip(add) {
        *total += n;
    }
}

impl Report {
    /// Counts one `done` of `phase` with outcome `class`.
    pub(crate) fn outcome(&mut self, phase: &str, class: &str) {
        let key = (phase.to_owned(), class.to_owned());
        match self.outcomes.iter_mut().find(|(k, _)| *k == key) {
            Some((_, n)) => *n += 1,
            None => self.outcomes.push((key, 1)),
        }
    }

    /// Counts faults injected and survived.
    pub(crate) fn fault(&mut self, name: &str, injected: u64, survived: u64) {
        bump(&mut self.faults, &name.to_owned(), [injected, survived]);
    }

    /// Counts one bad input tried, and whether the runner still answered after it.
    pub(crate) fn bad_input(&mut self, name: &str, survived: bool) {
        bump(
            &mut self.bad_inputs,
            &name.to_owned(),
            [1, u64::from(survived)],
        );
    }

    /// Counts one occurrence of behaviour that is allowed either way today.
    pub(crate) fn count(&mut self, name: &str) {
        bump(&mut self.counters, &name.to_owned(), [1]);
    }

    /// A stale `tool_result` or `cancel` survived when nothing answered it: the executions
    /// after it would have seen the answer as a stray message, a violation. So once a session
    /// ends clean, every stale message it sent survived.
    pub(crate) fn stale_survived(&mut self) {
        let clean = self.lost.is_empty() && self.violations.is_empty();
        for (name, counts) in self.faults.iter_mut() {
            if name.starts_with("stale") && clean {
                counts[1] = counts[0];
            }
        }
    }

    /// Adds a row to the measures table.
    pub(crate) fn measure(&mut self, name: &str, value: impl Into<String>) {
        self.measures.push((name.to_owned(), value.into()));
    }

    /// Adds `other`'s counts to this report.
    pub(crate) fn merge(&mut self, other: Report) {
        for ((phase, class), n) in other.outcomes {
            for _ in 0..n {
                self.outcome(&phase, &class);
            }
        }
        for (name, [a, b]) in other.faults {
            self.fault(&name, a, b);
        }
        for (name, counts) in other.bad_inputs {
            bump(&mut self.bad_inputs, &name, counts);
        }
        self.measures.extend(other.measures);
        for (name, counts) in other.counters {
            bump(&mut self.counters, &name, counts);
        }
        if other.rss.is_some() {
            self.rss = other.rss;
        }
        self.pids.extend(other.pids);
        self.orphans.extend(other.orphans);
        self.lost.extend(other.lost);
        self.violations.extend(other.violations);
    }

    /// Records a broken promise (and prints it at once, for long runs).
    pub(crate) fn violation(&mut self, what: impl Into<String>) {
        let what = what.into();
        eprintln!("soak: VIOLATION: {what}");
        self.violations.push(what);
    }

    /// Records an execution that never got its `done`.
    pub(crate) fn lose(&mut self, what: impl Into<String>) {
        let what = what.into();
        eprintln!("soak: LOST EXECUTION: {what}");
        self.lost.push(what);
    }

    /// Waits for every runner pid of this report to be gone (not running, not a zombie) and
    /// records the ones that are not as orphans.
    pub(crate) async fn check_orphans(&mut self) {
        for pid in self.pids.clone() {
            if !wait_gone(pid, Duration::from_secs(10)).await {
                self.orphans.push(pid);
                self.violation(format!(
                    "runner {pid} is still present after its phase: {}",
                    describe(pid)
                ));
            }
        }
    }

    /// The summary as Markdown tables.
    pub(crate) fn markdown(&self, title: &str) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "## {title}\n");

        let mut phases: Vec<&str> = Vec::new();
        for ((phase, _), _) in &self.outcomes {
            if !phases.contains(&phase.as_str()) {
                phases.push(phase.as_str());
            }
        }
        let count = |phase: Option<&str>, class: &str| -> u64 {
            self.outcomes
                .iter()
                .filter(|((p, c), _)| phase.is_none_or(|ph| ph == p) && c == class)
                .map(|(_, n)| n)
                .sum()
        };
        let _ = writeln!(out, "| executions held | {} | total |", CLASSES.join(" | "));
        let _ = writeln!(out, "|---|{}---:|", "---:|".repeat(CLASSES.len()));
        let mut rows: Vec<Option<&str>> = phases.iter().map(|p| Some(*p)).collect();
        rows.push(None);
        for row in rows {
            let cells: Vec<u64> = CLASSES.iter().map(|c| count(row, c)).collect();
            let other: u64 = self
                .outcomes
                .iter()
                .filter(|((p, c), _)| {
                    row.is_none_or(|ph| ph == p) && !CLASSES.contains(&c.as_str())
                })
                .map(|(_, n)| n)
                .sum();
            let total: u64 = cells.iter().sum::<u64>() + other;
            let name = row.unwrap_or("**all**");
            let cells: Vec<String> = cells.iter().map(u64::to_string).collect();
            let _ = writeln!(out, "| {name} | {} | {total} |", cells.join(" | "));
        }

        let _ = writeln!(out, "\n| fault injected | injected | survived |");
        let _ = writeln!(out, "|---|---:|---:|");
        for (name, [injected, survived]) in &self.faults {
            let _ = writeln!(out, "| {name} | {injected} | {survived} |");
        }

        if !self.bad_inputs.is_empty() {
            let tried: u64 = self.bad_inputs.iter().map(|(_, [t, _])| t).sum();
            let ok: u64 = self.bad_inputs.iter().map(|(_, [_, s])| s).sum();
            let _ = writeln!(
                out,
                "\n| bad input ({tried} tried, {ok} survived) | tried | runner still answered |"
            );
            let _ = writeln!(out, "|---|---:|---:|");
            for (name, [tried, survived]) in &self.bad_inputs {
                let _ = writeln!(out, "| {name} | {tried} | {survived} |");
            }
        }

        let _ = writeln!(out, "\n| measure | value |");
        let _ = writeln!(out, "|---|---|");
        if let Some(rss) = &self.rss {
            let mib = |kib: u64| format!("{:.1} MiB", kib as f64 / 1024.0);
            let values: Vec<u64> = rss.samples.iter().map(|s| s.1).collect();
            if let (Some(first), Some(last)) = (rss.samples.first(), rss.samples.last()) {
                let baseline = rss_baseline(rss).unwrap_or(*first);
                let _ = writeln!(
                    out,
                    "| stdio runner RSS: first (after {}) / after warm-up ({}) / last (after {}) | {} / {} / {} |",
                    first.0, baseline.0, last.0, mib(first.1), mib(baseline.1), mib(last.1)
                );
                let _ = writeln!(
                    out,
                    "| stdio runner RSS: min / max of {} samples / VmHWM | {} / {} / {} |",
                    values.len(),
                    mib(values.iter().copied().min().unwrap_or(0)),
                    mib(values.iter().copied().max().unwrap_or(0)),
                    mib(rss.peak_kib)
                );
                let _ = writeln!(
                    out,
                    "| stdio runner RSS growth after warm-up (bound {}) | {:+.1} MiB |",
                    mib(RSS_GROWTH_BOUND_KIB),
                    (last.1 as f64 - baseline.1 as f64) / 1024.0
                );
            }
        }
        for (name, value) in &self.measures {
            let _ = writeln!(out, "| {name} | {value} |");
        }
        for (name, [n]) in &self.counters {
            let _ = writeln!(out, "| {name} | {n} |");
        }
        let _ = writeln!(out, "| runner processes seen | {} |", self.pids.len());
        let _ = writeln!(
            out,
            "| orphans found (must be 0) | {} |",
            self.orphans.len()
        );
        let _ = writeln!(out, "| lost executions (must be 0) | {} |", self.lost.len());
        let _ = writeln!(
            out,
            "| other violations (must be 0) | {} |",
            self.violations.len()
        );
        for (label, list) in [("lost", &self.lost), ("violation", &self.violations)] {
            for item in list.iter().take(40) {
                let _ = writeln!(out, "\n- **{label}**: {item}");
            }
            if list.len() > 40 {
                let _ = writeln!(out, "\n- … and {} more", list.len() - 40);
            }
        }
        out
    }

    /// Panics, listing them, on any lost execution, orphan or violation.
    pub(crate) fn assert_clean(&self) {
        let problems = self.lost.len() + self.orphans.len() + self.violations.len();
        if problems > 0 {
            let mut all: Vec<String> = self.lost.iter().map(|l| format!("lost: {l}")).collect();
            all.extend(
                self.orphans
                    .iter()
                    .map(|p| format!("orphan runner pid {p}")),
            );
            all.extend(self.violations.iter().cloned());
            panic!(
                "soak found {problems} problem(s):\n{}",
                all.iter().take(40).cloned().collect::<Vec<_>>().join("\n")
            );
        }
    }
}

/// The first sample after the warm-up (or the first sample, for a short run).
pub(crate) fn rss_baseline(rss: &Rss) -> Option<(u64, u64)> {
    rss.samples
        .iter()
        .find(|(n, _)| *n >= rss.warmup)
        .or(rss.samples.first())
        .copied()
}
