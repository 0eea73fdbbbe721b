// Hostile programs and misbehaving tools must not hurt the Node.js process: it keeps working
// and the next run is fine.
import { test } from "node:test";
import assert from "node:assert/strict";

import { run, Sandbox } from "../index.mjs";

test("an endless loop ends as timeout and the next run is fine", async () => {
  const sandbox = new Sandbox({ pool: 1 });
  try {
    const looping = await sandbox.run("while (true) {}", { timeoutMs: 300 });
    assert.equal(looping.ok, false);
    assert.equal(looping.error.code, "timeout");
    assert.equal((await sandbox.run("1 + 1")).value, 2);
  } finally {
    sandbox.close();
  }
});

test("a memory bomb ends as memory_limit and the host keeps working", async () => {
  const sandbox = new Sandbox({ pool: 1 });
  try {
    const bomb = await sandbox.run("const a = []; while (true) a.push('x'.repeat(1 << 20) + a.length);", {
      memoryLimitBytes: 32 * 1024 * 1024,
      timeoutMs: 10_000,
    });
    assert.equal(bomb.ok, false);
    assert.equal(bomb.error.code, "memory_limit");
    // This process is unharmed: its own allocations and the next run work.
    assert.equal(new Array(1000).fill(1).length, 1000);
    assert.equal((await sandbox.run("[1, 2, 3].length")).value, 3);
    assert.equal((await run("'still fine'")).value, "still fine");
  } finally {
    sandbox.close();
  }
});

test("a tool that never settles is bounded by the execution's time limit", async () => {
  const tools = { t: { hang: () => new Promise(() => {}) } };
  const started = Date.now();
  const result = await run("await t.hang()", { tools, timeoutMs: 300 });
  assert.equal(result.error.code, "timeout");
  assert.ok(Date.now() - started < 5_000);
  assert.equal((await run("await t.ok()", { tools: { t: { ok: () => "ok" } } })).value, "ok");
});

test("a tool that throws synchronously does not crash the process", async () => {
  const tools = {
    t: {
      boom: () => { throw new Error("boom"); },
      weird: () => { throw { toString() { throw new Error("no string for you"); } }; },
      thenable: () => ({ get then() { throw new Error("a then that throws"); } }),
    },
  };
  const first = await run("await t.boom()", { tools });
  assert.equal(first.error.code, "tool_error");
  const second = await run("await t.weird()", { tools });
  assert.equal(second.error.code, "tool_error");
  assert.match(second.error.message, /cannot be shown/);
  const third = await run("await t.thenable()", { tools });
  assert.equal(third.error.code, "tool_error");
  assert.match(third.error.message, /a then that throws/);
});

test("the guest cannot reach Node.js: no require, process or fetch", async () => {
  const result = await run("[typeof require, typeof process, typeof fetch, typeof globalThis.Deno]");
  assert.deepEqual(result.value, ["undefined", "undefined", "undefined", "undefined"]);
});
