// The peer of execbox's SDK benchmarks: quickjs-emscripten in-process (QuickJS compiled to
// WebAssembly, inside Node.js), doing per execution what the reference TypeScript project's
// QuickJS executor does: a fresh runtime and context with a memory limit (64 MiB) and an
// interrupt handler (a 5 s deadline and an abort signal), `console.log/info/warn/error` injected,
// one host function `t.one` returning a promise the host resolves (its handler returns 1), the
// program run as an async function, its promise settled, its value read and checked, and the
// context and runtime disposed; µs per execution of `1 + 1` and of `await t.one()`, mean and p50.
//
// Used by `bench.mjs` (imported) and by `sdk/python/bench/bench.py` (as a command):
//
//   npm ci --prefix sdk/node/bench      # once: installs quickjs-emscripten (pinned) here
//   node sdk/node/bench/peer.mjs        # prints one line of JSON: {"run":{..},"tool":{..},..}
//
// EXECBOX_BENCH_ITERATIONS sets the executions per case (default 1000, after as many warm-up
// ones). Between runs of pending jobs the reference's executor waits with `setTimeout(0)` (at
// least 1 ms in Node.js); this harness drains the jobs as soon as the host settles a promise
// instead, so its figures are a floor of the reference's. EXECBOX_PEER_WAIT=timeout waits as the
// reference does, to measure that too.

import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

export const INSTALL_HINT = "npm ci --prefix sdk/node/bench";

/**
 * Loads quickjs-emscripten from this folder's node_modules. Returns `{ runner, version }`, or
 * `{ missing }` saying what is missing and what to do.
 */
export async function loadPeer() {
  let qjs;
  try {
    qjs = await import("quickjs-emscripten");
  } catch (error) {
    if (error?.code !== "ERR_MODULE_NOT_FOUND") throw error;
    return { missing: `quickjs-emscripten is not installed: run \`${INSTALL_HINT}\` (from the repository's top)` };
  }
  const version = createRequire(import.meta.url)("quickjs-emscripten/package.json").version;
  const module = await qjs.newQuickJSWASMModule(qjs.RELEASE_SYNC);
  const waitLikeReference = process.env.EXECBOX_PEER_WAIT === "timeout";
  return { runner: makeRunner(qjs, module, waitLikeReference), version, wait: waitLikeReference ? "setTimeout(0)" : "drain on settle" };
}

const MEMORY_LIMIT = 64 * 1024 * 1024;
const TIMEOUT_MS = 5000;

function makeRunner(qjs, module, waitLikeReference) {
  const tools = { t: { one: () => 1 } };

  /** One execution: `{ ok, value, logs }` or `{ ok: false, error }`. */
  return async function run(code) {
    const logs = [];
    const abort = new AbortController();
    const runtime = module.newRuntime();
    runtime.setMemoryLimit(MEMORY_LIMIT);
    const context = runtime.newContext();
    const drain = () => {
      if (runtime.alive) {
        const jobs = runtime.executePendingJobs(-1);
        if (jobs.error) jobs.error.dispose();
      }
    };
    try {
      const consoleHandle = context.newObject();
      for (const name of ["log", "info", "warn", "error"]) {
        const method = context.newFunction(name, (...args) => {
          logs.push(args.map((arg) => JSON.stringify(context.dump(arg))).join(" "));
          return context.undefined;
        });
        context.setProp(consoleHandle, name, method);
        method.dispose();
      }
      context.setProp(context.global, "console", consoleHandle);
      consoleHandle.dispose();

      for (const [namespace, functions] of Object.entries(tools)) {
        const object = context.newObject();
        for (const [name, handler] of Object.entries(functions)) {
          const fn = context.newFunction(name, (...args) => {
            const input = args[0] === undefined ? undefined : context.dump(args[0]);
            const deferred = context.newPromise();
            Promise.resolve()
              .then(() => handler(input))
              .then(
                (value) => {
                  if (!context.alive || !deferred.alive) return;
                  const handle = toGuest(context, value);
                  deferred.resolve(handle);
                  handle.dispose();
                },
                (error) => {
                  if (!context.alive || !deferred.alive) return;
                  const handle = context.newError(String(error?.message ?? error));
                  deferred.reject(handle);
                  handle.dispose();
                },
              )
              .finally(() => {
                if (deferred.alive) deferred.dispose();
                if (!waitLikeReference) drain();
              });
            return deferred.handle;
          });
          context.setProp(object, name, fn);
          fn.dispose();
        }
        context.setProp(context.global, namespace, object);
        object.dispose();
      }

      const deadline = Date.now() + TIMEOUT_MS;
      const interrupt = qjs.shouldInterruptAfterDeadline(deadline);
      runtime.setInterruptHandler((rt) => abort.signal.aborted || interrupt(rt));

      const fnHandle = context.unwrapResult(context.evalCode(`(async () => (${code}))`, "sandbox-user-code.js"));
      let promiseHandle;
      try {
        promiseHandle = context.unwrapResult(context.callFunction(fnHandle, context.undefined));
      } finally {
        fnHandle.dispose();
      }
      let settled;
      try {
        settled = context.resolvePromise(promiseHandle);
      } finally {
        promiseHandle.dispose();
      }
      if (waitLikeReference) {
        let done = false;
        settled.then(
          () => (done = true),
          () => (done = true),
        );
        while (!done) {
          if (Date.now() > deadline) throw new Error("timeout");
          drain();
          await new Promise((resolve) => setTimeout(resolve, 0));
        }
      } else {
        drain();
      }
      const result = await settled;
      if (result.error) {
        const error = context.dump(result.error);
        result.error.dispose();
        return { ok: false, error, logs };
      }
      const value = context.dump(result.value);
      result.value.dispose();
      return { ok: true, value, logs };
    } finally {
      abort.abort();
      context.dispose();
      runtime.dispose();
    }
  };
}

/** A JSON value of the host as a new handle of the guest's (what a tool's result becomes). */
function toGuest(context, value) {
  if (value === undefined) return context.undefined;
  if (value === null) return context.null;
  switch (typeof value) {
    case "number":
      return context.newNumber(value);
    case "string":
      return context.newString(value);
    case "boolean":
      return value ? context.true : context.false;
  }
  const object = Array.isArray(value) ? context.newArray() : context.newObject();
  for (const [key, item] of Object.entries(value)) {
    const handle = toGuest(context, item);
    context.setProp(object, key, handle);
    handle.dispose();
  }
  return object;
}

function stats(samples) {
  samples.sort((a, b) => a - b);
  const mean = samples.reduce((a, b) => a + b, 0) / samples.length;
  const round = (us) => Math.round(us * 10) / 10;
  return { mean: round(mean), p50: round(samples[Math.floor(samples.length / 2)]) };
}

async function measure(run, code, expected, n) {
  const samples = new Array(n);
  for (let i = 0; i < n; i++) {
    const started = process.hrtime.bigint();
    const result = await run(code);
    samples[i] = Number(process.hrtime.bigint() - started) / 1000;
    if (!result.ok || result.value !== expected) {
      throw new Error(`quickjs-emscripten: ${code} gave ${JSON.stringify(result)}, not ${expected}`);
    }
  }
  return samples;
}

/** `{ run, tool }`: `1 + 1` and `await t.one()`, each `n` times after `n` warm-up runs. */
export async function peerFigures(runner, n) {
  await measure(runner, "1 + 1", 2, n);
  const run = stats(await measure(runner, "1 + 1", 2, n));
  await measure(runner, "await t.one()", 1, n);
  const tool = stats(await measure(runner, "await t.one()", 1, n));
  return { run, tool };
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const peer = await loadPeer();
  if (peer.missing) {
    console.error(peer.missing);
    process.exit(3);
  }
  const n = Number(process.env.EXECBOX_BENCH_ITERATIONS ?? 1000);
  const figures = await peerFigures(peer.runner, n);
  console.log(JSON.stringify({ iterations: n, ...figures, version: peer.version, wait: peer.wait, node: process.version }));
}
