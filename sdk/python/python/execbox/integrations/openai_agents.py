"""A sandbox as a tool of an OpenAI Agents SDK agent.

    from execbox.integrations.openai_agents import Sandbox, code_tool
    sandbox = Sandbox({"shop": {"price": price}})
    agent = Agent(name="shop", model="gpt-5", tools=[code_tool(sandbox)])
"""

from __future__ import annotations

from typing import Any

from execbox._result import MAX_ANSWER_CHARS
from execbox._sandbox import Sandbox
from execbox.integrations._arguments import answer_json_async, code_tool_of

try:
    from agents import FunctionTool
except ImportError as error:  # pragma: no cover - what a plain install sees
    raise ImportError(
        "execbox.integrations.openai_agents needs the OpenAI Agents SDK (the package "
        f"openai-agents), which could not be imported ({error}): "
        'pip install "execbox[openai-agents]"'
    ) from error

__all__ = ["Sandbox", "code_tool"]


def code_tool(
    sandbox: Sandbox, *, name: str = "execute_code", max_answer_chars: int = MAX_ANSWER_CHARS
) -> FunctionTool:
    """``sandbox`` as one ``agents.FunctionTool``: the model sends ``{"code": "<program>"}``,
    the program runs in the sandbox (on the runner's event loop), and the model gets
    ``Result.for_model(max_answer_chars)``, a failed program's error with its line included.

    The tool's description is ``sandbox.tool().description`` (the rules of a program, the
    limits, the answer's shape and the TypeScript declarations of the sandbox's tools); its
    parameters are ``{code: string}``, closed, so the schema is strict. Arguments that are not
    JSON, or not that object, get an answer saying what to send (``validation_error``), not an
    exception that would end the run.
    """
    tool = code_tool_of(
        sandbox, name, max_answer_chars, "execbox.integrations.openai_agents.code_tool"
    )

    async def on_invoke_tool(context: Any, arguments: str) -> str:
        return await answer_json_async(tool, arguments)

    return FunctionTool(
        name=tool.name,
        description=tool.description,
        params_json_schema=tool.input_schema,
        on_invoke_tool=on_invoke_tool,
        strict_json_schema=True,
    )
