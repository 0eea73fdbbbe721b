"""Hostile programs end with an error; the Python process stays as it was."""

from __future__ import annotations

import asyncio
import resource

import execbox


def _rss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def test_an_endless_loop_times_out_and_the_next_run_is_fine():
    result = execbox.run("while (true) {}", timeout_ms=300)
    assert result.error.code == "timeout"
    assert "timed out after 300 ms" in result.error.message
    assert execbox.run("1 + 1").value == 2


def test_a_memory_bomb_hits_the_limit_in_the_runner_not_in_python():
    before = _rss_kib()
    result = execbox.run(
        "const a = []; while (true) a.push('x'.repeat(1 << 16));",
        memory_limit_bytes=32 << 20,
    )
    assert result.error.code == "memory_limit"
    assert _rss_kib() - before < 16 << 10
    assert execbox.run("1 + 1").value == 2


def test_unbounded_recursion_is_an_error():
    result = execbox.run("function f() { return f() + 1 } f()")
    assert not result.ok
    assert result.error.code in ("runtime_error", "memory_limit")


def test_a_flood_of_logs_is_cut_by_the_limits():
    result = execbox.run("while (true) console.log('x'.repeat(1000))", timeout_ms=300)
    assert result.error.code == "timeout"
    assert len(result.logs) <= 101


def test_a_program_cannot_reach_python_or_the_host():
    result = execbox.run(
        "return [typeof require, typeof process, typeof fetch, typeof globalThis.os, typeof Deno]"
    )
    assert result.value == ["undefined"] * 5


def test_a_tool_that_never_answers_is_bounded_by_the_time_limit():
    import threading

    release = threading.Event()

    def stuck(input):
        release.wait(5)
        return 1

    try:
        result = execbox.run("await t.stuck()", {"t": {"stuck": stuck}}, timeout_ms=300)
        assert result.error.code == "timeout"
        assert "t.stuck" in result.error.message
    finally:
        release.set()


def test_system_exit_in_a_tool_is_the_programs_answer_not_the_end_of_the_loop():
    async def quits(input):
        raise SystemExit(3)

    async def fine(input):
        return "fine"

    tools = {"t": {"quits": quits, "fine": fine}}
    caught = execbox.run("try { await t.quits() } catch (e) { return e.code }", tools)
    assert caught.value == "tool_error"
    assert execbox.run("return await t.fine()", tools, timeout_ms=2000).value == "fine"

    async def main():
        return await execbox.run_async("try { await t.quits() } catch (e) { return e.code }", tools)

    assert asyncio.run(main()).value == "tool_error"


def test_a_tool_that_cancels_itself_is_a_tool_error_not_a_timeout():
    async def gives_up(input):
        raise asyncio.CancelledError()

    result = execbox.run(
        "try { await t.gives_up() } catch (e) { return [e.code, e.message] }", {"t": {"gives_up": gives_up}}
    )
    assert result.value[0] == "tool_error"
    assert "t.gives_up was cancelled" in result.value[1]


def test_a_result_nested_deeper_than_python_reads_is_a_serialization_error_not_an_exception():
    def deep(depth):
        if depth == 0:
            return execbox.run("let v = {}; for (let i = 0; i < 990; i++) v = { a: v }; return v")
        return deep(depth - 1)

    result = deep(200)
    assert not result.ok
    assert result.error.code == "serialization_error"
    assert "nested too deeply" in result.error.message


def test_the_runner_inherits_none_of_the_hosts_secrets(monkeypatch):
    from conftest import child_pids

    monkeypatch.setenv("EXECBOX_TEST_SECRET", "sk-very-secret")
    others = set(child_pids())
    with execbox.Sandbox(pool=1) as sb:
        assert sb.run("1").ok
        for pid in set(child_pids()) - others:
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    environ = f.read()
            except (FileNotFoundError, PermissionError):
                continue
            assert b"sk-very-secret" not in environ


def test_sync_calls_left_running_by_ended_executions_are_bounded_with_a_clear_error():
    import threading

    release = threading.Event()
    started = []

    def stuck(input):
        started.append(1)
        release.wait(30)
        return 1

    tools = {"t": {"stuck": stuck}}
    try:
        # Each hostile execution leaves 16 calls running (the host's concurrency per
        # execution) when its time is up; Python threads cannot be stopped.
        program = "for (let i = 0; i < 64; i++) t.stuck(); await t.stuck()"
        for _ in range(16):
            assert execbox.run(program, tools, timeout_ms=100).error.code == "timeout"
        while len(started) < 256:
            threading.Event().wait(0.01)
        refused = execbox.run("try { await t.stuck() } catch (e) { return e.message }", tools)
        assert "calls of sync Python tools are running in this process" in refused.value
    finally:
        release.set()
    for _ in range(200):
        if execbox.run("return await t.stuck()", tools).value == 1:
            break
        threading.Event().wait(0.02)
    assert execbox.run("return await t.stuck()", tools).value == 1
