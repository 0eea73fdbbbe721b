"""``CodeTool``: a sandbox as one tool a model calls with a program, for any agent framework."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict

from execbox._result import MAX_ANSWER_CHARS

if TYPE_CHECKING:
    from execbox._sandbox import Sandbox

# What the model APIs accept as a function's name (OpenAI's rule, the strictest of them).
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

CODE_DESCRIPTION = (
    "The program: the body of an async function (top-level `await`; `return` the result)."
)


def input_schema() -> Dict[str, Any]:
    """The JSON schema of the tool's input, ``{code}``."""
    return {
        "type": "object",
        "properties": {"code": {"type": "string", "description": CODE_DESCRIPTION}},
        "required": ["code"],
        "additionalProperties": False,
    }


@dataclass(frozen=True)
class CodeTool:
    """A sandbox as one tool: what a model is shown (``name``, ``description``,
    ``input_schema``) and what runs its call (``handler`` / ``handler_async``, which take the
    program and return the answer for the model, ``Result.for_model``)."""

    name: str
    description: str
    input_schema: Dict[str, Any]
    sandbox: "Sandbox" = field(repr=False)
    max_answer_chars: int = MAX_ANSWER_CHARS

    def handler(self, code: str) -> str:
        """Runs ``code`` in the sandbox and returns the answer for the model."""
        return self.sandbox.run(_code(code)).for_model(self.max_answer_chars)

    async def handler_async(self, code: str) -> str:
        """``handler`` for asyncio (async tools run on the caller's loop)."""
        result = await self.sandbox.run_async(_code(code))
        return result.for_model(self.max_answer_chars)


def _code(code: Any) -> str:
    # A model can send anything: say what was expected in the answer it reads, not a TypeError.
    if not isinstance(code, str):
        raise ValueError(f"code must be a string holding the program, not {type(code).__name__}")
    return code


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(
            "name must be 1 to 64 letters, digits, '_' or '-' (what model APIs accept as a "
            f"tool's name), not {name!r}"
        )
    return name
