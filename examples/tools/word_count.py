#!/usr/bin/env python3
"""Example command tool `text.word_count` (see examples/tools.yaml).

Reads the request envelope {"schemaVersion":1,"tool":...,"input":{"text":...},"executionId":...}
from stdin and prints {"words": N, "lines": N, "chars": N} on stdout.
"""
import json
import sys

request = json.load(sys.stdin)
text = request["input"]["text"]
json.dump(
    {"words": len(text.split()), "lines": len(text.splitlines()), "chars": len(text)},
    sys.stdout,
)
