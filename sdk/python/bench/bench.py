"""The binding's cost: `1 + 1`, and one tool call, through a `Sandbox` of one warm runner (µs
per execution, mean and p50), beside the same through the Rust host
(`host/benches/sdk_baseline.rs`, run with cargo when the workspace is there; EXECBOX_BENCH_RUST=0
skips it).

    python sdk/python/bench/bench.py

EXECBOX_BENCH_ITERATIONS sets the executions per case (default 2000, after as many warm-up
ones); EXECBOX_BENCH_ROUNDS (default 3) how many times both sides are measured, alternating, so a
busy machine disturbs both alike: each figure is the median over the rounds. The runner is this
interpreter serving it, as the package does, unless EXECBOX_RUNNER names a binary; the Rust side
uses the `execbox-runner` binary of the workspace's release build.
"""

import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time

import execbox

ITERATIONS = int(os.environ.get("EXECBOX_BENCH_ITERATIONS", "2000"))
ROUNDS = int(os.environ.get("EXECBOX_BENCH_ROUNDS", "3"))
WORKSPACE = pathlib.Path(__file__).resolve().parents[3]


def stats(samples):
    samples = sorted(samples)
    return {
        "mean": round(statistics.fmean(samples) * 1e6, 1),
        "p50": round(samples[len(samples) // 2] * 1e6, 1),
    }


def measure(sandbox, code, n):
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        result = sandbox.run(code)
        samples.append(time.perf_counter() - started)
        if not result.ok:
            raise SystemExit(f"{code}: {result.error.code}: {result.error.message}")
    return samples


def python_figures():
    with execbox.Sandbox({"t": {"one": lambda input: 1}}, pool=1) as sandbox:
        measure(sandbox, "1 + 1", ITERATIONS)
        run = stats(measure(sandbox, "1 + 1", ITERATIONS))
        measure(sandbox, "await t.one()", ITERATIONS)
        tool = stats(measure(sandbox, "await t.one()", ITERATIONS))
    return {"run": run, "tool": tool}


def rust_figures():
    if os.environ.get("EXECBOX_BENCH_RUST") == "0" or not (WORKSPACE / "Cargo.toml").is_file():
        return None
    env = {**os.environ, "EXECBOX_BENCH_ITERATIONS": str(ITERATIONS)}
    env.pop("EXECBOX_RUNNER", None)
    cargo = subprocess.run(
        ["cargo", "bench", "-q", "-p", "execbox-host", "--bench", "sdk_baseline"],
        cwd=WORKSPACE,
        env=env,
        capture_output=True,
        text=True,
    )
    if cargo.returncode != 0:
        print(f"(no Rust figures: cargo bench failed: {cargo.stderr.strip().splitlines()[-1:]})",
              file=sys.stderr)
        return None
    return json.loads(cargo.stdout.strip().splitlines()[-1])


def combine(rounds):
    if any(r is None for r in rounds):
        return None
    return {
        case: {key: statistics.median(r[case][key] for r in rounds) for key in ("mean", "p50")}
        for case in ("run", "tool")
    }


def main():
    python_rounds, rust_rounds = [], []
    for _ in range(ROUNDS):
        python_rounds.append(python_figures())
        rust_rounds.append(rust_figures())
    py, rust = combine(python_rounds), combine(rust_rounds)
    runner = os.environ.get("EXECBOX_RUNNER") or "this interpreter"
    print(
        f"{ITERATIONS} executions per case and round, {ROUNDS} rounds (medians), one warm runner "
        f"({runner}); {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print("| case | Python mean µs | Python p50 µs | Rust mean µs | Rust p50 µs | binding adds (p50) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, case in (("run `1 + 1`", "run"), ("one tool call", "tool")):
        p = py[case]
        if rust:
            r = rust[case]
            print(f"| {name} | {p['mean']} | {p['p50']} | {r['mean']} | {r['p50']} | {round(p['p50'] - r['p50'], 1)} |")
        else:
            print(f"| {name} | {p['mean']} | {p['p50']} | – | – | – |")
    per_call = round(py["tool"]["p50"] - py["run"]["p50"], 1)
    if rust:
        rust_call = round(rust["tool"]["p50"] - rust["run"]["p50"], 1)
        print(f"| per tool call (p50 of the tool case minus the run case) | | {per_call} | | {rust_call} | {round(per_call - rust_call, 1)} |")
    else:
        print(f"| per tool call (p50 of the tool case minus the run case) | | {per_call} | | – | – |")


if __name__ == "__main__":
    main()
