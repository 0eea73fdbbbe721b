#!/usr/bin/env python3
"""Example command tool `text.upper` (see examples/tools.yaml).

Reads the request envelope from stdin and prints the upper-cased `input.text` as a JSON string.
"""
import json
import sys

request = json.load(sys.stdin)
json.dump(request["input"]["text"].upper(), sys.stdout)
