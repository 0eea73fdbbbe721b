// `execbox/ai` for ESM: a Sandbox as a tool of the Vercel AI SDK (the package `ai`, v5 or later).
//
//   import { Sandbox, codeTool } from "execbox/ai";
//   const sandbox = new Sandbox({ tools });
//   await generateText({ model, tools: { execute_code: codeTool(sandbox) }, stopWhen: stepCountIs(5), prompt });
import adapters from "./adapters.cjs";

export { Sandbox } from "./index.mjs";

let ai;
try {
  ai = await import("ai");
} catch (error) {
  throw adapters.loadError("ai", error);
}
adapters.checkAi(ai);

/** `sandbox` as an AI SDK tool; the answer the model gets is `sandbox.tool()`'s. */
export function codeTool(sandbox, options) {
  return adapters.aiCodeTool(ai, sandbox, options);
}
