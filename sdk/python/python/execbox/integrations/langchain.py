"""A sandbox as a LangChain tool (a ``StructuredTool``, for ``create_agent``, LangGraph's
``ToolNode`` or ``model.bind_tools``).

    from execbox.integrations.langchain import Sandbox, code_tool
    sandbox = Sandbox({"shop": {"price": price}})
    agent = create_agent("openai:gpt-5", tools=[code_tool(sandbox)])
"""

from __future__ import annotations

from typing import Any

from execbox._result import MAX_ANSWER_CHARS
from execbox._sandbox import Sandbox
from execbox.integrations._arguments import answer, answer_async, code_tool_of

try:
    from langchain_core.tools import StructuredTool
except ImportError as error:  # pragma: no cover - what a plain install sees
    raise ImportError(
        f"execbox.integrations.langchain needs LangChain (the package langchain-core), which "
        f'could not be imported ({error}): pip install "execbox[langchain]"'
    ) from error

__all__ = ["Sandbox", "code_tool"]


def code_tool(
    sandbox: Sandbox, *, name: str = "execute_code", max_answer_chars: int = MAX_ANSWER_CHARS
) -> StructuredTool:
    """``sandbox`` as one ``langchain_core.tools.StructuredTool``: the model sends
    ``{"code": "<program>"}``, the program runs in the sandbox, and the tool message is
    ``Result.for_model(max_answer_chars)``, a failed program's error with its line included.
    ``invoke`` runs the program blocking, ``ainvoke`` on the caller's event loop.

    The tool's description is ``sandbox.tool().description`` (the rules of a program, the
    limits, the answer's shape and the TypeScript declarations of the sandbox's tools) and its
    ``args_schema`` is the JSON schema ``{code: string}``, closed. Arguments that are not that
    get an answer saying what to send (``validation_error``), not an exception.
    """
    tool = code_tool_of(
        sandbox, name, max_answer_chars, "execbox.integrations.langchain.code_tool"
    )

    def execute_code(**arguments: Any) -> str:
        return answer(tool, arguments)

    async def execute_code_async(**arguments: Any) -> str:
        return await answer_async(tool, arguments)

    return StructuredTool.from_function(
        func=execute_code,
        coroutine=execute_code_async,
        name=tool.name,
        description=tool.description,
        args_schema=tool.input_schema,
    )
