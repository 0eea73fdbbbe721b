"""A sandbox as a tool of a Pydantic AI agent.

    from execbox.integrations.pydantic_ai import Sandbox, code_tool
    sandbox = Sandbox({"shop": {"price": price}})
    agent = Agent("openai:gpt-5", tools=[code_tool(sandbox)])
"""

from __future__ import annotations

from typing import Any

from execbox._result import MAX_ANSWER_CHARS
from execbox._sandbox import Sandbox
from execbox.integrations._arguments import answer_async, code_tool_of

try:
    from pydantic_ai import Tool
    from pydantic_core import SchemaValidator, core_schema
except ImportError as error:  # pragma: no cover - what a plain install sees
    raise ImportError(
        f"execbox.integrations.pydantic_ai needs Pydantic AI, which could not be imported "
        f'({error}): pip install "execbox[pydantic-ai]"'
    ) from error

__all__ = ["Sandbox", "code_tool"]


def code_tool(
    sandbox: Sandbox, *, name: str = "execute_code", max_answer_chars: int = MAX_ANSWER_CHARS
) -> "Tool[Any]":
    """``sandbox`` as one ``pydantic_ai.Tool``: the model sends ``{"code": "<program>"}``,
    the program runs in the sandbox (on the agent's event loop), and the model gets
    ``Result.for_model(max_answer_chars)``, a failed program's error with its line included.

    The tool's description is ``sandbox.tool().description`` (the rules of a program, the
    limits, the answer's shape and the TypeScript declarations of the sandbox's tools) and its
    JSON schema is ``{code: string}``, closed. Arguments that are not that get an answer saying
    what to send (``validation_error``), not an exception; arguments that are not a JSON object
    get Pydantic AI's own retry prompt.
    """
    tool = code_tool_of(
        sandbox, name, max_answer_chars, "execbox.integrations.pydantic_ai.code_tool"
    )

    async def execute_code(**arguments: Any) -> str:
        return await answer_async(tool, arguments)

    framework_tool = Tool.from_schema(
        execute_code,
        name=tool.name,
        description=tool.description,
        json_schema=tool.input_schema,
    )
    # `from_schema` accepts any JSON as the arguments, and a call whose arguments are not an
    # object would fail inside Pydantic AI (`**` of a list); insist on an object, as Pydantic
    # AI's MCP tools do, so such a call is sent back to the model to fix. `execute_code` checks
    # the rest (and answers in the shape of every answer).
    if hasattr(framework_tool.function_schema, "validator"):
        framework_tool.function_schema.validator = _OBJECT
    return framework_tool


_OBJECT = SchemaValidator(
    core_schema.dict_schema(core_schema.str_schema(), core_schema.any_schema())
)
