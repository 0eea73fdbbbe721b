// The runners the package starts are the runner under its OS lockdown, and get none of the
// application's environment.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";

import { Sandbox } from "../index.mjs";

/** The processes this process started that still run. */
function childPids() {
  const pids = [];
  for (const tid of readdirSync(`/proc/${process.pid}/task`)) {
    try {
      const text = readFileSync(`/proc/${process.pid}/task/${tid}/children`, "utf8");
      pids.push(...text.split(/\s+/).filter(Boolean).map(Number));
    } catch {
      // the thread ended meanwhile
    }
  }
  return pids;
}

function status(pid) {
  try {
    const fields = {};
    for (const line of readFileSync(`/proc/${pid}/status`, "utf8").split("\n")) {
      const at = line.indexOf(":");
      if (at > 0) fields[line.slice(0, at)] = line.slice(at + 1).trim();
    }
    return fields;
  } catch {
    return null; // gone meanwhile
  }
}

test("the runners are locked down by the OS and inherit none of the application's secrets", async () => {
  process.env.EXECBOX_TEST_SECRET = "sk-very-secret";
  const others = new Set(childPids());
  const sandbox = new Sandbox({ pool: 1 });
  try {
    assert.equal((await sandbox.run("1 + 1")).value, 2);
    const runners = childPids().filter((pid) => !others.has(pid));
    assert.ok(runners.length >= 1);
    for (const pid of runners) {
      // The pool may be starting a runner now (a replacement, or a warm one): a runner locks
      // itself down within moments of its start, before it reads anything, so wait for that
      // state rather than catch one mid-start.
      let fields = status(pid);
      const deadline = Date.now() + 5000;
      while (fields !== null && fields.Seccomp !== "2" && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 20));
        fields = status(pid);
      }
      if (fields === null) continue;
      assert.equal(fields.Seccomp, "2", `runner ${pid}: ${JSON.stringify(fields)}`);
      assert.equal(fields.NoNewPrivs, "1");
      let environ = "";
      try {
        environ = readFileSync(`/proc/${pid}/environ`, "latin1");
      } catch {
        continue;
      }
      assert.ok(!environ.includes("sk-very-secret"), `runner ${pid} holds the application's secret`);
    }
  } finally {
    sandbox.close();
    delete process.env.EXECBOX_TEST_SECRET;
  }
});
