// A real OAuth-protected MCP server for execbox's sign-in tests, built from the official
// TypeScript SDK's server auth (`mcpAuthRouter`, `requireBearerAuth`, an OAuthServerProvider):
// an authorization server and a resource server (the MCP server, at /mcp) on two loopback ports.
//
//   node oauth-server.mjs
//
// It signs in anyone who asks (the authorization endpoint redirects at once, as after a click on
// "allow"), issues access tokens that expire after OAUTH_TOKEN_TTL_MS (2000) with rotating
// refresh tokens, and answers one tool, `whoami`, with the client and scopes of the token used.
// Environment: OAUTH_EVENTS (required): a file each grant, registration, authorization, revocation
// and call is appended to as a JSON line (tokens included: the tests look for them where they
// must not be); CONFORMANCE_NODE_MODULES: where the SDK and express are installed (default:
// target/tmp/conformance-tests/node_modules of this checkout).
//
// Its first line on stdout: {"mcp": URL, "issuer": URL, "control": URL}. Control requests
// (POST, on the resource server's port):
//   /control/revoke              forget every access token issued so far (refresh tokens stay)
//   /control/ttl?ms=N            the lifetime of the access tokens issued from now on
//   /control/token?mode=M        the token endpoint from now on: ok, stall (requests are held,
//                                never answered) or down (the authorization server stops
//                                listening: connection refused); ok listens again on its port
// It exits when stdin closes, so a test that dies takes it along.

import { randomBytes, randomUUID } from "node:crypto";
import { appendFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const modules =
  process.env.CONFORMANCE_NODE_MODULES ||
  join(here, "../../../target/tmp/conformance-tests/node_modules");
const require = createRequire(join(modules, "resolve-from-here.js"));
const express = require("express");
const sdk = (path) =>
  import(pathToFileURL(join(modules, "@modelcontextprotocol/sdk/dist/esm", path)).href);
const { mcpAuthRouter } = await sdk("server/auth/router.js");
const { requireBearerAuth } = await sdk("server/auth/middleware/bearerAuth.js");
const { InvalidGrantError, InvalidTokenError } = await sdk("server/auth/errors.js");
const { Server } = await sdk("server/index.js");
const { StreamableHTTPServerTransport } = await sdk("server/streamableHttp.js");
const { CallToolRequestSchema, ListToolsRequestSchema } = await sdk("types.js");

const eventsFile = process.env.OAUTH_EVENTS;
if (!eventsFile) {
  console.error("oauth-server: OAUTH_EVENTS must name the file events are appended to");
  process.exit(2);
}
const event = (what) =>
  appendFileSync(eventsFile, `${JSON.stringify({ at: Date.now(), ...what })}\n`);

let ttlMs = Number(process.env.OAUTH_TOKEN_TTL_MS || 2000);
let tokenMode = "ok";
const SCOPES = ["mcp:tools"];

// Distinct, long enough to find, and never a prefix of another.
const secret = (kind) => `${kind}-${randomBytes(18).toString("base64url")}`;

class Clients {
  constructor() {
    this.clients = new Map();
  }
  async getClient(id) {
    return this.clients.get(id);
  }
  async registerClient(client) {
    this.clients.set(client.client_id, client);
    event({ event: "registered", client_id: client.client_id, redirect_uris: client.redirect_uris });
    return client;
  }
}

class Provider {
  constructor() {
    this.clientsStore = new Clients();
    this.codes = new Map();
    this.access = new Map();
    this.refresh = new Map();
  }

  async authorize(client, params, res) {
    const code = secret("code");
    this.codes.set(code, { client, params });
    event({
      event: "authorize",
      client_id: client.client_id,
      scopes: params.scopes ?? [],
      resource: params.resource?.href,
    });
    const target = new URL(params.redirectUri);
    target.searchParams.set("code", code);
    if (params.state !== undefined) target.searchParams.set("state", params.state);
    res.redirect(target.toString());
  }

  async challengeForAuthorizationCode(_client, code) {
    const grant = this.codes.get(code);
    if (!grant) throw new InvalidGrantError("unknown authorization code");
    return grant.params.codeChallenge;
  }

  async exchangeAuthorizationCode(client, code, _verifier, _redirectUri, resource) {
    const grant = this.codes.get(code);
    if (!grant || grant.client.client_id !== client.client_id) {
      throw new InvalidGrantError("unknown authorization code");
    }
    this.codes.delete(code);
    const scopes = grant.params.scopes ?? [];
    return this.issue("authorization_code", client.client_id, scopes, resource?.href);
  }

  async exchangeRefreshToken(client, refreshToken, scopes, resource) {
    const held = this.refresh.get(refreshToken);
    if (!held || held.clientId !== client.client_id) {
      event({ event: "refused", grant: "refresh_token", client_id: client.client_id });
      throw new InvalidGrantError("unknown or used refresh token");
    }
    // Rotation: a refresh token is good once, so a client must keep the new one.
    this.refresh.delete(refreshToken);
    return this.issue("refresh_token", client.client_id, scopes ?? held.scopes, resource?.href);
  }

  issue(grant, clientId, scopes, resource) {
    const accessToken = secret("access");
    const refreshToken = secret("refresh");
    const expiresAt = Date.now() + ttlMs;
    this.access.set(accessToken, { clientId, scopes, expiresAt, resource });
    this.refresh.set(refreshToken, { clientId, scopes });
    event({
      event: "grant",
      grant,
      client_id: clientId,
      scopes,
      resource,
      ttl_ms: ttlMs,
      access_token: accessToken,
      refresh_token: refreshToken,
    });
    return {
      access_token: accessToken,
      token_type: "Bearer",
      expires_in: Math.max(1, Math.round(ttlMs / 1000)),
      refresh_token: refreshToken,
      scope: scopes.join(" "),
    };
  }

  async verifyAccessToken(token) {
    const held = this.access.get(token);
    // InvalidTokenError: a 401 with WWW-Authenticate (any other error would be a 500).
    if (!held) throw new InvalidTokenError("unknown or revoked access token");
    if (held.expiresAt <= Date.now()) throw new InvalidTokenError("the access token has expired");
    return {
      token,
      clientId: held.clientId,
      scopes: held.scopes,
      expiresAt: Math.floor(held.expiresAt / 1000),
      resource: held.resource ? new URL(held.resource) : undefined,
    };
  }

  async revokeToken(_client, { token }) {
    const known = this.access.delete(token) || this.refresh.delete(token);
    event({ event: "revoked", by: "client", known });
  }
}

const provider = new Provider();
const listenOn = (app, port = 0) =>
  new Promise((resolve, reject) => {
    const server = app.listen(port, "127.0.0.1", () => resolve(server));
    server.on("error", reject);
  });

// The resource server listens first: the authorization server's metadata names it.
const resource = express();
const resourceServer = await listenOn(resource);
const mcpUrl = `http://127.0.0.1:${resourceServer.address().port}/mcp`;
const prmUrl = `http://127.0.0.1:${resourceServer.address().port}/.well-known/oauth-protected-resource/mcp`;

// The authorization server: a port of its own, so it can stall or go down alone.
const authorization = express();
const held = new Set();
authorization.use((req, res, next) => {
  if (req.path === "/token" && tokenMode === "stall") {
    event({ event: "stalled", path: req.path });
    held.add(res);
    res.on("close", () => held.delete(res));
    return;
  }
  next();
});
let authorizationServer = await listenOn(authorization);
const authorizationPort = authorizationServer.address().port;
const issuer = new URL(`http://127.0.0.1:${authorizationPort}/`);
authorization.use(
  mcpAuthRouter({
    provider,
    issuerUrl: issuer,
    resourceServerUrl: new URL(mcpUrl),
    scopesSupported: SCOPES,
    resourceName: "execbox oauth test server",
    authorizationOptions: { rateLimit: false },
    tokenOptions: { rateLimit: false },
    clientRegistrationOptions: { rateLimit: false },
    revocationOptions: { rateLimit: false },
  }),
);

resource.get("/.well-known/oauth-protected-resource/mcp", (_req, res) => {
  res.json({
    resource: mcpUrl,
    authorization_servers: [issuer.href],
    scopes_supported: SCOPES,
    resource_name: "execbox oauth test server",
  });
});

resource.post("/control/revoke", (_req, res) => {
  const count = provider.access.size;
  provider.access.clear();
  event({ event: "revoked", by: "control", count });
  res.json({ revoked: count });
});
resource.post("/control/ttl", (req, res) => {
  ttlMs = Number(req.query.ms);
  event({ event: "ttl", ms: ttlMs });
  res.json({ ttl_ms: ttlMs });
});
resource.post("/control/token", async (req, res) => {
  const mode = String(req.query.mode);
  if (mode === "down" && tokenMode !== "down") {
    authorizationServer.closeAllConnections();
    await new Promise((done) => authorizationServer.close(done));
  }
  if (mode !== "down" && tokenMode === "down") {
    authorizationServer = await listenOn(authorization, authorizationPort);
  }
  if (mode !== "stall") for (const r of held) r.destroy();
  tokenMode = mode;
  event({ event: "token-endpoint", mode });
  res.json({ mode });
});

function mcpServer(auth) {
  const server = new Server({ name: "oauth-test-server", version: "1.0.0" }, { capabilities: { tools: {} } });
  server.setRequestHandler(ListToolsRequestSchema, async () => ({
    tools: [
      {
        name: "whoami",
        description: "Says which client and scopes the access token of this call carries",
        inputSchema: { type: "object", properties: {} },
      },
    ],
  }));
  server.setRequestHandler(CallToolRequestSchema, async (request) => {
    if (request.params.name !== "whoami") throw new Error(`unknown tool ${request.params.name}`);
    event({ event: "call", tool: "whoami", client_id: auth.clientId });
    return {
      content: [{ type: "text", text: JSON.stringify({ client_id: auth.clientId, scopes: auth.scopes }) }],
    };
  });
  return server;
}

resource.post(
  "/mcp",
  express.json(),
  requireBearerAuth({ verifier: provider, resourceMetadataUrl: prmUrl }),
  async (req, res) => {
    // Stateless: a server and a transport per request.
    const server = mcpServer(req.auth);
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: undefined,
      enableJsonResponse: true,
    });
    res.on("close", () => {
      transport.close();
      server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(req, res, req.body);
  },
);
resource.all("/mcp", (_req, res) => res.status(405).set("Allow", "POST").end());

console.log(JSON.stringify({ mcp: mcpUrl, issuer: issuer.href, control: `${mcpUrl.replace(/\/mcp$/, "")}/control` }));
process.stdin.resume();
process.stdin.on("end", () => process.exit(0));
process.stdin.on("close", () => process.exit(0));
