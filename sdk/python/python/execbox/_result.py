"""What an execution gives back: ``Result``, its ``Error`` and the error's ``Location``."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, List, Optional

from . import _native

MAX_ANSWER_CHARS = 24_000
"""The default limit of ``Result.for_model``, as ``execbox mcp``'s ``execute_code``."""


def check_max_chars(value: Any, name: str) -> int:
    """``value`` when it is a limit of an answer's characters; else a ``ValueError`` naming
    ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a whole number of at least 1, not {value!r}")
    return value


@dataclass(frozen=True)
class Location:
    """Where in the program an error was thrown."""

    line: int
    """1-based line."""
    column: int
    """1-based column, in characters."""
    source: Optional[str] = None
    """The text of that line (a long line is shown as a window around the column)."""
    caret: Optional[int] = None
    """The 1-based character position in ``source`` the caret points at."""


@dataclass(frozen=True)
class Error:
    """Why an execution failed.

    ``code`` is one of ``timeout``, ``memory_limit``, ``validation_error``, ``tool_error``,
    ``runtime_error``, ``serialization_error``, ``internal_error``; ``str(error)`` is the
    error as a person or a model reads it (name, message, line and a caret).
    """

    code: str
    message: str
    name: Optional[str] = None
    """The JavaScript error's name (``TypeError``), when the program threw one."""
    reason: Optional[str] = None
    """Why a tool call was refused, when the host says (``rate_limited``, ...)."""
    retry_after_ms: Optional[int] = None
    """When a retry may succeed, for a rate-limited call."""
    location: Optional[Location] = None
    text: str = field(default="", repr=False)

    def __str__(self) -> str:
        return self.text or self.message


@dataclass(frozen=True)
class Result:
    """The outcome of one execution.

    ``ok`` is true when the program returned; then ``value`` is what it returned (``None``
    when it returned nothing) and ``error`` is ``None``. Otherwise ``error`` says why.
    ``logs`` are the program's console lines (and execbox's own notes, starting
    ``[execbox]``); ``duration_ms`` is how long the execution took.
    """

    ok: bool
    value: Any
    error: Optional[Error]
    logs: List[str]
    duration_ms: int
    _value_json: Optional[str] = field(default=None, repr=False, compare=False)

    def for_model(self, max_chars: int = MAX_ANSWER_CHARS) -> str:
        """The answer to hand a model: the JSON of ``{ok, result | error, logs}`` (an error
        with its name, line and caret), with long log lines cut first and then the whole text
        cut at ``max_chars`` with a marker saying so; execbox's own notes always follow. The
        same text ``execbox mcp``'s ``execute_code`` and the Node SDK's ``forModel`` give."""
        check_max_chars(max_chars, "max_chars")
        error = None if self.error is None else (self.error.code, str(self.error))
        return _native.model_answer(self._value_json, error, list(self.logs), max_chars)


def _result(raw: tuple) -> Result:
    ok, value, error, logs, duration_ms = raw
    if value is not None:
        try:
            value = json.loads(value)
        except RecursionError:
            # The runner passes values nested up to its own bound; Python's decoder counts
            # them against the caller's recursion limit.
            message = (
                "the program's result is nested too deeply for Python's json module to read "
                "(at this depth of the calling code); return a flatter value"
            )
            return Result(
                ok=False,
                value=None,
                error=Error(code="serialization_error", message=message, text=message),
                logs=logs,
                duration_ms=duration_ms,
            )
    return Result(
        ok=ok,
        value=value,
        error=None if error is None else _error(error),
        logs=logs,
        duration_ms=duration_ms,
        _value_json=raw[1],
    )


def _error(raw: tuple) -> Error:
    code, message, name, reason, retry_after_ms, location, text = raw
    return Error(
        code=code,
        message=message,
        name=name,
        reason=reason,
        retry_after_ms=retry_after_ms,
        location=None if location is None else Location(*location),
        text=text,
    )
