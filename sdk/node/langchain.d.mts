// Types of `execbox/langchain` for ESM: a Sandbox as a LangChain.js tool (`@langchain/core`).
// Word for word langchain.d.ts, kept apart because @langchain/core types its CommonJS and ESM builds
// apart (.d.cts, .d.ts), and a tool typed with the other build's classes does not fit createAgent.
import type { DynamicStructuredTool } from "@langchain/core/tools";
import { Sandbox, CodeToolOptions } from "./index.js";

export { Sandbox, CodeToolOptions };

/**
 * `sandbox` as a LangChain.js tool, for `createAgent({ tools: [codeTool(sandbox)] })`,
 * `model.bindTools([...])` and the like: the name (default `"execute_code"`) and description of
 * {@link Sandbox.tool} (rules, limits, answer, the tools' declarations), the JSON schema of
 * `{ code: string }`, and a function that runs the program, cancelled by the run's `signal`, and
 * resolves with the answer text for the model.
 */
export function codeTool(sandbox: Sandbox, options?: CodeToolOptions): DynamicStructuredTool;
