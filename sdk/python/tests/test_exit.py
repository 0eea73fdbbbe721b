"""The interpreter exits cleanly while execbox's threads are busy (no abort, no hang).

CPython ends a thread that takes the GIL during finalization with `pthread_exit`, which
aborts a process whose thread is in Rust code: each script runs a few times, since the race
it guards against is a matter of timing.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

RESULT_ARRIVING_AT_EXIT = """
import asyncio, execbox
async def echo(i):
    return i
async def main():
    async with execbox.Sandbox({"t": {"echo": echo}}, pool=1) as sb:
        print((await sb.run_async("await t.echo({ n: 1 })")).value)
asyncio.run(main())
"""

DAEMON_THREADS_RUNNING_AT_EXIT = """
import threading, time, execbox
def slow(i):
    time.sleep(0.02)
    return i
def forever():
    while True:
        execbox.run("await t.slow({})", {"t": {"slow": slow}})
for _ in range(3):
    threading.Thread(target=forever, daemon=True).start()
time.sleep(0.3)
print("done")
"""


@pytest.mark.parametrize("script", [RESULT_ARRIVING_AT_EXIT, DAEMON_THREADS_RUNNING_AT_EXIT])
def test_the_interpreter_exits_cleanly_while_execbox_is_busy(script):
    for _ in range(4):
        child = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(script)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert child.returncode == 0, (child.returncode, child.stderr)


def test_a_run_after_execbox_has_shut_down_raises_instead_of_hanging():
    script = """
import atexit

def late():
    try:
        execbox.run("return 1")
    except RuntimeError as e:
        print("refused:", e)

atexit.register(late)   # before execbox's own hook, so it runs after it
import execbox
print(execbox.run("return 1").value)
"""
    child = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=60
    )
    assert child.returncode == 0, child.stderr
    assert "refused: execbox has shut down" in child.stdout
