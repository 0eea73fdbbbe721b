// The MCP conformance suite's client under test, played by execbox: `node client.mjs URL` (the
// suite appends the URL of the scenario's server) does what a user and a model would do with
// `execbox mcp` in front of that server.
//
// 1. Writes an mcp.json naming the server `server` (with an `oauth` block where the scenario
//    gives credentials in MCP_CONFORMANCE_CONTEXT, or a client metadata URL for auth/basic-cimd).
// 2. For the authorization-code scenarios, signs in first: `execbox mcp login server` with
//    BROWSER = `node browser.mjs` (which follows the redirects to execbox's loopback listener)
//    and XDG_STATE_HOME in a temporary folder.
// 3. Starts `execbox mcp --config mcp.json` over stdio with the official SDK's client, reads the
//    index in `execute_code`'s description and runs a program calling the server's tool.
// 4. When the index or the answer says to run `execbox mcp login server`, does so and tries
//    again, at most 3 sign-ins in all: that is the user's part; refusing a sign-in that cannot
//    help (auth/scope-retry-limit) is execbox's.
//
// Exit 0 when execbox behaved as it should, 1 otherwise; what happened goes to stderr.
// Environment: EXECBOX_BIN (the binary, required), CONFORMANCE_NODE_MODULES (the folder holding
// @modelcontextprotocol/sdk; default: target/tmp/conformance-tests/node_modules of this
// checkout), CONFORMANCE_CLIENT_TIMEOUT_MS (the whole run, 50 s), CONFORMANCE_KEEP=1 (keep the
// temporary folder).

import { spawn } from "node:child_process";
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const started = Date.now();
const budget = Number(process.env.CONFORMANCE_CLIENT_TIMEOUT_MS || 50000);
const deadline = started + budget;
const NAME = "server";
const LOGIN = `execbox mcp login ${NAME}`;
const MAX_SIGN_INS = 3;

const log = (line) =>
  console.error(`[adapter +${((Date.now() - started) / 1000).toFixed(1)}s] ${line}`);

function fail(why) {
  log(`FAIL: ${why}`);
  cleanUp();
  process.exit(1);
}

function pass(what) {
  log(`PASS: ${what}`);
  cleanUp();
  process.exit(0);
}

const bin = process.env.EXECBOX_BIN;
if (!bin) fail("EXECBOX_BIN is not set: it names the execbox binary under test");
const serverUrl = process.argv[process.argv.length - 1];
if (!/^https?:\/\//.test(serverUrl ?? "")) fail(`usage: node client.mjs URL (got ${serverUrl})`);
const scenario = process.env.MCP_CONFORMANCE_SCENARIO ?? "";
const context = JSON.parse(process.env.MCP_CONFORMANCE_CONTEXT || "{}");

const modules =
  process.env.CONFORMANCE_NODE_MODULES ||
  join(here, "../../../target/tmp/conformance-tests/node_modules");
const sdk = (path) =>
  import(pathToFileURL(join(modules, "@modelcontextprotocol/sdk/dist/esm", path)).href);
const { Client } = await sdk("client/index.js");
const { StdioClientTransport } = await sdk("client/stdio.js");

const work = mkdtempSync(join(tmpdir(), "execbox-conformance-"));
function cleanUp() {
  if (process.env.CONFORMANCE_KEEP === "1") {
    console.error(`[adapter] kept ${work}`);
  } else {
    rmSync(work, { recursive: true, force: true });
  }
}

// What execbox reads besides the config: its own state folders, and secrets through variables.
const env = {
  ...process.env,
  XDG_STATE_HOME: join(work, "state"),
  EXECBOX_HOME: join(work, "home"),
  BROWSER: `${process.execPath} ${join(here, "browser.mjs")}`,
};

/// The `oauth` block the scenario calls for, or none (discovery and dynamic registration).
function oauthBlock() {
  if (scenario === "auth/basic-cimd") {
    return { client_metadata_url: "https://conformance-test.local/client-metadata.json" };
  }
  if (scenario.startsWith("auth/client-credentials")) {
    const block = { grant: "client_credentials", client_id: context.client_id };
    if (context.client_secret !== undefined) {
      env.CONFORMANCE_CLIENT_SECRET = context.client_secret;
      block.client_secret = { env: "CONFORMANCE_CLIENT_SECRET" };
    }
    if (context.private_key_pem !== undefined) {
      const key = join(work, "client-key.pem");
      writeFileSync(key, context.private_key_pem, { mode: 0o600 });
      chmodSync(key, 0o600);
      block.private_key = { file: key };
      if (context.signing_algorithm) block.signing_algorithm = context.signing_algorithm;
    }
    return block;
  }
  return undefined;
}

const entry = { url: serverUrl };
const oauth = oauthBlock();
if (oauth) entry.oauth = oauth;
const config = join(work, "mcp.json");
writeFileSync(config, JSON.stringify({ mcpServers: { [NAME]: entry } }, null, 2));
log(`scenario ${scenario || "(none)"}: ${serverUrl}; mcp.json: ${JSON.stringify(entry)}`);

// What a program calls on each scenario's server, and the value it must get back.
const program =
  scenario === "tools_call"
    ? { code: `return await ${NAME}.add_numbers({ a: 5, b: 3 })`, expect: "The sum of 5 and 3 is 8" }
    : scenario.startsWith("auth/")
      ? { code: `return await ${NAME}.test_tool({})`, expect: "test" }
      : { code: "return 'execbox runs programs'", expect: "execbox runs programs" };
const signsInFirst = scenario.startsWith("auth/") && !scenario.startsWith("auth/client-credentials");
// auth/scope-retry-limit's server refuses every call for a scope it already granted: the right
// end is execbox's login saying that signing in again will not help.
const hopeless = scenario === "auth/scope-retry-limit";

const remaining = () => deadline - Date.now();

function within(promise, ms, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

/// `execbox mcp login server`, bounded; resolves to {code, stdout, stderr}.
function login() {
  const ms = Math.max(1000, Math.min(20000, remaining() - 5000));
  const args = ["mcp", "login", NAME, "--config", config, "--timeout-ms", String(ms)];
  log(`$ execbox ${args.join(" ")}`);
  return new Promise((resolve) => {
    const child = spawn(bin, args, { env, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    const timer = setTimeout(() => {
      stderr += `\n[adapter] login still running after ${ms + 3000} ms: killed`;
      child.kill("SIGKILL");
    }, ms + 3000);
    child.on("error", (e) => {
      clearTimeout(timer);
      resolve({ code: -1, stdout, stderr: `${stderr}\ncannot start ${bin}: ${e.message}` });
    });
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      for (const line of stderr.trimEnd().split("\n")) if (line) log(`login stderr: ${line}`);
      for (const line of stdout.trimEnd().split("\n")) if (line) log(`login stdout: ${line}`);
      log(`login exited with ${code ?? signal}`);
      resolve({ code: code ?? -1, stdout, stderr });
    });
  });
}

/// The line of execute_code's index about our server, with the lines of its tools.
function indexOf(description) {
  const lines = description.split("\n");
  const at = lines.findIndex((l) => l.startsWith(`${NAME} (`));
  if (at < 0) return "";
  const out = [lines[at]];
  for (const l of lines.slice(at + 1)) {
    if (!l.startsWith("  ")) break;
    out.push(l);
  }
  return out.join("\n");
}

/// One `execbox mcp` session: {outcome: "called" | "login" | "hopeless" | "error", detail}
/// ("hopeless": execbox itself says that signing in again will not help).
async function session() {
  const transport = new StdioClientTransport({
    command: bin,
    args: ["mcp", "--config", config],
    env,
    stderr: "pipe",
  });
  transport.stderr?.on("data", (d) => {
    for (const line of String(d).trimEnd().split("\n")) log(`execbox mcp: ${line}`);
  });
  const client = new Client({ name: "execbox-conformance-adapter", version: "1.0.0" });
  try {
    await within(client.connect(transport), Math.max(1000, remaining()), "initialize");
    const listed = await within(client.listTools(), Math.max(1000, remaining()), "tools/list");
    const execute = listed.tools.find((t) => t.name === "execute_code");
    if (!execute) return { outcome: "error", detail: "execute_code is not listed" };
    const index = indexOf(execute.description ?? "");
    log(`index: ${index || `(no line for ${NAME})`}`);
    const unavailable = /UNAVAILABLE/.test(index);
    if (unavailable && scenario === "initialize") {
      return { outcome: "error", detail: `the server is unavailable: ${index}` };
    }
    log(`execute_code: ${program.code}`);
    const answer = await within(
      client.callTool({ name: "execute_code", arguments: { code: program.code } }),
      Math.max(1000, remaining()),
      "execute_code",
    );
    const value = answer.structuredContent ?? JSON.parse(answer.content?.[0]?.text ?? "null");
    log(`answer: ${JSON.stringify(value)}`);
    if (value?.ok) {
      if (unavailable) {
        return { outcome: "error", detail: "the index said unavailable, yet the call worked" };
      }
      if (JSON.stringify(value.result) !== JSON.stringify(program.expect)) {
        return {
          outcome: "error",
          detail: `the program returned ${JSON.stringify(value.result)}, not ${JSON.stringify(program.expect)}`,
        };
      }
      return { outcome: "called", detail: value.result };
    }
    const said = `${index}\n${value?.error?.message ?? ""}`;
    if (hopeless && saysHopeless(said) && !said.includes(LOGIN)) {
      return { outcome: "hopeless", detail: said };
    }
    if (said.includes(LOGIN)) {
      return { outcome: "login", detail: value?.error?.message ?? index };
    }
    return { outcome: "error", detail: `the program failed: ${JSON.stringify(value?.error)}` };
  } catch (error) {
    return { outcome: "error", detail: error.message };
  } finally {
    await within(client.close(), 5000, "closing execbox mcp").catch((e) => log(e.message));
  }
}

// A login that refused because signing in again would not help (the scope asked for was
// granted already and the server still refuses).
const saysHopeless = (text) =>
  /(will|would|can) ?not help|won't help|cannot help|already (been )?granted/i.test(text);

const timer = setTimeout(() => fail(`not done within ${budget} ms`), budget);
timer.unref();

let signIns = 0;
async function signIn() {
  signIns += 1;
  const result = await login();
  if (result.code === 0) return;
  if (hopeless && signIns > 1 && saysHopeless(result.stderr)) {
    pass(`sign-in ${signIns} refused: signing in again will not help (exit ${result.code})`);
  }
  fail(`execbox mcp login exited with ${result.code}: ${result.stderr.trim().split("\n").pop()}`);
}

if (signsInFirst) await signIn();
for (;;) {
  const { outcome, detail } = await session();
  if (outcome === "called") {
    if (hopeless) fail(`the call worked against a server that refuses every call: ${detail}`);
    pass(`the program returned ${JSON.stringify(detail)} after ${signIns} sign-in(s)`);
  }
  if (outcome === "error") fail(detail);
  if (outcome === "hopeless") pass(`execbox mcp says signing in again will not help: ${detail}`);
  log(`execbox says to sign in: ${detail}`);
  if (signIns >= MAX_SIGN_INS) {
    fail(`still asked to sign in after ${signIns} sign-ins (execbox should refuse a sign-in that cannot help)`);
  }
  await signIn();
}
