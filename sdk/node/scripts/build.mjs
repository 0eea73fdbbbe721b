// Builds the package in place: the addon (`execbox.node`, napi-rs) and the runner binary it
// starts (`bin/execbox-runner`, copied from the workspace's cargo target dir).
//
//   node scripts/build.mjs            release addon + release runner (what `npm run build` does)
//   node scripts/build.mjs --debug    debug addon (faster to build), release runner
//
// Both builds use the workspace's target dir (CARGO_TARGET_DIR when set, else <workspace>/target),
// so the dependencies they share with the rest of the workspace are compiled once.
import { spawnSync } from "node:child_process";
import { chmodSync, copyFileSync, existsSync, mkdirSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const workspace = resolve(here, "..", "..");
const targetDir = process.env.CARGO_TARGET_DIR
  ? resolve(workspace, process.env.CARGO_TARGET_DIR)
  : join(workspace, "target");
const debug = process.argv.includes("--debug");
const exe = process.platform === "win32" ? ".exe" : "";

function run(command, args, cwd) {
  console.log(`> ${command} ${args.join(" ")}`);
  const result = spawnSync(command, args, { cwd, stdio: "inherit", shell: process.platform === "win32" });
  if (result.error) {
    console.error(`cannot run ${command}: ${result.error.message}`);
    process.exit(1);
  }
  if (result.status !== 0) {
    console.error(`${command} ${args.join(" ")} failed (exit ${result.status})`);
    process.exit(result.status ?? 1);
  }
}

// The addon. `--dts native.d.ts` keeps napi's generated typings away from the hand-written index.d.ts.
const napi = join(here, "node_modules", ".bin", process.platform === "win32" ? "napi.cmd" : "napi");
if (!existsSync(napi)) {
  console.error("the napi CLI is missing: run `npm install` in sdk/node first");
  process.exit(1);
}
run(napi, ["build", "--dts", "native.d.ts", "--target-dir", targetDir, ...(debug ? [] : ["--release"])], here);

// The runner, always a release build: it is what the package ships.
run("cargo", ["build", "--release", "-p", "execbox-runner"], workspace);
const runner = join(targetDir, "release", `execbox-runner${exe}`);
if (!existsSync(runner)) {
  console.error(
    `the runner binary is not at ${runner} after \`cargo build --release -p execbox-runner\`;\n` +
      "build it from the workspace root (" + workspace + ") and check CARGO_TARGET_DIR points at the target dir it used",
  );
  process.exit(1);
}
mkdirSync(join(here, "bin"), { recursive: true });
const shipped = join(here, "bin", `execbox-runner${exe}`);
copyFileSync(runner, shipped);
chmodSync(shipped, 0o755);
console.log(`copied ${runner} -> ${shipped}`);
