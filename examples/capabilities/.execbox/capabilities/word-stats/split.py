#!/usr/bin/env python3
"""The tool `text.split` of word-stats: {"input": {"text": ...}} in, {"words": [...]} out."""
import json
import re
import sys

request = json.load(sys.stdin)
print(json.dumps({"words": re.findall(r"[a-z']+", request["input"]["text"].lower())}))
