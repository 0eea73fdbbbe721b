#!/usr/bin/env python3
# Reproducer of the guest-target finding, end to end against the real runner binary:
# a loop whose body is one slow native call overruns timeoutMs by seconds, because QuickJS
# asks the interrupt handler only every 10000 interrupt-counter ticks (JS_INTERRUPT_COUNTER_INIT)
# and natives such as Array.prototype.fill / indexOf never tick it.
# Usage: slow_native_loop_overruns_timeout.py target/release/execbox-runner
import json
import subprocess
import sys
import time

CASES = [
    # The fuzzer's input (crash-f2b3e5a5...), with the guest target's limits.
    ("const a = []; for (;;)(new Array(2e5).fill({}))", 50, 8 << 20),
    # A non-allocating native, default memory limit.
    ("const a = new Array(1e6).fill(0); for (;;) a.indexOf(1)", 1000, 64 << 20),
]
for code, timeout_ms, memory in CASES:
    runner = subprocess.Popen(
        [sys.argv[1]], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    execute = {
        "type": "execute",
        "id": "g",
        "code": code,
        "options": {"timeoutMs": timeout_ms, "memoryLimitBytes": memory},
        "providers": [],
    }
    start = time.time()
    runner.stdin.write((json.dumps(execute) + "\n").encode())
    runner.stdin.flush()
    for line in runner.stdout:
        if b'"done"' in line:
            print(f"timeoutMs {timeout_ms}: done after {time.time() - start:.1f} s: {code}")
            print("   ", line.decode().strip())
            break
    runner.stdin.close()
    runner.wait()
