// Types of `execbox/ai`: a Sandbox as a tool of the Vercel AI SDK (the package `ai`, v5 or later).
import type { Tool } from "ai";
import { Sandbox } from "./index.js";

export { Sandbox };

/** Options of {@link codeTool}. The AI SDK names a tool by its key in `tools`, so there is no `name`. */
export interface AiCodeToolOptions {
  /** The answers are cut at this many characters (default 24000). */
  maxAnswerChars?: number;
}

/**
 * `sandbox` as an AI SDK tool, for `generateText({ tools: { execute_code: codeTool(sandbox) } })`
 * and the like: the description of {@link Sandbox.tool} (rules, limits, answer, the tools'
 * declarations), the input schema `{ code: string }`, and an `execute` that runs the program,
 * cancelled by the call's `abortSignal`, and resolves with the answer text for the model.
 */
export function codeTool(sandbox: Sandbox, options?: AiCodeToolOptions): Tool<{ code: string }, string>;
