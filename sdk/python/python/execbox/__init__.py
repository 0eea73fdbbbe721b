"""execbox: run model-written JavaScript against your Python tools, in a sandbox locked down
by the OS.

>>> import execbox
>>> def add(input):
...     return {"sum": input["a"] + input["b"]}
>>> result = execbox.run("return (await math.add({ a: 2, b: 3 })).sum", {"math": {"add": add}})
>>> result.value
5
"""

from execbox._code_tool import CodeTool
from execbox._openapi import OpenAPI
from execbox._policy import ApprovalRequest, Policy
from execbox._result import Error, Location, Result
from execbox._sandbox import Sandbox, prompt, run, run_async, types
from execbox._tools import Tool, ToolError, ToolFunction, Tools

__all__ = [
    "ApprovalRequest",
    "CodeTool",
    "Error",
    "Location",
    "OpenAPI",
    "Policy",
    "Result",
    "Sandbox",
    "Tool",
    "ToolError",
    "ToolFunction",
    "Tools",
    "prompt",
    "run",
    "run_async",
    "types",
]

__version__ = "0.1.0"
