"use strict";
// `execbox/ai` for CommonJS: a Sandbox as a tool of the Vercel AI SDK (the package `ai`, v5 or later).
//
//   const { Sandbox, codeTool } = require("execbox/ai");
//   const sandbox = new Sandbox({ tools });
//   await generateText({ model, tools: { execute_code: codeTool(sandbox) }, stopWhen: stepCountIs(5), prompt });

const adapters = require("./adapters.cjs");
const { Sandbox } = require("./index.cjs");

let ai;
try {
  ai = require("ai");
} catch (error) {
  throw adapters.loadError("ai", error);
}
adapters.checkAi(ai);

/** `sandbox` as an AI SDK tool; the answer the model gets is `sandbox.tool()`'s. */
function codeTool(sandbox, options) {
  return adapters.aiCodeTool(ai, sandbox, options);
}

module.exports = { codeTool, Sandbox };
