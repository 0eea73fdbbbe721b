"""`execbox mcp`'s own cost, with the Python MCP SDK as the client (issue 35).

Starts an upstream MCP server written with the Python MCP SDK's FastMCP (this script with
`--serve-upstream`: one tool, `add(a, b)` -> `{"sum": a + b}`), and, from one Python client, in
rounds taking turns so a busy machine disturbs all alike:
  (a) a direct `tools/call` of `add` on that upstream (client -> upstream);
  (b) `execute_code` of `1 + 1` through `execbox mcp --config <mcp.json naming the upstream>`;
  (c) `execute_code` of a program making one upstream call, `(await alpha.add({ a: 1, b: 2 })).sum`
      (client -> execbox mcp -> a pooled runner -> the host -> upstream, and back).
and a `ping` of each server (the same client's round trip with no tool: each server's floor).
Prints p50 and p90 per row (over all the timed calls of all rounds) and execbox's own cost as the
issue defines it: p50 of (b) minus p50 of (a) (target <= 100 µs), and p50 of (c) minus p50 of (a)
(target <= 150 µs); then (b) beside execbox's `ping`, (a) beside the upstream's, and (c) - (b)
beside (a), which say what execbox costs when the upstream, in (a), is slower than an execution.
Every answer is checked.

    python3 -m venv /tmp/mcp-bench
    /tmp/mcp-bench/bin/pip install -r cli/benches/requirements-mcp.txt
    cargo build --release -p execbox-cli --bin execbox      # if target/release/execbox is missing
    /tmp/mcp-bench/bin/python cli/benches/mcp_python.py

EXECBOX_BENCH_ITERATIONS sets the timed calls per row and round (default 300, after 50 warm-up
ones per row before the first round); EXECBOX_BENCH_ROUNDS the rounds (default 5); EXECBOX=PATH
another `execbox` binary. Calls are sent as `ClientSession.call_tool` sends them, but without
its check of each answer against the tool's output schema (`jsonschema.validate`, about a
millisecond or more a call, and more for `execute_code`'s larger schema: the client's cost, which
would count as execbox's); EXECBOX_BENCH_CLIENT_VALIDATE=1 calls `call_tool` itself. `cargo bench -p execbox-cli --bench mcp` measures the same with `rmcp`
(Rust) as the client.
"""

import asyncio
import datetime
import json
import os
import pathlib
import platform
import sys
import tempfile
import time

INSTALL = (
    "python3 -m venv /tmp/mcp-bench && "
    "/tmp/mcp-bench/bin/pip install -r cli/benches/requirements-mcp.txt, "
    "then run this script with /tmp/mcp-bench/bin/python"
)

try:
    import importlib.metadata

    from mcp import ClientSession, StdioServerParameters, types
    from mcp.client.stdio import stdio_client
    from mcp.server.fastmcp import FastMCP
    from pydantic import BaseModel
except ImportError as error:
    raise SystemExit(f"mcp_python.py: the Python MCP SDK is missing ({error}): {INSTALL}")

HERE = pathlib.Path(__file__).resolve()
WORKSPACE = HERE.parents[2]
ITERATIONS = int(os.environ.get("EXECBOX_BENCH_ITERATIONS", "300"))
ROUNDS = int(os.environ.get("EXECBOX_BENCH_ROUNDS", "5"))
WARMUP = 50
VALIDATE = os.environ.get("EXECBOX_BENCH_CLIENT_VALIDATE") == "1"
NAMESPACE = "alpha"


class Sum(BaseModel):
    sum: int


def serve_upstream():
    """The upstream: FastMCP on stdio, one tool, logging warnings only (not a line per call)."""
    server = FastMCP(NAMESPACE, log_level="WARNING")

    @server.tool()
    def add(a: int, b: int) -> Sum:
        """Adds a and b."""
        return Sum(sum=a + b)

    server.run("stdio")


def check_add(result):
    if result.isError or result.structuredContent != {"sum": 3}:
        raise SystemExit(f"add(1, 2) answered {result}")


def no_check(_result):
    pass


def check_execute(expected):
    def check(result):
        answer = result.structuredContent
        if result.isError or not answer or not answer.get("ok") or answer.get("result") != expected:
            raise SystemExit(f"execute_code answered {result}")

    return check


async def call(session, tool, arguments):
    """`tools/call`, as `ClientSession.call_tool` sends it, without its check of the answer
    against the tool's output schema (`jsonschema.validate`, which checks the schema itself at
    every call: a cost of the client that grows with the schema, not of the server), unless
    EXECBOX_BENCH_CLIENT_VALIDATE=1."""
    if VALIDATE:
        return await session.call_tool(tool, arguments)
    request = types.ClientRequest(
        types.CallToolRequest(params=types.CallToolRequestParams(name=tool, arguments=arguments))
    )
    return await session.send_request(request, types.CallToolResult)


async def timed(session, tool, arguments, check, n, samples):
    for _ in range(n):
        started = time.perf_counter()
        result = await (session.send_ping() if tool == "ping" else call(session, tool, arguments))
        elapsed = time.perf_counter() - started
        check(result)
        if samples is not None:
            samples.append(elapsed)


def percentile(samples, p):
    ordered = sorted(samples)
    return ordered[round((len(ordered) - 1) * p)]


def us(seconds):
    return f"{seconds * 1e6:.0f}"


def machine():
    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{os.cpu_count()} cores of {model}"


def load_average():
    return ", ".join(f"{l:.2f}" for l in os.getloadavg())


async def run(execbox, work):
    upstream = StdioServerParameters(command=sys.executable, args=[str(HERE), "--serve-upstream"])
    config = work / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {NAMESPACE: {
        "command": sys.executable, "args": [str(HERE), "--serve-upstream"],
    }}}))
    through = StdioServerParameters(command=execbox, args=["mcp", "--config", str(config)])
    errlog_path = work / "stderr.log"
    add_args = {"a": 1, "b": 2}
    one_call = f"(await {NAMESPACE}.add({{ a: 1, b: 2 }})).sum"
    rows = {
        "ping_upstream": ("`ping` of the upstream (client → upstream, no tool)", "ping", None, no_check),
        "direct": ("(a) direct `tools/call` of `add` (client → upstream)", "add", add_args, check_add),
        "ping_execbox": ("`ping` of `execbox mcp` (no tool, no execution)", "ping", None, no_check),
        "trivial": ("(b) `execute_code` of `1 + 1` through `execbox mcp`", "execute_code",
                    {"code": "1 + 1"}, check_execute(2)),
        "one": (f"(c) `execute_code` of `{one_call}`", "execute_code", {"code": one_call},
                check_execute(3)),
    }
    samples = {key: [] for key in rows}
    with open(errlog_path, "w") as errlog:
        try:
            async with stdio_client(upstream, errlog=errlog) as (r1, w1), \
                    ClientSession(r1, w1) as direct, \
                    stdio_client(through, errlog=errlog) as (r2, w2), \
                    ClientSession(r2, w2) as code_mode:
                await direct.initialize()
                await code_mode.initialize()
                sessions = {"ping_upstream": direct, "direct": direct, "ping_execbox": code_mode,
                            "trivial": code_mode, "one": code_mode}
                for key, (_, tool, arguments, check) in rows.items():
                    await timed(sessions[key], tool, arguments, check, WARMUP, None)
                loads = [load_average()]
                for _ in range(ROUNDS):
                    for key, (_, tool, arguments, check) in rows.items():
                        await timed(sessions[key], tool, arguments, check, ITERATIONS, samples[key])
                loads.append(load_average())
        except BaseException:
            errlog.flush()
            tail = errlog_path.read_text().strip().splitlines()[-20:]
            if tail:
                print(f"stderr of the servers (last lines of {errlog_path}):", file=sys.stderr)
                print("\n".join(tail), file=sys.stderr)
            raise
    return rows, samples, loads


def main():
    if sys.argv[1:] == ["--serve-upstream"]:
        serve_upstream()
        return
    if sys.argv[1:]:
        raise SystemExit(f"mcp_python.py takes no arguments (see its docstring); got {sys.argv[1:]}")
    execbox = os.environ.get("EXECBOX") or str(WORKSPACE / "target" / "release" / "execbox")
    if not os.access(execbox, os.X_OK):
        raise SystemExit(
            f"mcp_python.py: {execbox} is missing: build it with "
            "`cargo build --release -p execbox-cli --bin execbox`, or set EXECBOX to an execbox binary"
        )
    started = datetime.datetime.now(datetime.timezone.utc)
    with tempfile.TemporaryDirectory(prefix="execbox-mcp-python-") as work:
        rows, samples, loads = asyncio.run(run(execbox, pathlib.Path(work)))

    p50 = {key: percentile(s, 0.5) for key, s in samples.items()}
    print(f"{started:%Y-%m-%d %H:%M} UTC; {machine()}; load average {loads[0]} before, {loads[1]} after; "
          f"Python {platform.python_version()}, mcp {importlib.metadata.version('mcp')} (client and upstream); "
          f"{execbox}; the client's output-schema check {'on' if VALIDATE else 'off'}")
    print(f"{ITERATIONS} timed calls per row and round after {WARMUP} warm-up ones, {ROUNDS} rounds "
          "taking turns; p50 and p90 over all of a row's calls")
    print()
    print("| measure | p50 µs | p90 µs |")
    print("| --- | ---: | ---: |")
    for key, (name, *_rest) in rows.items():
        print(f"| {name} | {us(p50[key])} | {us(percentile(samples[key], 0.9))} |")
    print()
    trivial = p50["trivial"] - p50["direct"]
    one = p50["one"] - p50["direct"]

    def verdict(cost, target):
        if cost < 0:
            return "met, but negative: the direct call, with the Python client's hop and the upstream's own work, costs more; see below"
        return "met" if cost * 1e6 <= target else "not met"

    print("execbox's own cost as issue 35 defines it (p50 of the row minus p50 of (a)):")
    print(f"- (b) − (a), `execute_code` of `1 + 1`: {us(trivial)} µs (target ≤ 100 µs: {verdict(trivial, 100)})")
    print(f"- (c) − (a), `execute_code` with one upstream call: {us(one)} µs (target ≤ 150 µs: {verdict(one, 150)})")
    # (a) holds the upstream's own handling of `add`, which (b) does not: when the upstream is
    # slower than a trivial execution, (b) − (a) says nothing. The pings give each server's floor.
    print("Beside each server's floor (a `ping` of the same server, from the same client):")
    print(f"- (b) − `ping` of execbox mcp, an execution of `1 + 1` above an MCP round trip: "
          f"{us(p50['trivial'] - p50['ping_execbox'])} µs")
    print(f"- (a) − `ping` of the upstream, the upstream's own handling of `add`: "
          f"{us(p50['direct'] - p50['ping_upstream'])} µs")
    print(f"- (c) − (b), one upstream call from inside an execution (execbox's client, the upstream "
          f"and the sandbox's path): {us(p50['one'] - p50['trivial'])} µs, against (a), "
          f"{us(p50['direct'])} µs, for the same call made directly")


if __name__ == "__main__":
    main()
