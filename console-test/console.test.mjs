// The approval console of `execbox serve` in a real browser (Debian's chromium through
// playwright-core): the release `execbox` serves a project whose `pay` capability calls
// `notes.add`, then `mail.send`, which needs approval when a policy rule says so
// (`input.amount > 100`, asked of the role `finance`); a requester starts executions through the API, and
// an approver signs in to /console, sees each pending call appear live, approves one, denies
// another with a reason, sees a second context's decision of a decided call refused, and
// hostile text in the program and the tool input stays text.
//
// Run: `.ci/console` (or `npm ci && node --test console.test.mjs` here, with
// EXECBOX=/path/to/execbox; default ../target/release/execbox).

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, mkdirSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { createInterface } from "node:readline";
import { chromium } from "playwright-core";

const here = dirname(fileURLToPath(import.meta.url));
const EXECBOX = process.env.EXECBOX || join(here, "..", "target", "release", "execbox");
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
// The screenshot of docs/console.md: written there with BLESS=1, else beside the build
// (target/console.png), so a run leaves the checkout as it found it.
const SCREENSHOT = process.env.BLESS === "1"
  ? join(here, "..", "docs", "console.png")
  : join(process.env.CARGO_TARGET_DIR || join(here, "..", "target"), "console.png");

// Hostile text: markup in the tool input, a closing script tag in the program.
const XSS_INPUT = "<img src=x onerror=alert('input')>";
const XSS_SOURCE = "</script><script>alert('source')</script>";

const sha256 = (text) => createHash("sha256").update(text).digest("hex");

let dir;
let server;
let url;
let browser;
const dialogs = [];

function project() {
  dir = mkdtempSync(join(tmpdir(), "execbox-console-"));
  const cap = join(dir, "project", ".execbox", "capabilities", "pay");
  mkdirSync(cap, { recursive: true });
  mkdirSync(join(dir, "global"), { recursive: true });
  writeFileSync(
    join(cap, "capability.yaml"),
    "name: pay\ntype: script\ndescription: pay someone\nentry: index.js\ntools: tools.yaml\ntimeout_ms: 60000\n"
  );
  writeFileSync(
    join(cap, "index.js"),
    `// ${XSS_SOURCE}\n` +
      "const noted = await notes.add({ text: params.note });\n" +
      "const sent = await mail.send({ to: params.to, amount: params.amount });\n" +
      "({ noted, sent })\n"
  );
  const tools = {
    version: 1,
    providers: {
      notes: { tools: { add: { command: "/bin/sh", args: ["-c", "cat >/dev/null; echo '{\"noted\": true}'"] } } },
      mail: {
        tools: {
          send: { command: "/bin/sh", args: ["-c", "cat >/dev/null; echo '{\"sent\": 7}'"] },
        },
      },
    },
  };
  writeFileSync(join(cap, "tools.yaml"), JSON.stringify(tools));
  const policy =
    "version: 1\n" +
    "roles:\n" +
    "  finance: { permissions: ['executions:approve'] }\n" +
    "principals:\n" +
    `  requester: { token_sha256: [${sha256("requester-token")}] }\n` +
    `  approver: { roles: [finance], token_sha256: [${sha256("approver-token")}] }\n` +
    `  bystander: { permissions: ['executions:approve'], token_sha256: [${sha256("bystander-token")}] }\n` +
    "rules:\n" +
    '  - { name: big-payments, tool: "mail.send", when: "input.amount > 100", action: approve, approvers: [finance], reason: "payments over 100 need a second person" }\n';
  writeFileSync(join(dir, "policy.yaml"), policy);
}

function startServer() {
  return new Promise((resolve, reject) => {
    server = spawn(
      EXECBOX,
      [
        "serve",
        "--listen", "127.0.0.1:0",
        "--pool", "2",
        "--project", join(dir, "project"),
        "--db", join(dir, "state.db"),
        "--policy", join(dir, "policy.yaml"),
      ],
      {
        cwd: dir,
        env: { ...process.env, EXECBOX_HOME: join(dir, "global"), RUST_LOG: "" },
        stdio: ["ignore", "pipe", "inherit"],
      }
    );
    server.on("error", reject);
    server.on("exit", (code) => reject(new Error(`execbox serve exited with ${code}`)));
    createInterface({ input: server.stdout }).once("line", (line) => resolve(line.trim()));
  });
}

/// Starts `pay` as the requester, through the bearer-token API: its execution id.
async function start(params) {
  const response = await fetch(`${url}/v1/executions`, {
    method: "POST",
    headers: { Authorization: "Bearer requester-token", "Content-Type": "application/json" },
    body: JSON.stringify({ capability: "pay", params }),
  });
  const body = await response.json();
  assert.equal(response.status, 202, JSON.stringify(body));
  return body.executionId;
}

/// A fresh browser context whose page is signed in as the approver.
async function signedIn({ blockEvents = false } = {}) {
  const context = await browser.newContext({ viewport: { width: 900, height: 1000 } });
  const page = await context.newPage();
  page.on("dialog", async (dialog) => {
    dialogs.push(dialog.message());
    await dialog.dismiss();
  });
  if (blockEvents) {
    // A page that lost its live stream: its list stays as it was first read.
    await page.route("**/console/events", (route) => route.abort());
  }
  await page.goto(`${url}/console`);
  await page.getByTestId("token").fill("approver-token");
  await page.getByTestId("sign-in").click();
  await page.locator("#who").waitFor({ state: "visible" });
  assert.equal(await page.getByTestId("token").inputValue(), "", "the token field is cleared");
  return { context, page };
}

function card(page, id) {
  return page.locator(`li.entry[data-execution-id="${id}"]`);
}

before(async () => {
  project();
  url = await startServer();
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
});

after(async () => {
  if (browser) await browser.close();
  if (server) {
    server.removeAllListeners("exit");
    server.kill("SIGTERM");
  }
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("a bad token is refused and the page keeps no token", async () => {
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(`${url}/console`);
  await page.getByTestId("token").fill("not-a-token");
  await page.getByTestId("sign-in").click();
  await page.getByTestId("message").filter({ hasText: "Sign-in refused" }).waitFor();
  assert.equal(await page.getByTestId("token").inputValue(), "");
  assert.deepEqual(await context.cookies(), []);
  const stored = await page.evaluate(() => localStorage.length + sessionStorage.length);
  assert.equal(stored, 0);
  await context.close();
});

test("a call no rule asks about runs at once, and one asked of finance is not shown to others", async () => {
  const small = await start({ to: "erin@example.com", amount: 50, note: "small" });
  const outcome = await (
    await fetch(`${url}/v1/executions/${small}/wait?timeoutMs=60000`, {
      headers: { Authorization: "Bearer requester-token" },
    })
  ).json();
  assert.equal(outcome.status, "completed", JSON.stringify(outcome));

  // A holder of the approve permission who is not in finance sees nothing of a big one.
  const big = await start({ to: "frank@example.com", amount: 400, note: "big" });
  const paused = await (
    await fetch(`${url}/v1/executions/${big}/wait?timeoutMs=60000`, {
      headers: { Authorization: "Bearer requester-token" },
    })
  ).json();
  assert.equal(paused.status, "awaiting_approval", JSON.stringify(paused));
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(`${url}/console`);
  await page.getByTestId("token").fill("bystander-token");
  await page.getByTestId("sign-in").click();
  await page.locator("#empty").waitFor({ state: "visible" });
  assert.equal(await page.getByTestId("pending-call").count(), 0);
  // Stop it, so that the approver's list starts empty.
  const stopped = await fetch(`${url}/v1/executions/${big}/stop`, {
    method: "POST",
    headers: { Authorization: "Bearer requester-token" },
  });
  assert.equal(stopped.status, 200);
  await context.close();
});

test("the approver sees a pending call live, approves it and sees the outcome", async () => {
  const { context, page } = await signedIn();
  // The cookie: HttpOnly, SameSite=Strict, on /console only; the page script cannot read it.
  const [cookie] = await context.cookies();
  assert.equal(cookie.name, "execbox_session");
  assert.equal(cookie.httpOnly, true);
  assert.equal(cookie.sameSite, "Strict");
  assert.equal(cookie.path, "/console");
  assert.equal(await page.evaluate(() => document.cookie), "");
  await page.locator("#live").filter({ hasText: "Live" }).waitFor();

  // Started after the page opened: it appears through the event stream.
  const id = await start({ to: XSS_INPUT, amount: 250, note: "first" });
  const entry = card(page, id);
  await entry.getByTestId("pending-call").waitFor();
  const input = await entry.getByTestId("pending-input").textContent();
  assert.ok(input.includes(XSS_INPUT), input);
  assert.ok(input.includes('"amount": 250'), input);
  assert.match(await entry.locator(".pending-title").textContent(), /call 2 of mail\.send/);
  assert.match(await entry.locator(".meta").textContent(), /started by requester/);
  const source = await entry.locator(".source").textContent();
  assert.ok(source.includes(XSS_SOURCE), source);
  assert.match(await entry.locator(".ran").textContent(), /notes\.add[\s\S]*"noted": true/);
  // The rule that asked, why, and of whom.
  assert.match(await entry.locator(".rule").textContent(), /big-payments.*because: payments over 100 need a second person/);
  assert.match(await entry.locator(".approvers").textContent(), /approvers: finance/);
  // The hostile text stayed text: no element was made of it, no script ran.
  assert.equal(await page.locator("img").count(), 0);
  assert.equal(await page.locator("script").count(), 1);
  assert.deepEqual(dialogs, []);

  await page.screenshot({ path: SCREENSHOT, fullPage: true });

  await entry.getByTestId("approve").click();
  const outcome = entry.getByTestId("outcome");
  await outcome.waitFor({ state: "visible", timeout: 60_000 });
  const shown = await outcome.textContent();
  assert.match(shown, /"status": "completed"/);
  assert.match(shown, /"sent": 7/);
  assert.deepEqual(dialogs, []);
  await context.close();
});

test("the approver denies a call with a reason and sees it", async () => {
  const { context, page } = await signedIn();
  const id = await start({ to: "mallory@example.com", amount: 900, note: "second" });
  const entry = card(page, id);
  await entry.getByTestId("pending-call").waitFor();
  await entry.getByTestId("deny-reason").fill("not to mallory <b>ever</b>");
  await entry.getByTestId("deny").click();
  const outcome = entry.getByTestId("outcome");
  await outcome.waitFor({ state: "visible", timeout: 60_000 });
  const shown = await outcome.textContent();
  assert.match(shown, /"status": "failed"/);
  assert.match(shown, /APPROVAL_DENIED/);
  assert.ok(shown.includes("not to mallory <b>ever</b>"), shown);
  assert.equal(await page.locator("b").count(), 0);
  await context.close();
});

test("a second context deciding a call decided already is refused in its page", async () => {
  const id = await start({ to: "carol@example.com", amount: 150, note: "third" });
  const first = await signedIn();
  await card(first.page, id).getByTestId("pending-call").waitFor();
  // Opened once the call waits: it reads the list once, then hears nothing more.
  const second = await signedIn({ blockEvents: true });
  await card(second.page, id).getByTestId("pending-call").waitFor();

  await card(first.page, id).getByTestId("approve").click();
  await card(first.page, id).getByTestId("outcome").waitFor({ state: "visible", timeout: 60_000 });

  // The second page still shows the call (its stream is gone); its denial is refused.
  await card(second.page, id).getByTestId("deny-reason").fill("too late");
  await card(second.page, id).getByTestId("deny").click();
  const result = card(second.page, id).locator(".result");
  await result.filter({ hasText: "Refused" }).waitFor();
  assert.match(await result.textContent(), /409|404/);
  assert.equal(await card(second.page, id).getByTestId("outcome").isVisible(), false);
  await first.context.close();
  await second.context.close();
});

test("a decision without the cookie, or from a foreign Origin, is refused", async () => {
  const id = await start({ to: "dave@example.com", amount: 500, note: "fourth" });
  const { context, page } = await signedIn();
  await card(page, id).getByTestId("pending-call").waitFor();
  const decisionPath = `/console/executions/${id}/approve`;
  const body = JSON.stringify({ call: 2 });

  // From the page itself, without its cookie (but with its CSRF token and Origin): 403.
  const withoutCookie = await page.evaluate(
    async ({ path, body }) => {
      const session = await (await fetch("/console/session")).json();
      const response = await fetch(path, {
        method: "POST",
        credentials: "omit",
        headers: { "Content-Type": "application/json", "x-execbox-csrf": session.csrf },
        body,
      });
      return { status: response.status, body: await response.json() };
    },
    { path: decisionPath, body }
  );
  assert.equal(withoutCookie.status, 403, JSON.stringify(withoutCookie.body));
  assert.equal(withoutCookie.body.error.code, "FORBIDDEN");

  // The cookie and the CSRF token, but a foreign Origin: 403.
  const [cookie] = await context.cookies();
  const session = await (
    await fetch(`${url}/console/session`, { headers: { Cookie: `${cookie.name}=${cookie.value}` } })
  ).json();
  const foreign = await fetch(`${url}${decisionPath}`, {
    method: "POST",
    headers: {
      Cookie: `${cookie.name}=${cookie.value}`,
      Origin: "http://evil.example",
      "x-execbox-csrf": session.csrf,
      "Content-Type": "application/json",
    },
    body,
  });
  assert.equal(foreign.status, 403);
  assert.match((await foreign.json()).error.message, /own page/);

  // The cookie and the Origin, without the CSRF header: 403.
  const noCsrf = await fetch(`${url}${decisionPath}`, {
    method: "POST",
    headers: { Cookie: `${cookie.name}=${cookie.value}`, Origin: url, "Content-Type": "application/json" },
    body,
  });
  assert.equal(noCsrf.status, 403);

  // A page of another origin (localhost is another site than 127.0.0.1) gets nothing.
  const other = await context.newPage();
  const port = new URL(url).port;
  await other.goto(`http://localhost:${port}/console`);
  const crossSite = await other.evaluate(async (target) => {
    try {
      const response = await fetch(target, {
        method: "POST",
        credentials: "include",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ call: 2 }),
      });
      return response.status;
    } catch (e) {
      return "blocked";
    }
  }, `${url}${decisionPath}`);
  assert.notEqual(crossSite, 200);

  // Still waiting: none of these decided anything.
  const record = await (
    await fetch(`${url}/v1/executions/${id}`, { headers: { Authorization: "Bearer approver-token" } })
  ).json();
  assert.equal(record.status, "awaiting_approval");
  assert.deepEqual(dialogs, []);
  await context.close();
});

test("the page is readable on a phone, and signing out ends the session", async () => {
  const context = await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
  const page = await context.newPage();
  await page.goto(`${url}/console`);
  await page.getByTestId("token").fill("approver-token");
  await page.getByTestId("sign-in").click();
  // The execution of the test before still waits.
  await page.getByTestId("pending-call").first().waitFor();
  const widths = await page.evaluate(() => ({
    page: document.documentElement.scrollWidth,
    screen: document.documentElement.clientWidth,
  }));
  assert.ok(widths.page <= widths.screen, JSON.stringify(widths));
  const approve = await page.getByTestId("approve").first().boundingBox();
  assert.ok(approve.height >= 36, "a button big enough to tap");

  // Signing out ends the session on the server and clears the cookie.
  const [cookie] = await context.cookies();
  await page.getByTestId("sign-out").click();
  await page.getByTestId("sign-in").waitFor({ state: "visible" });
  assert.deepEqual(await context.cookies(), []);
  const after = await fetch(`${url}/console/session`, {
    headers: { Cookie: `${cookie.name}=${cookie.value}` },
  });
  assert.equal(after.status, 403);
  await context.close();
});
