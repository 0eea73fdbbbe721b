"""The adapters of ``execbox.integrations``, each in a whole agent loop of its framework, driven
by the framework's own test model (no network): the model sends a wrong program, reads the error
with its line in the tool message, sends the fixed program, which calls a real Python tool, and
answers with the value the sandbox returned.

The frameworks are optional dependencies: each test skips when its framework is not installed,
so a plain install still runs the rest; `.ci/python` installs all three, so CI runs them all.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import pathlib
import re
import sys
from typing import Any, Dict, List

import pytest

import execbox

QUESTION = "What do 4 teas cost?"

# The wrong programs and the fixed one; each wrong one fails at a place the answer must name.
TEA = 'const { price } = await shop.price({ item: "tea" });'
UNDEFINED = f"{TEA}\nreturn price * quantity;"
NO_SUCH_TOOL = f"const quantity = 4;\n{TEA.replace('shop.price', 'shop.prices')}\nreturn 1;"
SYNTAX = f"const quantity = 4;\n{TEA[:-2]};\nreturn price * quantity;"
FIXED = f"const quantity = 4;\n{TEA}\nreturn price * quantity;"


@pytest.fixture
def asked() -> List[dict]:
    """The inputs the Python tool was called with."""
    return []


@pytest.fixture
def sandbox(asked):
    def price(input):
        asked.append(input)
        return {"item": input["item"], "price": {"tea": 3.25, "cake": 4.5}[input["item"]]}

    tool = execbox.Tool(
        price,
        description="The unit price of an item.",
        input_schema={
            "type": "object",
            "properties": {"item": {"enum": ["tea", "cake"]}},
            "required": ["item"],
            "additionalProperties": False,
        },
    )
    with execbox.Sandbox({"shop": {"price": tool}}, pool=1) as sb:
        yield sb


def final_words(answer: str) -> str:
    """What the scripted models say once the sandbox answered: the answer's value, read from
    the JSON the model got, so a final answer holds only what really came back."""
    parsed = json.loads(answer)
    assert parsed["ok"] is True, answer
    return f"4 teas cost {parsed['result']}."


# --- Pydantic AI -----------------------------------------------------------------------------


def test_pydantic_ai_agent_fixes_its_program_from_the_error_and_answers(sandbox, asked):
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from execbox.integrations.pydantic_ai import code_tool

    returned: List[str] = []
    shown: List[Any] = []

    def model(messages: list, info: AgentInfo) -> ModelResponse:
        shown.append(info.function_tools)
        answers = [
            part.content
            for part in messages[-1].parts
            if isinstance(part, ToolReturnPart) and part.tool_name == "execute_code"
        ]
        returned.extend(answers)
        if not answers:
            return ModelResponse(
                parts=[ToolCallPart("execute_code", {"code": UNDEFINED}, "call-1")]
            )
        if not json.loads(answers[-1])["ok"]:
            return ModelResponse(parts=[ToolCallPart("execute_code", {"code": FIXED}, "call-2")])
        return ModelResponse(parts=[TextPart(final_words(answers[-1]))])

    agent = Agent(FunctionModel(model), tools=[code_tool(sandbox)])
    result = asyncio.run(agent.run(QUESTION))

    assert len(returned) == 2, returned
    error = json.loads(returned[0])["error"]
    assert error["code"] == "runtime_error"
    assert error["message"].startswith("ReferenceError: quantity is not defined")
    assert "(line 2, column 16)" in error["message"]
    assert "2 | return price * quantity" in error["message"]
    assert result.output == "4 teas cost 13."
    # The wrong program got as far as its first call; the fixed one called the tool again.
    assert asked == [{"item": "tea"}, {"item": "tea"}]
    # What the model saw: the code tool's description and schema.
    (definition,) = shown[0]
    assert definition.name == "execute_code"
    assert definition.description == sandbox.tool().description
    assert "declare namespace shop" in definition.description
    assert definition.parameters_json_schema == sandbox.tool().input_schema


def test_pydantic_ai_calls_with_wrong_arguments_are_told_what_to_send(sandbox, asked):
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from execbox.integrations.pydantic_ai import code_tool

    returned: Dict[str, str] = {}

    def model(messages: list, info: AgentInfo) -> ModelResponse:
        for part in messages[-1].parts:
            if getattr(part, "tool_call_id", None):
                returned[part.tool_call_id] = str(part.content)
        if not returned:
            return ModelResponse(parts=[ToolCallPart("run_js", {"program": FIXED}, "call-1")])
        if len(returned) == 1:
            # Arguments that are not an object are Pydantic AI's to refuse (a retry prompt).
            return ModelResponse(parts=[ToolCallPart("run_js", "[1]", "call-2")])
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(model), tools=[code_tool(sandbox, name="run_js")])
    assert asyncio.run(agent.run(QUESTION)).output == "done"
    error = json.loads(returned["call-1"])["error"]
    assert error["code"] == "validation_error"
    assert error["message"] == (
        'run_js takes {"code": "<the program>"}; "code" is missing (the call had "program"): '
        'send the program as a string in "code"'
    )
    assert "Input should be an object" in returned["call-2"]
    assert asked == []


# --- OpenAI Agents SDK -----------------------------------------------------------------------


def tool_outputs(call: Any) -> List[str]:
    """The tool answers in the input of one call of the scripted model."""
    items = call.input if isinstance(call.input, list) else []
    return [
        item["output"]
        for item in items
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    ]


def test_openai_agents_agent_fixes_its_program_from_the_error_and_answers(sandbox, asked):
    pytest.importorskip("agents")
    from agents import Agent, RunConfig, Runner
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

    from execbox.integrations.openai_agents import code_tool

    def after_first_answer(call: Any) -> list:
        assert len(tool_outputs(call)) == 1
        assert not json.loads(tool_outputs(call)[-1])["ok"]
        return [function_call("execute_code", {"code": FIXED}, call_id="call-2")]

    def after_second_answer(call: Any) -> list:
        return [assistant_message(final_words(tool_outputs(call)[-1]))]

    model = ScriptedModel(
        [
            [function_call("execute_code", {"code": NO_SUCH_TOOL}, call_id="call-1")],
            ModelStep.respond(after_first_answer),
            ModelStep.respond(after_second_answer),
        ]
    )
    agent = Agent(name="shop", model=model, tools=[code_tool(sandbox)])
    result = asyncio.run(Runner.run(agent, QUESTION, run_config=RunConfig(tracing_disabled=True)))
    model.assert_complete()

    error = json.loads(tool_outputs(model.calls[1])[0])["error"]
    assert error["code"] == "runtime_error"
    assert error["message"].startswith("TypeError: shop.prices is not a function; shop has: price")
    assert "(line 2, column 30)" in error["message"]
    assert result.final_output == "4 teas cost 13."
    assert asked == [{"item": "tea"}]
    # What the model saw.
    (tool,) = model.calls[0].tools
    assert tool.name == "execute_code"
    assert tool.description == sandbox.tool().description
    assert tool.strict_json_schema is True
    assert tool.params_json_schema == sandbox.tool().input_schema


def test_openai_agents_arguments_that_are_not_json_get_an_answer_not_an_exception(sandbox, asked):
    pytest.importorskip("agents")
    from agents import Agent, RunConfig, Runner
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

    from execbox.integrations.openai_agents import code_tool

    model = ScriptedModel(
        [
            [function_call("execute_code", '{"code": "return 1"', call_id="call-1")],
            ModelStep.respond(lambda call: [assistant_message(tool_outputs(call)[-1])]),
        ]
    )
    agent = Agent(name="shop", model=model, tools=[code_tool(sandbox)])
    result = asyncio.run(Runner.run(agent, QUESTION, run_config=RunConfig(tracing_disabled=True)))

    error = json.loads(result.final_output)["error"]
    assert error["code"] == "validation_error"
    assert error["message"].startswith("the arguments of execute_code are not valid JSON (")
    assert error["message"].endswith(
        'send {"code": "<the program>"}, with the program as one JSON string'
    )


# --- LangChain -------------------------------------------------------------------------------


def test_langchain_agent_fixes_its_program_from_the_error_and_answers(sandbox, asked):
    pytest.importorskip("langchain_core")
    agents = pytest.importorskip("langchain.agents")
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.utils.function_calling import convert_to_openai_tool

    from execbox.integrations.langchain import code_tool

    class ToolCallingFakeChatModel(GenericFakeChatModel):
        def bind_tools(self, tools, **kwargs):
            # As a real chat model does: the tools go to every call as their JSON schemas.
            return self.bind(tools=[convert_to_openai_tool(tool) for tool in tools])

    seen: List[Dict[str, Any]] = []

    class Recorder(BaseCallbackHandler):
        def on_chat_model_start(self, serialized, messages, **kwargs):
            seen.append({"messages": messages[0], "tools": kwargs["invocation_params"]["tools"]})

    def answers() -> List[str]:
        return [m.content for m in seen[-1]["messages"] if isinstance(m, ToolMessage)]

    def call(code: str, id: str) -> AIMessage:
        return AIMessage("", tool_calls=[{"name": "execute_code", "args": {"code": code}, "id": id}])

    def script():
        yield call(SYNTAX, "call-1")
        assert not json.loads(answers()[-1])["ok"]
        yield call(FIXED, "call-2")
        yield AIMessage(final_words(answers()[-1]))

    model = ToolCallingFakeChatModel(messages=script())
    agent = agents.create_agent(model, tools=[code_tool(sandbox)])
    state = asyncio.run(
        agent.ainvoke({"messages": [("user", QUESTION)]}, config={"callbacks": [Recorder()]})
    )

    assert len(seen) == 3
    error = json.loads(answers()[0])["error"]
    assert error["code"] == "runtime_error"
    assert error["message"].startswith("SyntaxError: ")
    assert "(line 2, column 51)" in error["message"]
    assert state["messages"][-1].content == "4 teas cost 13."
    assert asked == [{"item": "tea"}]
    # What the model saw.
    (tool,) = seen[0]["tools"]
    assert tool["function"]["name"] == "execute_code"
    # (LangChain strips the description's last newline.)
    assert tool["function"]["description"] == sandbox.tool().description.strip()
    assert tool["function"]["parameters"] == sandbox.tool().input_schema


def test_langchain_tool_runs_blocking_and_answers_wrong_arguments(sandbox, asked):
    pytest.importorskip("langchain_core")
    from execbox.integrations.langchain import code_tool

    tool = code_tool(sandbox)
    assert json.loads(tool.invoke({"code": FIXED})) == {"ok": True, "result": 13, "logs": []}
    assert asked == [{"item": "tea"}]

    wrong = json.loads(tool.invoke({"code": 42}))["error"]
    assert wrong == {
        "code": "validation_error",
        "message": 'execute_code takes {"code": "<the program>"}; "code" is a number: send '
        "the program's source as a string",
    }
    extra = json.loads(tool.invoke({"code": "return 1", "timeout": 9}))["error"]["message"]
    assert extra == (
        'execute_code takes {"code": "<the program>"} and nothing else; remove "timeout" and '
        "send the program alone"
    )
    # max_answer_chars reaches the answer: a long result is cut, with a marker saying so.
    short = code_tool(sandbox, max_answer_chars=100).invoke({"code": "return 'x'.repeat(1000)"})
    assert "x" * 100 not in short and "the limit is 100" in short


# --- The examples of docs/sdk-python.md ----------------------------------------------------

DOCS = pathlib.Path(__file__).resolve().parents[3] / "docs" / "sdk-python.md"
# What the docs' examples ask, and the program the test models answer it with.
DOCS_QUESTION = "What do 4 teas and a cake cost?"
DOCS_PROGRAM = (
    'const [tea, cake] = await Promise.all(["tea", "cake"].map(item => shop.price({ item })));\n'
    "return 4 * tea.price + cake.price;"
)


def docs_example(adapter: str) -> str:
    """The example of docs/sdk-python.md that imports ``adapter`` (a ```py block: it needs a
    model's API key, so the README test does not run it)."""
    blocks = re.findall(r"```py\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.S)
    (block,) = [b for b in blocks if f"from execbox.integrations.{adapter} import" in b]
    lines = [line for line in block.splitlines() if line.strip()]
    # At most three lines from import to tool: the adapter's import, the sandbox, the agent.
    start = next(i for i, line in enumerate(lines) if "execbox.integrations" in line)
    end = next(i for i, line in enumerate(lines) if "code_tool(sandbox)" in line)
    assert end - start + 1 <= 3, lines
    return block


def run_docs_example(adapter: str, model: Any, capsys) -> str:
    """Runs the example with ``model`` in place of the model it names; returns what it printed."""
    block = docs_example(adapter)
    named = re.findall(r'"(?:openai:)?gpt-[^"]*"', block)
    assert len(named) == 1, block
    namespace = {"model": model}
    docs_tools = re.findall(r"```python\n(PRICES = .*?)```", DOCS.read_text(encoding="utf-8"), re.S)
    exec(compile(docs_tools[0], str(DOCS), "exec"), namespace)
    exec(compile(block.replace(named[0], "model"), str(DOCS), "exec"), namespace)
    namespace["sandbox"].close()
    return capsys.readouterr().out


def test_the_pydantic_ai_example_of_the_docs_runs(capsys):
    pytest.importorskip("pydantic_ai")
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import FunctionModel

    def model(messages: list, info: Any) -> ModelResponse:
        answers = [p.content for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        if not answers:
            return ModelResponse(parts=[ToolCallPart("execute_code", {"code": DOCS_PROGRAM})])
        return ModelResponse(parts=[TextPart(f"It costs {json.loads(answers[0])['result']}.")])

    assert run_docs_example("pydantic_ai", FunctionModel(model), capsys) == "It costs 17.5.\n"


def test_the_openai_agents_example_of_the_docs_runs(capsys):
    pytest.importorskip("agents")
    from agents import set_tracing_disabled
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

    # The example's Runner.run_sync has no RunConfig: no traces leave this test process.
    set_tracing_disabled(True)
    model = ScriptedModel(
        [
            [function_call("execute_code", {"code": DOCS_PROGRAM}, call_id="call-1")],
            ModelStep.respond(
                lambda call: [
                    assistant_message(f"It costs {json.loads(tool_outputs(call)[0])['result']}.")
                ]
            ),
        ]
    )
    assert run_docs_example("openai_agents", model, capsys) == "It costs 17.5.\n"


def test_the_langchain_example_of_the_docs_runs(capsys):
    pytest.importorskip("langchain_core")
    pytest.importorskip("langchain.agents")
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, ToolMessage

    class ToolCallingFakeChatModel(GenericFakeChatModel):
        def bind_tools(self, tools, **kwargs):
            return self

    seen: List[Any] = []

    class Recorder(BaseCallbackHandler):
        def on_chat_model_start(self, serialized, messages, **kwargs):
            seen.append(messages[0])

    def script():
        call = {"name": "execute_code", "args": {"code": DOCS_PROGRAM}, "id": "call-1"}
        yield AIMessage("", tool_calls=[call])
        (answer,) = [m.content for m in seen[-1] if isinstance(m, ToolMessage)]
        yield AIMessage(f"It costs {json.loads(answer)['result']}.")

    model = ToolCallingFakeChatModel(messages=script(), callbacks=[Recorder()])
    assert run_docs_example("langchain", model, capsys) == "It costs 17.5.\n"


# --- Without a framework ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "module, framework, extra",
    [
        ("pydantic_ai", "pydantic_ai", "pydantic-ai"),
        ("openai_agents", "agents", "openai-agents"),
        ("langchain", "langchain_core", "langchain"),
    ],
)
def test_a_missing_framework_says_what_to_install(monkeypatch, module, framework, extra):
    name = f"execbox.integrations.{module}"
    monkeypatch.delitem(sys.modules, name, raising=False)
    # A module set to None in sys.modules cannot be imported: the framework is "not installed".
    for loaded in [m for m in sys.modules if m == framework or m.startswith(framework + ".")]:
        monkeypatch.setitem(sys.modules, loaded, None)
    monkeypatch.setitem(sys.modules, framework, None)
    with pytest.raises(ImportError) as raised:
        importlib.import_module(name)
    assert f'pip install "execbox[{extra}]"' in str(raised.value)
    assert str(raised.value).startswith(f"{name} needs ")
    monkeypatch.delitem(sys.modules, name, raising=False)


def test_importing_execbox_imports_no_framework():
    import subprocess

    code = (
        "import sys, execbox, execbox.integrations; "
        "print(sorted(m for m in ('pydantic_ai', 'agents', 'langchain_core') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_an_adapter_given_tools_instead_of_a_sandbox_says_what_it_takes():
    pytest.importorskip("langchain_core")
    from execbox.integrations.langchain import code_tool

    with pytest.raises(TypeError) as raised:
        code_tool({"shop": {}})  # type: ignore[arg-type]
    assert str(raised.value) == (
        "execbox.integrations.langchain.code_tool takes an execbox.Sandbox (made with "
        "execbox.Sandbox(tools)), not dict"
    )
