"""Tools written in Python: ``Tool``, ``ToolError``, and their adapters for the native side.

Every tool is wrapped in an adapter that takes the input as JSON text and returns
``(status, text, reason, retry_after_ms)``: ``("ok", result_json, None, None)``, or
``("tool_error" | "serialization_error", message, reason, retry_after_ms)``. All of Python's
semantics (exceptions, JSON) stay here; the extension module only moves text.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import decimal
import enum
import functools
import inspect
import json
import math
import traceback
import uuid
from typing import Any, Awaitable, Callable, List, Mapping, Optional, Tuple, Union

from execbox import _native
from execbox._openapi import OpenAPI

ToolFunction = Callable[[Any], Union[Any, Awaitable[Any]]]
"""A tool: called with the input (a dict, or ``None`` when the program passed nothing),
returns a JSON value (dict, list, str, int, float, bool or None), or a coroutine of one.
What database rows carry converts too (see ``JsonDefault``)."""

JsonDefault = Callable[[Any], Any]
"""Converts a value of a tool's result that JSON cannot hold to one it can (``json_default=``
of ``run``, ``run_async`` and ``Sandbox``), or raises ``TypeError``. Asked only for what execbox
does not convert itself: ``datetime``, ``date`` and ``time`` (ISO 8601 text), ``Decimal`` (a
number; precision past a float's is lost), ``UUID`` (text), enums (their value), sets and
frozensets (arrays), dataclasses (objects of their fields) and pydantic models
(``model_dump(mode="json")``). Tuples are arrays already."""

Answer = Tuple[str, str, Optional[str], Optional[int]]


class ToolError(Exception):
    """Raise it from a tool to fail the call with this message, and optionally say why
    (``reason``, a short word a program can test) and when a retry may succeed.

    The program's ``await`` rejects with an ``Error`` whose ``code`` is ``"tool_error"``,
    ``message`` this message, and ``reason`` / ``retryAfterMs`` these values.
    """

    def __init__(
        self,
        message: str,
        *,
        reason: Optional[str] = None,
        retry_after_ms: Optional[int] = None,
    ) -> None:
        if not isinstance(message, str):
            raise TypeError(f"ToolError(message) must be a str, not {type(message).__name__}")
        if reason is not None and not isinstance(reason, str):
            raise TypeError(f"ToolError(reason=...) must be a str, not {type(reason).__name__}")
        if retry_after_ms is not None and (
            isinstance(retry_after_ms, bool)
            or not isinstance(retry_after_ms, int)
            or not 0 <= retry_after_ms <= 2**53
        ):
            raise ValueError(
                f"ToolError(retry_after_ms=...) must be a whole number of milliseconds, not {retry_after_ms!r}"
            )
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.retry_after_ms = retry_after_ms


class Tool:
    """A tool with its description and JSON Schemas.

    The description (by default the function's docstring) and the schemas go into the
    TypeScript declarations a model is shown (``execbox.types``). Input that fails
    ``input_schema`` is refused with ``validation_error`` without calling ``fn``; a result
    that fails ``output_schema`` fails the call the same way.

    With a ``Policy``, ``permissions`` are what a principal must hold to call it,
    ``rate_limit`` (``"100 per 1h"``, ``"3/1m"``) bounds its calls, and ``requires_approval``
    asks the policy's approver before each call. Without a policy, a tool with a rate limit or
    an approval is refused rather than run unguarded.
    """

    __slots__ = (
        "fn",
        "description",
        "input_schema",
        "output_schema",
        "permissions",
        "rate_limit",
        "requires_approval",
    )

    def __init__(
        self,
        fn: ToolFunction,
        description: Optional[str] = None,
        input_schema: Optional[Mapping[str, Any]] = None,
        output_schema: Optional[Mapping[str, Any]] = None,
        *,
        permissions: Optional[List[str]] = None,
        rate_limit: Optional[str] = None,
        requires_approval: bool = False,
    ) -> None:
        if not callable(fn):
            raise TypeError(f"Tool(fn=...) must be a callable, not {type(fn).__name__}")
        if permissions is not None and (
            isinstance(permissions, str) or not all(isinstance(p, str) for p in permissions)
        ):
            raise TypeError("Tool(permissions=...) must be a list of str")
        if description is not None and not isinstance(description, str):
            raise TypeError(f"Tool(description=...) must be a str, not {type(description).__name__}")
        if rate_limit is not None and not isinstance(rate_limit, str):
            raise TypeError('Tool(rate_limit=...) must be a str such as "100 per 1h"')
        self.fn = fn
        self.description = description
        self.input_schema = input_schema
        self.output_schema = output_schema
        self.permissions = list(permissions or [])
        self.rate_limit = rate_limit
        self.requires_approval = bool(requires_approval)

    def __repr__(self) -> str:
        return f"Tool({getattr(self.fn, '__qualname__', self.fn)!r})"


Tools = Mapping[str, Union[Mapping[str, Union[ToolFunction, Tool]], OpenAPI]]
"""Namespace → tool name → a callable or a ``Tool``: ``{"math": {"add": add}}`` gives the
program ``await math.add({...})``. A namespace may instead be an ``execbox.OpenAPI``: the
operations of an OpenAPI document (``{"github": execbox.OpenAPI("github.json")}``)."""


def native_tools(
    tools: Optional[Tools], tracebacks: bool, json_default: Optional[JsonDefault] = None
) -> Tuple[Any, bool]:
    """The tools resolved by the host core, and whether any is async."""
    if json_default is not None and not callable(json_default):
        raise TypeError(
            "json_default must be a callable (value -> JSON value), "
            f"not {type(json_default).__name__}"
        )
    default = _json_default(json_default)
    specs: List[tuple] = []
    apis: List[Tuple[str, Any]] = []
    has_async = False
    if tools is None:
        tools = {}
    if not isinstance(tools, Mapping):
        raise TypeError(
            "tools must be a dict of namespace → dict of tool name → callable, "
            f"not {type(tools).__name__}"
        )
    for namespace, entries in tools.items():
        if not isinstance(namespace, str):
            raise TypeError(f"tools: namespace {namespace!r} must be a str")
        if isinstance(entries, OpenAPI):
            apis.append((namespace, entries._native))
            continue
        if not isinstance(entries, Mapping):
            raise TypeError(
                f"tools[{namespace!r}] must be a dict of tool name → callable, or an "
                f"execbox.OpenAPI, not {type(entries).__name__}"
            )
        for name, entry in entries.items():
            where = f"tools[{namespace!r}][{name!r}]"
            if not isinstance(name, str):
                raise TypeError(f"{where}: the tool name must be a str")
            tool = entry if isinstance(entry, Tool) else None
            fn = tool.fn if tool is not None else entry
            if not callable(fn):
                raise TypeError(
                    f"{where} must be a callable or an execbox.Tool, not {type(fn).__name__}"
                )
            is_async = _is_async(fn)
            has_async = has_async or is_async
            description = tool.description if tool is not None else None
            if description is None:
                description = _docstring(fn)
            label = f"{namespace}.{name}"
            specs.append(
                (
                    (
                        namespace,
                        name,
                        _adapter(label, fn, is_async, tracebacks, default),
                        is_async,
                        description,
                        _schema(where, "input_schema", tool.input_schema if tool else None),
                        _schema(where, "output_schema", tool.output_schema if tool else None),
                    ),
                    (
                        tool.permissions if tool else [],
                        tool.rate_limit if tool else None,
                        tool.requires_approval if tool else False,
                    ),
                )
            )
    return _native.NativeTools(specs, apis), has_async


def _is_async(fn: Any) -> bool:
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)
    return call is not None and inspect.iscoroutinefunction(call)


def _docstring(fn: Any) -> Optional[str]:
    if isinstance(fn, functools.partial):
        fn = fn.func
    doc = inspect.getdoc(fn) if inspect.isfunction(fn) or inspect.ismethod(fn) else None
    return doc or None


def _schema(where: str, field: str, schema: Any) -> Optional[str]:
    if schema is None:
        return None
    if not isinstance(schema, (Mapping, bool)):
        raise TypeError(f"{where}.{field} must be a JSON Schema (a dict), not {type(schema).__name__}")
    try:
        return json.dumps(schema, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{where}.{field} is not JSON: {e}") from None


def _adapter(
    label: str, fn: Any, is_async: bool, tracebacks: bool, default: Callable[[Any], Any]
) -> Callable[[str], Any]:
    loads = json.loads

    if is_async:

        async def call_async(text: str) -> Answer:
            try:
                out = await fn(loads(text))
            except asyncio.CancelledError:
                raise
            except BaseException as e:  # noqa: BLE001 - even SystemExit: the program's answer,
                # never the end of the event loop (or of the application) it runs on
                return _failure(e, tracebacks)
            return _encode(label, out, default)

        return call_async

    def call(text: str) -> Answer:
        try:
            out = fn(loads(text))
            if inspect.iscoroutine(out):
                # A sync-looking callable that returned a coroutine (a decorator that hid
                # `async def`): it runs to its end on a loop of its own, on this thread.
                out = asyncio.run(out)
        except BaseException as e:  # noqa: BLE001 - every failure of a tool is the program's answer
            return _failure(e, tracebacks)
        return _encode(label, out, default)

    return call


class _Unconvertible(TypeError):
    """A value neither execbox nor the ``json_default`` hook converts: its type, for the message."""

    def __init__(self, value: Any, hooked: bool) -> None:
        kind = type(value)
        qualified = f"{kind.__module__}.{kind.__qualname__}"
        self.type_name = kind.__qualname__ if kind.__module__ == "builtins" else qualified
        self.hooked = hooked
        super().__init__(self.type_name)


def _json_default(hook: Optional[JsonDefault]) -> Callable[[Any], Any]:
    """``json.dumps``'s ``default``: what rows carry, then the hook, else ``_Unconvertible``."""

    def default(value: Any) -> Any:
        if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
            return value.isoformat()
        if isinstance(value, decimal.Decimal):
            if not value.is_finite():
                raise ValueError(f"Decimal {value} is not a JSON number")
            whole = value == value.to_integral_value() and abs(value) < 2**53
            return int(value) if whole else float(value)
        if isinstance(value, uuid.UUID):
            return str(value)
        if isinstance(value, enum.Enum):
            return value.value
        if isinstance(value, (set, frozenset)):
            try:
                return sorted(value)
            except TypeError:
                return list(value)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        dump = getattr(value, "model_dump", None)
        if callable(dump) and hasattr(type(value), "model_fields"):
            return dump(mode="json")
        if hook is not None:
            converted = hook(value)
            if converted is value:
                raise _Unconvertible(value, True)
            return converted
        raise _Unconvertible(value, False)

    return default


def _encode(label: str, out: Any, default: Callable[[Any], Any]) -> Answer:
    try:
        text = json.dumps(out, allow_nan=False, separators=(",", ":"), default=default)
        return ("ok", text, None, None)
    except _Unconvertible as e:
        if e.hooked:
            what = f"the json_default hook returned the {e.type_name} unchanged"
        else:
            what = (
                "convert it in the tool, or give run(), run_async() or Sandbox() a "
                "json_default= function that turns it into a JSON value"
            )
        message = f"{label} returned a {e.type_name}, which JSON cannot hold: {what}"
        return ("serialization_error", message, None, None)
    except (TypeError, ValueError, RecursionError) as e:
        return ("serialization_error", f"{label} returned a value JSON cannot hold: {e}", None, None)


def _failure(e: BaseException, tracebacks: bool) -> Answer:
    if isinstance(e, ToolError):
        return ("tool_error", e.message, e.reason, e.retry_after_ms)
    message = str(e) or type(e).__name__
    if tracebacks:
        message += "\n" + "".join(traceback.format_exception(type(e), e, e.__traceback__))
    return ("tool_error", message, None, None)


