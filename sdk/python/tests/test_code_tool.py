"""``Result.for_model`` and ``Sandbox.tool()``: the answer a model reads and the tool it calls."""

from __future__ import annotations

import asyncio
import json

import pytest

import execbox
from conftest import add


def test_for_model_is_the_json_of_ok_result_and_logs() -> None:
    result = execbox.run('console.log("hi"); return { a: [1, "two"] }')
    assert result.for_model() == '{"ok":true,"result":{"a":[1,"two"]},"logs":["hi"]}'


def test_for_model_bounds_the_answer() -> None:
    result = execbox.run("return Array.from({ length: 200000 }, (_, i) => ({ id: i }))")
    assert len(result.value) == 200000
    text = result.for_model()
    assert text.startswith('{"ok":true,"result":[{"id":0}')
    marker = text[24000:]
    assert marker.startswith("\n… [cut: the answer has ")
    assert marker.endswith("the limit is 24000; return less, e.g. only the fields you need]")
    assert "the limit is 500;" in result.for_model(500)
    with pytest.raises(ValueError, match="max_chars must be a whole number of at least 1, not 0"):
        result.for_model(0)


def test_str_of_an_error_is_the_message_of_the_answer() -> None:
    result = execbox.run("const order = { lines: [] };\nreturn order.lines[0].sku")
    assert result.error is not None
    expected = (
        "TypeError: cannot read property 'sku' of undefined (line 2, column 8)\n"
        "  2 | return order.lines[0].sku\n"
        "    |        ^"
    )
    assert str(result.error) == expected
    assert json.loads(result.for_model())["error"] == {"code": "runtime_error", "message": expected}


def test_sandbox_tool_describes_the_sandbox_and_answers_for_the_model() -> None:
    with execbox.Sandbox({"math": {"add": add}}, pool=1) as sandbox:
        tool = sandbox.tool()
        assert isinstance(tool, execbox.CodeTool)
        assert tool.name == "execute_code"
        assert tool.description.startswith("Run a JavaScript program in a sandbox")
        assert "declare namespace math" in tool.description
        assert "Adds a and b." in tool.description
        assert "cut at 24000 characters" in tool.description
        assert tool.input_schema["required"] == ["code"]
        assert tool.input_schema["additionalProperties"] is False
        code = "return (await math.add({ a: 2, b: 3 })).sum"
        assert tool.handler(code) == '{"ok":true,"result":5,"logs":[]}'
        assert asyncio.run(tool.handler_async(code)) == '{"ok":true,"result":5,"logs":[]}'
        failed = json.loads(tool.handler("return y"))
        assert failed["ok"] is False
        assert failed["error"]["message"].startswith("ReferenceError: y is not defined")
        assert "(line 1, column 8)" in failed["error"]["message"]
        short = sandbox.tool("run_js", max_answer_chars=50)
        assert short.name == "run_js"
        assert "the limit is 50;" in short.handler('return "y".repeat(500)')
        with pytest.raises(ValueError, match="name must be 1 to 64 letters"):
            sandbox.tool("run code")
        with pytest.raises(ValueError, match="max_answer_chars must be a whole number"):
            sandbox.tool(max_answer_chars=0)
        with pytest.raises(ValueError, match="code must be a string holding the program, not int"):
            tool.handler(5)  # type: ignore[arg-type]
