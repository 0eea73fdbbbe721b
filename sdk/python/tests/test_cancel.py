"""Cancellation: a cancelled run_async task, and Ctrl-C in a script using run."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time

import execbox


def test_a_cancelled_task_cancels_its_execution():
    started = []

    async def mark(input):
        started.append(time.monotonic())
        return 1

    async def main():
        task = asyncio.ensure_future(
            execbox.run_async("await t.mark(); while (true) {}", {"t": {"mark": mark}}, timeout_ms=30000)
        )
        while not started:
            await asyncio.sleep(0.01)
        task.cancel()
        t0 = time.monotonic()
        try:
            await task
        except asyncio.CancelledError:
            return time.monotonic() - t0
        raise AssertionError("the task was not cancelled")

    assert asyncio.run(main()) < 5
    # The sandbox's runner went with it: the next run gets a working one.
    assert execbox.run("1 + 1").value == 2


def test_wait_for_past_its_time_cancels_the_execution():
    async def main():
        with execbox.Sandbox(pool=1) as sb:
            try:
                await asyncio.wait_for(sb.run_async("while (true) {}", timeout_ms=30000), 0.3)
            except asyncio.TimeoutError:
                pass
            else:
                raise AssertionError("wait_for did not time out")
            return (await sb.run_async("return 7")).value

    assert asyncio.run(main()) == 7


def test_ctrl_c_in_a_script_cancels_the_execution():
    script = textwrap.dedent(
        """
        import signal, sys, time, execbox
        # Python installs its Ctrl-C handler only when SIGINT is not ignored at start, and a
        # shell ignores it for commands it starts in the background (`cmd &`), as CI may.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        def ready(input):
            print("running", flush=True)
            return 1
        try:
            execbox.run("await t.ready(); while (true) {}", {"t": {"ready": ready}}, timeout_ms=60000)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(0)
        print("not interrupted", flush=True)
        sys.exit(1)
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert child.stdout.readline().strip() == "running"
        time.sleep(0.1)
        t0 = time.monotonic()
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=20)
        assert child.returncode == 0, err
        assert "interrupted" in out
        assert time.monotonic() - t0 < 10
    finally:
        child.kill()
