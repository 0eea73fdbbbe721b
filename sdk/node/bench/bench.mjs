// The binding's cost: `1 + 1`, and one tool call, through a Sandbox of one warm runner (µs per
// execution, mean and p50), beside the same through the Rust host (`host/benches/sdk_baseline.rs`,
// run with cargo on this package's runner when the workspace is there; EXECBOX_BENCH_RUST=0 skips it). `npm run bench` or `node bench/bench.mjs`.
// EXECBOX_BENCH_ITERATIONS sets the executions per case (default 2000, after as many warm-up
// ones); EXECBOX_BENCH_ROUNDS (default 3) how many times both sides are measured, alternating, so
// a busy machine disturbs both alike: each figure is the median over the rounds.
import { spawnSync } from "node:child_process";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import os from "node:os";

import { createRequire } from "node:module";

import { Sandbox } from "../index.mjs";

// The addon itself, for the floor of its round trip (an empty Promise from the Tokio runtime).
const native = createRequire(import.meta.url)("../execbox.node");

const here = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const iterations = Number(process.env.EXECBOX_BENCH_ITERATIONS ?? 2000);
const rounds = Number(process.env.EXECBOX_BENCH_ROUNDS ?? 3);

function stats(samples) {
  samples.sort((a, b) => a - b);
  const mean = samples.reduce((a, b) => a + b, 0) / samples.length;
  const round = (us) => Math.round(us * 10) / 10;
  return { mean: round(mean), p50: round(samples[Math.floor(samples.length / 2)]) };
}

async function measure(sandbox, code, n) {
  const samples = new Array(n);
  for (let i = 0; i < n; i++) {
    const started = process.hrtime.bigint();
    const result = await sandbox.run(code);
    samples[i] = Number(process.hrtime.bigint() - started) / 1000;
    if (!result.ok) throw new Error(`${code}: ${result.error.code}: ${result.error.message}`);
  }
  return samples;
}

async function nodeFigures() {
  const sandbox = new Sandbox({ pool: 1, tools: { t: { one: () => 1 } } });
  try {
    await measure(sandbox, "1 + 1", iterations);
    const run = stats(await measure(sandbox, "1 + 1", iterations));
    await measure(sandbox, "await t.one()", iterations);
    const tool = stats(await measure(sandbox, "await t.one()", iterations));
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

function rustFigures() {
  if (process.env.EXECBOX_BENCH_RUST === "0") return null;
  const workspace = resolve(here, "..", "..");
  const cargo = spawnSync("cargo", ["bench", "-q", "-p", "execbox-host", "--bench", "sdk_baseline"], {
    cwd: workspace,
    encoding: "utf8",
    env: {
      ...process.env,
      EXECBOX_BENCH_ITERATIONS: String(iterations),
      EXECBOX_RUNNER: process.env.EXECBOX_RUNNER ?? join(here, "bin", "execbox-runner"),
    },
  });
  if (cargo.error || cargo.status !== 0) {
    console.error(`(no Rust figures: cargo bench failed: ${cargo.error?.message ?? cargo.stderr.trim().split("\n").pop()})`);
    return null;
  }
  const line = cargo.stdout.trim().split("\n").pop();
  return JSON.parse(line);
}

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

/** The median over `all` (per-round figures, or nulls) of each case's mean and p50. */
function combine(all) {
  if (all.some((figures) => figures === null)) return null;
  const pick = (key) => ({
    mean: median(all.map((f) => f[key].mean)),
    p50: median(all.map((f) => f[key].p50)),
  });
  return { run: pick("run"), tool: pick("tool"), handoff: all[0].handoff ? pick("handoff") : undefined };
}

const nodeRounds = [];
const rustRounds = [];
for (let i = 0; i < rounds; i++) {
  nodeRounds.push(await nodeFigures());
  rustRounds.push(rustFigures());
}
const node = combine(nodeRounds);
const rust = combine(rustRounds);

const rows = [
  ["run `1 + 1`", node.run, rust?.run],
  ["one tool call", node.tool, rust?.tool],
];
console.log(`${iterations} executions per case and round, ${rounds} rounds (medians), one warm runner; ${os.cpus().length} cores, Node ${process.version}`);
console.log("| case | Node mean µs | Node p50 µs | Rust mean µs | Rust p50 µs | binding adds (p50) |");
console.log("| --- | ---: | ---: | ---: | ---: | ---: |");
for (const [name, n, r] of rows) {
  const rustCols = r ? `${r.mean} | ${r.p50} | ${Math.round((n.p50 - r.p50) * 10) / 10}` : "– | – | –";
  console.log(`| ${name} | ${n.mean} | ${n.p50} | ${rustCols} |`);
}
{
  const perCall = (f) => Math.round((f.tool.p50 - f.run.p50) * 10) / 10;
  const r = rust ? perCall(rust) : null;
  console.log(
    `| per tool call (p50 of the tool case minus the run case) | | ${perCall(node)} | | ${r ?? "–"} | ${r === null ? "–" : Math.round((perCall(node) - r) * 10) / 10} |`,
  );
}
{
  const r = rust?.handoff;
  console.log(
    `| floor: an empty task from the caller's thread to Tokio and back | ${node.handoff.mean} | ${node.handoff.p50} | ${r ? `${r.mean} | ${r.p50}` : "– | –"} | |`,
  );
}
