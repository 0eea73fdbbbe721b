// Where the package finds its native part: without a build beside index.cjs and without the
// platform package, requiring it fails with the package to install, not a bare MODULE_NOT_FOUND.
const { test } = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");

test("without its platform package, execbox names the package to install", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "execbox-loader-"));
  try {
    fs.copyFileSync(path.join(__dirname, "..", "index.cjs"), path.join(dir, "index.cjs"));
    assert.throws(
      () => require(path.join(dir, "index.cjs")),
      (err) => {
        assert.match(err.message, /the npm package execbox-linux-(x64|arm64)-gnu, is not installed/);
        assert.match(err.message, /without --omit=optional/);
        return true;
      },
    );
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
