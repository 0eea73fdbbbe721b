#!/usr/bin/env bash
# CI for the npm package: install the locked dev tools, build the addon and the runner (in the
# workspace's target dir, CARGO_TARGET_DIR when set, so cargo reuses what the Rust jobs built),
# then the tests. Needs node >= 18, npm and cargo; reaches only the npm registry (and crates.io
# through cargo, as the Rust jobs do).
set -euo pipefail
cd "$(dirname "$0")/.."

npm ci --no-audit --no-fund
npm run build
node --test test/*.test.mjs test/*.test.cjs
