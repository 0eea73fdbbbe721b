"""Adapters that make a ``Sandbox`` the code-mode tool of an agent framework.

Each module turns ``sandbox.tool()`` (``execbox.CodeTool``: a name, a description with the rules
of a program, its limits, the answer's shape and the TypeScript declarations of the tools, and
the ``{code}`` schema) into that framework's tool, whose call runs the program and answers the
model with ``Result.for_model()``:

- ``execbox.integrations.pydantic_ai.code_tool(sandbox)``: a ``pydantic_ai.Tool``
  (``pip install "execbox[pydantic-ai]"``);
- ``execbox.integrations.openai_agents.code_tool(sandbox)``: an ``agents.FunctionTool`` of the
  OpenAI Agents SDK (``pip install "execbox[openai-agents]"``);
- ``execbox.integrations.langchain.code_tool(sandbox)``: a ``langchain_core`` ``StructuredTool``
  (``pip install "execbox[langchain]"``).

Each module imports its framework when it is imported, and says what to install when the
framework is missing; ``import execbox`` imports none of them. For another framework, give it
``sandbox.tool()``'s ``name``, ``description``, ``input_schema`` and ``handler_async``.
"""
