"""execbox.run: values, errors, logs, limits and Python tools."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import decimal
import enum
import uuid

import pytest

import execbox
from conftest import add


def test_a_program_returns_its_value_as_python():
    result = execbox.run("return { a: [1, 2.5, 'x', null, true] }")
    assert result.ok
    assert result.error is None
    assert result.value == {"a": [1, 2.5, "x", None, True]}
    assert isinstance(result.duration_ms, int)


def test_a_program_that_returns_nothing_has_the_value_none():
    result = execbox.run("const x = 1;")
    assert result.ok and result.value is None


def test_logs_are_the_console_lines():
    result = execbox.run("console.log('hello', 1); console.error('oops'); return 2")
    assert result.logs == ["hello 1", "oops"]


def test_a_sync_tool_gets_its_input_as_a_dict_and_returns_json(tools, calls):
    result = execbox.run(
        "const a = await math.add({ a: 2, b: 3 }); const r = await log.record({ k: 'v' });"
        "return [a.sum, r.n]",
        tools,
    )
    assert result.value == [5, 1]
    assert calls == [{"k": "v"}]


def test_a_tool_called_without_input_gets_none():
    seen = []
    result = execbox.run("await t.get()", {"t": {"get": lambda input: seen.append(input) or 7}})
    assert result.value == 7
    assert seen == [None]


def test_an_async_tool_runs_on_an_event_loop():
    async def fetch(input):
        await asyncio.sleep(0.01)
        return {"url": input["url"], "loop": asyncio.get_running_loop() is not None}

    result = execbox.run("return await web.fetch({ url: 'u' })", {"web": {"fetch": fetch}})
    assert result.value == {"url": "u", "loop": True}


def test_a_tool_that_raises_rejects_with_tool_error_and_its_message_only():
    def lookup(input):
        raise ValueError("no such city: Atlantis")

    result = execbox.run(
        "try { await geo.lookup({}) } catch (e) { return [e.code, e.message] }",
        {"geo": {"lookup": lookup}},
    )
    code, message = result.value
    assert code == "tool_error"
    assert "no such city: Atlantis" in message
    assert "Traceback" not in message and "test_run.py" not in message


def test_a_traceback_reaches_the_program_only_when_asked_for():
    def lookup(input):
        raise KeyError("x")

    result = execbox.run(
        "try { await geo.lookup({}) } catch (e) { return e.message }",
        {"geo": {"lookup": lookup}},
        tool_tracebacks=True,
    )
    assert "Traceback" in result.value and "KeyError" in result.value


def test_an_uncaught_tool_error_fails_the_execution_with_tool_error():
    result = execbox.run("await geo.lookup({})", {"geo": {"lookup": lambda i: 1 / 0}})
    assert not result.ok
    assert result.error.code == "tool_error"
    assert "division by zero" in result.error.message


def test_tool_error_carries_a_reason_and_a_retry_time():
    def send(input):
        raise execbox.ToolError("slow down", reason="rate_limited", retry_after_ms=1500)

    result = execbox.run(
        "try { await mail.send({}) } catch (e) { return [e.code, e.message, e.reason, e.retryAfterMs] }",
        {"mail": {"send": send}},
    )
    code, message, reason, retry = result.value
    assert (code, reason, retry) == ("tool_error", "rate_limited", 1500)
    assert "slow down" in message


class Opaque:
    """A type neither JSON nor execbox knows."""


def test_a_result_json_cannot_hold_is_a_serialization_error_naming_the_tool_type_and_hook():
    result = execbox.run(
        "try { await t.bad() } catch (e) { return [e.code, e.message] }",
        {"t": {"bad": lambda input: {"rows": [Opaque()]}}},
    )
    code, message = result.value
    assert code == "serialization_error"
    assert message == (
        "t.bad returned a test_run.Opaque, which JSON cannot hold: convert it in the tool, "
        "or give run(), run_async() or Sandbox() a json_default= function that turns it into "
        "a JSON value"
    )
    nan = execbox.run(
        "try { await t.nan() } catch (e) { return [e.code, e.message] }",
        {"t": {"nan": lambda input: float("nan")}},
    ).value
    assert nan[0] == "serialization_error" and "t.nan returned a value JSON cannot hold" in nan[1]


class Color(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Order:
    id: uuid.UUID
    placed: datetime.datetime
    total: decimal.Decimal
    tags: frozenset


def test_tool_results_may_carry_what_database_rows_carry():
    order_id = uuid.UUID("12345678-1234-5678-1234-567812345678")
    row = {
        "when": datetime.datetime(2026, 11, 27, 9, 30, tzinfo=datetime.timezone.utc),
        "day": datetime.date(2026, 11, 27),
        "at": datetime.time(9, 30, 15),
        "price": decimal.Decimal("12.50"),
        "count": decimal.Decimal("3"),
        "color": Color.RED,
        "ids": {3, 1, 2},
        "pair": (1, "a"),
        "order": Order(
            order_id, datetime.datetime(2026, 1, 2, 3, 4, 5), decimal.Decimal("0.1"), frozenset({"x"})
        ),
    }
    result = execbox.run(
        "const r = await db.row(); return [r, typeof r.price, r.price + 1, r.count * 2]",
        {"db": {"row": lambda input: row}},
    )
    assert result.ok, result.error
    value, price_type, price_plus_one, count_twice = result.value
    assert value == {
        "when": "2026-11-27T09:30:00+00:00",
        "day": "2026-11-27",
        "at": "09:30:15",
        "price": 12.5,
        "count": 3,
        "color": "red",
        "ids": [1, 2, 3],
        "pair": [1, "a"],
        "order": {
            "id": "12345678-1234-5678-1234-567812345678",
            "placed": "2026-01-02T03:04:05",
            "total": 0.1,
            "tags": ["x"],
        },
    }
    # A Decimal is a number in the program, not text that `+` would concatenate.
    assert (price_type, price_plus_one, count_twice) == ("number", 13.5, 6)


def test_pydantic_models_are_dumped_as_json():
    pydantic = pytest.importorskip("pydantic")

    class Customer(pydantic.BaseModel):
        name: str
        since: datetime.date

    result = execbox.run(
        "return await crm.get()",
        {"crm": {"get": lambda input: [Customer(name="Ada", since=datetime.date(2020, 1, 2))]}},
    )
    assert result.value == [{"name": "Ada", "since": "2020-01-02"}]


def test_json_default_converts_the_rest_and_a_hook_that_gives_up_is_named():
    def default(value):
        if isinstance(value, Opaque):
            return {"opaque": True, "at": datetime.date(2026, 1, 1)}
        return value

    tools = {"t": {"get": lambda input: [Opaque(), complex(1, 2)] if input else Opaque()}}
    ok = execbox.run("return await t.get()", tools, json_default=default)
    assert ok.value == {"opaque": True, "at": "2026-01-01"}
    with execbox.Sandbox(tools, pool=1, json_default=default) as sandbox:
        bad = sandbox.run(
            "try { await t.get({ both: 1 }) } catch (e) { return [e.code, e.message] }"
        ).value
    assert bad == [
        "serialization_error",
        "t.get returned a complex, which JSON cannot hold: the json_default hook returned "
        "the complex unchanged",
    ]
    with pytest.raises(TypeError, match="json_default must be a callable"):
        execbox.run("1", tools, json_default="iso")


def test_input_failing_the_schema_is_refused_without_calling_the_tool(calls):
    def record(input):
        calls.append(input)
        return "called"

    tool = execbox.Tool(
        record,
        description="Records a name.",
        input_schema={
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
        },
    )
    result = execbox.run(
        "try { await people.add({ name: 42 }) } catch (e) { return [e.code, e.message] }",
        {"people": {"add": tool}},
    )
    code, message = result.value
    assert code == "validation_error"
    assert "name" in message
    assert calls == []
    ok = execbox.run("return await people.add({ name: 'Ada' })", {"people": {"add": tool}})
    assert ok.value == "called" and calls == [{"name": "Ada"}]


def test_a_result_failing_the_output_schema_fails_the_call():
    tool = execbox.Tool(lambda input: {"n": "x"}, output_schema={
        "type": "object", "properties": {"n": {"type": "number"}}, "required": ["n"]})
    result = execbox.run("try { await t.get() } catch (e) { return e.code }", {"t": {"get": tool}})
    assert result.value == "validation_error"


def test_a_syntax_error_has_its_location():
    result = execbox.run("const a = 1;\nconst b = ;")
    assert not result.ok
    assert result.error.code == "runtime_error"
    assert result.error.name == "SyntaxError"
    assert result.error.location.line == 2
    assert result.error.location.source == "const b = ;"
    assert "^" in str(result.error)


def test_a_thrown_error_is_a_runtime_error():
    result = execbox.run("throw new TypeError('bad input')")
    assert result.error.code == "runtime_error"
    assert result.error.name == "TypeError"
    assert result.error.message == "bad input"


def test_the_log_limits_are_applied():
    result = execbox.run("for (let i = 0; i < 50; i++) console.log(i)", max_log_lines=5)
    assert result.logs[:5] == ["0", "1", "2", "3", "4"]
    assert any("more log lines not shown" in line for line in result.logs[5:])


def test_bad_arguments_are_refused_with_the_name_of_the_argument():
    with pytest.raises(ValueError, match="timeout_ms must be a positive whole number"):
        execbox.run("1", timeout_ms=-1)
    with pytest.raises(TypeError, match="timeout_ms must be an int"):
        execbox.run("1", timeout_ms="5")
    with pytest.raises(TypeError, match="code must be a str"):
        execbox.run(b"1")
    with pytest.raises(TypeError, match=r"tools\['math'\]\['add'\] must be a callable"):
        execbox.run("1", {"math": {"add": 3}})
    with pytest.raises(TypeError, match=r"tools\['math'\] must be a dict"):
        execbox.run("1", {"math": [add]})
    with pytest.raises(TypeError, match=r"input_schema must be a JSON Schema"):
        execbox.run("1", {"math": {"add": execbox.Tool(add, input_schema="object")}})


def test_a_bad_namespace_name_is_refused_by_the_host():
    with pytest.raises(ValueError, match="my ns"):
        execbox.run("1", {"my ns": {"add": add}})


def test_types_declares_the_tools_for_a_model():
    tool = execbox.Tool(
        add,
        input_schema={
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        },
    )
    declarations = execbox.types({"math": {"add": tool}})
    assert "declare namespace math" in declarations
    assert "Adds a and b." in declarations
    assert "a: number" in declarations
    prompt = execbox.prompt({"math": {"add": tool}}, timeout_ms=2000)
    assert "declare namespace math" in prompt
    assert "Time: 2 s for the whole program" in prompt


def test_run_inside_a_running_event_loop_warns_that_it_blocks_the_loop():
    async def main():
        with pytest.warns(RuntimeWarning, match="run_async"):
            return execbox.run("1 + 1").value

    assert asyncio.run(main()) == 2


def test_tool_error_and_tool_check_their_arguments_when_made():
    with pytest.raises(TypeError, match="reason"):
        execbox.ToolError("x", reason=5)
    with pytest.raises(ValueError, match="retry_after_ms"):
        execbox.ToolError("x", retry_after_ms=True)
    with pytest.raises(TypeError, match="description"):
        execbox.Tool(add, description=5)
