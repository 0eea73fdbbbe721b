"""The Python SDK beside its peer and its runner, from one run: `Sandbox.run` of `1 + 1` and of
one awaited tool call (`await t.one()`, a Python tool returning 1) through a `Sandbox` of one
warm runner; the same two programs in quickjs-emscripten in-process, in Node.js
(`sdk/node/bench/peer.mjs`, run as a command printing JSON: what the reference TypeScript
project's QuickJS executor does per execution); and the raw runner the SDK uses
(`execbox-conformance bench --runner <it> --json`: the `execute` -> `done` round trip of `1 + 1`,
and a tool call's round trip inside an execution). µs, p50, sequential.

    npm ci --prefix sdk/node/bench      # once: the peer, quickjs-emscripten (pinned)
    python sdk/python/bench/bench.py

Needs the package importable (`cd sdk/python && maturin develop --release`), and for the other
columns Node.js with the peer installed as above, and `cargo build --release -p
execbox-conformance` (or EXECBOX_CONFORMANCE=PATH); a column that cannot run stays empty and a
note says how to get it.
EXECBOX_BENCH_ITERATIONS sets the executions per case (default 1000, after as many warm-up ones);
EXECBOX_BENCH_ROUNDS (default 5) how many times each side is measured, the sides taking turns, so
a busy machine disturbs all alike: each figure is the median over the rounds. The runner is this
interpreter serving it from the extension module, as the package does, unless EXECBOX_RUNNER
names a binary. EXECBOX_BENCH_RUST=1 adds the Rust host (`host/benches/sdk_baseline.rs`, built
once with cargo before the rounds, on the workspace's `execbox-runner`) and prints a second table:
what the binding adds to an execution and to a tool call.
"""

import datetime
import json
import os
import pathlib
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import time

try:
    import execbox
    from execbox._sandbox import _runner_argv
except ImportError as error:
    raise SystemExit(
        f"bench.py: cannot import execbox ({error}): install it first, "
        "`cd sdk/python && maturin develop --release` (see docs/sdk-python.md)"
    )

ITERATIONS = int(os.environ.get("EXECBOX_BENCH_ITERATIONS", "1000"))
ROUNDS = int(os.environ.get("EXECBOX_BENCH_ROUNDS", "5"))
WORKSPACE = pathlib.Path(__file__).resolve().parents[3]
PEER = WORKSPACE / "sdk" / "node" / "bench" / "peer.mjs"
INSTALL_PEER = "npm ci --prefix sdk/node/bench"


def stats(samples):
    samples = sorted(samples)
    return {
        "mean": round(statistics.fmean(samples) * 1e6, 1),
        "p50": round(samples[len(samples) // 2] * 1e6, 1),
    }


def measure(sandbox, code, expected, n):
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        result = sandbox.run(code)
        samples.append(time.perf_counter() - started)
        if not result.ok:
            raise SystemExit(f"{code}: {result.error.code}: {result.error.message}")
        if result.value != expected:
            raise SystemExit(f"{code} gave {result.value!r}, not {expected!r}")
    return samples


def sdk_figures():
    with execbox.Sandbox({"t": {"one": lambda input: 1}}, pool=1) as sandbox:
        measure(sandbox, "1 + 1", 2, ITERATIONS)
        run = stats(measure(sandbox, "1 + 1", 2, ITERATIONS))
        measure(sandbox, "await t.one()", 1, ITERATIONS)
        tool = stats(measure(sandbox, "await t.one()", 1, ITERATIONS))
    return {"run": run, "tool": tool}


def check_peer():
    """None when the peer can run, else why not and what to do."""
    node = shutil.which("node")
    if node is None:
        return "no quickjs-emscripten figures: `node` is not on PATH (the peer runs in Node.js 18+)"
    if not PEER.is_file():
        return f"no quickjs-emscripten figures: {PEER} is missing"
    if not (PEER.parent / "node_modules" / "quickjs-emscripten").is_dir():
        return (
            "no quickjs-emscripten figures: quickjs-emscripten is not installed: run "
            f"`{INSTALL_PEER}` (from the repository's top)"
        )
    return None


def peer_figures():
    env = {**os.environ, "EXECBOX_BENCH_ITERATIONS": str(ITERATIONS)}
    peer = subprocess.run(["node", str(PEER)], env=env, capture_output=True, text=True)
    if peer.returncode != 0:
        raise SystemExit(f"the peer ({PEER}) failed: {peer.stderr.strip()}")
    return json.loads(peer.stdout.strip().splitlines()[-1])


def find_conformance():
    """(path, None), or (None, why not and what to do)."""
    path = pathlib.Path(
        os.environ.get("EXECBOX_CONFORMANCE")
        or WORKSPACE / "target" / "release" / "execbox-conformance"
    )
    if path.is_file():
        return str(path), None
    return None, (
        f"no raw runner figures: {path} is missing; build it with "
        "`cargo build --release -p execbox-conformance` (or set EXECBOX_CONFORMANCE)"
    )


def raw_figures(conformance):
    args = [
        conformance, "bench", "--runner", shlex.join(_runner_argv()), "--json",
        "--iterations", str(ITERATIONS), "--spawns", "3",
    ]
    bench = subprocess.run(args, capture_output=True, text=True)
    if bench.returncode != 0:
        raise SystemExit(f"{shlex.join(args)} failed: {bench.stderr.strip()}")
    figures = json.loads(bench.stdout)
    return {"run": {"p50": figures["trivial_p50_us"]}, "tool": {"p50": figures["tool_call_p50_us"]}}


def build_rust_baseline():
    """(executable, None), or (None, why not)."""
    cargo = subprocess.run(
        ["cargo", "bench", "--no-run", "-q", "-p", "execbox-host", "--bench", "sdk_baseline",
         "--message-format=json"],
        cwd=WORKSPACE, capture_output=True, text=True,
    )
    if cargo.returncode != 0:
        last = (cargo.stderr.strip().splitlines() or ["?"])[-1]
        return None, f"no Rust figures: `cargo bench --no-run -p execbox-host --bench sdk_baseline` failed: {last}"
    for line in cargo.stdout.splitlines():
        if not line.startswith("{"):
            continue
        message = json.loads(line)
        if (message.get("reason") == "compiler-artifact"
                and message.get("target", {}).get("name") == "sdk_baseline"
                and message.get("executable")):
            return message["executable"], None
    return None, "no Rust figures: cargo built no sdk_baseline executable"


def rust_figures(executable):
    env = {**os.environ, "EXECBOX_BENCH_ITERATIONS": str(ITERATIONS)}
    # The Rust host needs a runner binary: EXECBOX_RUNNER, else the workspace's release build.
    env.setdefault("EXECBOX_RUNNER", str(WORKSPACE / "target" / "release" / "execbox-runner"))
    bench = subprocess.run([executable], env=env, capture_output=True, text=True)
    if bench.returncode != 0:
        raise SystemExit(f"{executable} failed: {bench.stderr.strip()}")
    return json.loads(bench.stdout.strip().splitlines()[-1])


def combine(rounds):
    if not rounds:
        return None
    return {
        case: {key: statistics.median(r[case][key] for r in rounds) for key in rounds[0][case]}
        for case in ("run", "tool")
    }


def machine():
    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{os.cpu_count()} cores of {model}"


def load_average():
    return ", ".join(f"{l:.2f}" for l in os.getloadavg())


def fmt(value):
    return "–" if value is None else f"{round(value, 1)}"


def main():
    notes = []
    peer_missing = check_peer()
    if peer_missing:
        notes.append(peer_missing)
    conformance, missing = find_conformance()
    if missing:
        notes.append(missing)
    rust_bench = None
    if os.environ.get("EXECBOX_BENCH_RUST") == "1":
        rust_bench, missing = build_rust_baseline()
        if missing:
            notes.append(missing)

    started = datetime.datetime.now(datetime.timezone.utc)
    load_before = load_average()
    sdk_rounds, peer_rounds, raw_rounds, rust_rounds = [], [], [], []
    peer_info = {}
    for _ in range(ROUNDS):
        sdk_rounds.append(sdk_figures())
        if not peer_missing:
            peer_info = peer_figures()
            peer_rounds.append(peer_info)
        if conformance:
            raw_rounds.append(raw_figures(conformance))
        if rust_bench:
            rust_rounds.append(rust_figures(rust_bench))
    sdk, qjs, raw, rust = (combine(r) for r in (sdk_rounds, peer_rounds, raw_rounds, rust_rounds))

    versions = f"Python {platform.python_version()}"
    if peer_info:
        versions += (f", Node.js {peer_info['node']}, quickjs-emscripten {peer_info['version']} "
                     f"({peer_info['wait']})")
    runner = os.environ.get("EXECBOX_RUNNER") or "this interpreter serving it (the package's own)"
    print(f"{started:%Y-%m-%d %H:%M} UTC; {machine()}; load average {load_before} before, "
          f"{load_average()} after; {versions}")
    print(f"{ITERATIONS} executions per case and round after as many warm-up ones, {ROUNDS} rounds "
          f"taking turns (medians); runner: {runner}")
    print()
    print("| case | Python SDK p50 µs | quickjs-emscripten p50 µs | raw runner p50 µs | SDK / peer |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, case in (("`1 + 1`", "run"), ("one tool call", "tool")):
        ratio = f"{sdk[case]['p50'] / qjs[case]['p50']:.2f}" if qjs else "–"
        mark = " ¹" if case == "tool" else ""
        print(f"| {name} | {fmt(sdk[case]['p50'])} | {fmt(qjs and qjs[case]['p50'])} | "
              f"{fmt(raw and raw[case]['p50'])}{mark} | {ratio} |")
    print()
    print("¹ the raw runner's tool call figure is one call's round trip inside an execution (its "
          "`tool_call` out, the `tool_result` in, to its next `tool_call`), not a whole execution "
          "making one call as in the other columns.")
    if qjs and peer_info.get("wait") != "setTimeout(0)":
        print("The peer drains its jobs as soon as the host settles a promise; the reference's "
              "executor waits `setTimeout(0)` (≥ 1 ms) between runs of them, so the peer's figures "
              "are its floor (EXECBOX_PEER_WAIT=timeout measures that).")

    if rust:
        print()
        print("What the binding adds, beside the Rust host (`host/benches/sdk_baseline.rs`, on the "
              "`execbox-runner` binary):")
        print()
        print("| case | Python mean µs | Python p50 µs | Rust mean µs | Rust p50 µs | binding adds (p50) |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for name, case in (("run `1 + 1`", "run"), ("one tool call", "tool")):
            p, r = sdk[case], rust[case]
            print(f"| {name} | {p['mean']} | {p['p50']} | {r['mean']} | {r['p50']} | "
                  f"{fmt(p['p50'] - r['p50'])} |")
        per_call = sdk["tool"]["p50"] - sdk["run"]["p50"]
        rust_call = rust["tool"]["p50"] - rust["run"]["p50"]
        print(f"| per tool call (p50 of the tool case minus the run case) | | {fmt(per_call)} | | "
              f"{fmt(rust_call)} | {fmt(per_call - rust_call)} |")

    for note in notes:
        print(f"\n({note})")


if __name__ == "__main__":
    main()
