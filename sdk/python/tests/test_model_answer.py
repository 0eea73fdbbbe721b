"""One model-facing answer: the same programs give the same text from ``Result.for_model``,
the Node SDK's ``result.forModel`` and ``execbox mcp``'s ``execute_code``.

The Node SDK and ``execbox mcp`` are the workspace's release build (``.ci/python`` builds it):
the addon is ``target/release/libexecbox_node.so``, beside ``sdk/node/index.cjs``; the CLI is
``target/release/execbox``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Dict, List

import pytest

import execbox

REPO = Path(__file__).resolve().parents[3]
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target")) / "release"

# Each kind of answer: a value, logs, an error with its location and caret, a thrown error of
# the program's own, the note for a missing `return`, long log lines cut first, a long answer
# cut with its marker and the host's notes after it.
PROGRAMS: List[str] = [
    'return { a: 1, b: [true, null, "x"], c: "é", d: 1.5e300 }',
    'console.log("hi"); console.warn({ n: 2 }); return [1, 2, 3]',
    'return await text.upper({ text: "shout" })',
    "const x = 1;\nreturn x + y.z",
    'throw new TypeError("the order has no lines")',
    "const names = [1, 2].map((n) => n * 2);",
    'console.log("x".repeat(3000)); console.log("short"); return "done"',
    'return "y".repeat(30000)',
    "for (let i = 0; i < 200; i++) console.log('line ' + i); return 'z'.repeat(2000)",
]

LIMITS = [24000, 1000]

# The namespaces of examples/tools.yaml, which `execbox mcp --tools` serves: the same names in
# each SDK, so that what the answers say of the namespaces is the same.
PYTHON_TOOLS = {
    "text": {"word_count": lambda i: {}, "upper": lambda i: i["text"].upper()},
    "data": {"lookup": lambda i: None},
}
NODE_TOOLS = (
    "{ text: { word_count: () => ({}), upper: ({ text }) => text.toUpperCase() }, "
    "data: { lookup: () => null } }"
)


def _built(path: Path) -> Path:
    if not path.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{path} is missing: .ci/python builds the workspace before the tests")
        pytest.skip(f"{path} is missing: build the workspace (cargo build --workspace --release)")
    return path


def _python_answers() -> Dict[int, List[str]]:
    with execbox.Sandbox(PYTHON_TOOLS, pool=1, timeout_ms=30000) as sandbox:
        results = [sandbox.run(code) for code in PROGRAMS]
    return {limit: [r.for_model(limit) for r in results] for limit in LIMITS}


def _node_answers(tmp: Path) -> Dict[int, List[str]]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    package = tmp / "node-execbox"
    (package / "bin").mkdir(parents=True)
    shutil.copy(REPO / "sdk" / "node" / "index.cjs", package / "index.cjs")
    shutil.copy(_built(TARGET / "libexecbox_node.so"), package / "execbox.node")
    shutil.copy(_built(TARGET / "execbox-runner"), package / "bin" / "execbox-runner")
    script = f"""
const {{ Sandbox }} = require({json.dumps(str(package / "index.cjs"))});
const programs = {json.dumps(PROGRAMS)};
const limits = {json.dumps(LIMITS)};
(async () => {{
  const sandbox = new Sandbox({{ tools: {NODE_TOOLS}, pool: 1, timeoutMs: 30000 }});
  const results = [];
  for (const code of programs) results.push(await sandbox.run(code));
  sandbox.close();
  const out = {{}};
  for (const limit of limits) out[limit] = results.map((r) => r.forModel({{ maxChars: limit }}));
  process.stdout.write(JSON.stringify(out));
}})();
"""
    done = subprocess.run(
        [node, "-e", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return {int(k): v for k, v in json.loads(done.stdout).items()}


def _mcp_answers(tmp: Path, limit: int) -> List[str]:
    """``execute_code``'s text for each program, from a real ``execbox mcp`` on stdio."""
    execbox_cli = _built(TARGET / "execbox")
    server = subprocess.Popen(
        [
            str(execbox_cli),
            "mcp",
            "--tools",
            str(REPO / "examples" / "tools.yaml"),
            "--max-output-chars",
            str(limit),
            "--no-pause",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp,
    )
    assert server.stdin is not None and server.stdout is not None

    def send(message: dict) -> None:
        server.stdin.write(json.dumps(message) + "\n")
        server.stdin.flush()

    def answer(id: int) -> dict:
        while True:
            line = server.stdout.readline()
            assert line, f"execbox mcp ended: {server.stderr.read() if server.stderr else ''}"
            message = json.loads(line)
            if message.get("id") == id:
                return message

    try:
        send(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "answers-test", "version": "1"},
                },
            }
        )
        assert "result" in answer(0)
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        texts = []
        for i, code in enumerate(PROGRAMS, start=1):
            send(
                {
                    "jsonrpc": "2.0",
                    "id": i,
                    "method": "tools/call",
                    "params": {"name": "execute_code", "arguments": {"code": code}},
                }
            )
            result = answer(i)["result"]
            texts.append(result["content"][0]["text"])
        return texts
    finally:
        server.stdin.close()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def test_python_node_and_mcp_give_the_same_answer_text() -> None:
    python = _python_answers()
    with tempfile.TemporaryDirectory() as tmp:
        node = _node_answers(Path(tmp))
        mcp = {limit: _mcp_answers(Path(tmp), limit) for limit in LIMITS}
    for limit in LIMITS:
        for i, code in enumerate(PROGRAMS):
            assert python[limit][i] == node[limit][i], f"Node differs for {code!r} at {limit}"
            assert python[limit][i] == mcp[limit][i], f"execbox mcp differs for {code!r} at {limit}"
    # The cases are what they claim to be.
    at_default = python[24000]
    assert '"ReferenceError: y is not defined' in at_default[3]
    assert "(line 2, column" in at_default[3] and "^" in at_default[3]
    assert '"result":"SHOUT"' in at_default[2]
    assert "the program returned no value" in at_default[5]
    assert "[cut: the answer has" in at_default[7]
    cut = python[1000]
    assert "line cut: 3000 characters" in cut[6]
    assert "[cut: the answer has" in cut[8] and cut[8].endswith(
        [line for line in cut[8].splitlines() if line.startswith("[execbox]")][-1]
    )


def test_an_error_renders_the_same_in_python_and_node(tmp_path: Path) -> None:
    code = "const order = { lines: [] };\nreturn order.lines[0].sku"
    python = str(execbox.run(code).error)
    package = tmp_path / "pkg"
    (package / "bin").mkdir(parents=True)
    shutil.copy(REPO / "sdk" / "node" / "index.cjs", package / "index.cjs")
    shutil.copy(_built(TARGET / "libexecbox_node.so"), package / "execbox.node")
    shutil.copy(_built(TARGET / "execbox-runner"), package / "bin" / "execbox-runner")
    script = (
        f"require({json.dumps(str(package / 'index.cjs'))}).run({json.dumps(code)})"
        ".then((r) => process.stdout.write(JSON.stringify([r.error.text, String(r.error)])))"
    )
    done = subprocess.run(
        ["node", "-e", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    text, as_string = json.loads(done.stdout)
    assert python == text == as_string
    assert python.startswith("TypeError: cannot read property 'sku' of undefined (line 2")
    assert python.endswith("^")
