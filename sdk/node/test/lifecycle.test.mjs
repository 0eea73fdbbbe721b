// The Node.js event loop: an idle Sandbox lets the process exit; an execution in flight
// keeps it alive until its result arrives.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";

const pkg = fileURLToPath(new URL("..", import.meta.url));

function node(script) {
  return spawnSync(process.execPath, ["-e", script], { cwd: pkg, encoding: "utf8", timeout: 20_000 });
}

test("an idle Sandbox does not keep the process from exiting", () => {
  const started = Date.now();
  const child = node(`
    const { Sandbox } = require(".");
    const sandbox = new Sandbox({ tools: { t: { f: () => 1 } }, pool: 2 });
    sandbox.run("await t.f()").then((r) => console.log("result", r.value));
  `);
  assert.equal(child.status, 0, child.stderr);
  assert.match(child.stdout, /result 1/);
  assert.ok(Date.now() - started < 10_000, "the child exited on its own");

  const idle = node(`const { Sandbox } = require("."); new Sandbox({ tools: { t: { f: () => 1 } } });`);
  assert.equal(idle.status, 0, idle.stderr);
  assert.equal(idle.error, undefined, "the child exited before the timeout");
});

test("an execution in flight keeps the process alive until its result", () => {
  const child = node(`
    const { run } = require(".");
    run("const t = Date.now(); while (Date.now() - t < 300) {} 'done'").then((r) => console.log("value", r.value));
  `);
  assert.equal(child.status, 0, child.stderr);
  assert.match(child.stdout, /value done/);
});
