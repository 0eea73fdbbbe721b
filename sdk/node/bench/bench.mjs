// The Node.js SDK beside its peer and its runner, from one run: `Sandbox.run` of `1 + 1` and of
// one awaited tool call (`await t.one()`, a JavaScript tool returning 1) through a Sandbox of one
// warm runner; the same two programs in quickjs-emscripten in-process (`peer.mjs`: what the
// reference TypeScript project's QuickJS executor does per execution); and the raw runner the
// SDK uses (`execbox-conformance bench --runner bin/execbox-runner --json`: the `execute` → `done`
// round trip of `1 + 1`, and a tool call's round trip inside an execution). µs, p50, sequential.
//
//   npm ci --prefix sdk/node/bench      # once: the peer, quickjs-emscripten (pinned), here only
//   node sdk/node/bench/bench.mjs       # or `npm run bench` in sdk/node
//
// Needs the addon (`npm run build` in sdk/node) and, for the raw runner's column,
// `cargo build --release -p execbox-conformance` (or EXECBOX_CONFORMANCE=PATH); a missing peer or
// conformance driver leaves its column empty and says how to get it.
// EXECBOX_BENCH_ITERATIONS sets the executions per case (default 1000, after as many warm-up
// ones); EXECBOX_BENCH_ROUNDS (default 5) how many times each side is measured, the sides taking
// turns, so a busy machine disturbs all alike: each figure is the median over the rounds.
// EXECBOX_BENCH_RUST=1 adds the Rust host (`host/benches/sdk_baseline.rs`, built once with cargo
// before the rounds) and prints a second table: what the binding adds to an execution and to a
// tool call, and the floor of its hand-off between threads.
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import os from "node:os";
import { createRequire } from "node:module";

import { Sandbox } from "../index.mjs";
import { loadPeer, peerFigures } from "./peer.mjs";

// The addon itself, for the floor of its round trip (an empty Promise from the Tokio runtime).
const native = createRequire(import.meta.url)("../execbox.node");

const here = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const workspace = resolve(here, "..", "..");
const iterations = Number(process.env.EXECBOX_BENCH_ITERATIONS ?? 1000);
const rounds = Number(process.env.EXECBOX_BENCH_ROUNDS ?? 5);
const runner = process.env.EXECBOX_RUNNER ?? join(here, "bin", "execbox-runner");

function stats(samples) {
  samples.sort((a, b) => a - b);
  const mean = samples.reduce((a, b) => a + b, 0) / samples.length;
  const round = (us) => Math.round(us * 10) / 10;
  return { mean: round(mean), p50: round(samples[Math.floor(samples.length / 2)]) };
}

async function measure(sandbox, code, expected, n) {
  const samples = new Array(n);
  for (let i = 0; i < n; i++) {
    const started = process.hrtime.bigint();
    const result = await sandbox.run(code);
    samples[i] = Number(process.hrtime.bigint() - started) / 1000;
    if (!result.ok) throw new Error(`${code}: ${result.error.code}: ${result.error.message}`);
    if (result.value !== expected) throw new Error(`${code} gave ${JSON.stringify(result.value)}, not ${expected}`);
  }
  return samples;
}

async function sdkFigures() {
  const sandbox = new Sandbox({ pool: 1, tools: { t: { one: () => 1 } } });
  try {
    await measure(sandbox, "1 + 1", 2, iterations);
    const run = stats(await measure(sandbox, "1 + 1", 2, iterations));
    await measure(sandbox, "await t.one()", 1, iterations);
    const tool = stats(await measure(sandbox, "await t.one()", 1, iterations));
    const floor = [];
    for (let i = 0; i < 2 * iterations; i++) {
      const started = process.hrtime.bigint();
      await native.ping();
      if (i >= iterations) floor.push(Number(process.hrtime.bigint() - started) / 1000);
    }
    return { run, tool, handoff: stats(floor) };
  } finally {
    sandbox.close();
  }
}

/** The conformance driver, or `{ missing }` saying how to get it. */
function findConformance() {
  const path = process.env.EXECBOX_CONFORMANCE ?? join(workspace, "target", "release", "execbox-conformance");
  if (existsSync(path)) return { path };
  return {
    missing: `no raw runner figures: ${path} is missing; build it with \`cargo build --release -p execbox-conformance\` (or set EXECBOX_CONFORMANCE)`,
  };
}

/** `{ run: {p50}, tool: {p50} }` of the raw runner, through `execbox-conformance bench`. */
function rawFigures(conformance) {
  const args = ["bench", "--runner", JSON.stringify(runner), "--json", "--iterations", String(iterations), "--spawns", "3"];
  const bench = spawnSync(conformance, args, { encoding: "utf8" });
  if (bench.error || bench.status !== 0) {
    throw new Error(`${conformance} ${args.join(" ")} failed: ${bench.error?.message ?? bench.stderr.trim()}`);
  }
  const figures = JSON.parse(bench.stdout);
  return { run: { p50: figures.trivial_p50_us }, tool: { p50: figures.tool_call_p50_us } };
}

/** The Rust host's bench, built once: the path of its executable, or `{ missing }`. */
function buildRustBaseline() {
  const cargo = spawnSync(
    "cargo",
    ["bench", "--no-run", "-q", "-p", "execbox-host", "--bench", "sdk_baseline", "--message-format=json"],
    { cwd: workspace, encoding: "utf8", maxBuffer: 64 << 20 },
  );
  if (cargo.error || cargo.status !== 0) {
    return { missing: `no Rust figures: \`cargo bench --no-run -p execbox-host --bench sdk_baseline\` failed: ${cargo.error?.message ?? cargo.stderr.trim().split("\n").pop()}` };
  }
  for (const line of cargo.stdout.split("\n")) {
    if (!line.startsWith("{")) continue;
    const message = JSON.parse(line);
    if (message.reason === "compiler-artifact" && message.target?.name === "sdk_baseline" && message.executable) {
      return { path: message.executable };
    }
  }
  return { missing: "no Rust figures: cargo built no sdk_baseline executable" };
}

function rustFigures(executable) {
  const bench = spawnSync(executable, [], {
    encoding: "utf8",
    env: { ...process.env, EXECBOX_BENCH_ITERATIONS: String(iterations), EXECBOX_RUNNER: runner },
  });
  if (bench.error || bench.status !== 0) {
    throw new Error(`${executable} failed: ${bench.error?.message ?? bench.stderr.trim()}`);
  }
  return JSON.parse(bench.stdout.trim().split("\n").pop());
}

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

/** The median over the rounds of each case's mean and p50 (null when a side did not run). */
function combine(all) {
  if (all.length === 0) return null;
  const out = {};
  for (const key of Object.keys(all[0])) {
    out[key] = {};
    for (const stat of Object.keys(all[0][key])) out[key][stat] = median(all.map((f) => f[key][stat]));
  }
  return out;
}

function machine() {
  let model = "unknown CPU";
  try {
    const line = readFileSync("/proc/cpuinfo", "utf8")
      .split("\n")
      .find((l) => l.startsWith("model name"));
    if (line) model = line.split(":").slice(1).join(":").trim();
  } catch {
    model = os.cpus()[0]?.model ?? model;
  }
  return `${os.cpus().length} cores of ${model}`;
}

const loadAverage = () => os.loadavg().map((l) => l.toFixed(2)).join(", ");
const fmt = (v) => (v === undefined || v === null ? "–" : String(Math.round(v * 10) / 10));

// What can run.
const peer = await loadPeer();
const notes = [];
if (peer.missing) notes.push(`no quickjs-emscripten figures: ${peer.missing}`);
const conformance = findConformance();
if (conformance.missing) notes.push(conformance.missing);
let rustBench = null;
if (process.env.EXECBOX_BENCH_RUST === "1") {
  rustBench = buildRustBaseline();
  if (rustBench.missing) notes.push(rustBench.missing);
}

const started = new Date();
const loadBefore = loadAverage();
const sdkRounds = [];
const peerRounds = [];
const rawRounds = [];
const rustRounds = [];
for (let i = 0; i < rounds; i++) {
  sdkRounds.push(await sdkFigures());
  if (peer.runner) peerRounds.push(await peerFigures(peer.runner, iterations));
  if (conformance.path) rawRounds.push(rawFigures(conformance.path));
  if (rustBench?.path) rustRounds.push(rustFigures(rustBench.path));
}
const sdk = combine(sdkRounds);
const qjs = combine(peerRounds);
const raw = combine(rawRounds);
const rust = combine(rustRounds);

console.log(
  `${started.toISOString().slice(0, 16).replace("T", " ")} UTC; ${machine()}; load average ${loadBefore} before, ${loadAverage()} after; ` +
    `Node.js ${process.version}${peer.version ? `, quickjs-emscripten ${peer.version} (${peer.wait})` : ""}`,
);
console.log(`${iterations} executions per case and round after as many warm-up ones, ${rounds} rounds taking turns (medians); runner ${runner}`);
console.log();
console.log("| case | Node SDK p50 µs | quickjs-emscripten p50 µs | raw runner p50 µs | SDK / peer |");
console.log("| --- | ---: | ---: | ---: | ---: |");
for (const [name, key] of [["`1 + 1`", "run"], ["one tool call", "tool"]]) {
  const ratio = qjs ? (sdk[key].p50 / qjs[key].p50).toFixed(2) : "–";
  console.log(`| ${name} | ${fmt(sdk[key].p50)} | ${fmt(qjs?.[key].p50)} | ${fmt(raw?.[key].p50)}${key === "tool" ? " ¹" : ""} | ${ratio} |`);
}
console.log();
console.log(
  "¹ the raw runner's tool call figure is one call's round trip inside an execution (its `tool_call` out, the `tool_result` in, to its next `tool_call`), not a whole execution making one call as in the other columns.",
);
if (peer.runner && peer.wait !== "setTimeout(0)") {
  console.log(
    "The peer drains its jobs as soon as the host settles a promise; the reference's executor waits `setTimeout(0)` (≥ 1 ms) between runs of them, so the peer's figures are its floor (EXECBOX_PEER_WAIT=timeout measures that).",
  );
}

if (rust) {
  console.log();
  console.log("What the binding adds, beside the Rust host (`host/benches/sdk_baseline.rs`, the same runner):");
  console.log();
  console.log("| case | Node mean µs | Node p50 µs | Rust mean µs | Rust p50 µs | binding adds (p50) |");
  console.log("| --- | ---: | ---: | ---: | ---: | ---: |");
  for (const [name, key] of [["run `1 + 1`", "run"], ["one tool call", "tool"]]) {
    console.log(`| ${name} | ${sdk[key].mean} | ${sdk[key].p50} | ${rust[key].mean} | ${rust[key].p50} | ${fmt(sdk[key].p50 - rust[key].p50)} |`);
  }
  const perCall = (f) => f.tool.p50 - f.run.p50;
  console.log(
    `| per tool call (p50 of the tool case minus the run case) | | ${fmt(perCall(sdk))} | | ${fmt(perCall(rust))} | ${fmt(perCall(sdk) - perCall(rust))} |`,
  );
  console.log(
    `| floor: an empty task from the caller's thread to Tokio and back | ${sdk.handoff.mean} | ${sdk.handoff.p50} | ${rust.handoff.mean} | ${rust.handoff.p50} | |`,
  );
}

for (const note of notes) console.log(`\n(${note})`);
