"""The arguments of a model's call of the code tool, checked the same way by every adapter.

A model can send anything: a call whose arguments are not ``{"code": "<program>"}`` gets an
answer in the shape of every other answer (``{"ok": false, "error": {...}}``) saying what was
wrong and what to send, never an exception that would end the agent's run.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from execbox._code_tool import CodeTool
from execbox._result import Error, Result
from execbox._sandbox import Sandbox


def code_tool_of(sandbox: Any, name: str, max_answer_chars: int, adapter: str) -> CodeTool:
    """``sandbox.tool(name, max_answer_chars=...)``, or a ``TypeError`` saying what ``adapter``
    takes."""
    if not isinstance(sandbox, Sandbox):
        raise TypeError(
            f"{adapter} takes an execbox.Sandbox (made with execbox.Sandbox(tools)), not "
            f"{type(sandbox).__name__}"
        )
    return sandbox.tool(name, max_answer_chars=max_answer_chars)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def problem(tool: CodeTool, arguments: Any) -> Optional[str]:
    """What is wrong with ``arguments`` (the parsed JSON of a call), or ``None``."""
    expected = f'{tool.name} takes {{"code": "<the program>"}}'
    if not isinstance(arguments, dict):
        return f"{expected}; got {_kind(arguments)}: send an object with the program in \"code\""
    extra = sorted(str(key) for key in arguments if key != "code")
    listed = ", ".join(json.dumps(key) for key in extra)
    if "code" not in arguments:
        had = f" (the call had {listed})" if extra else ""
        return f'{expected}; "code" is missing{had}: send the program as a string in "code"'
    code = arguments["code"]
    if not isinstance(code, str):
        return f'{expected}; "code" is {_kind(code)}: send the program\'s source as a string'
    if extra:
        return f"{expected} and nothing else; remove {listed} and send the program alone"
    return None


def refusal(tool: CodeTool, message: str) -> str:
    """The answer for a call that ran nothing: ``validation_error`` with ``message``."""
    error = Error(code="validation_error", message=message, text=message)
    result = Result(ok=False, value=None, error=error, logs=[], duration_ms=0)
    return result.for_model(tool.max_answer_chars)


async def answer_async(tool: CodeTool, arguments: Any) -> str:
    """Runs the program in ``arguments`` and returns the answer for the model."""
    wrong = problem(tool, arguments)
    if wrong is not None:
        return refusal(tool, wrong)
    return await tool.handler_async(arguments["code"])


def answer(tool: CodeTool, arguments: Any) -> str:
    """``answer_async`` for callers without an event loop (it blocks)."""
    wrong = problem(tool, arguments)
    if wrong is not None:
        return refusal(tool, wrong)
    return tool.handler(arguments["code"])


async def answer_json_async(tool: CodeTool, text: str) -> str:
    """``answer_async`` for arguments sent as JSON text: text that is not JSON gets an answer
    saying so."""
    try:
        arguments = json.loads(text or "{}")
    except ValueError as error:
        return refusal(
            tool,
            f"the arguments of {tool.name} are not valid JSON ({error}); send "
            '{"code": "<the program>"}, with the program as one JSON string',
        )
    return await answer_async(tool, arguments)
