#!/usr/bin/env python3
"""The `report-py` executor: builds a markdown report from a `report` capability's params.

stdin: {"schemaVersion": 1, "capability": {"name", "type", "path", "config"},
        "input": {...params}, "execution": {"id", "parentId", "timeoutMs"}}
stdout: {"result": ..., "additionalContext": ...}; a failure: a message on stderr, exit 1.
"""
import json
import sys

request = json.load(sys.stdin)  # read stdin to its end first: the protocol requires it
params = request["input"]
if not params["items"]:
    print("a report needs at least one item", file=sys.stderr)
    sys.exit(1)
bullet = (request["capability"]["config"].get("config") or {}).get("bullet", "*")
lines = [f"# {params['title']}", ""] + [f"{bullet} {item}" for item in params["items"]]
json.dump(
    {
        "result": {"markdown": "\n".join(lines), "items": len(params["items"])},
        "additionalContext": {"executionId": request["execution"]["id"], "executor": "report-py"},
    },
    sys.stdout,
)
