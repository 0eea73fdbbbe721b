// A stand-in for a person's browser: `node browser.mjs URL` GETs the authorization URL and
// follows its redirects, so the authorization server's answer lands on the loopback listener
// of `execbox mcp login` as it would after a person clicked "allow".
//
// Exit 0 when the last hop answered 2xx or 3xx, else 1; bounded by BROWSER_TIMEOUT_MS (15 s).

const url = process.argv[process.argv.length - 1];
const within = Number(process.env.BROWSER_TIMEOUT_MS || 15000);

try {
  const response = await fetch(url, { redirect: "follow", signal: AbortSignal.timeout(within) });
  const body = await response.text();
  const page = body.replace(/\s+/g, " ").slice(0, 200);
  // Only the host and path: the query of the last hop holds the authorization code.
  const where = new URL(response.url);
  console.error(`browser: ${response.status} from ${where.origin}${where.pathname}: ${page}`);
  process.exit(response.status < 400 ? 0 : 1);
} catch (error) {
  console.error(`browser: cannot open the authorization URL: ${error.cause?.message ?? error.message}`);
  process.exit(1);
}
