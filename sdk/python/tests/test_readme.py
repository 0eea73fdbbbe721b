"""The examples of the READMEs work as written."""

from __future__ import annotations

import contextlib
import io
import pathlib
import re

import pytest

HERE = pathlib.Path(__file__).resolve().parent
READMES = [HERE.parent / "README.md", HERE.parents[2] / "README.md", HERE.parents[2] / "docs" / "sdk-python.md"]


def python_blocks(path: pathlib.Path):
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.S)


@pytest.mark.parametrize("path", READMES, ids=lambda p: str(p.relative_to(HERE.parents[2])))
def test_the_python_examples_run_and_print_what_they_say(path, tmp_path, monkeypatch):
    # The policy example of docs/sdk-python.md reads `policy.yaml`.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "policy.yaml").write_text(
        "version: 1\nprincipals:\n  alice: { permissions: ['docs:read'] }\n"
    )
    blocks = python_blocks(path)
    assert blocks, f"{path} has no python example"
    namespace: dict = {}
    for block in blocks:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, str(path), "exec"), namespace)
        for line in block.splitlines():
            said = re.match(r"\s*print\(.*\)\s+# (.*)$", line)
            if said:
                # `...` in the comment stands for anything.
                pattern = ".*?".join(re.escape(part.strip()) for part in said.group(1).split("..."))
                assert re.search(pattern, out.getvalue(), re.S), (line, out.getvalue())
