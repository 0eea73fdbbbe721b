"use strict";
// The agent-framework adapters behind `execbox/ai` and `execbox/langchain`, in one place: each
// entry point loads its framework (`require` from ai.cjs and langchain.cjs, `import` from ai.mjs
// and langchain.mjs, so a program gets the framework build it uses itself) and hands it here.
// Both wrap `sandbox.tool()`: the same description, input schema and answer text for every
// framework.

const { Sandbox } = require("./index.cjs");

/** What each adapter needs, and the command that installs it. */
const FRAMEWORKS = {
  ai: {
    entry: "execbox/ai",
    needs: 'the Vercel AI SDK (the npm package "ai", version 5 or later)',
    install: "npm install ai",
    modules: ["ai"],
  },
  langchain: {
    entry: "execbox/langchain",
    needs: 'LangChain.js (the npm package "@langchain/core", 0.3.80 or later)',
    install: "npm install @langchain/core",
    modules: ["@langchain/core", "@langchain/core/tools"],
  },
};

function describe(value) {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  if (typeof value === "function") return "a function";
  if (typeof value === "object") return `an object (${Object.prototype.toString.call(value)})`;
  if (typeof value === "string") return `the string ${JSON.stringify(value.slice(0, 40))}`;
  return `${typeof value} ${String(value)}`;
}

/**
 * The error to throw when loading `framework`'s package failed with `error`: one naming the
 * package and the command that installs it when the package itself is missing, else `error`
 * (a package that is there but broken keeps its own error).
 */
function loadError(framework, error) {
  const { entry, needs, install, modules } = FRAMEWORKS[framework];
  const notFound = error && (error.code === "MODULE_NOT_FOUND" || error.code === "ERR_MODULE_NOT_FOUND");
  const message = error && typeof error.message === "string" ? error.message : "";
  if (notFound && modules.some((name) => message.includes(`'${name}'`))) {
    return new Error(`${entry} needs ${needs}, which is not installed where execbox is: ${install}`, {
      cause: error,
    });
  }
  return error;
}

/** Checks the `ai` module is v5 or later (v4's `tool()` takes `parameters`, not `inputSchema`). */
function checkAi(ai) {
  if (typeof ai.tool !== "function" || typeof ai.jsonSchema !== "function" || typeof ai.stepCountIs !== "function") {
    throw new Error(
      `execbox/ai needs ${FRAMEWORKS.ai.needs}; the "ai" installed is older (it has no stepCountIs): npm install ai@5`,
    );
  }
  return ai;
}

/** Checks `codeTool`'s arguments; returns the options for `sandbox.tool()`. */
function toolOptions(entry, sandbox, options, allowed, advice) {
  if (!(sandbox instanceof Sandbox)) {
    throw new TypeError(
      `codeTool (${entry}) takes a Sandbox as its first argument, as codeTool(new Sandbox({ tools })); got ${describe(sandbox)}`,
    );
  }
  if (options === undefined || options === null) return {};
  if (typeof options !== "object" || Array.isArray(options)) {
    throw new TypeError(`codeTool (${entry}) options must be an object { ${allowed.join("?, ")}? }; got ${describe(options)}`);
  }
  const picked = {};
  for (const key of Object.keys(options)) {
    if (!allowed.includes(key)) {
      throw new TypeError(
        `codeTool (${entry}) options: unknown option ${JSON.stringify(key)}; the options are ${allowed.join(", ")}${(advice && advice[key]) || ""}`,
      );
    }
    if (options[key] !== undefined) picked[key] = options[key];
  }
  return picked;
}

/**
 * `sandbox` as a tool of the Vercel AI SDK: `tool({ description, inputSchema, execute })` of the
 * `ai` module given. The AI SDK names a tool by its key in `tools`, so there is no `name` here.
 */
function aiCodeTool(ai, sandbox, options) {
  const picked = toolOptions("execbox/ai", sandbox, options, ["maxAnswerChars"], {
    name: ": the AI SDK names a tool by its key in `tools`, as tools: { my_name: codeTool(sandbox) }",
  });
  const spec = sandbox.tool(picked);
  return ai.tool({
    description: spec.description,
    inputSchema: ai.jsonSchema(spec.inputSchema),
    execute: (input, callOptions) => spec.handler(input, { signal: callOptions && callOptions.abortSignal }),
  });
}

/**
 * `sandbox` as a LangChain.js tool: `tool(func, { name, description, schema })` of the
 * `@langchain/core/tools` module given, the schema being the JSON schema of `{ code }`.
 */
function langchainCodeTool(tools, sandbox, options) {
  const picked = toolOptions("execbox/langchain", sandbox, options, ["name", "maxAnswerChars"]);
  const spec = sandbox.tool(picked);
  return tools.tool((input, config) => spec.handler(input, { signal: config && config.signal }), {
    name: spec.name,
    description: spec.description,
    schema: spec.inputSchema,
    // An input that is not `{ code: string }` is answered with what did not match, not only that
    // something did not (LangChain checks the schema before the function runs).
    verboseParsingErrors: true,
  });
}

module.exports = { loadError, checkAi, aiCodeTool, langchainCodeTool };
