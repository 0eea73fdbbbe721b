// Policy: permissions, rate limits, approvals and the audit log over JavaScript tools, through
// the ESM entry (the same cases as the Python SDK's tests/test_policy.py).
import { createHash } from "node:crypto";
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { run, Sandbox, Policy } from "../index.mjs";

/** A program that calls `call` and returns the error's code, reason, message and retry time. */
const caught = (call) =>
  `try { return await ${call} } catch (e) { return [e.code, e.reason, e.message, e.retryAfterMs] }`;

function tempDir(t) {
  const dir = mkdtempSync(join(tmpdir(), "execbox-policy-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

test("a rate limit admits its calls, then refuses with a retry time", async () => {
  const calls = [];
  const hit = { handler: (input) => calls.push(input), rateLimit: "2 per 1m" };
  const sandbox = new Sandbox({ tools: { api: { hit } }, policy: new Policy(), pool: 1 });
  try {
    assert.equal((await sandbox.run("return await api.hit({})")).value, 1);
    assert.equal((await sandbox.run("return await api.hit({})")).value, 2);
    const [code, reason, message, retry] = (await sandbox.run(caught("api.hit({})"))).value;
    assert.equal(code, "tool_error");
    assert.equal(reason, "rate_limited");
    assert.match(message, /api\.hit/);
    assert.ok(retry > 0, `retryAfterMs ${retry}`);
    // Uncaught, the result's error carries the same.
    const uncaught = await sandbox.run("return await api.hit({})");
    assert.equal(uncaught.error.reason, "rate_limited");
    assert.ok(uncaught.error.retryAfterMs > 0);
  } finally {
    sandbox.close();
  }
  assert.equal(calls.length, 2);
});

test("a guarded tool without a policy is refused, never run unguarded", async () => {
  const calls = [];
  const hit = { handler: (input) => calls.push(input), rateLimit: "2 per 1m" };
  const [code, , message] = (await run(caught("api.hit({})"), { tools: { api: { hit } } })).value;
  assert.equal(code, "tool_error");
  assert.deepEqual(calls, []);
  // What to do is said the JavaScript way, not the Rust library's.
  assert.equal(
    message,
    "api.hit: this tool has a rate limit, and this execution has no policy to enforce that, so the " +
      "call was refused; pass run() or new Sandbox() a policy: { policy: new Policy({ approve }) } " +
      "(approve decides the calls of tools that require approval)",
  );
});

test("permissions come from the policy file", async (t) => {
  const dir = tempDir(t);
  const file = join(dir, "policy.yaml");
  writeFileSync(
    file,
    "version: 1\n" +
      "principals:\n" +
      "  alice: { permissions: ['weather:read'] }\n" +
      "  bob: { permissions: [] }\n",
  );
  const tools = { weather: { today: { handler: () => "sunny", permissions: ["weather:read"] } } };
  const alice = new Policy({ path: file, principal: "alice" });
  const bob = new Policy({ path: file, principal: "bob" });
  assert.equal(alice.principal, "alice");
  assert.equal((await run("return await weather.today()", { tools, policy: alice })).value, "sunny");
  // A tool the principal may not call is not there at all.
  assert.equal((await run("return typeof weather", { tools, policy: bob })).value, "undefined");
  assert.throws(() => new Policy({ path: file, principal: "carol" }), (err) => {
    assert.ok(err instanceof Error);
    assert.match(err.message, /carol/);
    return true;
  });
});

test("a policy file that cannot be read throws at construction, naming it", () => {
  assert.throws(() => new Policy({ path: "/nonexistent/execbox/policy.yaml" }), /nonexistent/);
});

test("an approver decides each call, and a denial never runs the tool", async () => {
  const sent = [];
  const asked = [];
  const approve = (request) => {
    asked.push(request);
    return request.input.to.endsWith("@example.com");
  };
  const send = {
    handler: (input) => {
      sent.push(input.to);
      return "sent";
    },
    requiresApproval: true,
  };
  const tools = { mail: { send } };
  const policy = new Policy({ approve });
  const ok = await run("return await mail.send({ to: 'a@example.com' })", { tools, policy });
  assert.equal(ok.value, "sent");
  const [code, reason] = (await run(caught("mail.send({ to: 'x@evil.test' })"), { tools, policy })).value;
  assert.equal(code, "tool_error");
  assert.equal(reason, "approval_denied");
  assert.deepEqual(sent, ["a@example.com"]);
  assert.deepEqual(
    asked.map((r) => r.tool),
    ["mail.send", "mail.send"],
  );
  assert.deepEqual(asked[1].input, { to: "x@evil.test" });
  assert.equal(asked[1].principal, null);
  assert.equal(typeof asked[1].executionId, "string");
  assert.notEqual(asked[1].executionId, "");
  // The digest a durable execution shows as inputSha256: canonical JSON, sorted and compact.
  const digest = createHash("sha256").update(JSON.stringify({ to: "x@evil.test" })).digest("hex");
  assert.equal(asked[1].inputSha256, digest);
  assert.notEqual(asked[0].inputSha256, digest);
  // Asked by the tool's own requiresApproval, not by a rule of a policy file.
  assert.equal(asked[1].rule, null);
  assert.equal(asked[1].reason, null);
  assert.deepEqual(asked[1].approvers, []);
});

test("without an approver approval is required; a throwing approver says no", async () => {
  const send = { handler: () => "sent", requiresApproval: true };
  const tools = { mail: { send } };
  const none = (await run(caught("mail.send({})"), { tools, policy: new Policy() })).value;
  assert.equal(none[1], "approval_required");

  const broken = new Policy({
    approve: () => {
      throw new Error("approver down");
    },
  });
  const raised = (await run(caught("mail.send({})"), { tools, policy: broken })).value;
  assert.equal(raised[1], "approval_denied");

  const truthy = new Policy({ approve: () => "yes" });
  const notTrue = (await run(caught("mail.send({})"), { tools, policy: truthy })).value;
  assert.equal(notTrue[1], "approval_denied");
});

test("an async approver is awaited; a rejection denies", async () => {
  const send = { handler: () => "sent", requiresApproval: true };
  const tools = { mail: { send } };
  const later = new Policy({
    approve: async (request) => {
      await new Promise((resolve) => setTimeout(resolve, 20));
      return request.input.ok === true;
    },
  });
  assert.equal((await run("return await mail.send({ ok: true })", { tools, policy: later })).value, "sent");
  const no = (await run(caught("mail.send({ ok: false })"), { tools, policy: later })).value;
  assert.equal(no[1], "approval_denied");

  const rejecting = new Policy({ approve: () => Promise.reject(new Error("nobody home")) });
  const rejected = (await run(caught("mail.send({})"), { tools, policy: rejecting })).value;
  assert.equal(rejected[1], "approval_denied");
});

test("the audit log records each call", async (t) => {
  const dir = tempDir(t);
  const audit = join(dir, "audit.jsonl");
  const policy = new Policy({ auditLog: audit });
  await run("await t.echo({ n: 1 })", { tools: { t: { echo: (input) => input } }, policy });
  const lines = readFileSync(audit, "utf8")
    .split("\n")
    .filter((line) => line !== "")
    .map((line) => JSON.parse(line));
  assert.ok(
    lines.some((line) => JSON.stringify(line).includes("t.echo")),
    `no line names t.echo: ${JSON.stringify(lines)}`,
  );
});

test("a bad rate limit or a non-Policy value is a TypeError naming it", async () => {
  const hit = { handler: () => 1, rateLimit: "lots" };
  assert.throws(() => new Sandbox({ tools: { api: { hit } } }), (err) => {
    assert.ok(err instanceof TypeError);
    assert.match(err.message, /^tools\.api\.hit\.rateLimit: /);
    return true;
  });
  await assert.rejects(run("1", { tools: { api: { hit } } }), /tools\.api\.hit\.rateLimit/);
  await assert.rejects(run("1", { policy: "policy.yaml" }), (err) => {
    assert.ok(err instanceof TypeError);
    assert.match(err.message, /run options\.policy must be an execbox Policy/);
    return true;
  });
  assert.throws(() => new Sandbox({ policy: {} }), TypeError);
  assert.throws(() => new Policy({ approve: true }), /approve must be a function/);
  assert.throws(() => new Policy({ principal: "alice" }), Error);
});

// Rules on a call's arguments (`rules:` in the policy file, docs/policy.md): the first that
// matches decides; none matching leaves the tool's own requiresApproval.
const PAYMENT_RULES =
  "version: 1\n" +
  'roles: { finance: { permissions: ["executions:approve"] } }\n' +
  "principals: { alice: {}, carol: { roles: [finance] } }\n" +
  "rules:\n" +
  '  - tool: "pay.send"\n' +
  '    when: "input.amount > 1000000"\n' +
  "    action: block\n" +
  '    reason: "payments over a million are made by hand"\n' +
  '  - tool: "pay.send"\n' +
  '    when: "input.amount > 100"\n' +
  "    action: approve\n" +
  '    reason: "payments over 100"\n' +
  '  - tool: "pay.refund"\n' +
  "    action: allow\n";

const PAYMENT_SCHEMA = {
  type: "object",
  properties: { amount: { type: "number" }, to: { type: "string" } },
  required: ["to"],
};

/** pay.send and pay.refund (which requires approval), recording what they did in `sent`. */
function payments(sent) {
  return {
    pay: {
      send: {
        handler: ({ amount, to }) => {
          sent.push(["send", amount, to]);
          return "sent";
        },
        inputSchema: PAYMENT_SCHEMA,
      },
      refund: {
        handler: ({ amount, to }) => {
          sent.push(["refund", amount, to]);
          return "refunded";
        },
        inputSchema: PAYMENT_SCHEMA,
        requiresApproval: true,
      },
    },
  };
}

/** A Policy of `rules` written to a temp dir, run as alice, whose approver records and answers `answer`. */
function paymentPolicy(t, asked, answer, rules = PAYMENT_RULES) {
  const file = join(tempDir(t), "policy.yaml");
  writeFileSync(file, rules);
  return new Policy({
    path: file,
    principal: "alice",
    approve: (request) => {
      asked.push(request);
      return answer;
    },
  });
}

test("a payment no rule matches runs without asking", async (t) => {
  const sent = [];
  const asked = [];
  const policy = paymentPolicy(t, asked, false);
  const ran = await run("return await pay.send({ amount: 50, to: 'bob' })", { tools: payments(sent), policy });
  assert.equal(ran.value, "sent", JSON.stringify(ran.error));
  assert.deepEqual(sent, [["send", 50, "bob"]]);
  assert.deepEqual(asked, []);
});

test("a rule sends a large payment for approval with its name and reason", async (t) => {
  const sent = [];
  const asked = [];
  const tools = payments(sent);
  const yes = paymentPolicy(t, asked, true);
  const ran = await run("return await pay.send({ amount: 500, to: 'bob' })", { tools, policy: yes });
  assert.equal(ran.value, "sent", JSON.stringify(ran.error));
  assert.equal(asked.length, 1);
  const [request] = asked;
  assert.equal(request.tool, "pay.send");
  assert.deepEqual(request.input, { amount: 500, to: "bob" });
  assert.equal(request.principal, "alice");
  assert.equal(request.rule, "rules[1]");
  assert.equal(request.reason, "payments over 100");
  assert.deepEqual(request.approvers, []);

  const no = paymentPolicy(t, asked, false);
  const [code, reason, message] = (
    await run(caught("pay.send({ amount: 700, to: 'mallory' })"), { tools, policy: no })
  ).value;
  assert.equal(code, "tool_error");
  assert.equal(reason, "approval_denied");
  assert.match(message, /pay\.send/);
  assert.equal(asked.length, 2);
  assert.equal(asked[1].rule, "rules[1]");
  assert.deepEqual(sent, [["send", 500, "bob"]]);
});

test("a rule naming approvers passes them to the approver", async (t) => {
  const rules = PAYMENT_RULES.replace(
    '    reason: "payments over 100"\n',
    '    reason: "payments over 100"\n    approvers: [finance, carol]\n',
  );
  assert.match(rules, /approvers: \[finance, carol\]/);
  const sent = [];
  const asked = [];
  const policy = paymentPolicy(t, asked, true, rules);
  const ran = await run("return await pay.send({ amount: 500, to: 'bob' })", { tools: payments(sent), policy });
  assert.equal(ran.value, "sent", JSON.stringify(ran.error));
  assert.deepEqual(
    asked.map((r) => [r.rule, r.reason, r.approvers]),
    [["rules[1]", "payments over 100", ["finance", "carol"]]],
  );
});

test("a rule blocks a huge payment without asking", async (t) => {
  const sent = [];
  const asked = [];
  const tools = payments(sent);
  const policy = paymentPolicy(t, asked, true);
  const [code, reason, message] = (
    await run(caught("pay.send({ amount: 5000000, to: 'bob' })"), { tools, policy })
  ).value;
  assert.equal(code, "tool_error");
  assert.equal(reason, "blocked");
  assert.equal(message, "pay.send: blocked by policy rules[0]: payments over a million are made by hand");
  // Uncaught, the result's error says the same.
  const { error } = await run("return await pay.send({ amount: 5000000, to: 'bob' })", { tools, policy });
  assert.equal(error.reason, "blocked");
  assert.match(error.message, /payments over a million are made by hand/);
  // A condition that cannot be evaluated (no amount) blocks too: it never lets a call through.
  const missing = (await run(caught("pay.send({ to: 'bob' })"), { tools, policy })).value;
  assert.equal(missing[1], "blocked");
  assert.match(missing[2], /rules\[0\]/);
  assert.deepEqual(sent, []);
  assert.deepEqual(asked, []);
});

test("an allow rule runs a tool that requires approval without asking", async (t) => {
  const sent = [];
  const asked = [];
  const tools = payments(sent);
  const policy = paymentPolicy(t, asked, false);
  const ran = await run("return await pay.refund({ amount: 5000, to: 'bob' })", { tools, policy });
  assert.equal(ran.value, "refunded", JSON.stringify(ran.error));
  assert.deepEqual(sent, [["refund", 5000, "bob"]]);
  assert.deepEqual(asked, []);
  // Without the rule, the tool's own requiresApproval asks (and this approver says no).
  const plain = new Policy({
    approve: (request) => {
      asked.push(request);
      return false;
    },
  });
  const [code, reason] = (await run(caught("pay.refund({ amount: 5, to: 'bob' })"), { tools, policy: plain })).value;
  assert.equal(code, "tool_error");
  assert.equal(reason, "approval_denied");
  assert.deepEqual(
    asked.map((r) => [r.tool, r.rule]),
    [["pay.refund", null]],
  );
});
