// Types of the npm package `execbox`: run model-written JavaScript in a locked-down sandbox
// whose only way out is the tools you give it.

/** One of the seven error codes of an execution. */
export type ErrorCode =
  | "timeout"
  | "memory_limit"
  | "validation_error"
  | "tool_error"
  | "runtime_error"
  | "serialization_error"
  | "internal_error";

/** Where in the program an uncaught error was thrown. */
export interface ErrorLocation {
  /** 1-based line of the program as sent. */
  line: number;
  /** 1-based column, in characters. */
  column: number;
  /** The text of that line (a window around the column for a long line). */
  source?: string;
  /** The 1-based position in `source` the caret points at. */
  caret?: number;
}

/** Why an execution failed. */
export interface ExecError {
  /**
   * `timeout` (past `timeoutMs`, or cancelled), `memory_limit` (past `memoryLimitBytes`),
   * `runtime_error` (an uncaught exception or a syntax error), or the code of a tool call's
   * error the program did not catch: `tool_error` (a tool threw), `validation_error` (the input
   * did not match the tool's `inputSchema`, or its output its `outputSchema`),
   * `serialization_error` (a value cannot cross the boundary); `internal_error` for a failure
   * of execbox itself.
   */
  code: ErrorCode;
  /** What went wrong, for a person or a model: a tool's error reads `math.add: <its message>`. */
  message: string;
  /** The name of the thrown error (`"TypeError"`), when it had one. */
  name?: string;
  /** Why a trusted layer refused a call (`"rate_limited"`, ...), when one did. */
  reason?: string;
  /** With a `reason` of `"rate_limited"`: milliseconds until a retry may be admitted. */
  retryAfterMs?: number;
  /** Where the error was thrown, when the runner knows. */
  location?: ErrorLocation;
  /**
   * The error as a person or a model reads it: name, message, line and a caret under the
   * column (what `String(error)` gives, and Python's `str(result.error)`).
   */
  text: string;
}

/** Options of {@link Result.forModel}. */
export interface ForModelOptions {
  /** The answer is cut at this many characters, with a marker saying so (default 24000). */
  maxChars?: number;
}

/** The outcome of one execution. Failures of the program are results, never rejections. */
export interface Result<T = unknown> {
  /** The program returned (its value is `value`). */
  ok: boolean;
  /** What the program returned, parsed from JSON; `undefined` when it returned nothing or failed. */
  value: T | undefined;
  /** Why it failed; absent when `ok`. */
  error?: ExecError;
  /** Its `console` lines (the first `maxLogLines`/`maxLogChars`), then execbox's notes starting `[execbox] `. */
  logs: string[];
  /** Wall time of the execution in milliseconds. */
  durationMs: number;
  /**
   * The answer to hand a model: the JSON of `{ok, result | error, logs}` (an error with its
   * name, line and caret), long log lines cut first, then the whole text cut at `maxChars`
   * with a marker; execbox's own notes always follow. The same text `execbox mcp`'s
   * `execute_code` and Python's `Result.for_model` give. Not enumerable.
   */
  forModel(options?: ForModelOptions): string;
}

/** The JSON schema of a {@link CodeTool}'s input. */
export interface CodeToolInputSchema {
  type: "object";
  properties: { code: { type: "string"; description: string } };
  required: ["code"];
  additionalProperties: false;
}

/** A sandbox as one tool a model calls with a program ({@link Sandbox.tool}). */
export interface CodeTool {
  /** The tool's name (default `"execute_code"`). */
  name: string;
  /** The rules of a program, the limits, the answer's shape and the tools' declarations. */
  description: string;
  /** `{ code: string }`. */
  inputSchema: CodeToolInputSchema;
  /** Where the answers are cut. */
  maxAnswerChars: number;
  /** Runs `input.code` in the sandbox and resolves with the answer for the model. */
  handler(input: { code: string }, options?: { signal?: AbortSignal }): Promise<string>;
}

/** Options of {@link Sandbox.tool}. */
export interface CodeToolOptions {
  /** The tool's name: 1 to 64 letters, digits, `_` or `-` (default `"execute_code"`). */
  name?: string;
  /** The answers are cut at this many characters (default 24000). */
  maxAnswerChars?: number;
}

/**
 * A tool's implementation: takes the input the program passed (parsed JSON; `null` when it
 * passed nothing) and returns a JSON value, or a Promise of one. A thrown `Error` (or a
 * rejection) reaches the program as a `tool_error` with the error's `message`.
 */
export type ToolFn<I = any, O = unknown> = (input: I) => O | Promise<O>;

/** A tool with its description and schemas. */
export interface ToolSpec<I = any, O = unknown> {
  /** The implementation. */
  handler: ToolFn<I, O>;
  /** What it does: the model reads it (in `types()` and `prompt()`). */
  description?: string;
  /** JSON Schema every input must match; a call that does not is refused (`validation_error`) without calling `handler`. */
  inputSchema?: object | boolean;
  /** JSON Schema every output must match before the program gets it (`validation_error` otherwise). */
  outputSchema?: object | boolean;
  /**
   * With a {@link Policy}: the permissions a principal must hold, every one (`["weather:read"]`);
   * a principal lacking one does not see the tool at all.
   */
  permissions?: string[];
  /**
   * Calls admitted per principal and window, like `"100 per 1h"` or `"3/1m"` (a bad one is a
   * `TypeError` naming `tools.<namespace>.<name>.rateLimit`). A call past it rejects with
   * `reason: "rate_limited"` and `retryAfterMs`. Needs a {@link Policy}: without one the tool
   * is refused, never run unguarded.
   */
  rateLimit?: string;
  /**
   * Each call waits for the policy's `approve` (see {@link PolicyOptions.approve}). Needs a
   * {@link Policy}: without one the tool is refused, never run unguarded.
   */
  requiresApproval?: boolean;
}

/**
 * Tools by namespace, then name: `{ math: { add: fn } }` is `await math.add(input)` in the program.
 * A namespace may instead be an OpenAPI provider: `{ github: openapi({ openapi: "./github.json" }) }`.
 */
export type Tools = Record<string, Record<string, ToolFn | ToolSpec> | OpenApiProvider>;

/**
 * A secret, named and never written: an environment variable of this process (which code may
 * set before calling `openapi()`) or a file (relative to `process.cwd()`; one trailing line
 * break dropped). Read once, when `openapi()` builds the provider.
 */
export type OpenApiSecret = { env: string } | { file: string };

/** How the calls of an OpenAPI provider authenticate: exactly one kind. */
export type OpenApiAuth =
  /** `Authorization: Bearer <secret>`. */
  | { bearer: OpenApiSecret }
  /** A key in a header or in the query string. */
  | { api_key: { in: "header" | "query"; name: string } & OpenApiSecret }
  /** `Authorization: Basic` from a user name and a password. */
  | { basic: { username: OpenApiSecret; password: OpenApiSecret } }
  /** A token fetched from `token_url` (https, or http on loopback), cached until it expires. */
  | {
      oauth2_client_credentials: {
        token_url: string;
        client_id: string;
        client_secret: OpenApiSecret;
        scopes?: string[];
      };
    };

/**
 * An OpenAPI provider's configuration: the fields of a tools file's OpenAPI provider, spelt as
 * there (snake_case), so one configuration moves between the two. See docs/openapi.md.
 */
export interface OpenApiConfig {
  /** The OpenAPI 3.0 or 3.1 document (JSON or YAML): a path, relative to `process.cwd()`, or a URL. */
  openapi: string;
  /** The API's base URL, overriding the document's `servers`. */
  base_url?: string;
  /** How calls authenticate; none by default. */
  auth?: OpenApiAuth;
  /** Which operations become tools: globs on the operationId, the tool name or a tag. */
  operations?: { include?: string[]; exclude?: string[] };
  /** Headers sent with every call (put credentials in `auth`: only those are redacted). */
  headers?: Record<string, string>;
  /** The time limit of one call, connection to last byte: default 30,000, at most 3,600,000. */
  timeout_ms?: number;
  /** The largest answer read: default 8 MiB, at most 15 MiB. */
  max_response_bytes?: number;
  /** The namespace's description, instead of the document's title and description. */
  description?: string;
  /** Permissions a principal must hold to call any of the operations (needs a `Policy`). */
  permissions?: string[];
  /** A rate limit of each operation, per principal: `"100 per 1h"` or `{ requests: 100, window: "1h" }` (needs a `Policy`). */
  rate_limit?: string | { requests: number; window: string };
  /** Each call waits for the policy's `approve` (needs a `Policy`). */
  requires_approval?: boolean;
}

/** An operation of the document that is not a tool, and why. */
export interface SkippedOperation {
  /** `METHOD /path`. */
  operation: string;
  /** Why it is not a tool (an unsupported request body, a broken `$ref`). */
  reason: string;
}

/** An OpenAPI document's operations as tools, made by `openapi()`; give it as a namespace of `tools`. */
export class OpenApiProvider {
  private constructor();
  /** The operations that are tools, named as the document names them (the program's names are these, sanitised). */
  readonly operations: readonly string[];
  /** The operations left out, and why (also reported with `process.emitWarning`). */
  readonly skipped: readonly SkippedOperation[];
}

/**
 * The operations of an OpenAPI document as tools: one tool per operation, each call an HTTP
 * request made by the host, with credentials the program never sees. The document and the
 * secrets are read now; a bad field throws an Error naming it (`openapi(): auth.bearer: ...`).
 */
export function openapi(config: OpenApiConfig): OpenApiProvider;

/** Limits of an execution; each defaults to execbox's default when unset. */
export interface Limits {
  /** Wall-clock limit in milliseconds, waiting for tools and for a free runner included (default 5000). */
  timeoutMs?: number;
  /** Memory the program's JavaScript runtime may allocate, in bytes (default 64 MiB). */
  memoryLimitBytes?: number;
  /** Log lines kept, the earliest (default 100). */
  maxLogLines?: number;
  /** Log characters kept across the kept lines (default 64000). */
  maxLogChars?: number;
}

/** Options of one execution of a {@link Sandbox}. */
export interface SandboxRunOptions extends Limits {
  /**
   * Cancels the execution: the Promise then rejects with `signal.reason` (an `AbortError`
   * `DOMException` unless you gave `abort()` a reason). An already-aborted signal rejects
   * without running anything.
   */
  signal?: AbortSignal;
}

/** Options of {@link run}. */
export interface RunOptions extends SandboxRunOptions {
  /** The tools the program may call. */
  tools?: Tools;
  /** Guards every tool call (permissions, rate limits, approvals, audit); anything but a {@link Policy} is a `TypeError`. */
  policy?: Policy;
}

/** Options of a {@link Sandbox}. */
export interface SandboxOptions extends Limits {
  /** The tools every program of this sandbox may call. */
  tools?: Tools;
  /** Guards every tool call of every run of this sandbox; anything but a {@link Policy} is a `TypeError`. */
  policy?: Policy;
  /** How many runner processes to keep warm, and so how many executions run at once (default 4). */
  pool?: number;
}

/** A call waiting for approval, as {@link PolicyOptions.approve} gets it. */
export interface ApprovalRequest {
  /** The tool, `namespace.name` (`"mail.send"`). */
  tool: string;
  /** The input the program passed, already checked against the tool's `inputSchema`. */
  input: any;
  /** The policy's principal, or `null` without one. */
  principal: string | null;
  /** The id of the execution making the call. */
  executionId: string;
  /**
   * The input's SHA-256 over canonical JSON, lowercase hex (a durable execution's
   * `inputSha256`): an approver that asks someone elsewhere shows it and checks the answer
   * names it, so a yes given for one input never lets another run.
   */
  inputSha256: string;
  /**
   * The policy rule that sent the call for approval (`rules:` in the policy file, see
   * docs/policy.md): `"rules[1]"`, with its `name` when it has one; `null` when the tool's own
   * `requiresApproval` asked.
   */
  rule: string | null;
  /** The rule's `reason`, to show with the question; `null` without one. */
  reason: string | null;
  /**
   * The roles or principals the rule names as its approvers: only they may answer, so an
   * approver that asks someone must check who answers. Empty: whoever the policy lets approve.
   */
  approvers: string[];
}

/** Options of a {@link Policy}. */
export interface PolicyOptions {
  /**
   * A policy file (principals, roles, permissions, `rules`, `state`, `audit`; see
   * docs/policy.md). Without one every tool is permitted and rate limits are counted in memory.
   */
  path?: string | URL;
  /** Who runs: a principal of the policy file (needs `path`). */
  principal?: string;
  /**
   * Decides each call of a tool that requires approval, and each call a rule of the policy
   * file sends for approval (`action: approve`). Only `true` (or a Promise of `true`) lets
   * the call run; `false`, anything else, a throw or a rejection denies it
   * (`reason: "approval_denied"`; a throw or rejection is also a process warning). It runs on
   * the main thread and never blocks it; it may take its time, but the execution's time limit
   * still runs. Without `approve`, such calls reject with `reason: "approval_required"`.
   */
  approve?: (request: ApprovalRequest) => boolean | Promise<boolean>;
  /**
   * The audit log: a file (one JSON line per decision) or a `postgres://` URL (one row per
   * decision); overrides the file's `audit`.
   */
  auditLog?: string | URL;
  /**
   * Where rate-limit counters are kept: a SQLite file shared by every process using it, or a
   * `postgres://` URL shared exactly by every process and replica using the database;
   * overrides the file's `state`.
   */
  state?: string | URL;
}

/**
 * Who runs, what they may call, how often, who approves, and the audit log: execbox-policy's
 * enforcement over the tool calls of the executions given it (`run(code, { policy })`,
 * `new Sandbox({ policy })`). Rate-limit counters are shared by every execution given the same
 * Policy (and, with `state`, by every process using that file).
 */
export class Policy {
  /**
   * Loads the policy file, resolves the principal, opens the state file and the audit log; a
   * bad file or an unknown principal throws an `Error` with the policy's words.
   */
  constructor(options?: PolicyOptions);
  /** The `principal` given, if any. */
  readonly principal: string | undefined;
}

/**
 * Runs `code` (the body of an async function: `await` at the top level, `return` or a last
 * expression gives the value) in a fresh sandbox, on a module-wide pool of warm runners.
 * Resolves with the {@link Result} whatever the program does; rejects only for bad arguments
 * (a `TypeError`) or a cancel (see {@link SandboxRunOptions.signal}).
 */
export function run<T = unknown>(code: string, options?: RunOptions): Promise<Result<T>>;

/**
 * A set of tools and a pool of warm runner processes for many executions. An idle Sandbox
 * does not keep Node.js from exiting; an execution in flight does.
 */
export class Sandbox {
  /** Checks the tools (a `TypeError` naming the bad one, e.g. `tools.math.add`) and starts `pool` runners. */
  constructor(options?: SandboxOptions);
  /**
   * Runs `code` with this sandbox's tools; its limits override the sandbox's. Concurrent calls
   * are fine: beyond `pool` at once they wait for a runner (the wait counts against `timeoutMs`).
   * Rejects when the sandbox is closed.
   */
  run<T = unknown>(code: string, options?: SandboxRunOptions): Promise<Result<T>>;
  /**
   * This sandbox as one tool for a model, for any agent framework: name, description (rules,
   * limits, answer, declarations), the input schema and a handler giving the model's answer.
   */
  tool(options?: CodeToolOptions): CodeTool;
  /** The TypeScript declarations of this sandbox's tools, as its programs see them. */
  types(): string;
  /** A prompt describing this sandbox (how programs run, its limits, its tools) to a model. */
  prompt(): string;
  /** Ends the idle runners; later `run` calls reject. Executions in flight run to their end. */
  close(): void;
  /** Whether `close()` was called. */
  readonly closed: boolean;
}

/** The TypeScript declarations of `tools`, as a program sees them (for a model's prompt). */
export function types(tools?: Tools): string;

/** A prompt-ready description of a sandbox with `tools` and the limits in `options`, declarations included. */
export function prompt(tools?: Tools, options?: Limits): string;
