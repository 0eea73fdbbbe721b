// The model-facing answer (`result.forModel`), an error's `text`, and `sandbox.tool()`.
import { test } from "node:test";
import assert from "node:assert/strict";

import { run, Sandbox } from "../index.mjs";

test("forModel is the JSON of ok, result and logs, and is not enumerable", async () => {
  const result = await run('console.log("hi"); return { a: [1, "two"] }');
  assert.equal(result.forModel(), '{"ok":true,"result":{"a":[1,"two"]},"logs":["hi"]}');
  assert.deepEqual(Object.keys(result), ["ok", "value", "logs", "durationMs"]);
  assert.equal(JSON.stringify(result).includes("forModel"), false);
});

test("forModel cuts a long answer with a marker, and checks maxChars", async () => {
  const result = await run('return "x".repeat(50000)');
  const text = result.forModel();
  assert.ok(text.startsWith('{"ok":true,"result":"xxx'), text.slice(0, 40));
  assert.ok(
    text.endsWith(
      "[cut: the answer has 50033 characters, the limit is 24000; return less, e.g. only the fields you need]",
    ),
    text.slice(-200),
  );
  assert.ok(result.forModel({ maxChars: 100 }).includes("the limit is 100;"));
  assert.throws(() => result.forModel({ maxChars: 0 }), /forModel options.maxChars must be a whole number of at least 1; got number 0/);
  assert.throws(() => result.forModel({ max: 10 }), /unknown option "max"/);
});

test("an error's text and String(error) carry its name, line and caret, as the answer does", async () => {
  const result = await run("const order = { lines: [] };\nreturn order.lines[0].sku");
  const expected =
    "TypeError: cannot read property 'sku' of undefined (line 2, column 8)\n" +
    "  2 | return order.lines[0].sku\n" +
    "    |        ^";
  assert.equal(result.error.text, expected);
  assert.equal(String(result.error), expected);
  assert.equal(result.error.message, "cannot read property 'sku' of undefined");
  assert.equal(JSON.parse(result.forModel()).error.message, expected);
});

test("a program with statements that returns nothing gets a note saying how to return", async () => {
  const result = await run("const names = [1, 2].map((n) => n * 2);");
  const answer = JSON.parse(result.forModel());
  assert.equal(answer.ok, true);
  assert.ok(answer.logs.some((l) => l.startsWith("[execbox] the program returned no value")), answer.logs);
});

test("sandbox.tool() gives the name, the description with the declarations, the schema and a handler", async () => {
  const sandbox = new Sandbox({
    pool: 1,
    tools: { math: { add: { handler: ({ a, b }) => ({ sum: a + b }), description: "Adds two numbers." } } },
  });
  try {
    const tool = sandbox.tool();
    assert.equal(tool.name, "execute_code");
    assert.ok(tool.description.startsWith("Run a JavaScript program in a sandbox"), tool.description);
    assert.ok(tool.description.includes("declare namespace math"), tool.description);
    assert.ok(tool.description.includes("cut at 24000 characters"), tool.description);
    assert.deepEqual(tool.inputSchema.required, ["code"]);
    assert.equal(tool.inputSchema.additionalProperties, false);
    assert.equal(
      await tool.handler({ code: "return (await math.add({ a: 2, b: 3 })).sum" }),
      '{"ok":true,"result":5,"logs":[]}',
    );
    const failed = JSON.parse(await tool.handler({ code: "return y" }));
    assert.equal(failed.ok, false);
    assert.match(failed.error.message, /^ReferenceError: y is not defined.*\(line 1, column 8\)/);
    await assert.rejects(tool.handler({ program: "1" }), /execute_code: the input must be \{ code: string \}/);
    const short = sandbox.tool({ name: "run_js", maxAnswerChars: 50 });
    assert.equal(short.name, "run_js");
    assert.ok((await short.handler({ code: 'return "y".repeat(500)' })).includes("the limit is 50;"));
    assert.throws(() => sandbox.tool({ name: "run code" }), /options.name must be 1 to 64 letters/);
  } finally {
    sandbox.close();
  }
});
