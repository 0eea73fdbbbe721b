#!/usr/bin/env python3
"""Fixture command tools `store.put`, `store.get` and `store.list` of the mistakes table.

Keys live in `store.jsonl` in the working directory (one JSON object per line). `put` waits
0.3 s before it writes, so a program that does not await it has returned by then.
"""
import json
import sys
import time

request = json.load(sys.stdin)
name = request["tool"]["name"]
data = request["input"] or {}
path = "store.jsonl"


def entries():
    try:
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


if name == "put":
    time.sleep(0.3)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"key": data["key"], "value": data.get("value")}) + "\n")
    json.dump({"stored": data["key"]}, sys.stdout)
elif name == "get":
    found = [e for e in entries() if e["key"] == data["key"]]
    if not found:
        print(f"no value stored under {data['key']!r}", file=sys.stderr)
        sys.exit(1)
    json.dump(found[-1]["value"], sys.stdout)
elif name == "list":
    json.dump(sorted({e["key"] for e in entries()}), sys.stdout)
