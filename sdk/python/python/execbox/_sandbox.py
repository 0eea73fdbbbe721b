"""Executions: ``Sandbox`` (warm runners, fixed tools), ``run`` / ``run_async``, ``types``."""

from __future__ import annotations

import asyncio
import atexit
import os
import sys
import threading
import warnings
from typing import Any, Optional, Tuple

from execbox import _native
from execbox._code_tool import CodeTool, check_name, input_schema
from execbox._policy import Policy
from execbox._result import MAX_ANSWER_CHARS, Result, _result, check_max_chars
from execbox._tools import JsonDefault, Tools, native_tools

# A runner process is this interpreter, isolated (-I: no environment variables, no user site,
# no current folder on the path) and without `site` (-S), loading the extension module by its
# path and serving one session on stdin/stdout under the OS lockdown.
_BOOT = (
    "import sys, importlib.util as u; "
    "s = u.spec_from_file_location('execbox._native', sys.argv[1]); "
    "m = u.module_from_spec(s); s.loader.exec_module(m); m.serve_runner()"
)

# Limits travel as JSON numbers, exact up to 2**53.
_MAX_LIMIT = 2**53

Limits = Tuple[Optional[int], Optional[int], Optional[int], Optional[int]]


def _runner_argv() -> list:
    """How a runner is started: ``EXECBOX_RUNNER`` (an ``execbox-runner`` binary), else this
    interpreter serving the runner from the extension module."""
    override = os.environ.get("EXECBOX_RUNNER")
    if override:
        return [override]
    if not sys.executable:
        raise RuntimeError(
            "execbox cannot start its runner: this Python has no sys.executable; "
            "set EXECBOX_RUNNER to an execbox-runner binary"
        )
    return [sys.executable, "-I", "-S", "-c", _BOOT, _native.__file__]


def _limits(
    timeout_ms: Optional[int],
    memory_limit_bytes: Optional[int],
    max_log_lines: Optional[int],
    max_log_chars: Optional[int],
) -> Limits:
    given = (
        ("timeout_ms", timeout_ms),
        ("memory_limit_bytes", memory_limit_bytes),
        ("max_log_lines", max_log_lines),
        ("max_log_chars", max_log_chars),
    )
    for name, value in given:
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, not {type(value).__name__}")
        if not 0 < value <= _MAX_LIMIT:
            raise ValueError(f"{name} must be a positive whole number, not {value}")
    return (timeout_ms, memory_limit_bytes, max_log_lines, max_log_chars)


def _merge(defaults: Limits, given: Limits) -> Limits:
    return tuple(g if g is not None else d for d, g in zip(defaults, given))  # type: ignore[return-value]


def _check_code(code: Any) -> str:
    if not isinstance(code, str):
        raise TypeError(f"code must be a str (the program's source), not {type(code).__name__}")
    return code


# Before the interpreter finalizes, execbox's own threads stop entering Python (a thread that
# takes the GIL during finalization would abort the process).
atexit.register(_native.shutdown)

_lock = threading.Lock()
_background: Optional[Tuple[int, asyncio.AbstractEventLoop, threading.Thread]] = None
_default: Optional[Tuple[int, Any]] = None


def _background_loop() -> asyncio.AbstractEventLoop:
    """The loop async tools of blocking ``run`` calls run on: one per process, on a daemon
    thread, so that tools share their clients and connections between calls."""
    global _background
    with _lock:
        if (
            _background is None
            or _background[0] != os.getpid()
            or not _background[2].is_alive()
        ):
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="execbox-tools", daemon=True)
            thread.start()
            _background = (os.getpid(), loop, thread)
        return _background[1]


def _default_pool() -> Any:
    """The runners of ``execbox.run``: started on demand, two kept warm between calls, and
    never waited for (a call that finds none free starts another)."""
    global _default
    with _lock:
        if _default is None or _default[0] != os.getpid():
            _default = (os.getpid(), _native.NativePool(_runner_argv(), 2, False, True))
        return _default[1]


def _in_running_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _native_policy(policy: Optional[Policy]) -> Any:
    if policy is None:
        return None
    if not isinstance(policy, Policy):
        raise TypeError(f"policy must be an execbox.Policy, not {type(policy).__name__}")
    return policy._native


def _run(
    pool: Any, tools: Any, has_async: bool, code: str, limits: Limits, policy: Optional[Policy]
) -> Result:
    if _in_running_loop():
        warnings.warn(
            "execbox.run blocks the event loop running in this thread until the program ends; "
            "use `await execbox.run_async(...)` (or Sandbox.run_async) instead",
            RuntimeWarning,
            stacklevel=3,
        )
    event_loop = _background_loop() if has_async else None
    guard = _native_policy(policy)
    return _result(pool.run(tools, code, *limits, event_loop=event_loop, policy=guard))


async def _run_async(
    pool: Any, tools: Any, code: str, limits: Limits, policy: Optional[Policy]
) -> Result:
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def deliver(raw: tuple) -> None:
        try:
            loop.call_soon_threadsafe(_settle, future, raw)
        except RuntimeError:
            pass  # the loop has closed: nobody is waiting for this result any more

    guard = _native_policy(policy)
    running = pool.start(tools, code, deliver, *limits, event_loop=loop, policy=guard)
    try:
        raw = await future
    except asyncio.CancelledError:
        running.cancel()
        raise
    return _result(raw)


def _settle(future: "asyncio.Future[tuple]", raw: tuple) -> None:
    if not future.done():
        future.set_result(raw)


def run(
    code: str,
    tools: Optional[Tools] = None,
    *,
    timeout_ms: Optional[int] = None,
    memory_limit_bytes: Optional[int] = None,
    max_log_lines: Optional[int] = None,
    max_log_chars: Optional[int] = None,
    tool_tracebacks: bool = False,
    policy: Optional[Policy] = None,
    json_default: Optional[JsonDefault] = None,
) -> Result:
    """Runs ``code`` (the body of an async function: ``await`` tools, ``return`` a value) in a
    locked-down runner, with ``tools`` as global namespaces, and returns its ``Result``.

    Limits default to 5 s, 64 MiB, 100 log lines and 64,000 log characters. Ctrl-C cancels the
    execution and raises ``KeyboardInterrupt``. With ``tool_tracebacks``, a tool's exception
    reaches the program with its Python traceback (by default, only its message does). With
    a ``policy``, every tool call is checked against it (permissions, rate limits, approvals)
    and audited. A tool's result may hold what database rows carry (``datetime``, ``Decimal``,
    ``UUID``, enums, sets, dataclasses, pydantic models); ``json_default`` converts the rest.
    """
    limits = _limits(timeout_ms, memory_limit_bytes, max_log_lines, max_log_chars)
    native, has_async = native_tools(tools, tool_tracebacks, json_default)
    return _run(_default_pool(), native, has_async, _check_code(code), limits, policy)


async def run_async(
    code: str,
    tools: Optional[Tools] = None,
    *,
    timeout_ms: Optional[int] = None,
    memory_limit_bytes: Optional[int] = None,
    max_log_lines: Optional[int] = None,
    max_log_chars: Optional[int] = None,
    tool_tracebacks: bool = False,
    policy: Optional[Policy] = None,
    json_default: Optional[JsonDefault] = None,
) -> Result:
    """``run`` for asyncio: async tools run on the caller's event loop, sync ones on threads;
    cancelling the task cancels the execution."""
    limits = _limits(timeout_ms, memory_limit_bytes, max_log_lines, max_log_chars)
    native, _ = native_tools(tools, tool_tracebacks, json_default)
    return await _run_async(_default_pool(), native, _check_code(code), limits, policy)


def types(tools: Optional[Tools] = None) -> str:
    """The TypeScript declarations of ``tools``, as a program sees them."""
    native, _ = native_tools(tools, False)
    return _native.declarations(native)


def prompt(
    tools: Optional[Tools] = None,
    *,
    timeout_ms: Optional[int] = None,
    memory_limit_bytes: Optional[int] = None,
    max_log_lines: Optional[int] = None,
    max_log_chars: Optional[int] = None,
) -> str:
    """What a model should be told to write a program for this sandbox: how a program runs,
    the declarations of ``tools``, and the limits (Markdown)."""
    limits = _limits(timeout_ms, memory_limit_bytes, max_log_lines, max_log_chars)
    native, _ = native_tools(tools, False)
    return _native.prompt(native, *limits)


class Sandbox:
    """Warm runner processes and a fixed set of tools, for many executions.

    ``pool`` runners are started at once and reused after clean executions (a runner whose
    execution failed is replaced, so nothing carries over). Safe to use from several threads
    and tasks at once; more than ``pool`` executions at once wait for a runner, and the wait
    counts against their time limit. Limits given here are the defaults of every ``run``; a
    ``policy`` guards every tool call of every run.
    Close it (or use it as a context manager) to stop the runners.
    """

    def __init__(
        self,
        tools: Optional[Tools] = None,
        *,
        pool: int = 4,
        timeout_ms: Optional[int] = None,
        memory_limit_bytes: Optional[int] = None,
        max_log_lines: Optional[int] = None,
        max_log_chars: Optional[int] = None,
        tool_tracebacks: bool = False,
        policy: Optional[Policy] = None,
        json_default: Optional[JsonDefault] = None,
    ) -> None:
        _native_policy(policy)
        self._policy = policy
        if isinstance(pool, bool) or not isinstance(pool, int) or not 1 <= pool <= 1024:
            raise ValueError(f"pool must be a whole number from 1 to 1024, not {pool!r}")
        self._limits = _limits(timeout_ms, memory_limit_bytes, max_log_lines, max_log_chars)
        self._tools, self._has_async = native_tools(tools, tool_tracebacks, json_default)
        self._pool = _native.NativePool(_runner_argv(), pool, True, False)

    def run(
        self,
        code: str,
        *,
        timeout_ms: Optional[int] = None,
        memory_limit_bytes: Optional[int] = None,
        max_log_lines: Optional[int] = None,
        max_log_chars: Optional[int] = None,
    ) -> Result:
        """Runs ``code`` on a warm runner; see ``execbox.run``."""
        given = _limits(timeout_ms, memory_limit_bytes, max_log_lines, max_log_chars)
        limits = _merge(self._limits, given)
        return _run(
            self._pool, self._tools, self._has_async, _check_code(code), limits, self._policy
        )

    async def run_async(
        self,
        code: str,
        *,
        timeout_ms: Optional[int] = None,
        memory_limit_bytes: Optional[int] = None,
        max_log_lines: Optional[int] = None,
        max_log_chars: Optional[int] = None,
    ) -> Result:
        """Runs ``code`` on a warm runner; see ``execbox.run_async``."""
        given = _limits(timeout_ms, memory_limit_bytes, max_log_lines, max_log_chars)
        limits = _merge(self._limits, given)
        return await _run_async(self._pool, self._tools, _check_code(code), limits, self._policy)

    def types(self) -> str:
        """The TypeScript declarations of this sandbox's tools."""
        return _native.declarations(self._tools)

    def prompt(self) -> str:
        """What a model should be told to write a program for this sandbox (Markdown)."""
        return _native.prompt(self._tools, *self._limits)

    def tool(
        self, name: str = "execute_code", *, max_answer_chars: int = MAX_ANSWER_CHARS
    ) -> CodeTool:
        """This sandbox as one tool for a model: its ``description`` holds the rules of a
        program, the limits, the answer's shape and the declarations of the tools; its
        ``handler`` runs a program and returns ``Result.for_model(max_answer_chars)``. The
        adapters of ``execbox.integrations`` make it a tool of an agent framework."""
        check_name(name)
        check_max_chars(max_answer_chars, "max_answer_chars")
        description = _native.code_tool_description(self._tools, max_answer_chars, *self._limits)
        return CodeTool(
            name=name,
            description=description,
            input_schema=input_schema(),
            sandbox=self,
            max_answer_chars=max_answer_chars,
        )

    @property
    def closed(self) -> bool:
        """Whether ``close`` was called."""
        return self._pool.closed

    def close(self) -> None:
        """Stops the idle runners; executions in flight finish first. Later runs raise."""
        self._pool.close()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> "Sandbox":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<execbox.Sandbox {state}>"
