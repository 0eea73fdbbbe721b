"use strict";
// The public API of the npm package `execbox` (typed by index.d.ts, re-exported for ESM by
// index.mjs). It checks what users pass, then hands it to the native addon (the execbox host
// core through napi-rs: execbox.node in a checkout, else the platform package): executions run
// there, on pooled runner processes, and tool calls come back here through one dispatcher
// function per tool set.

const path = require("node:path");
const fs = require("node:fs");
const { fileURLToPath } = require("node:url");

const EXE = process.platform === "win32" ? ".exe" : "";

// The npm packages holding the addon and the runner, by platform (the napi-rs way: `execbox`
// names each as an optional dependency restricted to its os, cpu and libc, so npm installs the
// one that fits).
const PLATFORM_PACKAGES = {
  "linux-x64-gnu": "execbox-linux-x64-gnu",
  "linux-arm64-gnu": "execbox-linux-arm64-gnu",
};

/** `linux-x64-gnu` and the like: this process's platform, in npm's words. */
function platformKey() {
  const key = `${process.platform}-${process.arch}`;
  if (process.platform !== "linux") return key;
  const header = process.report && process.report.getReport ? process.report.getReport().header : {};
  return `${key}-${header && header.glibcVersionRuntime ? "gnu" : "musl"}`;
}

/**
 * Where the addon and the runner are: a build in this folder (a checkout after `npm run build`),
 * else the platform package npm installed beside this one.
 */
function locateNative() {
  const local = path.join(__dirname, "execbox.node");
  if (fs.existsSync(local)) {
    return { addon: local, runner: path.join(__dirname, "bin", `execbox-runner${EXE}`) };
  }
  const key = platformKey();
  const name = PLATFORM_PACKAGES[key];
  if (!name) {
    throw new Error(
      `execbox: there is no prebuilt package for ${key} (there are for ` +
        `${Object.keys(PLATFORM_PACKAGES).join(", ")}); build it from a checkout of the ` +
        "repository: `npm install && npm run build` in sdk/node, then `npm pack`",
    );
  }
  let dir;
  try {
    dir = path.dirname(require.resolve(`${name}/package.json`));
  } catch {
    throw new Error(
      `execbox: its native part for ${key}, the npm package ${name}, is not installed; npm ` +
        "installs it with execbox as an optional dependency: install again without " +
        `--omit=optional (or --no-optional), or install ${name} of the same version beside execbox`,
    );
  }
  const manifest = JSON.parse(fs.readFileSync(path.join(dir, "package.json"), "utf8"));
  return { addon: path.join(dir, manifest.main), runner: path.join(dir, "bin", `execbox-runner${EXE}`) };
}

const NATIVE = locateNative();
const native = require(NATIVE.addon);

/** The runner binary: `EXECBOX_RUNNER` when set, else the one shipped with the addon. */
function runnerPath() {
  const fromEnv = process.env.EXECBOX_RUNNER;
  if (fromEnv) return path.resolve(fromEnv);
  if (!fs.existsSync(NATIVE.runner)) {
    throw new Error(
      `execbox: the runner binary is missing (looked for ${NATIVE.runner}); ` +
        "reinstall the package, or in a checkout run `npm run build` in sdk/node, " +
        "or set EXECBOX_RUNNER to an execbox-runner binary",
    );
  }
  return NATIVE.runner;
}

function newExecutor(size, prewarm) {
  const runner = runnerPath();
  try {
    return new native.NativeExecutor(runner, size, prewarm);
  } catch (err) {
    throw new Error(`execbox: cannot start runners from ${runner}: ${err.message}`);
  }
}

// ---- options ---------------------------------------------------------------------------------

const LIMITS = ["timeoutMs", "memoryLimitBytes", "maxLogLines", "maxLogChars"];
const POSITIVE = new Set(["timeoutMs", "memoryLimitBytes"]);

function describe(value) {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  if (typeof value === "function") return "a function";
  if (typeof value === "object") return "an object";
  if (typeof value === "string") return `the string ${JSON.stringify(value.slice(0, 40))}`;
  return `${typeof value} ${String(value)}`;
}

function isPlainObject(value) {
  if (value === null || typeof value !== "object" || Array.isArray(value)) return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/** Checks `options` of `where` has only `allowed` keys; returns it (or `{}`). */
function checkKeys(options, where, allowed) {
  if (options === undefined || options === null) return {};
  if (typeof options !== "object" || Array.isArray(options)) {
    throw new TypeError(`${where} must be an object; got ${describe(options)}`);
  }
  for (const key of Object.keys(options)) {
    if (!allowed.includes(key)) {
      throw new TypeError(`${where}: unknown option ${JSON.stringify(key)}; the options are ${allowed.join(", ")}`);
    }
  }
  return options;
}

/** The limits set in `options` (checked), as the native side takes them. */
function pickLimits(options, where) {
  const limits = {};
  for (const key of LIMITS) {
    const value = options[key];
    if (value === undefined) continue;
    const min = POSITIVE.has(key) ? 1 : 0;
    if (typeof value !== "number" || !Number.isSafeInteger(value) || value < min) {
      throw new TypeError(
        `${where}.${key} must be a whole number of at least ${min}; got ${describe(value)}`,
      );
    }
    limits[key] = value;
  }
  return limits;
}

function checkSignal(signal, where) {
  if (signal === undefined || signal === null) return undefined;
  if (typeof signal !== "object" || typeof signal.aborted !== "boolean" || typeof signal.addEventListener !== "function") {
    throw new TypeError(`${where}.signal must be an AbortSignal; got ${describe(signal)}`);
  }
  return signal;
}

// ---- OpenAPI ---------------------------------------------------------------------------------

/** Reads the native provider of an `OpenApiProvider` (set in its static block). */
let nativeOpenApi;

/**
 * The operations of an OpenAPI 3.0 or 3.1 document as tools, made by `openapi({...})`: one tool
 * per operation, each call an HTTP request the host makes, with credentials the program never
 * sees. Give it as a namespace of `tools`.
 */
class OpenApiProvider {
  #native;

  constructor(handle) {
    if (!(handle instanceof native.NativeOpenApi)) {
      throw new TypeError("execbox: make an OpenApiProvider with openapi({ openapi: PATH, ... })");
    }
    this.#native = handle;
    /** The operations that are tools, named as the document names them. */
    this.operations = Object.freeze(handle.operations);
    /** The operations left out, and why: `[{ operation: "POST /upload", reason }]`. */
    this.skipped = Object.freeze(handle.skipped.map((s) => Object.freeze({ ...s })));
    Object.freeze(this);
  }

  static {
    nativeOpenApi = (value) => (value instanceof OpenApiProvider ? value.#native : undefined);
  }
}

/**
 * An OpenAPI provider from `config`, the fields of a tools file's OpenAPI provider as they are
 * spelt there (`openapi`, `base_url`, `auth`, `operations`, `headers`, `timeout_ms`,
 * `max_response_bytes`, and the shared `description`, `permissions`, `rate_limit`,
 * `requires_approval`). Relative paths resolve against `process.cwd()`. The document and the
 * secrets are read now: a bad field throws an Error naming it; left-out operations are listed in
 * `skipped` and reported with `process.emitWarning`.
 */
function openapi(config) {
  if (!isPlainObject(config)) {
    throw new TypeError(
      `openapi() takes the provider's configuration, like { openapi: "./api.json", base_url: "https://api.example.com" }; got ${describe(config)}`,
    );
  }
  let text;
  try {
    text = JSON.stringify(config, null, 1);
  } catch (err) {
    throw new TypeError(`openapi(): the configuration cannot be written as JSON: ${err.message}`);
  }
  let handle;
  try {
    handle = new native.NativeOpenApi(text, process.cwd());
  } catch (err) {
    throw new Error(`openapi(): ${err.message}`);
  }
  const provider = new OpenApiProvider(handle);
  if (provider.skipped.length > 0) {
    const listed = provider.skipped.map((s) => `${s.operation}: ${s.reason}`).join("; ");
    process.emitWarning(
      `openapi(${JSON.stringify(config.openapi)}): ${provider.skipped.length} operation(s) left out: ${listed}`,
      { type: "ExecboxWarning", code: "EXECBOX_OPENAPI_SKIPPED" },
    );
  }
  return provider;
}

// ---- tools -----------------------------------------------------------------------------------

const SPEC_KEYS = [
  "handler",
  "description",
  "inputSchema",
  "outputSchema",
  "permissions",
  "rateLimit",
  "requiresApproval",
];

function checkSchema(schema, where) {
  if (schema === undefined) return undefined;
  if (typeof schema !== "boolean" && !isPlainObject(schema)) {
    throw new TypeError(`${where} must be a JSON Schema (an object or a boolean); got ${describe(schema)}`);
  }
  try {
    return JSON.parse(JSON.stringify(schema));
  } catch (err) {
    throw new TypeError(`${where} cannot be written as JSON: ${err.message}`);
  }
}

/**
 * Checks `tools` ({ namespace: { name: fn | spec } }) and splits it into what the native side
 * needs (names, descriptions, schemas) and the handlers, indexed in the same order.
 */
function normalizeTools(tools) {
  const specs = [];
  const handlers = [];
  const labels = [];
  const apis = { names: [], handles: [] };
  if (tools === undefined || tools === null) return { specs, handlers, labels, apis };
  if (!isPlainObject(tools)) {
    throw new TypeError(`tools must be an object of namespaces, like { math: { add: (input) => ... } }; got ${describe(tools)}`);
  }
  for (const [namespace, members] of Object.entries(tools)) {
    const nsPath = `tools.${namespace}`;
    if (!/^[A-Za-z_$][A-Za-z0-9_$]*$/.test(namespace)) {
      throw new TypeError(`${nsPath}: a namespace must be a JavaScript identifier (letters, digits, _ and $, not starting with a digit)`);
    }
    const api = nativeOpenApi(members);
    if (api !== undefined) {
      apis.names.push(namespace);
      apis.handles.push(api);
      continue;
    }
    if (!isPlainObject(members)) {
      throw new TypeError(
        `${nsPath} must be an object of tools, like { add: (input) => ... }, or openapi({ ... }); got ${describe(members)}`,
      );
    }
    const list = [];
    for (const [name, tool] of Object.entries(members)) {
      const toolPath = `${nsPath}.${name}`;
      let spec;
      if (typeof tool === "function") {
        spec = { handler: tool };
      } else if (isPlainObject(tool)) {
        for (const key of Object.keys(tool)) {
          if (!SPEC_KEYS.includes(key)) {
            throw new TypeError(`${toolPath}: unknown field ${JSON.stringify(key)}; a tool is { ${SPEC_KEYS.join(", ")} }`);
          }
        }
        if (typeof tool.handler !== "function") {
          throw new TypeError(`${toolPath}.handler must be a function; got ${describe(tool.handler)}`);
        }
        spec = tool;
      } else {
        throw new TypeError(
          `${toolPath} must be a function or { handler, description?, inputSchema?, outputSchema?, permissions?, rateLimit?, requiresApproval? }; got ${describe(tool)}`,
        );
      }
      if (spec.description !== undefined && typeof spec.description !== "string") {
        throw new TypeError(`${toolPath}.description must be a string; got ${describe(spec.description)}`);
      }
      const permissions = spec.permissions;
      if (
        permissions !== undefined &&
        (!Array.isArray(permissions) || !permissions.every((p) => typeof p === "string"))
      ) {
        throw new TypeError(
          `${toolPath}.permissions must be an array of strings, like ["weather:read"]; got ${describe(permissions)}`,
        );
      }
      if (spec.rateLimit !== undefined && typeof spec.rateLimit !== "string") {
        throw new TypeError(
          `${toolPath}.rateLimit must be a string, like "100 per 1h" or "3/1m"; got ${describe(spec.rateLimit)}`,
        );
      }
      if (spec.requiresApproval !== undefined && typeof spec.requiresApproval !== "boolean") {
        throw new TypeError(`${toolPath}.requiresApproval must be a boolean; got ${describe(spec.requiresApproval)}`);
      }
      list.push({
        name,
        description: spec.description,
        inputSchema: checkSchema(spec.inputSchema, `${toolPath}.inputSchema`),
        outputSchema: checkSchema(spec.outputSchema, `${toolPath}.outputSchema`),
        permissions: permissions === undefined ? undefined : [...permissions],
        rateLimit: spec.rateLimit,
        requiresApproval: spec.requiresApproval === true,
      });
      handlers.push(spec.handler);
      labels.push(`${namespace}.${name}`);
    }
    specs.push({ namespace, tools: list });
  }
  return { specs, handlers, labels, apis };
}

// How a call is answered (the native `complete`'s kind).
const ANSWER_OK = 0;
const ANSWER_TOOL_ERROR = 1;
const ANSWER_SERIALIZATION_ERROR = 2;

function answer(callId, kind, text) {
  try {
    native.complete(callId, kind, text);
  } catch {
    // The call table refused the answer; the execution's time limit ends the call.
  }
}

function errorText(err) {
  if (err instanceof Error) return String(err.message);
  try {
    return String(err);
  } catch {
    return "the tool threw a value that cannot be shown";
  }
}

function succeed(callId, label, value) {
  let text;
  try {
    text = JSON.stringify(value === undefined ? null : value);
  } catch (err) {
    answer(callId, ANSWER_SERIALIZATION_ERROR, `${label} returned a value JSON cannot hold: ${errorText(err)}`);
    return;
  }
  if (text === undefined) {
    answer(callId, ANSWER_SERIALIZATION_ERROR, `${label} returned a value JSON cannot hold: ${describe(value)}`);
    return;
  }
  answer(callId, ANSWER_OK, text);
}

/**
 * The dispatcher of one tool set: the native side calls it as (callId, toolIndex, inputJson) on
 * the main thread. It never throws: every outcome goes back through `complete`.
 */
function makeDispatcher(handlers, labels) {
  return (callId, index, inputJson) => {
    const label = labels[index];
    try {
      const pending = handlers[index](JSON.parse(inputJson));
      // Reading `then` runs the tool's code too (a getter), so it stays inside the try.
      if (pending !== null && typeof pending === "object" && typeof pending.then === "function") {
        Promise.resolve(pending).then(
          (value) => succeed(callId, label, value),
          (err) => answer(callId, ANSWER_TOOL_ERROR, errorText(err)),
        );
      } else {
        succeed(callId, label, pending);
      }
    } catch (err) {
      answer(callId, ANSWER_TOOL_ERROR, errorText(err));
    }
  };
}

/** The native tool set of `tools`; a bad spec or schema is a TypeError naming it. */
function buildTools(tools) {
  const { specs, handlers, labels, apis } = normalizeTools(tools);
  try {
    return new native.NativeTools(
      JSON.stringify(specs),
      makeDispatcher(handlers, labels),
      apis.names,
      apis.handles,
    );
  } catch (err) {
    // A message naming its field (`tools.api.hit.rateLimit: ...`) needs no prefix.
    const message = String(err.message);
    throw new TypeError(message.startsWith("tools.") ? message : `tools: ${message}`);
  }
}

// ---- Policy ----------------------------------------------------------------------------------

const POLICY_OPTIONS = ["path", "principal", "approve", "auditLog", "state"];

/** The native enforcement of `policy` (checked: a TypeError naming `where` for anything but a Policy), or undefined. */
let nativePolicy;

/** A file path given as a string or a `file:` URL; `undefined` when unset. */
function checkPath(value, where) {
  if (value === undefined || value === null) return undefined;
  if (typeof value === "string" && value !== "") return value;
  if (value instanceof URL && value.protocol === "file:") return fileURLToPath(value);
  throw new TypeError(`${where} must be a file path (a string or a file: URL); got ${describe(value)}`);
}

function approvalWarning(err) {
  process.emitWarning(`execbox: the policy's approve function failed, so the call is denied: ${errorText(err)}`);
}

/**
 * The approver the native side calls as (id, tool, inputJson, principal, executionId, inputSha256,
 * rule, reason, approvers) on the main thread. It never throws: only `true` (or a Promise of it) approves, every other outcome
 * denies, and the answer goes back through `completeApproval`.
 */
function makeApprover(approve) {
  const settle = (id, approved) => {
    try {
      native.completeApproval(id, approved);
    } catch {
      // The table refused the answer; the execution's time limit ends the wait.
    }
  };
  return (id, tool, inputJson, principal, executionId, inputSha256, rule, reason, approvers) => {
    try {
      const request = {
        tool,
        input: JSON.parse(inputJson),
        principal: principal ?? null,
        executionId,
        inputSha256,
        rule: rule ?? null,
        reason: reason ?? null,
        approvers: Array.isArray(approvers) ? approvers : [],
      };
      const decision = approve(request);
      if (decision !== null && typeof decision === "object" && typeof decision.then === "function") {
        Promise.resolve(decision).then(
          (value) => settle(id, value === true),
          (err) => {
            approvalWarning(err);
            settle(id, false);
          },
        );
      } else {
        settle(id, decision === true);
      }
    } catch (err) {
      approvalWarning(err);
      settle(id, false);
    }
  };
}

/**
 * Who runs, what they may call, how often, who approves, and the audit log: the policy of the
 * executions given it (`run(code, { policy })`, `new Sandbox({ policy })`).
 */
class Policy {
  #native;
  #principal;

  constructor(options) {
    const opts = checkKeys(options, "Policy options", POLICY_OPTIONS);
    const policyPath = checkPath(opts.path, "Policy options.path");
    const auditLog = checkPath(opts.auditLog, "Policy options.auditLog");
    const state = checkPath(opts.state, "Policy options.state");
    const principal = opts.principal === null ? undefined : opts.principal;
    if (principal !== undefined && typeof principal !== "string") {
      throw new TypeError(`Policy options.principal must be a string; got ${describe(principal)}`);
    }
    const approve = opts.approve === null ? undefined : opts.approve;
    if (approve !== undefined && typeof approve !== "function") {
      throw new TypeError(`Policy options.approve must be a function; got ${describe(approve)}`);
    }
    try {
      this.#native = new native.NativePolicy(
        policyPath,
        principal,
        auditLog,
        state,
        approve === undefined ? undefined : makeApprover(approve),
      );
    } catch (err) {
      throw new Error(`execbox: ${err.message}`);
    }
    this.#principal = principal;
  }

  /** Who runs (the `principal` given), or undefined. */
  get principal() {
    return this.#principal;
  }

  static {
    nativePolicy = (policy, where) => {
      if (policy === undefined || policy === null) return undefined;
      if (!(policy instanceof Policy)) {
        throw new TypeError(
          `${where}.policy must be an execbox Policy (new Policy({ ... })); got ${describe(policy)}`,
        );
      }
      return policy.#native;
    };
  }
}

// ---- executions ------------------------------------------------------------------------------

function abortReason(signal) {
  if (signal.reason !== undefined) return signal.reason;
  return new DOMException("This operation was aborted", "AbortError");
}

/** The default limit of `forModel`, as `execbox mcp`'s `execute_code`. */
const MAX_ANSWER_CHARS = 24000;

function checkMaxChars(value, where) {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 1 || value > 0xffffffff) {
    throw new TypeError(`${where} must be a whole number of at least 1; got ${describe(value)}`);
  }
  return value;
}

function hidden(target, name, value) {
  Object.defineProperty(target, name, { value, enumerable: false, writable: false, configurable: true });
}

function toResult(raw) {
  const result = {
    ok: raw.ok,
    value: raw.valueJson == null ? undefined : JSON.parse(raw.valueJson),
    logs: raw.logs,
    durationMs: raw.durationMs,
  };
  let errorCode = null;
  let errorText = null;
  if (!raw.ok && raw.error) {
    const e = raw.error;
    const error = { code: e.code, message: e.message };
    if (e.name != null) error.name = e.name;
    if (e.reason != null) error.reason = e.reason;
    if (e.retryAfterMs != null) error.retryAfterMs = e.retryAfterMs;
    if (e.location != null) {
      const l = e.location;
      error.location = { line: l.line, column: l.column };
      if (l.source != null) error.location.source = l.source;
      if (l.caret != null) error.location.caret = l.caret;
    }
    error.text = e.text;
    hidden(error, "toString", function toString() {
      return this.text;
    });
    result.error = error;
    errorCode = e.code;
    errorText = e.text;
  }
  const valueJson = raw.valueJson == null ? null : raw.valueJson;
  hidden(result, "forModel", function forModel(options) {
    const opts = checkKeys(options, "forModel options", ["maxChars"]);
    const maxChars =
      opts.maxChars === undefined ? MAX_ANSWER_CHARS : checkMaxChars(opts.maxChars, "forModel options.maxChars");
    return native.modelAnswer(valueJson, errorCode, errorText, this.logs, maxChars);
  });
  return result;
}

/** Runs `code` on `executor` with `nativeTools`, `limits`, `signal` and `policy` (native). */
async function execute(executor, nativeTools, code, limits, signal, policy) {
  if (signal && signal.aborted) throw abortReason(signal);
  let cancel;
  let onAbort;
  if (signal) {
    cancel = new native.NativeCancel();
    onAbort = () => cancel.cancel();
    signal.addEventListener("abort", onAbort, { once: true });
  }
  try {
    const raw = await executor.execute(code, nativeTools, limits, cancel, policy);
    if (raw.cancelled && signal && signal.aborted) throw abortReason(signal);
    return toResult(raw);
  } finally {
    if (signal) signal.removeEventListener("abort", onAbort);
  }
}

function checkCode(code, where) {
  if (typeof code !== "string") {
    throw new TypeError(`${where}: code must be a string of JavaScript; got ${describe(code)}`);
  }
}

// ---- the module-wide pool of run() -----------------------------------------------------------

let shared;

function sharedExecutor() {
  if (!shared) shared = newExecutor(4, false);
  return shared;
}

const RUN_OPTIONS = ["tools", "policy", ...LIMITS, "signal"];

/** Runs `code` once, with `options.tools`, on a module-wide pool of runners. */
async function run(code, options) {
  checkCode(code, "run");
  const opts = checkKeys(options, "run options", RUN_OPTIONS);
  const limits = pickLimits(opts, "run options");
  const signal = checkSignal(opts.signal, "run options");
  const policy = nativePolicy(opts.policy, "run options");
  const tools = opts.tools === undefined || opts.tools === null ? null : buildTools(opts.tools);
  return execute(sharedExecutor(), tools, code, limits, signal, policy);
}

// ---- Sandbox ---------------------------------------------------------------------------------

// What the model APIs accept as a function's name (OpenAI's rule, the strictest of them).
const TOOL_NAME = /^[A-Za-z0-9_-]{1,64}$/;

/** The JSON schema of a code tool's input, `{ code }`. */
function codeInputSchema() {
  return {
    type: "object",
    properties: {
      code: {
        type: "string",
        description: "The program: the body of an async function (top-level `await`; `return` the result).",
      },
    },
    required: ["code"],
    additionalProperties: false,
  };
}

const SANDBOX_OPTIONS = ["tools", "policy", "pool", ...LIMITS];
const SANDBOX_RUN_OPTIONS = [...LIMITS, "signal"];

class Sandbox {
  #executor;
  #tools;
  #limits;
  #policy;
  #closed = false;

  constructor(options) {
    const opts = checkKeys(options, "Sandbox options", SANDBOX_OPTIONS);
    const pool = opts.pool === undefined ? 4 : opts.pool;
    if (typeof pool !== "number" || !Number.isSafeInteger(pool) || pool < 1 || pool > 1024) {
      throw new TypeError(`Sandbox options.pool must be a whole number from 1 to 1024; got ${describe(pool)}`);
    }
    this.#limits = pickLimits(opts, "Sandbox options");
    this.#policy = nativePolicy(opts.policy, "Sandbox options");
    this.#tools = buildTools(opts.tools);
    this.#executor = newExecutor(pool, true);
  }

  /** Runs `code`; concurrent calls share the pool. */
  async run(code, options) {
    checkCode(code, "Sandbox.run");
    if (this.#closed) throw new Error("execbox: this Sandbox is closed; create a new Sandbox to run more code");
    const opts = checkKeys(options, "Sandbox.run options", SANDBOX_RUN_OPTIONS);
    const limits = { ...this.#limits, ...pickLimits(opts, "Sandbox.run options") };
    const signal = checkSignal(opts.signal, "Sandbox.run options");
    return execute(this.#executor, this.#tools, code, limits, signal, this.#policy);
  }

  /**
   * This sandbox as one tool for a model: `{ name, description, inputSchema, handler }`. The
   * description holds the rules of a program, the limits, the answer's shape and the
   * declarations of the tools; `handler({ code })` runs the program and resolves with
   * `result.forModel({ maxChars: maxAnswerChars })`. `execbox/ai` and `execbox/langchain`
   * make it a tool of those frameworks.
   */
  tool(options) {
    const opts = checkKeys(options, "Sandbox.tool options", ["name", "maxAnswerChars"]);
    const name = opts.name === undefined ? "execute_code" : opts.name;
    if (typeof name !== "string" || !TOOL_NAME.test(name)) {
      throw new TypeError(
        `Sandbox.tool options.name must be 1 to 64 letters, digits, '_' or '-' (what model APIs accept as a tool's name); got ${describe(name)}`,
      );
    }
    const maxChars =
      opts.maxAnswerChars === undefined
        ? MAX_ANSWER_CHARS
        : checkMaxChars(opts.maxAnswerChars, "Sandbox.tool options.maxAnswerChars");
    const sandbox = this;
    return {
      name,
      description: this.#tools.codeToolDescription(this.#limits, maxChars),
      inputSchema: codeInputSchema(),
      maxAnswerChars: maxChars,
      async handler(input, options) {
        const code = input !== null && typeof input === "object" ? input.code : undefined;
        if (typeof code !== "string") {
          throw new TypeError(`${name}: the input must be { code: string } holding the program; got ${describe(input)}`);
        }
        const signal = options && options.signal ? { signal: options.signal } : undefined;
        const result = await sandbox.run(code, signal);
        return result.forModel({ maxChars });
      },
    };
  }

  /** The TypeScript declarations of this sandbox's tools. */
  types() {
    return this.#tools.declarations();
  }

  /** A prompt describing this sandbox (its limits and tools) to a model. */
  prompt() {
    return this.#tools.prompt(this.#limits);
  }

  /** Ends idle runners; later `run` calls reject. Executions in flight run to their end. */
  close() {
    if (this.#closed) return;
    this.#closed = true;
    this.#executor.close();
  }

  /** Whether `close()` was called. */
  get closed() {
    return this.#closed;
  }
}

if (typeof Symbol.dispose === "symbol") {
  Sandbox.prototype[Symbol.dispose] = function dispose() {
    this.close();
  };
}

// ---- declarations and prompts ----------------------------------------------------------------

/** The TypeScript declarations of `tools`, as the sandboxed program sees them. */
function types(tools) {
  return buildTools(tools).declarations();
}

const PROMPT_OPTIONS = [...LIMITS];

/** A prompt-ready description of a sandbox with `tools` and the limits in `options`. */
function prompt(tools, options) {
  const opts = checkKeys(options, "prompt options", PROMPT_OPTIONS);
  return buildTools(tools).prompt(pickLimits(opts, "prompt options"));
}

module.exports = { run, Sandbox, Policy, types, prompt, openapi, OpenApiProvider };
