#!/usr/bin/env python3
# Reproducer of the decode-target finding, end to end against the real runner binary:
# an oversized execute whose "type"/"id" lie past the limit (but within PEEK_BYTES) is
# answered when it arrives in one read, and silently dropped when it arrives in two.
# Usage: oversized_execute_split_reads.py target/release/execbox-runner
import subprocess
import sys
import time

line = '{"code":"' + "x" * 200 + '","type":"execute","id":"e1","providers":[]}'
for pieces in ([line + "\n"], [line[:110], line[110:] + "\n"]):
    runner = subprocess.Popen(
        [sys.argv[1], "--max-message-bytes", "100"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    for piece in pieces:
        runner.stdin.write(piece.encode())
        runner.stdin.flush()
        time.sleep(0.2)
    time.sleep(0.3)
    runner.stdin.close()
    out = runner.stdout.read().decode().strip() or "(nothing: the execute never gets a done)"
    print(len(pieces), "write(s) ->", out)
    runner.wait()
