// run(): values, logs, errors, tools (functions, specs, schemas, failures) and cancellation,
// through the ESM entry.
import { test } from "node:test";
import assert from "node:assert/strict";

import { run } from "../index.mjs";

const math = {
  add: ({ x, y }) => ({ sum: x + y }),
};

test("a program's value comes back parsed, with its logs", async () => {
  const result = await run('console.log("hi", 1); ({ a: [1, "two", null], b: 1.5 })');
  assert.equal(result.ok, true);
  assert.deepEqual(result.value, { a: [1, "two", null], b: 1.5 });
  assert.deepEqual(result.logs, ["hi 1"]);
  assert.equal(typeof result.durationMs, "number");
  assert.equal("error" in result, false);
});

test("a program that returns nothing has the value undefined", async () => {
  const result = await run("const x = 1;");
  assert.equal(result.ok, true);
  assert.equal(result.value, undefined);
});

test("an uncaught error is a runtime_error with where it was thrown", async () => {
  const result = await run("const a = 1;\nthrow new TypeError('bad thing');");
  assert.equal(result.ok, false);
  assert.equal(result.value, undefined);
  assert.equal(result.error.code, "runtime_error");
  assert.equal(result.error.message, "bad thing");
  assert.equal(result.error.name, "TypeError");
  assert.equal(result.error.location.line, 2);
});

test("a tool function is called with the parsed input, sync or async", async () => {
  const tools = {
    math,
    slow: { double: async (n) => { await new Promise((r) => setTimeout(r, 5)); return n * 2; } },
  };
  const result = await run("(await math.add({ x: 1, y: 2 })).sum + await slow.double(10)", { tools });
  assert.deepEqual(result, { ok: true, value: 23, logs: [], durationMs: result.durationMs });
});

test("a tool that returns undefined gives the program null", async () => {
  const result = await run("await t.nothing()", { tools: { t: { nothing: () => undefined } } });
  assert.equal(result.ok, true);
  assert.equal(result.value, null);
});

test("a thrown Error becomes tool_error with its message only", async () => {
  const tools = { t: { fail: () => { throw new Error("the disk is full"); } } };
  const caught = await run("try { await t.fail(); } catch (e) { return [e.code, e.message]; }", { tools });
  assert.deepEqual(caught.value, ["tool_error", "t.fail: the disk is full"]);
  const uncaught = await run("await t.fail()", { tools });
  assert.equal(uncaught.ok, false);
  assert.equal(uncaught.error.code, "tool_error");
  assert.equal(uncaught.error.message, "t.fail: the disk is full");
  assert.ok(!uncaught.error.message.includes("at "), "no stack reaches the sandbox");
});

test("a rejected promise and a thrown non-Error are tool errors too", async () => {
  const tools = {
    t: {
      reject: async () => { throw new RangeError("out of range"); },
      string: () => { throw "plain text"; },
    },
  };
  const result = await run(
    "const out = []; for (const f of [t.reject, t.string]) { try { await f(); } catch (e) { out.push(e.message); } } out",
    { tools },
  );
  assert.deepEqual(result.value, ["t.reject: out of range", "t.string: plain text"]);
});

test("a value JSON cannot hold is a serialization_error naming the tool", async () => {
  const cycle = {};
  cycle.self = cycle;
  const tools = { t: { big: () => 10n, cycle: () => cycle, fn: () => () => 1 } };
  for (const name of ["big", "cycle", "fn"]) {
    const result = await run(`await t.${name}()`, { tools });
    assert.equal(result.ok, false, name);
    assert.equal(result.error.code, "serialization_error", name);
    assert.match(result.error.message, new RegExp(`^t\\.${name} returned a value JSON cannot hold: `), name);
  }
});

test("input failing the input schema is refused without calling the handler", async () => {
  let calls = 0;
  const tools = {
    math: {
      add: {
        description: "Adds two numbers",
        inputSchema: {
          type: "object",
          required: ["x", "y"],
          properties: { x: { type: "number" }, y: { type: "number" } },
        },
        outputSchema: { type: "number" },
        handler: ({ x, y }) => { calls += 1; return x + y; },
      },
    },
  };
  const bad = await run('await math.add({ x: "one", y: 2 })', { tools });
  assert.equal(bad.ok, false);
  assert.equal(bad.error.code, "validation_error");
  assert.match(bad.error.message, /^math\.add: input\.x/);
  assert.equal(calls, 0);
  const good = await run("await math.add({ x: 1, y: 2 })", { tools });
  assert.equal(good.value, 3);
  assert.equal(calls, 1);
});

test("output failing the output schema is a validation_error", async () => {
  const tools = { t: { get: { handler: () => "text", outputSchema: { type: "number" } } } };
  const result = await run("await t.get()", { tools });
  assert.equal(result.error.code, "validation_error");
  assert.match(result.error.message, /output/);
});

test("limits apply: timeoutMs and maxLogLines", async () => {
  const slow = await run("while (true) {}", { timeoutMs: 200 });
  assert.equal(slow.error.code, "timeout");
  const logs = await run("for (let i = 0; i < 10; i++) console.log(i)", { maxLogLines: 3 });
  assert.deepEqual(logs.logs.slice(0, 3), ["0", "1", "2"]);
  assert.match(logs.logs[3], /^\[execbox\] /);
});

test("aborting the signal rejects with its reason and ends the execution", async () => {
  const controller = new AbortController();
  const started = Date.now();
  const pending = run("while (true) {}", { signal: controller.signal, timeoutMs: 10_000 });
  setTimeout(() => controller.abort(), 100);
  await assert.rejects(pending, (err) => err.name === "AbortError");
  assert.ok(Date.now() - started < 5_000, "the abort ended the run, not its time limit");
  const reason = new Error("stop it");
  const other = new AbortController();
  const second = run("while (true) {}", { signal: other.signal, timeoutMs: 10_000 });
  setTimeout(() => other.abort(reason), 50);
  await assert.rejects(second, (err) => err === reason);
});

test("an already-aborted signal never starts the run", async () => {
  let calls = 0;
  const tools = { t: { hit: () => { calls += 1; } } };
  await assert.rejects(
    run("await t.hit()", { tools, signal: AbortSignal.abort() }),
    (err) => err.name === "AbortError",
  );
  assert.equal(calls, 0);
});

test("a run whose signal is never aborted resolves as usual", async () => {
  const controller = new AbortController();
  const result = await run("40 + 2", { signal: controller.signal });
  assert.equal(result.value, 42);
});

test("bad arguments are TypeErrors naming what is wrong", async () => {
  await assert.rejects(run(42), /code must be a string/);
  await assert.rejects(run("1", { timeout: 5 }), /unknown option "timeout"/);
  await assert.rejects(run("1", { timeoutMs: -1 }), /timeoutMs must be a whole number/);
  await assert.rejects(run("1", { tools: { math: { add: 5 } } }), (err) =>
    err instanceof TypeError && err.message.startsWith("tools.math.add must be a function"));
  await assert.rejects(run("1", { tools: { math: { add: { run: () => 1 } } } }), /tools\.math\.add: unknown field "run"/);
  await assert.rejects(run("1", { tools: { math: { add: { description: "x" } } } }), /tools\.math\.add\.handler must be a function/);
  await assert.rejects(run("1", { tools: { "not-a-name": { add: () => 1 } } }), /tools\.not-a-name: a namespace must be a JavaScript identifier/);
  await assert.rejects(run("1", { tools: { math: [] } }), /tools\.math must be an object of tools/);
  await assert.rejects(run("1", { tools: { math: { add: { handler: () => 1, inputSchema: "number" } } } }), /tools\.math\.add\.inputSchema must be a JSON Schema/);
  await assert.rejects(
    run("1", { tools: { math: { add: { handler: () => 1, inputSchema: { type: "no-such-type" } } } } }),
    (err) => err instanceof TypeError && /math\.add/.test(err.message) && /input schema/.test(err.message),
  );
});
