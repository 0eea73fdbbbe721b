// `execbox/langchain` for ESM: a Sandbox as a LangChain.js tool (`@langchain/core`).
//
//   import { Sandbox, codeTool } from "execbox/langchain";
//   const sandbox = new Sandbox({ tools });
//   const agent = createAgent({ model, tools: [codeTool(sandbox)] });
import adapters from "./adapters.cjs";

export { Sandbox } from "./index.mjs";

let tools;
try {
  tools = await import("@langchain/core/tools");
} catch (error) {
  throw adapters.loadError("langchain", error);
}

/** `sandbox` as a LangChain.js tool; the answer the model gets is `sandbox.tool()`'s. */
export function codeTool(sandbox, options) {
  return adapters.langchainCodeTool(tools, sandbox, options);
}
