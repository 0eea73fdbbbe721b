// execbox/ai and execbox/langchain: a whole agent loop in each framework, driven by the
// framework's own test model (no network), where the model first sends a wrong program, reads
// the error with its location, then sends the fixed one calling a real JavaScript tool; the
// abort signal of each framework cancelling the program; the CommonJS entries; the error when
// the framework is not installed.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, copyFileSync, symlinkSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

import { generateText, stepCountIs } from "ai";
import { MockLanguageModelV2 } from "ai/test";
import { createAgent } from "langchain";
import { fakeModel } from "@langchain/core/testing";
import { AIMessage, ToolMessage } from "@langchain/core/messages";
import { convertToOpenAITool } from "@langchain/core/utils/function_calling";

import * as aiAdapter from "execbox/ai";
import * as langchainAdapter from "execbox/langchain";
import { Sandbox } from "execbox";

const here = path.dirname(fileURLToPath(import.meta.url));
const packageDir = path.resolve(here, "..");

// A real JavaScript tool: the stock lives on the host, the program can only ask for it.
function stockTools(calls) {
  const stock = new Map([["apples", 17], ["pears", 4]]);
  return {
    shop: {
      stock: {
        description: "How many of an item are in stock.",
        inputSchema: { type: "object", required: ["item"], properties: { item: { type: "string" } } },
        handler: ({ item }) => {
          calls.push(item);
          return { item, count: stock.get(item) ?? 0 };
        },
      },
    },
  };
}

const WRONG = "return apples * 3";
const FIXED = 'const { count } = await shop.stock({ item: "apples" });\nreturn count * 3;';

/** The answer the "model" gives once it has the tool's answer: it reads the value out of it. */
function finalText(answer) {
  const parsed = JSON.parse(answer);
  return parsed.ok ? `There are ${parsed.result} apples (three crates' worth).` : `It failed: ${parsed.error.message}`;
}

// ---- the Vercel AI SDK -----------------------------------------------------------------------

const usage = { inputTokens: 10, outputTokens: 10, totalTokens: 20 };

function toolCall(id, code) {
  return {
    content: [{ type: "tool-call", toolCallId: id, toolName: "execute_code", input: JSON.stringify({ code }) }],
    finishReason: "tool-calls",
    usage,
    warnings: [],
  };
}

/** The text of the tool result with `toolCallId` in an AI SDK prompt (what the model receives). */
function toolResultInPrompt(prompt, toolCallId) {
  for (const message of prompt) {
    if (message.role !== "tool") continue;
    for (const part of message.content) {
      if (part.type === "tool-result" && part.toolCallId === toolCallId) {
        assert.equal(part.output.type, "text", "the answer reaches the model as text");
        return part.output.value;
      }
    }
  }
  return undefined;
}

test("ai: generateText fixes a wrong program from the error it got back, then calls the real tool", async () => {
  const calls = [];
  const sandbox = new aiAdapter.Sandbox({ tools: stockTools(calls), pool: 1 });
  try {
    const seen = [];
    const model = new MockLanguageModelV2({
      doGenerate: async ({ prompt, tools }) => {
        seen.push({ prompt, tools });
        if (seen.length === 1) return toolCall("call-1", WRONG);
        if (seen.length === 2) {
          const answer = toolResultInPrompt(prompt, "call-1");
          // A real model would read the error and fix the program; this one checks it could.
          if (!/ReferenceError/.test(answer ?? "")) return { content: [{ type: "text", text: "no error seen" }], finishReason: "stop", usage, warnings: [] };
          return toolCall("call-2", FIXED);
        }
        const answer = toolResultInPrompt(prompt, "call-2");
        return { content: [{ type: "text", text: finalText(answer) }], finishReason: "stop", usage, warnings: [] };
      },
    });

    const result = await generateText({
      model,
      tools: { execute_code: aiAdapter.codeTool(sandbox) },
      stopWhen: stepCountIs(5),
      prompt: "How many apples times three?",
    });

    // What the model was offered: the sandbox's tool, its declarations and the schema of { code }.
    const offered = seen[0].tools;
    assert.equal(offered.length, 1);
    assert.equal(offered[0].name, "execute_code");
    assert.equal(offered[0].description, sandbox.tool().description);
    assert.match(offered[0].description, /declare namespace shop/);
    assert.match(offered[0].description, /How many of an item are in stock/);
    assert.deepEqual(offered[0].inputSchema, sandbox.tool().inputSchema);

    // The wrong program: the model got the error with where it is.
    const first = toolResultInPrompt(seen[1].prompt, "call-1");
    assert.match(first, /"ok":false/);
    assert.match(first, /"code":"runtime_error"/);
    assert.match(first, /ReferenceError: apples is not defined/);
    assert.match(first, /line 1, column 8/);
    assert.equal(result.steps[0].toolResults[0].output, first);

    // The fixed program called the host's tool once, and the model's answer holds its value.
    assert.deepEqual(calls, ["apples"]);
    const second = toolResultInPrompt(seen[2].prompt, "call-2");
    assert.deepEqual(JSON.parse(second), { ok: true, result: 51, logs: [] });
    assert.equal(result.steps.length, 3);
    assert.equal(result.text, "There are 51 apples (three crates' worth).");
  } finally {
    sandbox.close();
  }
});

test("ai: the abortSignal of generateText cancels the running program", { timeout: 20000 }, async () => {
  const sandbox = new aiAdapter.Sandbox({ pool: 1, timeoutMs: 60000 });
  try {
    const model = new MockLanguageModelV2({ doGenerate: [toolCall("call-1", "while (true) {}")] });
    const controller = new AbortController();
    const reason = new Error("the user pressed stop");
    setTimeout(() => controller.abort(reason), 300);
    await assert.rejects(
      generateText({
        model,
        tools: { execute_code: aiAdapter.codeTool(sandbox) },
        stopWhen: stepCountIs(3),
        prompt: "spin",
        abortSignal: controller.signal,
      }),
      (error) => error === reason,
    );
    // The only runner is free again: the loop was ended, not left to its 60 s limit.
    const next = await sandbox.run("1 + 1", { timeoutMs: 5000 });
    assert.deepEqual([next.ok, next.value], [true, 2]);
  } finally {
    sandbox.close();
  }
});

test("ai: a call that is not { code } is answered with what to send, and the run goes on", async () => {
  const sandbox = new aiAdapter.Sandbox({ pool: 1 });
  try {
    const prompts = [];
    const model = new MockLanguageModelV2({
      doGenerate: async ({ prompt }) => {
        prompts.push(prompt);
        if (prompts.length === 1) {
          const content = [{ type: "tool-call", toolCallId: "call-1", toolName: "execute_code", input: '{"program":"1"}' }];
          return { content, finishReason: "tool-calls", usage, warnings: [] };
        }
        return { content: [{ type: "text", text: "sorry" }], finishReason: "stop", usage, warnings: [] };
      },
    });
    const result = await generateText({ model, tools: { execute_code: aiAdapter.codeTool(sandbox) }, stopWhen: stepCountIs(3), prompt: "x" });
    assert.equal(result.text, "sorry");
    const answer = prompts[1].at(-1).content[0];
    assert.equal(answer.toolCallId, "call-1");
    assert.deepEqual(answer.output, {
      type: "error-text",
      value: "execute_code: the input must be { code: string } holding the program; got an object",
    });
  } finally {
    sandbox.close();
  }
});

test("ai: bad arguments are TypeErrors that say what to pass", () => {
  const sandbox = new aiAdapter.Sandbox({ pool: 1 });
  try {
    assert.throws(() => aiAdapter.codeTool({ tools: {} }), {
      name: "TypeError",
      message: /^codeTool \(execbox\/ai\) takes a Sandbox as its first argument, as codeTool\(new Sandbox\(\{ tools \}\)\); got an object/,
    });
    assert.throws(() => aiAdapter.codeTool(sandbox, { name: "js" }), {
      name: "TypeError",
      message: /unknown option "name"; the options are maxAnswerChars: the AI SDK names a tool by its key in `tools`/,
    });
    assert.throws(() => aiAdapter.codeTool(sandbox, { maxAnswerChars: -1 }), { name: "TypeError", message: /maxAnswerChars/ });
  } finally {
    sandbox.close();
  }
});

// ---- LangChain.js ----------------------------------------------------------------------------

/** The content of the ToolMessage answering `toolCallId` among `messages`. */
function toolMessage(messages, toolCallId) {
  const found = messages.find((m) => ToolMessage.isInstance(m) && m.tool_call_id === toolCallId);
  return found && found.content;
}

test("langchain: createAgent fixes a wrong program from the error it got back, then calls the real tool", async () => {
  const calls = [];
  const sandbox = new langchainAdapter.Sandbox({ tools: stockTools(calls), pool: 1 });
  try {
    const tool = langchainAdapter.codeTool(sandbox);
    const model = fakeModel()
      .respondWithTools([{ name: "execute_code", args: { code: WRONG }, id: "call-1" }])
      .respond((messages) => {
        // A real model would read the error and fix the program; this one checks it could.
        if (!/ReferenceError/.test(toolMessage(messages, "call-1") ?? "")) return new AIMessage("no error seen");
        return new AIMessage({ content: "", tool_calls: [{ name: "execute_code", args: { code: FIXED }, id: "call-2" }] });
      })
      .respond((messages) => new AIMessage(finalText(toolMessage(messages, "call-2"))));

    const agent = createAgent({ model, tools: [tool] });
    const { messages } = await agent.invoke({ messages: [{ role: "user", content: "How many apples times three?" }] });

    // What a provider sends the model for this tool (ChatOpenAI's conversion).
    const offered = convertToOpenAITool(tool);
    assert.equal(offered.function.name, "execute_code");
    assert.equal(offered.function.description, sandbox.tool().description);
    assert.match(offered.function.description, /declare namespace shop/);
    assert.deepEqual(offered.function.parameters, sandbox.tool().inputSchema);

    // The wrong program: the model got the error with where it is.
    assert.equal(model.callCount, 3);
    const first = toolMessage(model.calls[1].messages, "call-1");
    assert.match(first, /"ok":false/);
    assert.match(first, /"code":"runtime_error"/);
    assert.match(first, /ReferenceError: apples is not defined/);
    assert.match(first, /line 1, column 8/);

    // The fixed program called the host's tool once, and the agent's last message holds its value.
    assert.deepEqual(calls, ["apples"]);
    assert.deepEqual(JSON.parse(toolMessage(messages, "call-2")), { ok: true, result: 51, logs: [] });
    const last = messages.at(-1);
    assert.ok(AIMessage.isInstance(last));
    assert.equal(last.content, "There are 51 apples (three crates' worth).");
  } finally {
    sandbox.close();
  }
});

test("langchain: the signal of agent.invoke cancels the running program", { timeout: 20000 }, async () => {
  const sandbox = new langchainAdapter.Sandbox({ pool: 1, timeoutMs: 60000 });
  try {
    const model = fakeModel()
      .respondWithTools([{ name: "execute_code", args: { code: "while (true) {}" }, id: "call-1" }])
      .respond(new AIMessage("done"));
    const agent = createAgent({ model, tools: [langchainAdapter.codeTool(sandbox)] });
    const controller = new AbortController();
    const reason = new Error("the user pressed stop");
    setTimeout(() => controller.abort(reason), 300);
    await assert.rejects(
      agent.invoke({ messages: [{ role: "user", content: "spin" }] }, { signal: controller.signal }),
      (error) => error.message === reason.message,
    );
    // The only runner is free again: the loop was ended, not left to its 60 s limit.
    const next = await sandbox.run("1 + 1", { timeoutMs: 5000 });
    assert.deepEqual([next.ok, next.value], [true, 2]);
  } finally {
    sandbox.close();
  }
});

test("langchain: a call that is not { code } is answered with what did not match, and the run goes on", async () => {
  const sandbox = new langchainAdapter.Sandbox({ pool: 1 });
  try {
    const model = fakeModel()
      .respondWithTools([{ name: "execute_code", args: { code: 5 }, id: "call-1" }])
      .respond(new AIMessage("sorry"));
    const agent = createAgent({ model, tools: [langchainAdapter.codeTool(sandbox)] });
    const { messages } = await agent.invoke({ messages: [{ role: "user", content: "x" }] });
    assert.equal(messages.at(-1).content, "sorry");
    const answer = toolMessage(messages, "call-1");
    assert.match(answer, /did not match expected schema/);
    assert.match(answer, /#\/properties\/code\/type: Instance type "number" is invalid\. Expected "string"\./);
  } finally {
    sandbox.close();
  }
});

test("langchain: the name option names the tool; a bad one is the sandbox's TypeError", () => {
  const sandbox = new langchainAdapter.Sandbox({ pool: 1 });
  try {
    assert.equal(langchainAdapter.codeTool(sandbox, { name: "run_js" }).name, "run_js");
    assert.equal(langchainAdapter.codeTool(sandbox).name, "execute_code");
    assert.throws(() => langchainAdapter.codeTool(sandbox, { name: "run js" }), {
      name: "TypeError",
      message: /options\.name must be 1 to 64 letters/,
    });
    assert.throws(() => langchainAdapter.codeTool(undefined), {
      name: "TypeError",
      message: /^codeTool \(execbox\/langchain\) takes a Sandbox as its first argument.*; got undefined/,
    });
  } finally {
    sandbox.close();
  }
});

// ---- entry points ----------------------------------------------------------------------------

test("the CommonJS entries give tools that run programs, on the same Sandbox class", async () => {
  const require = createRequire(import.meta.url);
  const ai = require("execbox/ai");
  const langchain = require("execbox/langchain");
  assert.equal(ai.Sandbox, Sandbox);
  assert.equal(langchain.Sandbox, Sandbox);
  assert.equal(aiAdapter.Sandbox, Sandbox);
  const calls = [];
  const sandbox = new Sandbox({ tools: stockTools(calls), pool: 1 });
  try {
    const viaAi = await ai.codeTool(sandbox).execute({ code: FIXED }, { toolCallId: "c", messages: [] });
    assert.deepEqual(JSON.parse(viaAi), { ok: true, result: 51, logs: [] });
    const viaLangchain = await langchain.codeTool(sandbox).invoke({ code: 'return (await shop.stock({ item: "pears" })).count' });
    assert.deepEqual(JSON.parse(viaLangchain), { ok: true, result: 4, logs: [] });
    assert.deepEqual(calls, ["apples", "pears"]);
  } finally {
    sandbox.close();
  }
});

test("without the framework installed, each entry says what to install", () => {
  // The package's JavaScript alone in a folder with no node_modules (the addon and the runner linked).
  const dir = mkdtempSync(path.join(tmpdir(), "execbox-no-frameworks-"));
  try {
    for (const file of ["index.cjs", "index.mjs", "adapters.cjs", "ai.cjs", "ai.mjs", "langchain.cjs", "langchain.mjs"]) {
      copyFileSync(path.join(packageDir, file), path.join(dir, file));
    }
    symlinkSync(path.join(packageDir, "execbox.node"), path.join(dir, "execbox.node"));
    symlinkSync(path.join(packageDir, "bin"), path.join(dir, "bin"));
    const env = { ...process.env, NODE_PATH: "" };
    // The main entry does not need either framework.
    execFileSync(process.execPath, ["-e", `require(${JSON.stringify(path.join(dir, "index.cjs"))})`], { env });
    const cases = [
      ["ai.cjs", "execbox/ai needs the Vercel AI SDK", "npm install ai"],
      ["ai.mjs", "execbox/ai needs the Vercel AI SDK", "npm install ai"],
      ["langchain.cjs", "execbox/langchain needs LangChain.js", "npm install @langchain/core"],
      ["langchain.mjs", "execbox/langchain needs LangChain.js", "npm install @langchain/core"],
    ];
    for (const [file, needs, install] of cases) {
      const url = new URL(`file://${path.join(dir, file)}`).href;
      const child = spawnSync(process.execPath, ["--input-type=module", "-e", `await import(${JSON.stringify(url)})`], {
        env,
        encoding: "utf8",
      });
      assert.notEqual(child.status, 0, `${file} loaded without its framework`);
      assert.match(child.stderr, new RegExp(`${needs}.*, which is not installed where execbox is: ${install}\\b`), file);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
