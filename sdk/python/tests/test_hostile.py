"""Hostile programs end with an error; the Python process stays as it was."""

from __future__ import annotations

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
