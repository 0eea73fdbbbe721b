// openapi({...}): an OpenAPI document's operations as tools, against a real local HTTP server
// (the same cases as the Python SDK's tests/test_openapi.py).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { openapi, OpenApiProvider, run, Sandbox, Policy, types } from "../index.mjs";

const SECRET = "s3cr3t-planted-token-4b1d";
const TOKEN_ENV = "EXECBOX_TEST_PETS_TOKEN";

const DOCUMENT = {
  openapi: "3.0.3",
  info: { title: "Pets", version: "1", description: "A small pet store." },
  paths: {
    "/pets": {
      get: {
        operationId: "listPets",
        summary: "List pets",
        parameters: [{ name: "limit", in: "query", schema: { type: "integer" } }],
        responses: { 200: { description: "pets" } },
      },
      post: {
        operationId: "createPet",
        summary: "Create a pet",
        requestBody: {
          required: true,
          content: {
            "application/json": {
              schema: { type: "object", required: ["name"], properties: { name: { type: "string" } } },
            },
          },
        },
        responses: { 201: { description: "created" } },
      },
    },
    "/pets/{petId}": {
      get: {
        operationId: "getPet",
        summary: "One pet",
        parameters: [{ name: "petId", in: "path", required: true, schema: { type: "string" } }],
        responses: { 200: { description: "a pet" } },
      },
    },
    "/echo": {
      get: {
        operationId: "echoHeaders",
        summary: "The request's headers, as the server saw them",
        responses: { 200: { description: "headers" } },
      },
    },
    "/upload": {
      post: {
        operationId: "upload",
        requestBody: { content: { "multipart/form-data": { schema: { type: "object" } } } },
        responses: { 200: { description: "ok" } },
      },
    },
  },
};

/** The Authorization header of every request the server saw. */
const seen = [];
let server;
let baseUrl;
let dir;
let documentPath;
const warnings = [];

function answer(res, status, value) {
  const body = JSON.stringify(value);
  res.writeHead(status, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(body) });
  res.end(body);
}

before(async () => {
  server = createServer((req, res) => {
    seen.push(req.headers.authorization);
    const url = new URL(req.url, "http://localhost");
    let body = "";
    req.on("data", (chunk) => (body += chunk));
    req.on("end", () => {
      if (req.method === "POST" && url.pathname === "/pets") {
        answer(res, 201, { created: JSON.parse(body), type: req.headers["content-type"] });
      } else if (url.pathname === "/pets") {
        const limit = Number(url.searchParams.get("limit") ?? 10);
        answer(res, 200, Array.from({ length: limit }, (_, i) => ({ id: String(i), name: `pet${i}` })));
      } else if (url.pathname === "/echo") {
        answer(res, 200, req.headers);
      } else if (url.pathname === "/pets/404") {
        answer(res, 404, { message: "no such pet" });
      } else if (url.pathname.startsWith("/pets/")) {
        answer(res, 200, { id: url.pathname.slice("/pets/".length), name: "Rex" });
      } else {
        answer(res, 404, { message: "no route" });
      }
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  baseUrl = `http://127.0.0.1:${server.address().port}`;
  dir = mkdtempSync(join(tmpdir(), "execbox-openapi-"));
  documentPath = join(dir, "pets.json");
  writeFileSync(documentPath, JSON.stringify(DOCUMENT));
  process.env[TOKEN_ENV] = SECRET;
  process.on("warning", (w) => warnings.push(w));
});

after(() => {
  server.close();
  rmSync(dir, { recursive: true, force: true });
  delete process.env[TOKEN_ENV];
});

function pets(extra) {
  return openapi({
    openapi: documentPath,
    base_url: baseUrl,
    auth: { bearer: { env: TOKEN_ENV } },
    timeout_ms: 5000,
    ...extra,
  });
}

const PROGRAM = `
const pet = await pets.getPet({ petId: "7" });
const list = await pets.listPets({ limit: 2 });
const made = await pets.createPet({ body: { name: "Tom" } });
const echoed = await pets.echoHeaders();
console.log("echoed", JSON.stringify(echoed));
let failed;
try { await pets.getPet({ petId: "404" }); } catch (e) {
  failed = { code: e.code, reason: e.reason, message: e.message };
  console.log("failed", e.message);
}
return { pet, list, made, failed, auth: echoed.authorization };
`;

test("a program calls operations, and the token stays on the host", async () => {
  seen.length = 0;
  const api = pets();
  assert.ok(api instanceof OpenApiProvider);
  assert.deepEqual(api.operations, ["listPets", "createPet", "getPet", "echoHeaders"]);
  assert.equal(api.skipped.length, 1);
  assert.equal(api.skipped[0].operation, "POST /upload");
  assert.match(api.skipped[0].reason, /multipart/);
  // Warnings are emitted on the next tick.
  await new Promise((resolve) => setImmediate(resolve));
  const warning = warnings.find((w) => w.code === "EXECBOX_OPENAPI_SKIPPED");
  assert.ok(warning, "a left-out operation is reported with process.emitWarning");
  assert.match(warning.message, /1 operation\(s\) left out: POST \/upload: /);

  const auditLog = join(dir, "audit.jsonl");
  const sandbox = new Sandbox({ tools: { pets: api }, pool: 1, policy: new Policy({ auditLog }) });
  let result;
  let declarations;
  let prompt;
  try {
    result = await sandbox.run(PROGRAM);
    declarations = sandbox.types();
    prompt = sandbox.prompt();
  } finally {
    sandbox.close();
  }
  assert.equal(result.ok, true, String(result.error));
  const value = result.value;
  assert.deepEqual(value.pet, { id: "7", name: "Rex" });
  assert.deepEqual(value.list, [
    { id: "0", name: "pet0" },
    { id: "1", name: "pet1" },
  ]);
  assert.deepEqual(value.made, { created: { name: "Tom" }, type: "application/json" });
  assert.equal(value.failed.code, "tool_error");
  assert.equal(value.failed.reason, "http_status");
  assert.match(value.failed.message, /404/);
  assert.match(value.failed.message, /no such pet/);
  // The token reached the server with every call, and the program saw it redacted.
  assert.ok(seen.length > 0);
  for (const header of seen) assert.equal(header, `Bearer ${SECRET}`);
  assert.equal(value.auth, "Bearer [redacted]");
  // The declarations name the operations, with what the document says of them.
  for (const name of ["getPet", "listPets", "createPet", "echoHeaders", "List pets"]) {
    assert.ok(declarations.includes(name), `${name} in the declarations`);
  }
  assert.ok(!declarations.includes("upload"));
  // The planted secret is nowhere: the result, its logs and errors, the declarations, the
  // prompt, the audit log, the warnings.
  const audit = readFileSync(auditLog, "utf8");
  assert.match(audit, /getPet/, "the policy audits OpenAPI calls as any tool's");
  const everything = [
    JSON.stringify(result),
    JSON.stringify(value),
    ...result.logs,
    declarations,
    prompt,
    audit,
    ...warnings.map((w) => w.message),
  ];
  for (const text of everything) assert.ok(!text.includes(SECRET), text);
});

test("run and types take a provider too; a failing program keeps the secret", async () => {
  const api = pets({ operations: { exclude: ["upload"] } });
  assert.deepEqual(api.skipped, []);
  const result = await run('await pets.getPet({ petId: "404" })', { tools: { pets: api }, timeoutMs: 10_000 });
  assert.equal(result.ok, false);
  assert.equal(result.error.code, "tool_error");
  assert.equal(result.error.reason, "http_status");
  assert.match(result.error.message, /HTTP 404/);
  assert.match(result.error.message, /GET \/pets\/\{petId\}/);
  assert.ok(!String(result.error).includes(SECRET));
  assert.ok(!JSON.stringify(result).includes(SECRET));
  assert.match(types({ pets: api }), /getPet/);
  // Input is checked against the operation's schema before any request.
  seen.length = 0;
  const bad = await run('return await pets.getPet({ id: "7" })', { tools: { pets: api } });
  assert.equal(bad.error.code, "validation_error");
  assert.deepEqual(seen, []);
});

test("a namespace of JavaScript tools sits beside a provider", async () => {
  const tools = { pets: pets({ operations: { include: ["getPet"] } }), math: { double: ({ n }) => n * 2 } };
  const code = 'const p = await pets.getPet({ petId: "3" }); return await math.double({ n: Number(p.id) })';
  assert.equal((await run(code, { tools })).value, 6);
});

test("a relative document path resolves against the working directory", async () => {
  const cwd = process.cwd();
  process.chdir(dir);
  let api;
  try {
    api = openapi({ openapi: "pets.json", base_url: baseUrl, operations: { include: ["getPet"] } });
  } finally {
    process.chdir(cwd);
  }
  seen.length = 0;
  const result = await run('return await pets.getPet({ petId: "1" })', { tools: { pets: api } });
  assert.deepEqual(result.value, { id: "1", name: "Rex" });
  assert.deepEqual(seen, [undefined]);
});

test("bad configurations throw errors naming the field", () => {
  const base = "http://127.0.0.1:9";
  const errorOf = (config) => {
    let message;
    assert.throws(
      () => openapi({ openapi: documentPath, base_url: base, ...config }),
      (err) => {
        message = err.message;
        return err instanceof Error;
      },
    );
    assert.ok(message.startsWith("openapi(): "), message);
    // People and models read these: no Rust type names.
    for (const rust of ["struct", "enum ", "OpenApiConfig", "AuthConfig", "Secret"]) {
      assert.ok(!message.includes(rust), message);
    }
    return message;
  };
  assert.equal(
    errorOf({ timeout: 5 }),
    "openapi(): unknown field `timeout`; did you mean `timeout_ms`? (expected one of `openapi`, " +
      "`base_url`, `auth`, `operations`, `headers`, `timeout_ms`, `max_response_bytes`, " +
      "`description`, `permissions`, `rate_limit`, `requires_approval`)",
  );
  assert.equal(
    errorOf({ auth: { bearer: { environment: "X" } } }),
    "openapi(): auth.bearer: unknown kind `environment` (expected one of `env`, `file`)",
  );
  delete process.env.EXECBOX_TEST_SURELY_UNSET;
  assert.equal(
    errorOf({ auth: { bearer: { env: "EXECBOX_TEST_SURELY_UNSET" } } }),
    "openapi(): auth.bearer: the environment variable EXECBOX_TEST_SURELY_UNSET is not set; export " +
      "it, or give the secret as `file: PATH`",
  );
  assert.match(errorOf({ operations: { includes: ["x"] } }), /operations: .*did you mean `include`\?/);
  assert.match(errorOf({ timeout_ms: 0 }), /^openapi\(\): timeout_ms: .*from 1/);
  assert.match(errorOf({ openapi: join(dir, "missing.json") }), /cannot read the OpenAPI document/);
  // A secret is named, never written: a token given as a value is refused without quoting it.
  for (const auth of [
    { bearer: SECRET },
    { bearer: { value: SECRET } },
    { basic: { username: { env: "U" }, password: SECRET } },
    { api_key: { in: "header", name: "X-Key", value: SECRET } },
    { oauth2_client_credentials: { token_url: base, client_id: "a", client_secret: SECRET } },
  ]) {
    const message = errorOf({ auth });
    assert.match(message, /a secret is named here, never written/);
    assert.ok(!message.includes(SECRET), message);
  }
  assert.throws(() => openapi("pets.json"), TypeError);
  assert.throws(() => new OpenApiProvider({}), TypeError);
});

test("policy requirements apply to every operation", async () => {
  const asked = [];
  const approve = (request) => {
    asked.push(request.tool);
    return request.input.petId !== "13";
  };
  const api = pets({
    auth: undefined,
    operations: { exclude: ["upload"] },
    requires_approval: true,
    rate_limit: { requests: 2, window: "1h" },
    description: "Pets, approved one call at a time",
  });
  seen.length = 0;
  const sandbox = new Sandbox({ tools: { pets: api }, pool: 1, policy: new Policy({ approve }) });
  try {
    const denied = await sandbox.run(
      'const ok = await pets.getPet({ petId: "1" });' +
        'try { await pets.getPet({ petId: "13" }) } catch (e) { return [ok, e.code, e.reason] }',
    );
    assert.deepEqual(denied.value, [{ id: "1", name: "Rex" }, "tool_error", "approval_denied"]);
    assert.match(sandbox.types(), /Pets, approved one call at a time/);
    // Two calls per hour of each operation: the third is refused.
    const limited = await sandbox.run(
      "for (let i = 0; i < 3; i++) {" +
        "  try { await pets.listPets({ limit: 1 }) } catch (e) { return [i, e.code, e.reason] }" +
        "}",
    );
    assert.deepEqual(limited.value, [2, "tool_error", "rate_limited"]);
  } finally {
    sandbox.close();
  }
  assert.deepEqual(asked.slice(0, 2), ["pets.getPet", "pets.getPet"]);
  assert.deepEqual(seen, [undefined, undefined, undefined]);
  // Without a policy the calls are refused, not run unguarded.
  const refused = await run('return await pets.getPet({ petId: "1" })', { tools: { pets: api } });
  assert.equal(refused.error.code, "tool_error");
  assert.match(refused.error.message, /policy/);
  assert.equal(seen.length, 3);
  assert.throws(() => pets({ rate_limit: "often" }), /^Error: openapi\(\): rate_limit: /);
  assert.throws(() => pets({ permissions: ["has space"] }), /^Error: openapi\(\): permissions: /);
});
