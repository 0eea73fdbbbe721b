"use strict";
// `execbox/langchain` for CommonJS: a Sandbox as a LangChain.js tool (`@langchain/core`).
//
//   const { Sandbox, codeTool } = require("execbox/langchain");
//   const sandbox = new Sandbox({ tools });
//   const agent = createAgent({ model, tools: [codeTool(sandbox)] });

const adapters = require("./adapters.cjs");
const { Sandbox } = require("./index.cjs");

let tools;
try {
  tools = require("@langchain/core/tools");
} catch (error) {
  throw adapters.loadError("langchain", error);
}

/** `sandbox` as a LangChain.js tool; the answer the model gets is `sandbox.tool()`'s. */
function codeTool(sandbox, options) {
  return adapters.langchainCodeTool(tools, sandbox, options);
}

module.exports = { codeTool, Sandbox };
