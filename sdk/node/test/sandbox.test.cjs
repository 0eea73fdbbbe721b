// Sandbox: one tool set and a warm pool for many executions, through the CommonJS entry.
const { test } = require("node:test");
const assert = require("node:assert/strict");

const { Sandbox, types, prompt } = require("..");

const tools = {
  math: {
    add: {
      description: "Adds two numbers",
      inputSchema: {
        type: "object",
        required: ["x", "y"],
        properties: { x: { type: "number" }, y: { type: "number" } },
      },
      handler: async ({ x, y }) => {
        await new Promise((resolve) => setTimeout(resolve, 2));
        return x + y;
      },
    },
  },
};

test("a sandbox runs programs with its tools", async () => {
  const sandbox = new Sandbox({ tools, pool: 1 });
  try {
    const result = await sandbox.run("await math.add({ x: 2, y: 3 })");
    assert.deepEqual(result, { ok: true, value: 5, logs: [], durationMs: result.durationMs });
  } finally {
    sandbox.close();
  }
});

test("20 concurrent runs with tool calls share a pool of 2", async () => {
  const sandbox = new Sandbox({ tools, pool: 2, timeoutMs: 20_000 });
  try {
    const runs = Array.from({ length: 20 }, (_, i) =>
      sandbox.run(`const a = await math.add({ x: ${i}, y: 1 }); const b = await math.add({ x: a, y: 1 }); b`),
    );
    const results = await Promise.all(runs);
    assert.deepEqual(results.map((r) => r.value), Array.from({ length: 20 }, (_, i) => i + 2));
  } finally {
    sandbox.close();
  }
});

test("a run's limits override the sandbox's", async () => {
  const sandbox = new Sandbox({ pool: 1, timeoutMs: 100 });
  try {
    const short = await sandbox.run("const t = Date.now(); while (Date.now() - t < 400) {} 1");
    assert.equal(short.error.code, "timeout");
    const long = await sandbox.run("const t = Date.now(); while (Date.now() - t < 400) {} 1", { timeoutMs: 5_000 });
    assert.equal(long.value, 1);
  } finally {
    sandbox.close();
  }
});

test("after close, run rejects and says what to do", async () => {
  const sandbox = new Sandbox({ pool: 1 });
  assert.equal((await sandbox.run("1")).value, 1);
  sandbox.close();
  assert.equal(sandbox.closed, true);
  await assert.rejects(sandbox.run("1"), /this Sandbox is closed; create a new Sandbox/);
  sandbox.close();
});

test("an execution in flight at close runs to its end", async () => {
  const sandbox = new Sandbox({ tools, pool: 1 });
  const pending = sandbox.run("const t = Date.now(); while (Date.now() - t < 200) {} await math.add({ x: 1, y: 1 })");
  await new Promise((resolve) => setTimeout(resolve, 50));
  sandbox.close();
  assert.equal((await pending).value, 2);
});

test("bad sandbox options are TypeErrors naming the path", async () => {
  assert.throws(() => new Sandbox({ tools: { math: { add: "x" } } }), (err) =>
    err instanceof TypeError && err.message.startsWith("tools.math.add must be a function"));
  assert.throws(() => new Sandbox({ pool: 0 }), /pool must be a whole number from 1 to 1024/);
  assert.throws(() => new Sandbox({ tool: {} }), /unknown option "tool"/);
  const sandbox = new Sandbox({ pool: 1 });
  try {
    await assert.rejects(sandbox.run("1", { tools }), /unknown option "tools"/);
  } finally {
    sandbox.close();
  }
});

test("types() gives the TypeScript declarations a program sees", () => {
  const declarations = types(tools);
  assert.match(declarations, /declare namespace math \{/);
  assert.match(declarations, /\/\*\* Adds two numbers \*\//);
  assert.match(declarations, /function add\(input: \{\s*x: number;\s*y: number;\s*\}\): Promise<unknown>;/);
  const sandbox = new Sandbox({ tools, pool: 1 });
  try {
    assert.equal(sandbox.types(), declarations);
  } finally {
    sandbox.close();
  }
});

test("prompt() describes the sandbox, its limits and tools", () => {
  const text = prompt(tools, { timeoutMs: 1500 });
  assert.match(text, /top-level `await`/);
  assert.match(text, /Time: 1\.5 ?s/);
  assert.match(text, /declare namespace math/);
  assert.match(prompt(), /There are no tools\./);
});
