#!/usr/bin/env python3
"""Fixture command tools `math.add`, `math.get-sum` and `math.stats` of the mistakes table."""
import json
import sys

request = json.load(sys.stdin)
name = request["tool"]["name"]
data = request["input"]

if name in ("add", "get-sum"):
    json.dump(data["a"] + data["b"], sys.stdout)
elif name == "stats":
    values = data["values"]
    json.dump(
        {
            "count": len(values),
            "mean": sum(values) / len(values) if values else None,
            "min": min(values, default=None),
            "max": max(values, default=None),
        },
        sys.stdout,
    )
