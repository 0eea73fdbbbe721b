"""execbox.Sandbox: warm runners, concurrency from threads and tasks, context managers."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import execbox
from conftest import child_pids


def test_a_sandbox_reuses_its_runners(tools):
    with execbox.Sandbox(tools, pool=2) as sb:
        for i in range(20):
            assert sb.run(f"return (await math.add({{ a: {i}, b: 1 }})).sum").value == i + 1
        assert sb._pool.runners_started <= 3


def test_a_failed_execution_leaves_nothing_for_the_next(tools):
    with execbox.Sandbox(tools, pool=1) as sb:
        assert not sb.run("globalThis.secret = 42; throw new Error('x')").ok
        assert sb.run("return typeof globalThis.secret").value == "undefined"
        assert sb.run("globalThis.kept = 1; return 1").ok
        assert sb.run("return typeof globalThis.kept").value == "undefined"


def test_the_sandbox_limits_are_defaults_that_a_run_overrides():
    def nap(input):
        threading.Event().wait(0.3)
        return "late"

    with execbox.Sandbox({"t": {"nap": nap}}, timeout_ms=200, pool=1) as sb:
        assert sb.run("while (true) {}").error.code == "timeout"
        assert sb.run("return await t.nap()").error.code == "timeout"
        assert sb.run("return await t.nap()", timeout_ms=2000).value == "late"


def test_threads_share_a_sandbox(tools, calls):
    lock = threading.Lock()
    seen = []

    def record(input):
        with lock:
            seen.append(input["i"])
        return input["i"]

    with execbox.Sandbox({"t": {"record": record}}, pool=2) as sb:
        with ThreadPoolExecutor(8) as threads:
            results = list(
                threads.map(lambda i: sb.run(f"return await t.record({{ i: {i} }})"), range(24))
            )
    assert [r.value for r in results] == list(range(24))
    assert sorted(seen) == list(range(24))


def test_tasks_share_a_sandbox_and_async_tools_run_on_their_loop():
    async def main():
        loop = asyncio.get_running_loop()
        loops = []

        async def ping(input):
            loops.append(asyncio.get_running_loop())
            await asyncio.sleep(0.005)
            return input["i"] * 2

        async with execbox.Sandbox({"t": {"ping": ping}}, pool=2) as sb:
            results = await asyncio.gather(
                *(sb.run_async(f"return await t.ping({{ i: {i} }})") for i in range(20))
            )
        assert [r.value for r in results] == [i * 2 for i in range(20)]
        assert loops and all(seen is loop for seen in loops)

    asyncio.run(main())


def test_a_closed_sandbox_refuses_to_run_and_stops_its_runners(tools):
    others = set(child_pids())
    sb = execbox.Sandbox(tools, pool=2)
    assert sb.run("1 + 1").value == 2
    before = set(child_pids()) - others
    assert len(before) == 2
    sb.close()
    assert sb.closed
    with pytest.raises(RuntimeError, match="this Sandbox is closed"):
        sb.run("1")
    for _ in range(100):
        if not (set(child_pids()) & before):
            break
        threading.Event().wait(0.02)
    assert not (set(child_pids()) & before)


def _status(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
    except FileNotFoundError:
        return None  # gone meanwhile


def test_the_runners_are_locked_down_by_the_os():
    others = set(child_pids())
    with execbox.Sandbox(pool=1) as sb:
        assert sb.run("1").ok
        pids = set(child_pids()) - others
        assert pids
        # Other tests' pools may be starting runners now: each must be locked down within
        # moments of its start (before it reads anything).
        deadline = time.monotonic() + 5
        while True:
            statuses = {pid: _status(pid) for pid in pids}
            unlocked = {
                pid
                for pid, status in statuses.items()
                if status is not None
                and (status["Seccomp"].strip() != "2" or status["NoNewPrivs"].strip() != "1")
            }
            if not unlocked or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert not unlocked, {pid: statuses[pid] for pid in unlocked}


def test_the_sandbox_gives_its_declarations_and_prompt(tools):
    with execbox.Sandbox(tools, timeout_ms=1500) as sb:
        assert "function add" in sb.types()
        assert "Time: 1.5 s" in sb.prompt() or "1500" in sb.prompt()


def test_a_pool_size_must_be_sensible():
    with pytest.raises(ValueError, match="pool must be a whole number"):
        execbox.Sandbox(pool=0)
