"""The binding's cost: `1 + 1`, and one tool call, through a warm `Sandbox` of one runner.

    python sdk/python/bench/bench.py            (BENCH_QUICK=1 for a short run)

Compare with `cargo bench -p execbox-host --bench sdk_baseline` (the same two rows from Rust).
With EXECBOX_RUNNER set to an execbox-runner binary, the runner is that binary (as in Rust)
rather than this interpreter serving it.
"""

import asyncio
import os
import statistics
import time

import execbox


def measure(run, iterations):
    samples = []
    for i in range(iterations + iterations // 10):
        started = time.perf_counter()
        result = run()
        elapsed = time.perf_counter() - started
        assert result.ok, result.error
        if i >= iterations // 10:
            samples.append(elapsed)
    return statistics.fmean(samples), statistics.median(samples)


async def measure_async(run, iterations):
    samples = []
    for i in range(iterations + iterations // 10):
        started = time.perf_counter()
        result = await run()
        elapsed = time.perf_counter() - started
        assert result.ok, result.error
        if i >= iterations // 10:
            samples.append(elapsed)
    return statistics.fmean(samples), statistics.median(samples)


def us(seconds):
    return f"{seconds * 1e6:.1f} µs"


def main():
    iterations = 300 if os.environ.get("BENCH_QUICK") else 3000
    runner = "EXECBOX_RUNNER" if os.environ.get("EXECBOX_RUNNER") else "this interpreter"
    print(f"| Python `Sandbox` (1 runner: {runner}) | mean | p50 |")
    print("|---|---|---|")
    with execbox.Sandbox({"t": {"echo": lambda input: input}}, pool=1) as sb:
        for row, code in (("`1 + 1`", "1 + 1"), ("one tool call", "await t.echo({ n: 1 })")):
            mean, p50 = measure(lambda: sb.run(code), iterations)
            print(f"| {row} | {us(mean)} | {us(p50)} |")

    async def echo(input):
        return input

    async def asynchronous():
        async with execbox.Sandbox({"t": {"echo": echo}}, pool=1) as sb:
            for row, code in (("`1 + 1`, `run_async`", "1 + 1"),
                              ("one async tool call, `run_async`", "await t.echo({ n: 1 })")):
                mean, p50 = await measure_async(lambda: sb.run_async(code), iterations)
                print(f"| {row} | {us(mean)} | {us(p50)} |")

    asyncio.run(asynchronous())


if __name__ == "__main__":
    main()
