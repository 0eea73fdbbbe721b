#!/usr/bin/env python3
"""Example command tool `data.lookup` (see examples/tools.yaml).

Reads the request envelope from stdin, looks `input.key` up in the JSON file named by
$CAPITALS_FILE (relative to this script's parent folder) and prints {"key": K, "value": V}.
An unknown key is a failure: a message on stderr and exit status 1, which the guest
sees as a `tool_error` carrying that message.
"""
import json
import os
import sys

request = json.load(sys.stdin)
key = request["input"]["key"]
examples = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
with open(os.path.join(examples, os.environ["CAPITALS_FILE"]), encoding="utf-8") as f:
    capitals = json.load(f)
if key not in capitals:
    print(f"unknown country {key!r}; known: {', '.join(sorted(capitals))}", file=sys.stderr)
    sys.exit(1)
json.dump({"key": key, "value": capitals[key]}, sys.stdout)
