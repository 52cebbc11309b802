// End to end in headless Chromium: postback's review page against a real postback and
// Redis (started by scripts/ui-test.sh) and a real receiver started here. Signs in,
// reads the overview, finds a dead letter, opens it, replays it to a new URL and sees
// it delivered, its history by cycle with the URL each attempt went to; bulk-replays
// the rest after a confirmation that shows the count; finds
// both replays in the audit log and filters it by action; walks the queue's tabs and
// pages, finds a notification by its idempotency key and cancels it; sees a failing
// endpoint among the endpoints and filters them by state; subscribes a URL to topics,
// follows a published event to its delivery, resends it, disables the subscription;
// reads a body with a number past 2^64, 10.10, 1E+2 and -0 as stored on a notification's,
// a dead letter's and an event's page and as its topic's example;
// opens a portal link in a tab signed in as the operator: it asks before it switches;
// opens a merchant's portal link
// in a fresh browser: its endpoints with the credential out of the address bar, no
// tenant to choose, only the actions its roles name, a notification's request and response,
// a replayed dead letter's cycles, a dead letter resent from its own page, and its
// signing keys with code (Node.js and Python) that verifies real deliveries; a notification its endpoint's open circuit holds back;
// a view a link may not open (the audit log) and one that does not exist say so; an
// instance without signing keys says what that means and how to give one; URLs and ids
// stay on one line, whole on hover; the overview counts held ones apart; a held one's page
// offers the actions its view lists (cancel and attempt now); every view of
// an operator and of a merchant answers at 1400 px and 390 px, no wider than the screen
// (VIEWS=DIR saves a screenshot of each there); checks the page works at phone
// width and with the keyboard, and that it and Swagger UI need nothing their
// Content-Security-Policy refuses. Saves a screenshot of each view under docs/.
import { chromium } from "playwright-core";
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { createRequire } from "node:module";
import http from "node:http";
import assert from "node:assert/strict";

const api = process.env.POSTBACK_URL;
const token = process.env.POSTBACK_TOKEN;
const shots = process.env.SCREENSHOTS || "docs";

// The receiver: /down always fails (but a path in `recovered`), /up records what it gets
// (the ids, and each request's headers and raw body, which the merchant's page's code
// verifies).
const delivered = [];
const requests = [];
const recovered = new Set();
const receiver = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    if (recovered.has(req.url)) {
      res.writeHead(200).end("ok");
    } else if (req.url.startsWith("/up")) {
      delivered.push(req.headers["webhook-id"]);
      requests.push({ headers: req.headers, body: Buffer.concat(chunks) });
      res.writeHead(200).end("ok");
    } else {
      res.writeHead(503).end("merchant down for maintenance");
    }
  });
});
await new Promise((resolve) => receiver.listen(0, "127.0.0.1", resolve));
const target = (path) => `http://127.0.0.1:${receiver.address().port}${path}`;

// `method path` with `text` as the request's body, as written.
async function callRaw(method, path, text) {
  const r = await fetch(api + path, {
    method,
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
    body: text,
  });
  if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${await r.text()}`);
  return r.json();
}

const call = (method, path, body) => callRaw(method, path, body && JSON.stringify(body));

// `postback portal-link` for the default tenant with `roles`, asked of the instance by
// the operator.
function portalLink(roles) {
  const args = ["portal-link", "--tenant", "default", "--ttl", "10m", "--roles", roles];
  const env = { ...process.env, POSTBACK_API_URL: api, POSTBACK_API_TOKEN: token };
  const link = execFileSync("target/debug/postback", args, { encoding: "utf8", env, stdio: ["ignore", "pipe", "pipe"] }).trim();
  assert.ok(link.startsWith(`${api}/ui#token=pt_`), link);
  assert.match(link, /\/ui#token=pt_/);
  return link;
}

// Whether the page's verifying code (`#verify-node`, `#verify-python`) accepts a request.
function verifiesWithNode(code, request) {
  const verify = new Function("require", `${code}\nreturn verify;`)(createRequire(import.meta.url));
  return verify(request.headers, request.body);
}
function verifiesWithPython(code, request) {
  const check = `${code}\n\nimport json, sys\nr = json.load(sys.stdin)\n` +
    "print(verify(r['headers'], r['body'].encode()))\n";
  const input = JSON.stringify({ headers: request.headers, body: request.body.toString() });
  return execFileSync("python3", ["-c", check], { input, encoding: "utf8" }).trim() === "True";
}

// A merchant's portal links, in a browser that never signed in: the page takes the
// credential from the fragment and clears it from the address bar, reads as the tenant
// with no tenant to choose, offers only the actions a link's roles name, shows a
// notification's request and each attempt's response, and the tenant's signing keys
// with code that verifies the receiver's real deliveries (and refuses a changed body).
async function merchantPage(browser, errors) {
  const merchant = await browser.newPage({ viewport: { width: 1200, height: 800 } });
  merchant.on("pageerror", (e) => errors.push(e.message));
  await merchant.goto(portalLink("read"));
  const rows = merchant.getByRole("table", { name: "Endpoints" }).locator("tbody tr");
  await rows.first().waitFor();
  assert.equal(new URL(merchant.url()).hash, "#/endpoints", "the credential is out of the address bar");
  assert.match(await merchant.evaluate(() => sessionStorage.getItem("postback-token")), /^pt_/);
  assert.match(await merchant.locator("#who").textContent(), /^default · read · until /);
  assert.ok(await merchant.getByRole("link", { name: "Audit" }).isHidden(), "no audit role");
  assert.equal(await merchant.getByRole("columnheader", { name: "Tenant" }).count(), 0);
  assert.equal(await merchant.getByLabel("tenant").count(), 0, "no tenant to choose");
  assert.equal(await rows.getByRole("button").count(), 0, "read only: no pause or resume");
  await merchant.screenshot({ path: `${shots}/ui-portal.png`, fullPage: true });

  // A delivered notification: the request it sent, the response it got, no resend.
  await merchant.getByRole("link", { name: "Queue" }).click();
  await merchant.getByRole("link", { name: "Delivered", exact: true }).click();
  const deliveredRows = merchant.getByRole("table", { name: "Delivered" }).locator("tbody tr");
  await deliveredRows.first().waitFor();
  await deliveredRows.first().getByRole("link").click();
  await merchant.getByRole("heading", { name: "Request" }).waitFor();
  const id = merchant.url().split("#/lookup/")[1];
  const head = await merchant.locator("#request-head").textContent();
  assert.match(head, new RegExp(`^POST http://127\\.0\\.0\\.1:\\d+/up`));
  assert.match(head, new RegExp(`webhook-id: ${id}`));
  const sent = requests.findLast((r) => r.headers["webhook-id"] === id);
  assert.equal(JSON.stringify(JSON.parse(await merchant.locator("#request-body").textContent())),
    JSON.stringify(JSON.parse(sent.body.toString())), "the body the receiver got");
  const latest = merchant.locator("ol.timeline").last();
  assert.match(await latest.textContent(), /HTTP 200/);
  assert.equal(await latest.locator("pre").first().textContent(), "ok", "the response");
  assert.equal(await merchant.getByRole("button", { name: "Resend…" }).count(), 0);
  await merchant.screenshot({ path: `${shots}/ui-portal-notification.png`, fullPage: true });

  // The signing keys, the ones the API publishes, and code that verifies deliveries.
  await merchant.getByRole("link", { name: "Signing keys" }).click();
  const keys = merchant.getByRole("table", { name: "Public keys" }).locator("tbody tr");
  await keys.first().waitFor();
  const published = (await call("GET", "/signing-keys?tenant=default")).keys.map((k) => k.public_key);
  assert.deepEqual(await keys.evaluateAll((rs) => rs.map((r) => r.cells[0].textContent)), published);
  const node = await merchant.locator("#verify-node").textContent();
  const python = await merchant.locator("#verify-python").textContent();
  const tampered = { ...sent, body: Buffer.from(sent.body.toString().replace("}", ',"x":1}')) };
  for (const [language, verifies] of [["Node.js", verifiesWithNode], ["Python", verifiesWithPython]]) {
    const code = language === "Node.js" ? node : python;
    assert.equal(verifies(code, sent), true, `${language}: a real delivery verifies`);
    assert.equal(verifies(code, tampered), false, `${language}: a changed body does not`);
  }
  await merchant.screenshot({ path: `${shots}/ui-portal-keys.png`, fullPage: true });

  // Another link opened in this tab asks before it switches. With `operate` it may
  // pause and resume endpoints and attempt a notification now, but neither cancel,
  // replay nor discard; still no audit.
  const later = await call("POST", "/notify", { url: target("/up/later"), body: {}, delay: "1h" });
  const dying = await call("POST", "/notify", { url: target("/down/dying"), body: {}, schedule: [] });
  await eventually("a dead letter", async () => (await call("GET", `/notifications/${dying.id}`)).state === "dead");
  await switchTab(merchant, portalLink("read,operate"));
  await rows.first().waitFor();
  assert.match(await merchant.locator("#who").textContent(), /^default · read, operate \(resend, pause\) · until /, "a link's operate is not a token's");
  assert.ok((await rows.getByRole("button", { name: /Pause…|Resume/ }).count()) > 0);
  assert.ok(await merchant.getByRole("link", { name: "Audit" }).isHidden());
  await merchant.goto(`${api}/ui#/lookup/${later.id}`);
  await merchant.getByRole("button", { name: "Attempt now" }).waitFor();
  assert.equal(await merchant.getByRole("button", { name: "Cancel…" }).count(), 0, "cancel needs `cancel`");
  await merchant.goto(`${api}/ui#/dead/${dying.id}`);
  await merchant.getByRole("heading", { name: "Attempts" }).waitFor();
  assert.equal(await merchant.getByRole("button", { name: "Replay", exact: true }).count(), 0, "replay needs `replay`");
  assert.equal(await merchant.getByRole("button", { name: "Discard" }).count(), 0, "discard needs `discard`");
  assert.equal(await merchant.getByRole("button", { name: "Resend…" }).count(), 0, "resending a dead one needs `replay`");
  // It resends what was delivered, and nothing dead: that is a replay, which it may not.
  await merchant.goto(`${api}/ui#/lookup/${id}`);
  await merchant.getByRole("button", { name: "Resend…" }).waitFor();
  await merchant.goto(`${api}/ui#/lookup/${dying.id}`);
  // The page before was a lookup too: this one once it says dead.
  await merchant.locator("#lookup-state", { hasText: "dead" }).waitFor();
  assert.equal(await merchant.getByRole("button", { name: "Resend…" }).count(), 0, "resending a dead one needs `replay`");
  await merchant.goto(`${api}/ui#/dead`);
  await merchant.getByRole("heading", { name: "Dead letters" }).waitFor();
  assert.equal(await merchant.getByRole("button", { name: "Replay all matching…" }).count(), 0, "needs `bulk`");

  // With `replay` it replays to the same URL only (a new one needs `redirect`).
  await switchTab(merchant, portalLink("read,replay"));
  await rows.first().waitFor();
  await merchant.goto(`${api}/ui#/dead/${dying.id}`);
  await merchant.getByRole("button", { name: "Replay", exact: true }).waitFor();
  assert.equal(await merchant.getByLabel("New callback URL (optional)").count(), 0, "a new URL needs `redirect`");
  assert.equal(await merchant.getByRole("button", { name: "Discard" }).count(), 0);
  await merchant.getByRole("button", { name: "Replay", exact: true }).click();
  await merchant.getByRole("heading", { name: "Look up a notification" }).waitFor();
  // Dead again: the merchant sees both cycles, and counts that agree with them.
  await eventually("the replay's death", async () =>
    (await call("GET", `/notifications/${dying.id}`)).total_attempts === 2);
  await merchant.goto(`${api}/ui#/dead/${dying.id}`);
  // The lookup page before it has cycles too: this is the dead letter's once its heading shows.
  await merchant.getByRole("heading", { name: "Dead letter", exact: true }).waitFor();
  await merchant.locator("section.cycle").nth(1).waitFor();
  assert.equal(await merchant.locator("#attempts").textContent(), "1 of 1 in this cycle; 2 in all");
  assert.deepEqual(await merchant.locator("section.cycle h3").allTextContents(),
    ["Registered · 1 attempt", "Replay 1 · 1 attempt"]);
  await merchant.screenshot({ path: `${shots}/ui-portal-cycles.png`, fullPage: true });

  // With `operate` and `replay` it may resend a dead one: its dead letter's page offers
  // that as its lookup page does, and a resend leaves it for the lookup page.
  await switchTab(merchant, portalLink("read,operate,replay"));
  await rows.first().waitFor();
  await merchant.goto(`${api}/ui#/lookup/${dying.id}`);
  await merchant.getByRole("button", { name: "Resend…" }).waitFor();
  await merchant.goto(`${api}/ui#/dead/${dying.id}`);
  await merchant.getByRole("button", { name: "Replay", exact: true }).waitFor();
  await merchant.getByRole("button", { name: "Resend…" }).click();
  await merchant.locator("dialog[open]").getByRole("button", { name: "Resend it" }).click();
  await merchant.waitForURL(new RegExp(`#/lookup/${dying.id}$`));
  await eventually("the resend", async () => (await call("GET", `/notifications/${dying.id}`)).cycle === 2);
  const resent = await call("GET", `/notifications/${dying.id}`);
  assert.deepEqual([resent.replays, resent.resends], [1, 1], "a resend is counted apart from a replay");
  assert.deepEqual(resent.cycles.map((c) => c.name), ["Registered", "Replay 1", "Resend 2"]);
  await merchant.getByRole("heading", { name: "Look up a notification" }).waitFor();
  assert.deepEqual([await merchant.locator("#replays").textContent(), await merchant.locator("#resends").textContent()], ["1", "1"]);
  await merchant.close();
}

// An endpoint whose circuit is open: a notification to it is held back, no attempt
// counted, its history noting the wait, and the page says until when it may wait; the
// endpoints page shows the circuit of its path open with what it holds back, and the
// overview counts that apart from the held. Once the receiver answers again, an attempt
// now lets the circuit probe, it closes, and both pages say so.
async function heldBack(page) {
  for (let n = 0; n < 10; n++) {
    const opener = await call("POST", "/notify", { url: target("/down/circuit"), body: { n }, schedule: [] });
    await eventually("a failure at the endpoint", async () =>
      (await call("GET", `/notifications/${opener.id}`)).state === "dead");
  }
  const held = await call("POST", "/notify", { url: target("/down/circuit"), body: {}, schedule: ["1h", "1h"] });
  await eventually("the circuit's hold", async () =>
    (await call("GET", `/notifications/${held.id}`)).held_back_since !== null);
  await page.goto(`${api}/ui#/lookup/${held.id}`);
  await page.locator("#held-back").waitFor();
  assert.match(await page.locator("#held-back").textContent(), /circuit is open since .*; dead-lettered at .* if still open/);
  assert.equal(await page.locator("#attempts").textContent(), "0 of 3");
  assert.match(await page.locator("ol.timeline").textContent(), /^Held back: its endpoint's circuit is open/);
  await page.screenshot({ path: `${shots}/ui-held-back.png`, fullPage: true });

  const row = page.getByRole("table", { name: "Endpoints" }).locator("tbody tr").filter({ hasText: target("") });
  const circuit = row.locator("li", { hasText: "/down/circuit" });
  // The circuit as the endpoint's record has it (written once a second).
  const circuitIs = (state) => async () => {
    const listed = (await call("GET", "/endpoints")).items.find((e) => e.url === target(""));
    const one = listed && await call("GET", `/endpoints/${listed.id}`);
    return one?.circuits.some((c) => c.path === "/down/circuit" && c.state === state && (state === "closed" || c.held_back === 1));
  };
  await eventually("the circuit open, holding one back", circuitIs("open"));
  await page.goto(`${api}/ui#/endpoints`);
  await circuit.waitFor();
  assert.match(await circuit.textContent(), /^\/down\/circuit open since .* · next probe .* · 1 held back$/);
  const count = (label) => page.locator(".count", { hasText: label }).locator("b");
  await page.goto(`${api}/ui#/overview`);
  assert.equal(await count("Held back (circuit open)").textContent(), "1");
  assert.equal(await count("Held (endpoint paused)").textContent(), "0");

  recovered.add("/down/circuit");
  await page.goto(`${api}/ui#/lookup/${held.id}`);
  await page.getByRole("button", { name: "Attempt now" }).click();
  await eventually("delivered once the circuit probed", async () =>
    (await call("GET", `/notifications/${held.id}`)).state === "delivered");
  await eventually("the circuit closed", circuitIs("closed"));
  await page.goto(`${api}/ui#/endpoints`);
  await circuit.waitFor();
  assert.match(await circuit.textContent(), /^\/down\/circuit closed /);
  await page.goto(`${api}/ui#/overview`);
  assert.equal(await count("Held back (circuit open)").textContent(), "0");
}

// A body as a payment system may write one: an integer past 2^64, a decimal with a
// trailing zero, an exponent, negative zeros, an escape, keys out of order.
const AWKWARD = '{"id":12345678901234567890123,"amount":10.10,"e":1E+2,"z":-0,"b":{"y":[1.0,-0.0],"a":"caf\\u00e9"}}';
// JSON text without the whitespace between its tokens: all a layout may change.
const squeezed = (text) => text.replace(/("(?:[^"\\]|\\.)*")|\s+/g, (m, string) => string ?? "");

// A body is shown as stored, read from the page: a notification's request, a dead
// letter's and an event's body laid out with every token as written, and the bytes
// stored at a click; a topic's example as stored.
async function bodiesAsStored(page) {
  // To another origin than the receiver's by address, whose circuit the tests after count on.
  const down = `http://localhost:${receiver.address().port}/down/exact`;
  const sent = await callRaw("POST", "/notify", `{"url": "${down}", "schedule": [], "body": ${AWKWARD}}`);
  await eventually("its death", async () => (await call("GET", `/notifications/${sent.id}`)).state === "dead");
  const event = await callRaw("POST", "/events", `{"topic": "ui.exact", "body": ${AWKWARD}}`);
  for (const [view, id] of [[`lookup/${sent.id}`, "request-body"], [`dead/${sent.id}`, "dead-body"], [`events/${event.id}`, "event-body"]]) {
    await page.goto(`${api}/ui#/${view}`);
    const body = page.locator(`#${id}`);
    await body.waitFor();
    const shown = await body.textContent();
    assert.equal(squeezed(shown), AWKWARD, `${view}: every token as written`);
    assert.match(shown, /\n {2}"amount": 10\.10,\n/, `${view}: laid out`);
    const asStored = page.getByRole("button", { name: "As stored" });
    await asStored.click();
    assert.equal(await body.textContent(), AWKWARD, `${view}: the bytes stored`);
    assert.equal(await asStored.getAttribute("aria-pressed"), "true");
    await asStored.click();
    assert.equal(await body.textContent(), shown, `${view}: laid out again`);
  }
  await page.goto(`${api}/ui#/events`);
  const example = page.getByRole("table", { name: "Topics" }).getByRole("row").filter({ hasText: "ui.exact" }).locator(".clip");
  await example.waitFor();
  assert.deepEqual([await example.textContent(), await example.getAttribute("title")], [AWKWARD, AWKWARD]);
}

// Opens `link` in a tab signed in already: the page asks, and switches once agreed.
async function switchTab(tab, link) {
  await tab.goto(link);
  const dialog = tab.locator("dialog[open]");
  await dialog.waitFor();
  assert.doesNotMatch(tab.url(), /token=/, "the credential is out of the address bar while it asks");
  await dialog.getByRole("button", { name: "Switch to the link" }).click();
}

// A portal link opened in the operator's tab (only its fragment changes) neither signs
// the tab in as the link unasked nor stays in the address bar; declined, the operator
// stays signed in; agreed, the tab is the link's.
async function linkInASignedInTab(browser, errors) {
  const tab = await browser.newPage({ viewport: { width: 1200, height: 800 } });
  tab.on("pageerror", (e) => errors.push(e.message));
  await tab.goto(`${api}/ui#/dead`);
  await tab.getByLabel("API token").fill(token);
  await tab.getByRole("button", { name: "Use token" }).click();
  await tab.getByRole("heading", { name: "Dead letters" }).waitFor();
  const operator = await tab.locator("#who").textContent();
  const link = portalLink("read");
  await tab.evaluate((l) => { location.hash = new URL(l).hash; }, link);
  const dialog = tab.locator("dialog[open]");
  await dialog.waitFor();
  assert.match(await dialog.textContent(), /A portal link for default was opened in this tab, which is signed in as api_token_1/);
  assert.equal(new URL(tab.url()).hash, "#/dead", "the credential is out of the address bar");
  await dialog.getByRole("button", { name: "Cancel" }).click();
  await tab.getByRole("heading", { name: "Dead letters" }).waitFor();
  assert.equal(await tab.evaluate(() => sessionStorage.getItem("postback-token")), token, "still the operator");
  assert.equal(await tab.locator("#who").textContent(), operator);
  // Reloaded with a link in its address, the signed-in tab asks too.
  await tab.goto("about:blank");
  await tab.goto(link);
  await dialog.waitFor();
  await dialog.getByRole("button", { name: "Switch to the link" }).click();
  await tab.getByRole("table", { name: "Endpoints" }).waitFor();
  assert.match(await tab.locator("#who").textContent(), /^default · read · until /);
  assert.equal(new URL(tab.url()).hash, "#/endpoints");
  await tab.close();
}

// Every view of the operator's page and of a merchant's link answers, at 1400 px and at
// 390 px, with a heading of its own (a view the caller may not open says why), and none
// is wider than a phone's screen. With VIEWS set, a screenshot of each goes there.
async function everyView(browser, errors, ids) {
  const views = process.env.VIEWS;
  const routes = ["overview", "dead", `dead/${ids.dead}`, "queue?state=scheduled", "queue?state=held",
    "queue?state=delivered", `lookup/${ids.notification}`, "endpoints", "subscriptions", "events",
    `events/${ids.event}`, "audit", "keys", "nowhere"];
  const problems = [];
  for (const [who, open] of [["operator", null], ["merchant", portalLink("read")]]) {
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    page.on("pageerror", (e) => errors.push(e.message));
    if (open) {
      await page.goto(open);
    } else {
      await page.goto(`${api}/ui`);
      await page.getByLabel("API token").fill(token);
      await page.getByRole("button", { name: "Use token" }).click();
    }
    await page.locator("#view h1").first().waitFor();
    for (const width of [1400, 390]) {
      await page.setViewportSize({ width, height: width === 390 ? 844 : 900 });
      for (const route of routes) {
        await page.evaluate(() => document.getElementById("view").replaceChildren());
        await page.goto(`${api}/ui#/${route}`);
        await page.waitForFunction(() => document.querySelector("#view h1"));
        await page.waitForLoadState("networkidle");
        const name = `${who}-${route.replace(/[/?=]/g, "-").slice(0, 40)}-${width}`;
        if (await page.locator("#view .error").count() > 0) problems.push(`${name}: ${await page.locator("#view").textContent()}`);
        const leaked = await page.locator("#view td, #view dd, #view .count b").evaluateAll((cells) =>
          cells.map((c) => c.textContent).filter((t) => ["false", "true", "undefined", "null", "NaN"].includes(t)));
        if (leaked.length) problems.push(`${name}: a script's value shown as text: ${leaked}`);
        const wide = await page.evaluate(() => document.documentElement.scrollWidth);
        if (wide > width) problems.push(`${name}: ${wide}px wide`);
        if (views) await page.screenshot({ path: `${views}/${name}.png`, fullPage: true });
      }
    }
    await page.close();
  }
  assert.deepEqual(problems, [], "every view answers, within the screen");
}

// A view a merchant's link may not open, and one that does not exist, say so.
async function notForALink(browser, errors) {
  const merchant = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  merchant.on("pageerror", (e) => errors.push(e.message));
  await merchant.goto(portalLink("read"));
  await merchant.getByRole("table", { name: "Endpoints" }).waitFor();
  await merchant.goto(`${api}/ui#/audit`);
  await merchant.getByRole("heading", { name: "Audit log" }).waitFor();
  await merchant.getByText("A portal link does not open the audit log: it is for postback's operators.").waitFor();
  await merchant.goto(`${api}/ui#/nowhere`);
  await merchant.getByRole("heading", { name: "No such page" }).waitFor();
  await merchant.getByRole("link", { name: "Go to overview" }).click();
  await merchant.getByRole("heading", { name: "Overview" }).waitFor();
  await merchant.close();
}

// The signing keys of an instance that has none: the page says what that means and how
// to give one, and shows no verifying code with no key in it. A second postback,
// without keys (and without tokens: any token is taken), on a store of its own.
async function noSigningKeys(browser, errors) {
  const port = await new Promise((resolve) => {
    const probe = http.createServer().listen(0, "127.0.0.1", () => {
      const { port: free } = probe.address();
      probe.close(() => resolve(free));
    });
  });
  const data = mkdtempSync(`${tmpdir()}/postback-ui-`);
  const env = { PATH: process.env.PATH, POSTBACK_SERVER_LISTEN: `127.0.0.1:${port}`, POSTBACK_STORE_DATA_DIR: data };
  const other = spawn("target/debug/postback", ["serve", "--insecure-no-auth"], { env, stdio: "ignore" });
  const keyless = `http://127.0.0.1:${port}`;
  try {
    await eventually("the keyless instance", async () => (await fetch(`${keyless}/healthz`).catch(() => null))?.ok);
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    page.on("pageerror", (e) => errors.push(e.message));
    await page.goto(`${keyless}/ui#/keys`);
    await page.getByLabel("API token").fill("any");
    await page.getByRole("button", { name: "Use token" }).click();
    await page.getByText("No signing key is configured for default").waitFor();
    await page.getByText("postback signing-key new").waitFor();
    assert.equal(await page.locator("#verify-node, #verify-python").count(), 0, "no code without a key");
    assert.doesNotMatch(await page.locator("#view").textContent(), /signed with each key below|PUBLIC_KEYS/);
    if (process.env.VIEWS) await page.screenshot({ path: `${process.env.VIEWS}/operator-keys-none-1400.png`, fullPage: true });
    await page.setViewportSize({ width: 390, height: 844 });
    if (process.env.VIEWS) await page.screenshot({ path: `${process.env.VIEWS}/operator-keys-none-390.png`, fullPage: true });
    await page.close();
  } finally {
    other.kill();
    rmSync(data, { recursive: true, force: true });
  }
}

async function eventually(what, check, seconds = 20) {
  const end = Date.now() + seconds * 1000;
  while (Date.now() < end) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting for ${what}`);
}

// Three notifications that die at once, two that are delivered.
const dead = [];
for (const order of [1001, 1002, 1003]) {
  const n = await call("POST", "/notify", {
    url: target(`/down/orders/${order}`), body: { order, status: "paid", amount: 4200 },
    schedule: [], topic: "payment.succeeded",
  });
  dead.push(n.id);
}
for (const order of [1004, 1005]) {
  await call("POST", "/notify", { url: target("/up/orders"), body: { order }, topic: "payment.succeeded" });
}
await eventually("the dead letters", async () =>
  (await call("GET", "/dead-letters?topic=payment.succeeded")).items.length === 3);

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1200, height: 800 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  // What the page's Content-Security-Policy refused, if anything.
  const refused = [];
  page.on("console", (m) => {
    if (/Content Security Policy/i.test(m.text())) refused.push(m.text());
  });

  // Sign in; the overview shows the counts.
  await page.goto(`${api}/ui`);
  await page.getByLabel("API token").fill(token);
  await page.getByRole("button", { name: "Use token" }).click();
  await page.getByRole("heading", { name: "Overview" }).waitFor();
  const deadCount = page.locator(".count", { hasText: "Dead letters" }).locator("b");
  assert.equal(await deadCount.textContent(), "3");
  await page.getByRole("cell", { name: "127.0.0.1" }).waitFor();
  await page.screenshot({ path: `${shots}/ui-overview.png`, fullPage: true });

  // One tenant's overview: another tenant has none of these.
  await page.getByLabel("tenant").fill("shop-elsewhere");
  await page.getByRole("button", { name: "Filter" }).click();
  await page.getByRole("heading", { name: "Overview of shop-elsewhere" }).waitFor();
  assert.equal(await deadCount.textContent(), "0");
  await page.getByText("No dead letters in the last hour.").waitFor();
  await page.getByLabel("tenant").fill("default");
  await page.getByRole("button", { name: "Filter" }).click();
  await page.getByRole("heading", { name: "Overview of default" }).waitFor();
  assert.equal(await deadCount.textContent(), "3");

  // The dead letters, filtered by topic.
  await page.getByRole("link", { name: "Dead letters", exact: true }).click();
  await page.getByLabel("topic").fill("payment.succeeded");
  await page.getByRole("button", { name: "Filter" }).click();
  await page.locator("tbody tr").nth(2).waitFor();
  assert.equal(await page.locator("tbody tr").count(), 3);
  await page.screenshot({ path: `${shots}/ui-dead-letters.png`, fullPage: true });

  // Open the oldest one with the keyboard: tab to its link, press Enter.
  const oldest = dead[0];
  const link = page.locator(`a[href="#/dead/${oldest}"]`);
  for (let i = 0; i < 40 && !(await link.evaluate((a) => a === document.activeElement)); i++) {
    await page.keyboard.press("Tab");
  }
  await page.keyboard.press("Enter");
  await page.getByRole("heading", { name: "Dead letter" }).waitFor();
  assert.match(await page.locator("ol.timeline").textContent(), /HTTP 503/);
  assert.match(await page.locator("pre").last().textContent(), /"order": 1001/);
  await page.screenshot({ path: `${shots}/ui-dead-letter.png`, fullPage: true });

  // Replay it to a URL that works, and see it delivered.
  await page.getByLabel("New callback URL (optional)").fill(target("/up/orders/1001"));
  await page.getByRole("button", { name: "Replay" }).click();
  await page.getByRole("heading", { name: "Look up a notification" }).waitFor();
  await eventually("the replay's delivery", async () => {
    await page.getByRole("button", { name: "Refresh" }).click();
    return (await page.locator("#lookup-state").textContent()) === "delivered";
  });
  assert.ok(delivered.includes(oldest), "the receiver got the replayed notification");
  // Its history by cycle: each attempt under the cycle it was made in, with the URL it
  // went to; the counts agree with what is shown; the request is the next one's.
  assert.equal(await page.locator("#attempts").textContent(), "1 of 1 in this cycle; 2 in all");
  const cycles = page.locator("section.cycle");
  assert.deepEqual(await cycles.locator("h3").allTextContents(),
    ["Registered · 1 attempt", "Replay 1 · 1 attempt"]);
  assert.match(await cycles.nth(0).textContent(), new RegExp(`to ${target("/down/orders/1001")}.*HTTP 503`));
  assert.match(await cycles.nth(1).textContent(), /HTTP 200/);
  assert.match(await page.locator("#request-head").textContent(), new RegExp(`^POST ${target("/up/orders/1001")}\n`));
  await page.screenshot({ path: `${shots}/ui-lookup.png`, fullPage: true });

  // Bulk replay of the filter: the confirmation shows the count of what is left.
  await page.goto(`${api}/ui#/dead?topic=payment.succeeded`);
  await page.locator("tbody tr").nth(1).waitFor();
  await page.getByRole("button", { name: "Replay all matching…" }).click();
  const dialog = page.locator("dialog[open]");
  await dialog.waitFor();
  assert.match(await dialog.textContent(), /Replay 2 dead letters matching topic=payment.succeeded/);
  await dialog.getByRole("button", { name: "Replay 2" }).click();
  await page.getByText("2 replayed.").waitFor();
  assert.equal(await page.locator("tbody tr").count(), 0, "the replayed rows leave the list");

  // The audit log: both replays, newest first, by the token's name; then only bulk ones.
  await page.getByRole("link", { name: "Audit" }).click();
  await page.getByRole("heading", { name: "Audit log" }).waitFor();
  const rows = page.getByRole("table", { name: "Audit log" }).locator("tbody tr");
  await rows.nth(1).waitFor();
  assert.match(await rows.nth(0).textContent(), /api_token_1replay matching.*topic=payment\.succeeded2$/);
  assert.match(await rows.nth(1).textContent(), new RegExp(`api_token_1replay.*${oldest}1$`));
  await page.screenshot({ path: `${shots}/ui-audit.png`, fullPage: true });
  await page.getByLabel("action").selectOption("replay_matching");
  await page.getByRole("button", { name: "Filter" }).click();
  await page.waitForURL(/action=replay_matching/);
  // The URL changes before the filtered page replaces the unfiltered table.
  await eventually("the filtered audit log", async () => (await rows.count()) === 1);
  assert.match(await rows.nth(0).textContent(), /replay matching/);

  // The queue: a tab per state, soonest due first, paged; the search box finds a
  // notification by its idempotency key, and its detail cancels it.
  const scheduled = [];
  for (const [hours, key] of [[1, "order-2001"], [2, "order-2002"], [3, "order-2003"]]) {
    const r = await fetch(`${api}/notify`, {
      method: "POST",
      headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json", "Idempotency-Key": key },
      body: JSON.stringify({
        url: target(`/up/refunds/${key}`), body: { key }, delay: `${hours}h`, topic: "refund",
        // One shows what decides its delivery: an ordering key, a profile and its rule.
        ...(key === "order-2002" ? { ordering_key: "refund-2002", profile: "alipay" } : {}),
      }),
    });
    scheduled.push((await r.json()).id);
  }
  await page.getByRole("link", { name: "Queue" }).click();
  await page.getByRole("heading", { name: "Queue" }).waitFor();
  await page.getByRole("link", { name: "Scheduled", exact: true }).click();
  await page.waitForURL(/state=scheduled/);
  const queueRows = page.getByRole("table", { name: "Scheduled" }).locator("tbody tr");
  await queueRows.nth(2).waitFor();
  assert.deepEqual(
    await queueRows.evaluateAll((rows) => rows.map((r) => r.querySelector(".id").textContent)),
    scheduled, "soonest due first");
  await page.screenshot({ path: `${shots}/ui-queue.png`, fullPage: true });
  await page.goto(`${api}/ui#/queue?state=scheduled&limit=2`);
  await eventually("the first page of two", async () => (await queueRows.count()) === 2);
  await page.getByRole("link", { name: "Next page" }).click();
  await page.waitForURL(/cursor=/);
  await eventually("the last page of one", async () => (await queueRows.count()) === 1);
  assert.equal(await queueRows.first().locator(".id").textContent(), scheduled[2]);
  await page.getByRole("link", { name: "Delivered", exact: true }).click();
  await page.waitForURL(/state=delivered/);
  await page.getByRole("table", { name: "Delivered" }).locator("tbody tr").first().waitFor();

  await page.getByLabel("Id or idempotency key").fill("order-2002");
  await page.keyboard.press("Enter");
  await page.getByRole("heading", { name: "Look up a notification" }).waitFor();
  await page.waitForURL(new RegExp(`#/lookup/${scheduled[1]}`));
  assert.equal(await page.locator("#lookup-state").textContent(), "scheduled");
  assert.equal(await page.locator("#ordering-key").textContent(), "refund-2002");
  assert.equal(await page.locator("#profile").textContent(), "alipay");
  assert.equal(await page.locator("#success-rule").textContent(), "2xx and body `success`");
  await page.getByRole("button", { name: "Cancel…" }).click();
  await page.locator("dialog[open]").getByRole("button", { name: "Cancel it" }).click();
  await eventually("the cancel", async () =>
    (await page.locator("#lookup-state").textContent()) === "cancelled");
  await page.goto(`${api}/ui#/queue?state=cancelled`);
  const cancelledRows = page.getByRole("table", { name: "Cancelled" }).locator("tbody tr");
  await cancelledRows.first().waitFor();
  assert.equal(await cancelledRows.first().locator(".id").textContent(), scheduled[1]);

  // A cancelled one is resent from its detail: a new cycle under the same id.
  await page.goto(`${api}/ui#/lookup/${scheduled[1]}`);
  await page.getByRole("button", { name: "Resend…" }).click();
  await page.locator("dialog[open]").getByRole("button", { name: "Resend it" }).click();
  await eventually("the resend", async () =>
    (await page.locator("#lookup-state").textContent()) !== "cancelled");
  const resent = await call("GET", `/notifications/${scheduled[1]}`);
  assert.deepEqual([resent.cycle, resent.replays, resent.resends], [1, 0, 1]);

  // Every delivered one of a topic resent from the queue, counted first.
  const topic = "ui.resend";
  for (let i = 0; i < 2; i++) await call("POST", "/notify", { url: target("/up/resend"), body: { i }, topic });
  await page.goto(`${api}/ui#/queue?state=delivered&topic=${topic}`);
  const deliveredRows = page.getByRole("table", { name: "Delivered" }).locator("tbody tr");
  await eventually("both delivered", async () => {
    await page.reload();
    return (await deliveredRows.count()) === 2;
  });
  await page.getByRole("button", { name: "Resend all matching…" }).click();
  const resendDialog = page.locator("dialog[open]");
  assert.match(await resendDialog.textContent(), /Resend 2 delivered notifications matching topic=ui.resend/);
  await resendDialog.getByRole("button", { name: "Resend 2" }).click();
  await page.getByText("2 resent.").waitFor();

  // The endpoints: the receiver's origin is healthy; the same receiver called by name is
  // another origin, which fails.
  const down = `http://localhost:${receiver.address().port}/down/orders/3001`;
  const failing = await call("POST", "/notify", { url: down, body: { order: 3001 }, schedule: ["100ms"] });
  const origin = `http://localhost:${receiver.address().port}`;
  await eventually("the failing endpoint", async () => (await call("GET", "/endpoints?state=failing"))
    .items.some((e) => e.url === origin && e.consecutive_failures === 2));
  await page.goto(`${api}/ui#/endpoints`);
  const endpointRows = page.getByRole("table", { name: "Endpoints" }).locator("tbody tr");
  await endpointRows.nth(1).waitFor();
  const failingRow = endpointRows.filter({ hasText: origin });
  assert.match(await failingRow.textContent(), /failing/);
  assert.match(await failingRow.textContent(), /HTTP 503/);
  // The receiver's own origin: its last attempt (a delivery) succeeded.
  assert.match(await endpointRows.filter({ hasText: "127.0.0.1" }).textContent(), /healthy/);
  // A URL and an id each on one line, cut where the column ends, whole on hover.
  await page.setViewportSize({ width: 1400, height: 900 });
  const clipped = await page.locator("td.url .clip").evaluateAll((all) => all.map((e) => ({
    text: e.textContent, whole: e.title === e.textContent,
    lines: Math.round(e.getBoundingClientRect().height / (parseFloat(getComputedStyle(e).fontSize) * 1.2)),
  })));
  assert.ok(clipped.length >= 4, "a URL and an id per row");
  for (const c of clipped) assert.deepEqual([c.whole, c.lines], [true, 1], `${c.text} on one line, whole in its title`);
  await page.screenshot({ path: `${shots}/ui-endpoints.png`, fullPage: true });
  await page.setViewportSize({ width: 1200, height: 800 });
  // Pausing the failing one holds its next notification; resuming lets it go.
  await failingRow.getByRole("button", { name: "Pause…" }).click();
  await page.locator("dialog[open]").getByRole("button", { name: "Pause it" }).click();
  await eventually("paused", async () => /paused/.test(await failingRow.textContent()));
  const held = await call("POST", "/notify", { url: down, body: { order: 3002 }, schedule: ["100ms"] });
  await eventually("held", async () => (await call("GET", `/notifications/${held.id}`)).state === "held");
  await page.goto(`${api}/ui#/queue?state=held`);
  await page.getByText(held.id).waitFor();
  // Its page offers what its view's `actions` list, and those alone: a held one may be
  // cancelled and attempted now (the lifecycle takes both), not resent.
  const heldView = await call("GET", `/notifications/${held.id}`);
  assert.deepEqual(heldView.actions, ["cancel", "attempt_now"]);
  await page.goto(`${api}/ui#/lookup/${held.id}`);
  await page.getByRole("heading", { name: "Request" }).waitFor();
  assert.match(await page.locator("#held").textContent(), /^its endpoint is paused/);
  for (const [button, count] of [["Cancel…", 1], ["Attempt now", 1], ["Resend…", 0]]) {
    assert.equal(await page.getByRole("button", { name: button }).count(), count, button);
  }
  // The overview counts it as held, not among the scheduled.
  await page.goto(`${api}/ui#/overview`);
  const heldCount = page.locator(".count", { hasText: "Held (endpoint paused)" }).locator("b");
  assert.equal(await heldCount.textContent(), "1");
  const scheduledCount = page.locator(".count", { hasText: "Scheduled or retrying" }).locator("b");
  const counts = (await call("GET", "/overview")).counts;
  assert.equal(await scheduledCount.textContent(), String(counts.scheduled - 1));
  await page.goto(`${api}/ui#/endpoints`);
  await endpointRows.nth(1).waitFor();
  await page.screenshot({ path: `${shots}/ui-endpoints-paused.png`, fullPage: true });
  await failingRow.getByRole("button", { name: "Resume" }).click();
  await eventually("let go", async () => (await call("GET", `/notifications/${held.id}`)).state !== "held");
  await eventually("failing again", async () => /failing/.test(await failingRow.textContent()));
  await page.getByLabel("state").selectOption("failing");
  await page.getByRole("button", { name: "Filter" }).click();
  await page.waitForURL(/state=failing/);
  await eventually("only the failing one", async () => (await endpointRows.count()) === 1);
  assert.equal((await call("GET", `/notifications/${failing.id}`)).state, "dead");
  // After the outage, what died at that endpoint is replayed by its id alone.
  await eventually("the held one dead too", async () => (await call("GET", `/notifications/${held.id}`)).state === "dead");
  await failingRow.getByRole("link", { name: "Dead letters" }).click();
  await page.waitForURL(/#\/dead\?endpoint=ep_/);
  await page.getByText(held.id).waitFor();
  await page.getByRole("button", { name: "Replay all matching…" }).click();
  const replayDialog = page.locator("dialog[open]");
  assert.match(await replayDialog.textContent(), /Replay 2 dead letters matching endpoint=ep_/);
  await replayDialog.getByRole("button", { name: "Replay 2" }).click();
  await page.getByText("2 replayed.").waitFor();
  assert.equal((await call("GET", `/notifications/${failing.id}`)).replays, 1);

  // Subscriptions and events: subscribe a URL on the page, publish an event, follow it
  // to its delivery, resend it, disable the subscription.
  await page.goto(`${api}/ui#/subscriptions`);
  await page.getByLabel("url").fill(target("/up/hooks/orders"));
  await page.getByLabel("topics").fill("ui.payment.*");
  await page.getByRole("button", { name: "Subscribe" }).click();
  const subscriptionRow = page.getByRole("table", { name: "Subscriptions" }).locator("tbody tr")
    .filter({ hasText: "/up/hooks/orders" });
  await subscriptionRow.waitFor();
  const published = await call("POST", "/events", { topic: "ui.payment.succeeded", body: { order: 4001 } });
  assert.equal(published.deliveries.length, 1, "the subscription made on the page took it");
  const made = published.deliveries[0].notification;
  await eventually("the event's delivery", async () => delivered.includes(made));
  await page.goto(`${api}/ui#/events`);
  await page.getByRole("table", { name: "Topics" }).getByText("ui.payment.succeeded").waitFor();
  await page.getByRole("link", { name: published.id }).click();
  await page.getByRole("heading", { name: "Event" }).waitFor();
  const deliveries = page.getByRole("table", { name: "Deliveries" });
  assert.match(await deliveries.textContent(), /delivered/);
  assert.match(await deliveries.textContent(), new RegExp(made));
  await page.screenshot({ path: `${shots}/ui-event.png`, fullPage: true });
  await page.getByRole("button", { name: "Resend finished ones" }).click();
  await page.getByText("1 resent.").waitFor();
  await eventually("sent again", async () => delivered.filter((id) => id === made).length === 2);
  await page.goto(`${api}/ui#/subscriptions`);
  await subscriptionRow.getByRole("button", { name: "Disable" }).click();
  await subscriptionRow.getByRole("button", { name: "Enable" }).waitFor();
  const later = await call("POST", "/events", { topic: "ui.payment.succeeded", body: { order: 4002 } });
  assert.equal(later.deliveries.length, 0, "a disabled subscription takes nothing");
  await page.screenshot({ path: `${shots}/ui-subscriptions.png`, fullPage: true });

  await bodiesAsStored(page);
  await linkInASignedInTab(browser, errors);
  await merchantPage(browser, errors);
  await heldBack(page);
  await notForALink(browser, errors);
  await noSigningKeys(browser, errors);
  await everyView(browser, errors, { dead: dead[1], notification: scheduled[0], event: published.id });

  // Phone width: nothing wider than the screen.
  await page.setViewportSize({ width: 390, height: 844 });
  await page.goto(`${api}/ui#/dead/${dead[1]}`);
  await page.getByRole("heading", { name: "Dead letter" }).waitFor();
  await page.goto(`${api}/ui#/overview`);
  await page.getByRole("heading", { name: "Overview" }).waitFor();
  const width = await page.evaluate(() => document.documentElement.scrollWidth);
  assert.ok(width <= 390, `the overview is ${width}px wide on a 390px screen`);
  await page.screenshot({ path: `${shots}/ui-phone.png`, fullPage: true });
  await page.goto(`${api}/ui#/queue?state=scheduled`);
  await page.getByRole("table", { name: "Scheduled" }).locator("tbody tr").first().waitFor();
  const queueWidth = await page.evaluate(() => document.documentElement.scrollWidth);
  assert.ok(queueWidth <= 390, `the queue is ${queueWidth}px wide on a 390px screen`);

  // Swagger UI renders under the same policy.
  await page.goto(`${api}/docs/`);
  await page.locator(".opblock").first().waitFor();
  assert.ok(await page.locator(".opblock").count() >= 15, "every operation is listed");

  assert.deepEqual(errors, [], "no script errors");
  assert.deepEqual(refused, [], "nothing the pages need is refused by their Content-Security-Policy");
  console.log("review page: sign-in, overview (and one tenant's), dead letters, keyboard, replay, bulk replay, audit, queue, search, cancel, resend, bulk resend, endpoints, pause and resume, an endpoint's dead letters replayed, subscriptions and events, a link opened in a signed-in tab asks, bodies as stored, merchant's page (roles, request and response, cycles, a dead letter resent from its page, signing keys verified in Node.js and Python), held back by an open circuit (its endpoint's circuit and the overview's count, until it closes), phone width: ok");
} finally {
  await browser.close();
  receiver.close();
}
