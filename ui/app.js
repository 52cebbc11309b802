// The review page: a small client of postback's own API. The token is kept in
// sessionStorage (this tab only) and sent as a bearer token, like any API client; a
// portal link's credential arrives in the URL's fragment (`portalLink`).
// Views are chosen by the URL's hash, so the browser's back button and links work:
// #/overview (?tenant), #/dead (?filters), #/dead/<id>, #/queue (?state, filters, cursor),
// #/lookup, #/lookup/<id>, #/endpoints (?filters), #/subscriptions, #/events,
// #/events/<id>, #/audit (?filters), #/keys (?tenant) (`VIEWS`). A token of one tenant
// (a merchant's portal link) sees that tenant's views without a tenant to choose, and
// only the controls whose routes its roles open (`routes` of `GET /me`); a view it may not open, or one
// that does not exist, says so rather than fail.
"use strict";

const TOKEN_KEY = "postback-token";
const view = document.getElementById("view");

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) node.setAttribute(k, v === true ? "" : v);
  }
  // `false` is nothing too, so that a control behind `&&` leaves nothing when not offered.
  for (const c of children.flat()) {
    if (c !== null && c !== undefined && c !== false) node.append(c instanceof Node ? c : String(c));
  }
  return node;
}

class ApiError extends Error {
  constructor(status, body) {
    super(body?.error?.message || `HTTP ${status}`);
    this.status = status;
    this.code = body?.error?.code;
  }
}

// Who the token is (`GET /me`): its tenant (null: every tenant), roles, the routes they
// open (`routes`, as `METHOD /pattern`) and what they let it do (`may`), asked once per
// token. The page offers a control only when `allowed` says the API takes the route it
// calls, a field a body adds beyond its route (a replay to another URL) only when `can`
// says the caller may do that too, a bulk resend only of the states it `resends`, and on
// one notification exactly the actions its view lists (`offers`).
let caller = null;
const allowed = (route) => Boolean(caller?.routes?.includes(route));
const can = (action) => Boolean(caller?.may.includes(action));
// Whether it may resend a finished notification in `state` (`resendable` of `GET /me`: a
// dead one needs `replay` too, a cancelled one `cancel`).
const resends = (state) => Boolean(caller?.resendable?.includes(state));
const oneTenant = () => caller?.tenant || null;
// Whether the caller is a merchant's portal link rather than a configured token.
const isLink = () => Boolean(caller?.actor.startsWith("portal:"));
// The filters of a view without `tenant` for a token of one tenant, which has no other.
const ownFilters = (fields) => (oneTenant() ? fields.filter((f) => f !== "tenant") : fields);
// A table's tenant header and cell, left out for a token of one tenant.
const tenantHead = () => (oneTenant() ? null : el("th", { class: "wide" }, "Tenant"));
const tenantCell = (t) => (oneTenant() ? null : el("td", { class: "wide" }, t));

function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
  caller = null;
}

// The API's answer to `path`: its value, and its text as the API wrote it, where a
// producer's body is read as written (`source`), since JSON.parse rounds numbers.
async function answer(path, options = {}) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const headers = { Authorization: `Bearer ${token}` };
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method: options.method || "GET",
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
  });
  const text = await response.text();
  let value = null;
  try {
    value = JSON.parse(text);
  } catch {
    // Not JSON: an error says so by its status.
  }
  if (response.status === 401) {
    forgetToken();
    showTokenForm("The token was refused; paste a valid one.");
    throw new ApiError(401, value);
  }
  if (!response.ok) throw new ApiError(response.status, value);
  return { value, text };
}

const api = async (path, options = {}) => (await answer(path, options)).value;

// ---- sign-in -------------------------------------------------------------

function showTokenForm(message = "") {
  document.getElementById("token-form").hidden = false;
  document.getElementById("token-error").textContent = message;
  document.getElementById("sign-out").hidden = true;
  document.getElementById("who").textContent = "";
  view.replaceChildren();
  document.getElementById("token").focus();
}

document.getElementById("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  forgetToken();
  sessionStorage.setItem(TOKEN_KEY, document.getElementById("token").value.trim());
  document.getElementById("token-form").hidden = true;
  route();
});

document.getElementById("sign-out").addEventListener("click", () => {
  forgetToken();
  showTokenForm();
});

function confirmAction(text, okLabel) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-text").textContent = text;
  document.getElementById("confirm-ok").textContent = okLabel;
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.showModal();
  });
}

// ---- helpers -------------------------------------------------------------

const when = (t) => (t ? new Date(t).toLocaleString() : "—");

// A success rule as a sentence: its statuses (any 2xx by default) and its body rule.
function successText(rule) {
  if (!rule) return "any 2xx";
  const statuses = rule.status ? rule.status.join(" or ") : "2xx";
  const body =
    rule.body_equals !== undefined ? `body \`${rule.body_equals}\`` :
    rule.body_equals_ignoring_case !== undefined ? `body \`${rule.body_equals_ignoring_case}\` in any case` :
    rule.body_matches !== undefined ? `body matching \`${rule.body_matches}\`` :
    rule.json_pointer !== undefined ? `JSON \`${rule.json_pointer}\` = ${JSON.stringify(rule.json_equals)}` : null;
  return body ? `${statuses} and ${body}` : statuses;
}

// What decides how a notification is delivered: its ordering key (and whether it waits
// behind an earlier one), its profile, its success rule.
function deliveryRules(n) {
  const key = n.ordering_key ? `${n.ordering_key}${n.waiting ? " (waiting behind an earlier one)" : ""}` : "—";
  return [
    el("dt", {}, "Ordering key"), el("dd", { id: "ordering-key" }, key),
    el("dt", {}, "Profile"), el("dd", { id: "profile" }, n.profile || "—"),
    el("dt", {}, "Success"), el("dd", { id: "success-rule" }, successText(n.success)),
  ];
}
// A long value (a URL, an id) kept on one line and cut with an ellipsis where its column
// ends; the whole value shows on hover, and a copy takes all of it.
function clip(text, attrs = {}) {
  const tag = attrs.href ? "a" : "span";
  return el(tag, { ...attrs, class: `clip ${attrs.class || ""}`.trim(), title: text }, text);
}
const stateBadge = (s) => el("span", { class: `state state-${s}` }, s.replace("_", " "));
const outcome = (a) => (a.status !== null ? `HTTP ${a.status}` : a.error || "no response");
// How a list item's last attempt ended: its status, and why when the status does not
// say (a 2xx whose body did not match expect_body).
function lastAttempt(n) {
  if (n.last_error && n.last_status !== null && !n.last_error.startsWith("HTTP ")) {
    return `HTTP ${n.last_status}: ${n.last_error}`;
  }
  return n.last_error || (n.last_status !== null ? `HTTP ${n.last_status}` : "—");
}

// A notification's history by cycle (its registration, then each replay or resend):
// each cycle under a heading that says how and when it began, the URL its attempts went
// to and how many there were (one cycle alone needs no heading); attempts numbered
// within their cycle, each with the URL it went to where that is not the one the next
// attempt goes to; a note of the endpoint's open circuit (no request, no attempt
// counted) in its place.
function timeline(n) {
  if (n.cycles.length < 2) {
    return n.history.length ? entries(n.history, n.request.url) : el("p", { class: "muted" }, "No attempt yet.");
  }
  return el("div", { class: "cycles" }, n.cycles.map((c) => el("section", { class: "cycle", "aria-label": c.name },
    el("h3", {}, cycleTitle(c)),
    el("p", { class: "muted" }, `${when(c.began_at)} · to `, el("span", { class: "went-to" }, c.url || "an unrecorded URL")),
    entries(n.history.filter((e) => e.cycle === c.cycle), n.request.url))));
}

const plural = (count, word) => `${count} ${word}${count === 1 ? "" : "s"}`;
// A cycle under the name the API gives it, as the command line shows it too:
// "Registered", "Replay 1", "Resend 2", …
function cycleTitle(c) {
  return `${c.name} · ${plural(c.attempts, "attempt")}`;
}

// One cycle's entries as a timeline.
function entries(list, nextUrl) {
  if (list.length === 0) return el("p", { class: "muted" }, "No attempt in this cycle yet.");
  let attempt = 0;
  return el("ol", { class: "timeline", "aria-label": "Attempt history" },
    list.map((a) => {
      if (a.kind !== "attempt") {
        return el("li", { class: "note" },
          el("strong", {}, a.kind === "circuit_deadline"
            ? "Dead: its endpoint's circuit was still open at its deadline"
            : "Held back: its endpoint's circuit is open (no request, no attempt counted)"),
          el("div", { class: "muted" }, when(a.at)));
      }
      attempt += 1;
      return el("li", { class: a.status >= 200 && a.status < 300 ? "ok" : "" },
        el("strong", {}, `Attempt ${attempt}: ${outcome(a)}`),
        el("div", { class: "muted" }, `${when(a.at)} · ${a.duration_ms} ms`,
          a.url && a.url !== nextUrl ? [" · to ", el("span", { class: "went-to" }, a.url)] : null),
        a.response ? el("pre", {}, a.response) : null,
        a.response_headers && a.response_headers.length
          ? el("details", {}, el("summary", {}, "Response headers"),
            el("pre", {}, a.response_headers.map((h) => `${h.name}: ${h.value}`).join("\n")))
          : null);
    }));
}

// "2 of 2", and with earlier cycles "2 of 2 in this cycle; 9 in all".
function attemptCount(n) {
  const current = `${n.attempts} of ${n.max_attempts}`;
  return n.cycle ? `${current} in this cycle; ${n.total_attempts} in all` : current;
}

// How often it was sent again, replays and resends each counted apart.
function sentAgain(n) {
  return [el("dt", {}, "Replays"), el("dd", { id: "replays" }, n.replays),
    el("dt", {}, "Resends"), el("dd", { id: "resends" }, n.resends)];
}

// While its endpoint is paused: held, not attempted, until the endpoint is resumed (what
// an open circuit does is "held back": `heldBack`).
function heldForPause(n) {
  if (n.state !== "held") return [];
  return [el("dt", {}, "Held"), el("dd", { id: "held" },
    "its endpoint is paused: not attempted, its schedule frozen, until the endpoint is resumed")];
}

// While its endpoint's open circuit holds it back: since when, and its deadline.
function heldBack(n) {
  if (!n.held_back_since) return [];
  return [el("dt", {}, "Held back"), el("dd", { id: "held-back" },
    `its endpoint's circuit is open since ${when(n.held_back_since)}; dead-lettered at ${when(n.deadline)} if still open`)];
}

// ---- bodies as stored ----------------------------------------------------

// JSON text's tokens as written (a string with its escapes, a number, a literal, or one
// of `{}[]:,`), each with where it ends; the whitespace between them left out.
function tokens(text) {
  const token = /\s*("(?:[^"\\]|\\[\s\S])*"|[{}[\]:,]|[^\s{}[\]:,"]+)/gy;
  const found = [];
  for (let m = token.exec(text); m; m = token.exec(text)) found.push({ text: m[1], end: token.lastIndex });
  return found;
}

const OPENS = new Set(["{", "["]);
const CLOSES = new Set(["}", "]"]);

// JSON text laid out two spaces a level, every token as written: numbers, strings and
// keys copied in their order, never read as values (JSON.parse shows
// 12345678901234567890123 as 1.2345678901234568e+22 and 10.10 as 10.1); null for text
// that is not one JSON value. The page's one layout of a producer's body.
function pretty(text) {
  try {
    JSON.parse(text);
  } catch {
    return null;
  }
  const list = tokens(text);
  let depth = 0;
  const newLine = () => `\n${"  ".repeat(depth)}`;
  return list.map(({ text: t }, i) => {
    if (OPENS.has(t)) {
      depth += 1;
      return CLOSES.has(list[i + 1]?.text) ? t : t + newLine();
    }
    if (CLOSES.has(t)) {
      depth -= 1;
      return OPENS.has(list[i - 1].text) ? t : newLine() + t;
    }
    return t === "," ? `,${newLine()}` : t === ":" ? ": " : t;
  }).join("");
}

// A reader of the values in JSON text as written (`at(["items", 0, "example"])`): where
// a producer's body sits in an API answer (an event's `body`, a topic's `example`).
function source(text) {
  const list = tokens(text);
  // The index of the token after the value that starts at token `i`.
  const after = (i) => {
    let depth = 0;
    do depth += OPENS.has(list[i].text) ? 1 : CLOSES.has(list[i].text) ? -1 : 0;
    while (++i < list.length && depth > 0);
    return i;
  };
  return (path) => {
    let i = 0;
    for (const step of path) {
      i += 1;
      if (typeof step === "number") {
        for (let n = 0; n < step; n++) i = after(i) + 1;
      } else {
        while (JSON.parse(list[i].text) !== step) i = after(i + 2) + 1;
        i += 2;
      }
    }
    return text.slice(list[i].end - list[i].text.length, list[after(i) - 1].end);
  };
}

const isJson = (contentType) => contentType.startsWith("application/json");

// A producer's body as stored (`id` names its <pre>): a JSON one laid out by `pretty`,
// which changes no token, with a toggle to the bytes stored; any other as it is.
function bodyView(stored, json, id) {
  const laidOut = json ? pretty(stored) : null;
  const pre = el("pre", { id }, laidOut ?? stored);
  if (laidOut === null || laidOut === stored) return pre;
  const toggle = el("button", { type: "button", class: "secondary", "aria-pressed": "false" }, "As stored");
  toggle.addEventListener("click", () => {
    const raw = toggle.getAttribute("aria-pressed") === "false";
    toggle.setAttribute("aria-pressed", String(raw));
    pre.textContent = raw ? stored : laidOut;
  });
  return el("div", {}, el("div", { class: "actions" }, toggle), pre);
}

// A form of filters over `fields`, filled from `params`: a text input each (with a hint
// for the RFC 3339 times) unless `control(f)` gives another; submitting it goes to
// `#/<view>?` the `fixed` parameters and the fields filled in.
function filterForm(fields, params, prefix, view, control = () => null, fixed = {}) {
  const isTime = (f) => f === "since" || f === "until";
  const form = el("form", { class: "filters", "aria-label": "Filters" },
    fields.map((f) => el("div", {},
      el("label", { for: `${prefix}-${f}` }, isTime(f) ? `${f} (RFC 3339)` : f),
      control(f) || el("input", { id: `${prefix}-${f}`, name: f, value: params.get(f) || "",
        placeholder: isTime(f) ? "2026-01-01T00:00:00Z" : "" }))),
    el("div", {}, el("button", { type: "submit" }, "Filter")));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const next = new URLSearchParams(fixed);
    for (const f of fields) if (form.elements[f].value.trim()) next.set(f, form.elements[f].value.trim());
    location.hash = `#/${view}?${next}`;
  });
  return form;
}

function failure(error) {
  return el("p", { class: "error", role: "alert" }, error.message);
}

// ---- views ---------------------------------------------------------------

async function overview(params) {
  const tenant = params.get("tenant") || oneTenant();
  const q = tenant ? `?${new URLSearchParams({ tenant })}` : "";
  const o = await api(`/overview${q}`);
  const c = o.counts;
  const max = Math.max(1, ...o.last_hour.map((w) => w.finished + w.dead));
  const dead = (host) => `#/dead?${new URLSearchParams(tenant ? { host, tenant } : { host })}`;
  const queue = (state) => `#/queue?${new URLSearchParams(tenant && !oneTenant() ? { state, tenant } : { state })}`;
  // The held (their endpoint paused) and the held back (by an open circuit) are among
  // the scheduled; each is counted once, under its own name.
  const atLeast = (h) => `${h.count}${h.complete ? "" : "+"}`;
  const counts = [["Scheduled or retrying", c.scheduled - o.held.count - o.held_back.count, queue("scheduled")],
    ["Held (endpoint paused)", atLeast(o.held), queue("held")],
    ["Held back (circuit open)", atLeast(o.held_back), queue("held_back")], ["In flight", c.in_flight, queue("in_flight")],
    ["Dead letters", c.dead, "#/dead"], ["Delivered or cancelled", c.finished, queue("delivered")]];
  return [
    el("h1", {}, tenant ? `Overview of ${tenant}` : "Overview"),
    oneTenant() ? null : filterForm(["tenant"], params, "o", "overview"),
    degradedShards(o.degraded_shards || []),
    el("div", { class: "counts" }, counts.map(([label, n, href]) =>
      el("a", { class: "count", href }, el("b", {}, n), el("span", {}, label)))),
    el("h2", {}, "Last hour"),
    el("p", { class: "legend" }, "Per five minutes: ",
      el("span", { class: "ok" }, "■ delivered or cancelled "), el("span", { class: "bad" }, "■ dead-lettered"),
      ` (${o.last_hour.reduce((n, w) => n + w.finished, 0)} and ${o.last_hour.reduce((n, w) => n + w.dead, 0)})`),
    el("div", { class: "bars", role: "img", "aria-label": "Finished and dead-lettered per five minutes" },
      o.last_hour.map((w) => el("div", { class: "bar", title: `${when(w.from)}: ${w.finished} finished, ${w.dead} dead` },
        el("i", { class: "ok", style: `height:${(100 * w.finished) / max}%` }),
        el("i", { class: "bad", style: `height:${(100 * w.dead) / max}%` })))),
    el("div", { class: "axis", "aria-hidden": "true" }, el("span", {}, "an hour ago"), el("span", {}, "now")),
    el("h2", {}, "Hosts failing most (last hour)"),
    o.failing_hosts.length === 0
      ? el("p", { class: "muted" }, "No dead letters in the last hour.")
      : el("div", { class: "table-wrap" }, el("table", {},
        el("thead", {}, el("tr", {}, el("th", {}, "Host"), el("th", {}, "Dead letters"), el("th", {}, "Last error"), el("th", { class: "wide" }, "At"))),
        el("tbody", {}, o.failing_hosts.map((h) => el("tr", {},
          el("td", {}, clip(h.host, { href: dead(h.host) })),
          el("td", {}, h.dead),
          el("td", {}, h.last_status !== null ? `HTTP ${h.last_status}` : h.last_error || "—"),
          el("td", { class: "wide" }, when(h.last_at))))))),
  ];
}

// The shards that take no new notification now (store.replica_acks not met), and why:
// what an operator fixes by giving their primary a replica (docs/durability.md).
function degradedShards(shards) {
  if (shards.length === 0) return null;
  return el("div", { class: "alert", role: "status" },
    el("b", {}, shards.length === 1 ? "1 shard takes no new notifications" : `${shards.length} shards take no new notifications`),
    el("ul", {}, shards.map((s) => el("li", {}, `Shard ${s.shard}: ${s.reason} (since ${when(s.since)}).`))),
    el("p", {}, "New notifications go to the other shards; those whose ordering key lives on one of these are refused (503 shard_unavailable). Give the primary the replicas store.replica_acks asks for."));
}

const FILTERS = ["topic", "host", "endpoint", "tenant", "since", "until"];

function filterQuery(params) {
  const q = new URLSearchParams();
  for (const f of FILTERS) if (params.get(f)) q.set(f, params.get(f));
  return q;
}

// How many dead letters match, paging through at most 10 pages of 500.
async function countMatching(params) {
  let count = 0;
  let cursor = null;
  for (let page = 0; page < 10; page++) {
    const q = filterQuery(params);
    q.set("limit", "500");
    if (cursor) q.set("cursor", cursor);
    const p = await api(`/dead-letters?${q}`);
    count += p.items.length;
    cursor = p.next_cursor;
    if (!cursor) return { count, more: false };
  }
  return { count, more: true };
}

async function deadLetters(params) {
  const filtered = [...filterQuery(params).keys()].length > 0;
  const q = filterQuery(params);
  q.set("limit", "50");
  if (params.get("cursor")) q.set("cursor", params.get("cursor"));
  const page = await api(`/dead-letters?${q}`);
  const status = el("p", { role: "status" });
  const form = filterForm(ownFilters(FILTERS), params, "f", "dead");
  const list = el("div", {}, deadRows(page, filtered));
  const replayAll = el("button", { type: "button", class: "secondary" }, "Replay all matching…");
  replayAll.addEventListener("click", async () => {
    replayAll.disabled = true;
    try {
      const { count, more } = await countMatching(params);
      const filter = Object.fromEntries(filterQuery(params));
      const what = Object.keys(filter).length ? `matching ${new URLSearchParams(filter)}` : "(no filter: all of them)";
      const ok = count > 0 && await confirmAction(
        `Replay ${count}${more ? " or more" : ""} dead letters ${what}?`, `Replay ${count}${more ? "+" : ""}`);
      if (count === 0) status.textContent = "Nothing matches.";
      if (ok) {
        const body = Object.keys(filter).length ? filter : { all: true };
        const r = await api("/dead-letters/replay", { method: "POST", body });
        status.textContent = `${r.count} replayed.`;
        // Every row matched the filter, so none is a dead letter any more.
        list.replaceChildren(el("p", { class: "muted" }, "No dead letters match."));
      }
    } catch (e) {
      status.replaceChildren(failure(e));
    } finally {
      replayAll.disabled = false;
    }
  });
  const next = new URLSearchParams(filterQuery(params));
  if (page.next_cursor) next.set("cursor", page.next_cursor);
  return [
    el("h1", {}, "Dead letters"),
    form,
    allowed("POST /dead-letters/replay") ? el("div", { class: "actions" }, replayAll, status) : null,
    list,
    page.next_cursor ? el("p", {}, el("a", { href: `#/dead?${next}` }, "Next page →")) : null,
  ];
}

// The rows of a page of dead letters.
function deadRows(page, filtered) {
  return page.items.length === 0
      ? el("p", { class: "muted" }, filtered ? "No dead letters match."
        : "No dead letters: nothing has used up its schedule. A notification lands here after its last attempt fails.")
      : el("div", { class: "table-wrap" }, el("table", {},
        el("thead", {}, el("tr", {}, el("th", {}, "Notification"), el("th", { class: "wide" }, "Topic"),
          tenantHead(), el("th", {}, "Last failure"), el("th", { class: "wide" }, "Attempts"),
          el("th", {}, "Dead since"))),
        el("tbody", {}, page.items.map((d) => el("tr", {},
          el("td", { class: "url" }, clip(d.url, { href: `#/dead/${d.id}` }), clip(d.id, { class: "muted id" })),
          el("td", { class: "wide" }, d.topic || "—"),
          tenantCell(d.tenant),
          el("td", {}, lastAttempt(d)),
          el("td", { class: "wide" }, d.attempts),
          el("td", {}, when(d.dead_at)))))));
}

async function deadLetter(id) {
  const d = await api(`/dead-letters/${encodeURIComponent(id)}`);
  const status = el("p", { role: "status" });
  const url = el("input", { id: "replay-url", name: "url", type: "url", placeholder: d.url });
  const replay = el("form", { class: "actions", "aria-label": "Replay" },
    can("redirect") ? el("div", { class: "grow" }, el("label", { for: "replay-url" }, "New callback URL (optional)"), url) : null,
    el("button", { type: "submit" }, "Replay"));
  replay.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const body = url.value.trim() ? { url: url.value.trim() } : {};
      await api(`/dead-letters/${encodeURIComponent(id)}/replay`, { method: "POST", body });
      location.hash = `#/lookup/${id}`;
    } catch (e) {
      status.replaceChildren(failure(e));
    }
  });
  const discard = el("button", { type: "button", class: "danger" }, "Discard");
  discard.addEventListener("click", async () => {
    if (!await confirmAction(`Discard ${id}? It will not be sent again.`, "Discard")) return;
    try {
      await api(`/dead-letters/${encodeURIComponent(id)}`, { method: "DELETE" });
      location.hash = "#/dead";
    } catch (e) {
      status.replaceChildren(failure(e));
    }
  });
  // What the lookup page offers it too (a resend, to a caller that may resend a dead one),
  // and discard.
  const actions = [...notificationActions(d, status), offers(d, "discard") && discard].filter(Boolean);
  return [
    el("h1", {}, "Dead letter"),
    el("div", { class: "card" }, el("dl", {},
      el("dt", {}, "Id"), el("dd", {}, d.id),
      el("dt", {}, "Tenant"), el("dd", {}, d.tenant),
      el("dt", {}, "Callback"), el("dd", {}, d.url),
      el("dt", {}, "Topic"), el("dd", {}, d.topic || "—"),
      ...deliveryRules(d),
      el("dt", {}, "Attempts"), el("dd", { id: "attempts" }, attemptCount(d)),
      el("dt", {}, "Created"), el("dd", {}, when(d.created_at)),
      el("dt", {}, "Dead since"), el("dd", {}, when(d.dead_at)),
      ...sentAgain(d))),
    offers(d, "replay") ? replay : null,
    actions.length ? el("div", { class: "actions" }, actions) : null,
    status,
    el("h2", {}, "Attempts"), timeline(d),
    el("h2", {}, `Body (${d.content_type})`), bodyView(d.body, isJson(d.content_type), "dead-body"),
  ];
}

const STATES = [["scheduled", "Scheduled"], ["retrying", "Retrying"], ["in_flight", "In flight"],
  ["held", "Held"], ["held_back", "Held back"], ["delivered", "Delivered"], ["dead", "Dead"], ["cancelled", "Cancelled"]];
const QUEUE_FILTERS = ["topic", "host", "endpoint", "tenant", "since", "until"];

// The search box: an id opens its notification; anything else is an idempotency key.
function queueSearch() {
  const input = el("input", { id: "queue-search", name: "q", placeholder: "ntf_0_… or order-1001", required: true });
  const form = el("form", { class: "actions", role: "search" },
    el("div", { class: "grow" }, el("label", { for: "queue-search" }, "Id or idempotency key"), input),
    el("button", { type: "submit" }, "Find"));
  const status = el("p", { role: "status" });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const q = input.value.trim();
    if (/^ntf_/.test(q)) {
      location.hash = `#/lookup/${q}`;
      return;
    }
    try {
      const page = await api(`/notifications?${new URLSearchParams({ idempotency_key: q })}`);
      if (page.items.length) location.hash = `#/lookup/${page.items[0].id}`;
      else status.textContent = `No notification has the idempotency key ${q} (keys are kept for idempotency_ttl).`;
    } catch (e) {
      status.replaceChildren(failure(e));
    }
  });
  return [form, status];
}

// Resends every finished notification of `state` the filters match: the count first
// (a dry run), then, once confirmed, the resend.
function resendAllButton(state, params, status) {
  const button = el("button", { type: "button", class: "secondary" }, "Resend all matching…");
  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      const filter = {};
      for (const f of QUEUE_FILTERS) if (params.get(f)) filter[f] = params.get(f);
      const what = Object.keys(filter).length ? `matching ${new URLSearchParams(filter)}` : "(no filter: all of them)";
      const body = { state, ...filter, ...(Object.keys(filter).length ? {} : { all: true }) };
      const { count } = await api("/notifications/resend", { method: "POST", body: { ...body, dry_run: true } });
      if (count === 0) status.textContent = "Nothing matches.";
      const question = `Resend ${count} ${state} notifications ${what}? Each receiver gets its notification again with the same webhook-id.`;
      if (count > 0 && await confirmAction(question, `Resend ${count}`)) {
        const r = await api("/notifications/resend", { method: "POST", body });
        status.textContent = `${r.count} resent.`;
      }
    } catch (e) {
      status.replaceChildren(failure(e));
    } finally {
      button.disabled = false;
    }
  });
  return button;
}

// One list of the queue: a tab per state, the filters, a page of rows, the next page.
async function queue(params) {
  const state = params.get("state") || "scheduled";
  const label = STATES.find(([s]) => s === state)?.[1] || state;
  const q = new URLSearchParams({ state, limit: params.get("limit") || "50" });
  for (const f of [...QUEUE_FILTERS, "cursor"]) if (params.get(f)) q.set(f, params.get(f));
  const page = await api(`/notifications?${q}`);
  const kept = (extra) => {
    const next = new URLSearchParams({ state });
    for (const f of [...QUEUE_FILTERS, "limit"]) if (params.get(f)) next.set(f, params.get(f));
    for (const [k, v] of Object.entries(extra)) next.set(k, v);
    return `#/queue?${next}`;
  };
  const pending = ["scheduled", "retrying", "in_flight", "held", "held_back"].includes(state);
  const form = filterForm(ownFilters(QUEUE_FILTERS), params, "q", "queue", () => null, { state });
  const status = el("p", { role: "status" });
  return [
    el("h1", {}, "Queue"),
    ...queueSearch(),
    el("nav", { class: "tabs", "aria-label": "States" }, STATES.map(([s, name]) =>
      el("a", { href: `#/queue?state=${s}`, ...(s === state ? { "aria-current": "page" } : {}) }, name))),
    form,
    !allowed("POST /notifications/resend") || !resends(state) ? null : el("div", { class: "actions" }, resendAllButton(state, params, status), status),
    page.items.length === 0
      ? el("p", { class: "muted" }, page.next_cursor ? "None on this page." : `Nothing ${label.toLowerCase()} matches.`)
      : el("div", { class: "table-wrap" }, el("table", { "aria-label": label },
        el("thead", {}, el("tr", {}, el("th", {}, "Notification"), el("th", {}, pending ? "Next attempt" : "Finished"),
          el("th", { class: "wide" }, "Topic"), tenantHead(),
          el("th", { class: "wide" }, "Attempts"), el("th", {}, "Last attempt"))),
        el("tbody", {}, page.items.map((n) => el("tr", {},
          el("td", { class: "url" }, clip(n.url, { href: `#/lookup/${n.id}` }), clip(n.id, { class: "muted id" })),
          el("td", {}, when(pending ? n.next_attempt_at : n.finished_at)),
          el("td", { class: "wide" }, n.topic || "—"),
          tenantCell(n.tenant),
          el("td", { class: "wide" }, `${n.attempts} of ${n.max_attempts}`),
          el("td", {}, lastAttempt(n))))))),
    page.partial ? el("p", { class: "muted" }, "This page stopped early: the filter matches few of those examined.") : null,
    page.next_cursor ? el("p", {}, el("a", { href: kept({ cursor: page.next_cursor }) }, "Next page")) : null,
  ];
}

// Cancels a notification that has not finished, after a confirmation.
function cancelButton(n, status) {
  const button = el("button", { type: "button", class: "danger" }, "Cancel…");
  button.addEventListener("click", async () => {
    if (!(await confirmAction(`Cancel ${n.id}? It will not be sent again.`, "Cancel it"))) return;
    try {
      await api(`/notifications/${encodeURIComponent(n.id)}`, { method: "DELETE" });
      route();
    } catch (e) {
      status.replaceChildren(failure(e));
    }
  });
  return button;
}

// Sends a finished notification again under the same id, after a confirmation; then
// shows its page (a dead letter's page, which it leaves, included).
function resendButton(n, status) {
  const button = el("button", { type: "button" }, "Resend…");
  button.addEventListener("click", async () => {
    const question = `Resend ${n.id}? The receiver gets it again with the same webhook-id, from a fresh attempt count.`;
    if (!(await confirmAction(question, "Resend it"))) return;
    await post(`/notifications/${encodeURIComponent(n.id)}/resend`, status, () => show(`#/lookup/${n.id}`));
  });
  return button;
}

// Makes a scheduled or retrying notification due now.
function attemptNowButton(n, status) {
  const button = el("button", { type: "button" }, "Attempt now");
  button.addEventListener("click", () => post(`/notifications/${encodeURIComponent(n.id)}/attempt-now`, status));
  return button;
}

// Pauses an endpoint (its notifications held) after a confirmation, or resumes it.
function pauseButton(e, status) {
  const paused = e.state === "paused";
  if (!allowed(paused ? "POST /endpoints/{id}/resume" : "POST /endpoints/{id}/pause")) return null;
  const button = el("button", { type: "button" }, paused ? "Resume" : "Pause…");
  button.addEventListener("click", async () => {
    const path = `/endpoints/${encodeURIComponent(e.id)}/${paused ? "resume" : "pause"}`;
    const question = `Pause ${e.url}? Its notifications are held, not attempted, until it is resumed.`;
    if (!paused && !(await confirmAction(question, "Pause it"))) return;
    await post(path, status);
  });
  return button;
}

// POSTs an action without a body, then shows the page again (or `then`), or the failure
// in `status`.
async function post(path, status, then = route) {
  try {
    await api(path, { method: "POST" });
    then();
  } catch (e) {
    status.replaceChildren(failure(e));
  }
}

// Goes to the view of `hash`, or draws it again when it is the current one.
function show(hash) {
  if (location.hash === hash) route();
  else location.hash = hash;
}

// Whether the caller may take `action` on notification `n` now (`actions` of its view:
// what the lifecycle takes in its state and the caller's roles let it ask).
const offers = (n, action) => n.actions.includes(action);

// What the caller may do with a notification now, as its `actions` say: cancel, attempt
// now, resend.
function notificationActions(n, status) {
  return [
    offers(n, "cancel") ? cancelButton(n, status) : null,
    offers(n, "attempt_now") ? attemptNowButton(n, status) : null,
    offers(n, "resend") ? resendButton(n, status) : null,
  ];
}

// The request each attempt of its current cycle sends: method, URL, headers (credentials
// withheld), body; earlier attempts that went elsewhere say so in the history.
function requestSent(n) {
  const r = n.request;
  const contentType = r.headers.find((h) => h.name === "content-type")?.value || "";
  const elsewhere = n.history.some((a) => a.url && a.url !== r.url);
  return [
    el("h2", {}, "Request"),
    el("p", { class: "muted" }, `${n.cycle ? "Each attempt of its current cycle sends" : "Each attempt sends"} this, with its own webhook-timestamp and webhook-signature `,
      el("a", { href: "#/keys" }, "(how to verify)"), ".",
      elsewhere ? " Earlier attempts went to the URL their history names." : null),
    el("pre", { id: "request-head" }, [`${r.method} ${r.url}`, ...r.headers.map((h) => `${h.name}: ${h.value}`)].join("\n")),
    bodyView(r.body, isJson(contentType), "request-body"),
  ];
}

async function lookup(id) {
  const input = el("input", { id: "lookup-id", name: "id", value: id || "", placeholder: "ntf_0_…", required: true });
  const form = el("form", { class: "actions", role: "search" },
    el("div", { class: "grow" }, el("label", { for: "lookup-id" }, "Notification id"), input),
    el("button", { type: "submit" }, "Look up"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    location.hash = `#/lookup/${input.value.trim()}`;
  });
  const parts = [el("h1", {}, "Look up a notification"), form];
  if (!id) return parts;
  const status = el("p", { role: "status" });
  try {
    const n = await api(`/notifications/${encodeURIComponent(id)}`);
    parts.push(
      el("div", { class: "card" }, el("dl", {},
        el("dt", {}, "State"), el("dd", { id: "lookup-state" }, stateBadge(n.list || n.state)),
        el("dt", {}, "Tenant"), el("dd", {}, n.tenant),
        el("dt", {}, "Callback"), el("dd", {}, n.url),
        ...deliveryRules(n),
        el("dt", {}, "Attempts"), el("dd", { id: "attempts" }, attemptCount(n)),
        el("dt", {}, "Next attempt"), el("dd", {}, n.waiting ? "after the one before it" : when(n.next_attempt_at)),
        ...heldForPause(n),
        ...heldBack(n),
        el("dt", {}, "Created"), el("dd", {}, when(n.created_at)),
        el("dt", {}, "Finished"), el("dd", {}, when(n.finished_at)),
        ...sentAgain(n))),
      el("div", { class: "actions" },
        el("button", { type: "button", class: "secondary", onclick: () => route() }, "Refresh"),
        ...notificationActions(n, status),
        n.state === "dead" ? el("a", { href: `#/dead/${n.id}` }, "Open as dead letter") : null),
      status,
      ...requestSent(n),
      el("h2", {}, "Attempts"), timeline(n));
  } catch (e) {
    parts.push(e.status === 404 ? el("p", { class: "error", role: "alert" }, "No notification has this id.") : failure(e));
  }
  return parts;
}

const ENDPOINT_FILTERS = ["state", "tenant"];

// Attempts over a span: "38 of 41 (93%)", or "none".
function span(s) {
  return s.attempts ? `${s.successes} of ${s.attempts} (${Math.round(s.success_rate * 100)}%)` : "none";
}

// An endpoint's notifications in the queue: its held ones when it is paused, else those
// an open circuit holds back if one is open, else those retrying.
function endpointQueue(e) {
  const state = e.state === "paused" ? "held" : e.circuits.some((c) => c.state === "open") ? "held_back" : "retrying";
  return `#/queue?${new URLSearchParams({ state, endpoint: e.id })}`;
}

// An endpoint's circuits, one per path that had one open: an open one with since when,
// its next probe and what it holds back (`held_back`, counted in the view of one
// endpoint), a closed one with when it closed.
function circuits(e) {
  if (!e.circuits.length) return "—";
  const heldBack = (c) => c.held_back === undefined ? null
    : el("a", { href: `#/queue?${new URLSearchParams({ state: "held_back", endpoint: e.id })}` }, `${c.held_back} held back`);
  return el("ul", { class: "circuits" }, e.circuits.map((c) => el("li", { class: `circuit-${c.state}` },
    el("span", { class: "path" }, c.path), " ",
    c.state === "open"
      ? [`open since ${when(c.open_since)} · next probe ${when(c.next_probe_at)}`, c.held_back === undefined ? null : " · ", heldBack(c)]
      : `closed ${when(c.closed_at)}`)));
}

// An endpoint's dead letters, which the view replays all at once after an outage.
function endpointDead(e) {
  return el("a", { href: `#/dead?${new URLSearchParams({ endpoint: e.id })}` }, "Dead letters");
}

// Each tenant's callback origins with their health, failing ones marked.
async function endpoints(params) {
  const q = new URLSearchParams();
  for (const f of ENDPOINT_FILTERS) if (params.get(f)) q.set(f, params.get(f));
  const shown = new URLSearchParams(q);
  q.set("limit", "50");
  if (params.get("cursor")) q.set("cursor", params.get("cursor"));
  const page = await api(`/endpoints?${q}`);
  // What each open circuit holds back is counted in the view of its endpoint alone: asked
  // one endpoint at a time, and an endpoint whose view does not come is shown without it.
  for (const [i, e] of page.items.entries()) {
    if (!e.circuits.some((c) => c.state === "open")) continue;
    page.items[i] = await api(`/endpoints/${encodeURIComponent(e.id)}`).catch(() => e);
  }
  const states = (f) => f === "state" &&
    el("select", { id: "e-state", name: "state" }, el("option", { value: "" }, "any"),
      ["healthy", "failing", "paused"].map((s) => el("option", { value: s, selected: params.get("state") === s }, s)));
  const form = filterForm(ownFilters(ENDPOINT_FILTERS), params, "e", "endpoints", states);
  if (page.next_cursor) shown.set("cursor", page.next_cursor);
  const lastFailure = (f) => f
    ? `${lastAttempt({ last_status: f.status, last_error: f.error })} · ${when(f.at)}` : "—";
  const status = el("div", { role: "status" });
  return [
    el("h1", {}, "Endpoints"),
    form,
    status,
    page.items.length === 0
      ? el("p", { class: "muted" }, shown.toString() ? "No endpoints match."
        : "No endpoints yet: an endpoint (a callback's scheme, host and port) is listed once a notification to it is registered.")
      : el("div", { class: "table-wrap" }, el("table", { "aria-label": "Endpoints" },
        el("thead", {}, el("tr", {}, el("th", {}, "Endpoint"), el("th", {}, "State"),
          tenantHead(), el("th", {}, "Circuits"), el("th", {}, "Failures in a row"),
          el("th", {}, "Last hour ok"), el("th", { class: "wide" }, "Last day ok"),
          el("th", { class: "wide" }, "Last failure"), el("th", {}, "Last success"),
          el("th", {}, el("span", { class: "visually-hidden" }, "Actions")))),
        el("tbody", {}, page.items.map((e) => el("tr", {},
          el("td", { class: "url" }, clip(e.url, { href: endpointQueue(e) }), clip(e.id, { class: "muted id" })),
          el("td", { class: `state-${e.state}` }, e.state,
            e.paused ? el("div", { class: "muted" }, `by ${e.paused.by} ${when(e.paused.since)}`)
              : e.failing_since ? el("div", { class: "muted" }, `since ${when(e.failing_since)}`) : null),
          tenantCell(e.tenant),
          el("td", {}, circuits(e)),
          el("td", {}, e.consecutive_failures),
          el("td", {}, span(e.last_hour)),
          el("td", { class: "wide" }, span(e.last_day)),
          el("td", { class: "wide" }, lastFailure(e.last_failure)),
          el("td", {}, when(e.last_success_at)),
          el("td", {}, el("div", { class: "row-actions" },
            endpointDead(e), pauseButton(e, status)))))))),
    page.next_cursor ? el("p", {}, el("a", { href: `#/endpoints?${shown}` }, "Next page →")) : null,
  ];
}

// A tenant's standing subscriptions: URL, topics, whether it takes events; if it `can`
// (`subscriptions`), subscribe a URL, disable or enable one, delete one.
async function subscriptions(params) {
  const q = new URLSearchParams({ limit: "50" });
  if (params.get("tenant")) q.set("tenant", params.get("tenant"));
  if (params.get("cursor")) q.set("cursor", params.get("cursor"));
  const page = await api(`/subscriptions?${q}`);
  const status = el("div", { role: "status" });
  const change = async (path, method, body) => {
    try {
      await api(path, { method, body });
      route();
    } catch (e) {
      status.replaceChildren(failure(e));
    }
  };
  const [edits, deletes] = [allowed("PATCH /subscriptions/{id}"), allowed("DELETE /subscriptions/{id}")];
  const actions = (s) => el("div", { class: "row-actions" },
    edits && el("button", { type: "button", onclick: () => change(`/subscriptions/${s.id}`, "PATCH", { enabled: !s.enabled }) },
      s.enabled ? "Disable" : "Enable"),
    deletes && el("button", { type: "button", class: "danger", onclick: async () => {
      if (await confirmAction(`Delete the subscription of ${s.url}? Later events do not reach it.`, "Delete it")) {
        change(`/subscriptions/${s.id}`, "DELETE");
      }
    } }, "Delete…"));
  const form = allowed("POST /subscriptions") && el("form", { class: "filters", "aria-label": "Subscribe" },
    el("div", {}, el("label", { for: "s-url" }, "url"), el("input", { id: "s-url", name: "url", required: true })),
    el("div", {}, el("label", { for: "s-topics" }, "topics"),
      el("input", { id: "s-topics", name: "topics", placeholder: "payment.*, refund.created", required: true })),
    el("div", {}, el("button", { type: "submit" }, "Subscribe")));
  if (form) {
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const topics = form.elements.topics.value.split(",").map((t) => t.trim()).filter(Boolean);
      change("/subscriptions", "POST", { url: form.elements.url.value.trim(), topics });
    });
  }
  const next = new URLSearchParams(params);
  if (page.next_cursor) next.set("cursor", page.next_cursor);
  return [
    el("h1", {}, "Subscriptions"),
    form,
    status,
    page.items.length === 0
      ? el("p", { class: "muted" }, form
        ? "No subscriptions yet: subscribe a URL to topics above, and each event published on them is sent there."
        : "No subscriptions yet: a URL subscribed to topics gets each event published on them.")
      : el("div", { class: "table-wrap" }, el("table", { "aria-label": "Subscriptions" },
        el("thead", {}, el("tr", {}, el("th", {}, "URL"), el("th", {}, "Topics"), tenantHead(),
          el("th", {}, "Takes events"), el("th", { class: "wide" }, "Settings"),
          edits || deletes ? el("th", {}, el("span", { class: "visually-hidden" }, "Actions")) : null)),
        el("tbody", {}, page.items.map((s) => el("tr", {},
          el("td", { class: "url" }, clip(s.url), clip(s.id, { class: "muted id" }),
            s.description ? el("div", { class: "muted" }, s.description) : null),
          el("td", {}, s.topics.join(", ")),
          tenantCell(s.tenant),
          el("td", {}, s.enabled ? "yes" : "no"),
          el("td", { class: "wide id" }, Object.keys(s.settings).length ? JSON.stringify(s.settings) : "—"),
          edits || deletes ? el("td", {}, actions(s)) : null))))),
    page.next_cursor ? el("p", {}, el("a", { href: `#/subscriptions?${next}` }, "Next page →")) : null,
  ];
}

const EVENT_FILTERS = ["topic", "tenant", "since"];

// The topics catalog (each with its latest example) and the events, newest first.
async function events(params) {
  const q = new URLSearchParams();
  for (const f of EVENT_FILTERS) if (params.get(f)) q.set(f, params.get(f));
  const shown = new URLSearchParams(q);
  q.set("limit", "50");
  if (params.get("cursor")) q.set("cursor", params.get("cursor"));
  const topicQuery = params.get("tenant") ? `?tenant=${encodeURIComponent(params.get("tenant"))}` : "";
  const [page, catalog] = await Promise.all([api(`/events?${q}`), answer(`/topics${topicQuery}`)]);
  const [topics, example] = [catalog.value, source(catalog.text)];
  const form = filterForm(ownFilters(EVENT_FILTERS), params, "v", "events");
  if (page.next_cursor) shown.set("cursor", page.next_cursor);
  return [
    el("h1", {}, "Events"),
    topics.items.length === 0 ? null : el("div", { class: "table-wrap" }, el("table", { "aria-label": "Topics" },
      el("thead", {}, el("tr", {}, el("th", {}, "Topic"), el("th", {}, "Last published"), el("th", { class: "wide" }, "Example"))),
      el("tbody", {}, topics.items.map((t, i) => el("tr", {},
        el("td", {}, el("a", { href: `#/events?${new URLSearchParams({ ...Object.fromEntries(params), topic: t.topic })}` }, t.topic)),
        el("td", {}, when(t.last_published_at)),
        el("td", { class: "wide" }, el("code", {}, clip(example(["items", i, "example"]))))))))),
    form,
    page.items.length === 0
      ? el("p", { class: "muted" }, shown.toString() ? "No events match."
        : "No events yet: a producer publishes one with POST /events, and each subscription that takes its topic gets a notification.")
      : el("div", { class: "table-wrap" }, el("table", { "aria-label": "Events list" },
        el("thead", {}, el("tr", {}, el("th", {}, "Event"), el("th", {}, "Topic"), tenantHead(),
          el("th", {}, "Published"), el("th", {}, "Subscriptions reached"))),
        el("tbody", {}, page.items.map((e) => el("tr", {},
          el("td", { class: "id" }, clip(e.id, { href: `#/events/${e.id}` })),
          el("td", {}, e.topic),
          tenantCell(e.tenant),
          el("td", {}, when(e.created_at)),
          el("td", {}, e.deliveries)))))),
    page.next_cursor ? el("p", {}, el("a", { href: `#/events?${shown}` }, "Next page →")) : null,
  ];
}

// One event: its body, and each subscription's notification with its state (linked);
// if it `can`, resend its finished ones.
async function event(id) {
  const { value: e, text } = await answer(`/events/${encodeURIComponent(id)}`);
  const status = el("div", { role: "status" });
  const resend = allowed("POST /events/{id}/resend") && el("button", { type: "button", onclick: async () => {
    try {
      const done = await api(`/events/${encodeURIComponent(id)}/resend`, { method: "POST" });
      status.replaceChildren(el("p", {}, `${done.count} resent.`));
    } catch (err) {
      status.replaceChildren(failure(err));
    }
  } }, "Resend finished ones");
  return [
    el("h1", {}, "Event"),
    el("div", { class: "card" }, el("dl", {},
      el("dt", {}, "Id"), el("dd", {}, e.id),
      el("dt", {}, "Topic"), el("dd", {}, e.topic),
      oneTenant() ? null : [el("dt", {}, "Tenant"), el("dd", {}, e.tenant)],
      el("dt", {}, "Published"), el("dd", {}, when(e.created_at)),
      e.idempotency_key ? [el("dt", {}, "Idempotency key"), el("dd", {}, e.idempotency_key)] : null)),
    el("h2", {}, "Deliveries"),
    resend ? el("div", { class: "actions" }, resend) : null,
    status,
    e.deliveries.length === 0
      ? el("p", { class: "muted" }, "No subscription took it.")
      : el("div", { class: "table-wrap" }, el("table", { "aria-label": "Deliveries" },
        el("thead", {}, el("tr", {}, el("th", {}, "Subscription"), el("th", {}, "Notification"),
          el("th", {}, "State"), el("th", {}, "Attempts"), el("th", {}, "Next attempt"))),
        el("tbody", {}, e.deliveries.map((d) => el("tr", {},
          el("td", { class: "id" }, clip(d.subscription)),
          el("td", { class: "id" }, d.notification ? clip(d.notification, { href: `#/lookup/${d.notification}` }) : "—"),
          el("td", { class: d.state ? `state-${d.state}` : "" }, d.error ? `refused: ${d.error.message}` : d.state || "deleted"),
          el("td", {}, d.attempts ?? "—"),
          el("td", {}, when(d.next_attempt_at))))))),
    el("h2", {}, "Body"),
    bodyView(source(text)(["body"]), true, "event-body"),
  ];
}

const AUDIT_FILTERS = ["actor", "action", "tenant", "since", "until"];
const ACTIONS = ["cancel", "replay", "replay_matching", "discard", "purge", "resend", "resend_matching", "attempt_now", "pause_endpoint", "resume_endpoint", "create_subscription", "update_subscription", "delete_subscription", "resend_event", "issue_portal_link"];

// What an entry acted on: one notification (linked), or a bulk action's filter.
function auditTarget(e) {
  if (e.target) return clip(e.target, { href: `#/lookup/${e.target}` });
  const f = Object.entries(e.filter || {});
  return f.length ? f.map(([k, v]) => `${k}=${v}`).join(" ") : "every dead letter";
}

async function audit(params) {
  const q = new URLSearchParams();
  for (const f of AUDIT_FILTERS) if (params.get(f)) q.set(f, params.get(f));
  const shown = new URLSearchParams(q);
  q.set("limit", "50");
  if (params.get("cursor")) q.set("cursor", params.get("cursor"));
  const page = await api(`/audit?${q}`);
  const actions = (f) => f === "action" &&
    el("select", { id: "a-action", name: "action" }, el("option", { value: "" }, "any"),
      ACTIONS.map((a) => el("option", { value: a, selected: params.get("action") === a }, a.replaceAll("_", " "))));
  const form = filterForm(ownFilters(AUDIT_FILTERS), params, "a", "audit", actions);
  if (page.next_cursor) shown.set("cursor", page.next_cursor);
  return [
    el("h1", {}, "Audit log"),
    form,
    page.items.length === 0
      ? el("p", { class: "muted" }, shown.toString() ? "No entries match."
        : "Nothing recorded yet: each cancel, replay, resend, discard, purge, pause, resume and change of a subscription is, with who did it.")
      : el("div", { class: "table-wrap" }, el("table", { "aria-label": "Audit log" },
        el("thead", {}, el("tr", {}, el("th", {}, "At"), el("th", {}, "Actor"), el("th", {}, "Action"),
          tenantHead(), el("th", {}, "On"), el("th", {}, "Count"))),
        el("tbody", {}, page.items.map((e) => el("tr", {},
          el("td", {}, when(e.at)),
          el("td", {}, e.actor),
          el("td", {}, e.action.replaceAll("_", " ")),
          oneTenant() ? null : el("td", { class: "wide" }, e.tenant || "every tenant"),
          el("td", { class: "id" }, auditTarget(e)),
          el("td", {}, e.count)))))),
    page.next_cursor ? el("p", {}, el("a", { href: `#/audit?${shown}` }, "Next page →")) : null,
  ];
}

// The code a receiver verifies a delivery with, in Node.js and in Python, with `keys`
// (`whpk_…`) filled in. The browser test runs both against real deliveries.
function nodeVerifier(keys) {
  return `// Node.js 18 or later.
const crypto = require("node:crypto");
const PUBLIC_KEYS = ${JSON.stringify(keys)}.map((k) => crypto.createPublicKey({
  key: { kty: "OKP", crv: "Ed25519", x: Buffer.from(k.slice(5), "base64").toString("base64url") },
  format: "jwk",
}));

// headers: the request's headers (names in lower case); body: its raw bytes (a Buffer).
function verify(headers, body) {
  const id = headers["webhook-id"];
  const timestamp = headers["webhook-timestamp"];
  if (!id || !timestamp || Math.abs(Date.now() / 1000 - Number(timestamp)) > 300) return false;
  const signed = Buffer.concat([Buffer.from(\`\${id}.\${timestamp}.\`), body]);
  return (headers["webhook-signature"] || "").split(" ").some((entry) => {
    const [version, signature] = entry.split(",");
    return version === "v1a" && PUBLIC_KEYS.some((key) =>
      crypto.verify(null, signed, key, Buffer.from(signature, "base64")));
  });
}`;
}

function pythonVerifier(keys) {
  return `# Python 3 with the cryptography package.
import base64
import time

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

PUBLIC_KEYS = [
    Ed25519PublicKey.from_public_bytes(base64.b64decode(k[5:]))
    for k in ${JSON.stringify(keys)}
]


def verify(headers, body):
    """headers: the request's headers (names in lower case); body: its raw bytes."""
    msg_id, timestamp = headers.get("webhook-id"), headers.get("webhook-timestamp")
    if not msg_id or not timestamp or abs(time.time() - int(timestamp)) > 300:
        return False
    signed = f"{msg_id}.{timestamp}.".encode() + body
    for entry in headers.get("webhook-signature", "").split():
        version, _, signature = entry.partition(",")
        for key in PUBLIC_KEYS if version == "v1a" else []:
            try:
                key.verify(base64.b64decode(signature), signed)
                return True
            except InvalidSignature:
                pass
    return False`;
}

// A tenant's public signing keys and how a receiver verifies a delivery with them.
async function keys(params) {
  const tenant = oneTenant() || params.get("tenant") || "default";
  const k = await api(`/signing-keys?${new URLSearchParams({ tenant })}`);
  const published = k.keys.map((key) => key.public_key);
  const heading = [el("h1", {}, "Signing keys"), oneTenant() ? null : filterForm(["tenant"], params, "k", "keys")];
  if (published.length === 0) return [...heading, ...noSigningKeys(k.tenant)];
  return [
    ...heading,
    el("p", {}, `Every delivery of ${k.tenant} is signed with each key below (ed25519, `,
      el("code", {}, "v1a"), " in Standard Webhooks' terms). During a rotation there are two: a signature that verifies with either is good."),
    el("div", { class: "table-wrap" }, el("table", { class: "keys", "aria-label": "Public keys" },
      el("thead", {}, el("tr", {}, el("th", {}, "Public key"), el("th", {}, "Algorithm"))),
      el("tbody", {}, k.keys.map((key) => el("tr", {}, el("td", {}, key.public_key), el("td", {}, key.algorithm)))))),
    el("p", { class: "muted" }, "They are public: ", el("code", {}, `GET /signing-keys?tenant=${k.tenant}`),
      " answers them without a token, so a receiver can fetch them when it starts."),
    el("h2", {}, "How to verify a delivery"),
    el("ol", { class: "steps" },
      el("li", {}, "Read the headers ", el("code", {}, "webhook-id"), ", ", el("code", {}, "webhook-timestamp"),
        " and ", el("code", {}, "webhook-signature"), ", and the body exactly as it arrived (before any JSON parsing)."),
      el("li", {}, "Refuse a timestamp more than five minutes from your clock: it may be a replayed request."),
      el("li", {}, "The signed content is ", el("code", {}, "{webhook-id}.{webhook-timestamp}.{body}"), "."),
      el("li", {}, el("code", {}, "webhook-signature"), " holds space-separated ", el("code", {}, "version,signature"),
        " entries. Accept the delivery if one ", el("code", {}, "v1a"), " signature (base64) verifies with one of the keys above. (",
        el("code", {}, "v1"), " entries are HMAC-SHA256 with a shared ", el("code", {}, "whsec_"), " secret, if you were given one.)"),
      el("li", {}, "Answer 2xx quickly. A retry and a resend carry the same ", el("code", {}, "webhook-id"),
        ": keep the ids you processed and skip a repeat.")),
    el("h2", {}, "Node.js"),
    el("pre", { id: "verify-node" }, nodeVerifier(published)),
    el("h2", {}, "Python"),
    el("pre", { id: "verify-python" }, pythonVerifier(published)),
  ];
}

// What the Signing keys view says when a tenant has no public key: what that means for its
// deliveries, and who does what to sign them.
function noSigningKeys(tenant) {
  return [
    el("p", { class: "notice", role: "status" }, `No signing key is configured for ${tenant}: its deliveries carry no `,
      el("code", {}, "v1a"), " signature, so a receiver cannot verify them with a public key. (They carry a ",
      el("code", {}, "v1"), " signature if the tenant has a shared ", el("code", {}, "whsec_"), " secret.)"),
    isLink()
      ? el("p", {}, "Ask postback's operator for a signing key; once it is configured, its public key and code that verifies a delivery with it appear here.")
      : el("ol", { class: "steps" },
        el("li", {}, el("code", {}, "postback signing-key new"), " prints a fresh key (", el("code", {}, "whsk_…"), ")."),
        el("li", {}, "Add it to ", el("code", {}, "signing.keys"), " (every tenant's, each signing with one derived from it) or to ",
          el("code", {}, `[tenants.${tenant}] keys`), ", and restart postback."),
        el("li", {}, "Its public key then shows here, with code that verifies a delivery in Node.js and Python.")),
  ];
}

// ---- routing -------------------------------------------------------------

// The header for the caller: its name, tenant, roles and expiry, and only the views
// its roles open.
function showCaller() {
  for (const a of document.querySelectorAll("header nav a[data-view]")) a.hidden = !opens(VIEWS[a.dataset.view]);
  const expires = caller.expires_at ? ` · until ${new Date(caller.expires_at).toLocaleTimeString()}` : "";
  const who = document.getElementById("who");
  who.textContent = `${caller.tenant || "every tenant"} · ${caller.roles.map(role).join(", ")}${expires}`;
  who.title = caller.roles.map((r) => `${r}: ${grantsOf(r).join(", ")}`).join("\n");
}

// What a role grants (`grants` of `GET /me`; the role's own action where an instance
// does not say, as one of an earlier build behind the same address does not).
const grantsOf = (r) => (caller.grants || {})[r] || [r];

// A role as the header names it: a portal link's with what it grants where that is not
// the action of its name (a link's `operate` resends and pauses, a token's does every
// operator action; `grants` of `GET /me`).
function role(r) {
  const grants = grantsOf(r);
  return isLink() && !grants.includes(r) ? `${r} (${grants.join(", ")})` : r;
}

// Every view: its title, the route it reads (the caller must be allowed it to open the
// view; none for a view without a token), and how it is drawn, with the id after its
// name if one is given.
const VIEWS = {
  overview: { title: "Overview", reads: "GET /overview", show: (id, q) => overview(q) },
  dead: { title: "Dead letters", reads: "GET /dead-letters", show: (id, q) => (id ? deadLetter(id) : deadLetters(q)) },
  queue: { title: "Queue", reads: "GET /notifications", show: (id, q) => queue(q) },
  lookup: { title: "Look up a notification", reads: "GET /notifications/{id}", show: (id) => lookup(id) },
  endpoints: { title: "Endpoints", reads: "GET /endpoints", show: (id, q) => endpoints(q) },
  subscriptions: { title: "Subscriptions", reads: "GET /subscriptions", show: (id, q) => subscriptions(q) },
  events: { title: "Events", reads: "GET /events", show: (id, q) => (id ? event(id) : events(q)) },
  audit: { title: "Audit log", reads: "GET /audit", show: (id, q) => audit(q) },
  keys: { title: "Signing keys", reads: null, show: (id, q) => keys(q) },
};

// Whether the caller may open view `v`.
const opens = (v) => !v.reads || allowed(v.reads);

// A view the caller may not open, and why.
function notAllowed(v) {
  const why = isLink()
    ? `A portal link does not open the ${v.title.toLowerCase()}: it is for postback's operators.`
    : `The token ${caller.actor} may not open the ${v.title.toLowerCase()}: its roles (${caller.roles.join(", ")}) do not grant ${v.reads}.`;
  return [el("h1", {}, v.title), el("p", { class: "notice", role: "status" }, why), home()];
}

// A link to a view the caller may open, to go on from a page that shows nothing.
function home() {
  const first = Object.entries(VIEWS).find(([, v]) => opens(v));
  return el("p", {}, el("a", { href: `#/${first[0]}` }, `Go to ${first[1].title.toLowerCase()}`));
}

// What went wrong, in words: a refusal says what the caller lacks, anything else what
// the API answered.
function failed(title, e) {
  if (e.status === 403) return [el("h1", {}, title), el("p", { class: "notice", role: "status" }, e.message), home()];
  if (e.status === 404) return [el("h1", {}, title), el("p", { class: "notice", role: "status" }, "Not found: it does not exist, or is not one this sign-in may see."), home()];
  return [el("h1", {}, title), failure(e),
    el("p", { class: "muted" }, "Refresh to try again; if it persists, postback's log says more.")];
}

// Each navigation's number: a view still loading when the user (or the page) moved on is
// dropped, not shown over the later one.
let navigations = 0;

async function route() {
  const navigation = ++navigations;
  if (!sessionStorage.getItem(TOKEN_KEY)) return showTokenForm();
  document.getElementById("sign-out").hidden = false;
  const [path, query = ""] = location.hash.replace(/^#/, "").split("?");
  const [, named, id] = path.split("/");
  const name = named || "overview";
  for (const a of document.querySelectorAll("nav a")) {
    if (a.dataset.view === name) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  const v = Object.hasOwn(VIEWS, name) ? VIEWS[name] : null;
  try {
    caller = caller || (await api("/me"));
    showCaller();
    const parts = !v ? [el("h1", {}, "No such page"), el("p", { class: "notice", role: "status" }, `There is no page #/${name}.`), home()]
      : !opens(v) ? notAllowed(v)
      : await v.show(id && decodeURIComponent(id), new URLSearchParams(query));
    if (navigation !== navigations) return;
    view.replaceChildren(...parts.filter(Boolean));
    document.title = `postback — ${parts[0].textContent}`;
  } catch (e) {
    if (navigation === navigations && e.status !== 401) view.replaceChildren(...failed(v ? v.title : "postback", e));
  }
  document.getElementById("main").focus({ preventScroll: true });
}

// A portal link (`postback portal-link`) carries its credential in the fragment, which
// the browser never sends. The page takes it out of the address bar at once, so that it
// is neither bookmarked nor shown over a merchant's shoulder, and keeps it like a pasted
// token: at once in a tab that holds no other, else only if the user agrees, so that a
// link opened in an operator's tab (a new fragment, a hash change) never signs it in as
// someone else unasked.
const PORTAL_LINK = /^#token=(pt_[A-Za-z0-9_.-]+)$/;

async function portalLink(previousHash) {
  const credential = location.hash.match(PORTAL_LINK)?.[1];
  if (!credential) return;
  const held = sessionStorage.getItem(TOKEN_KEY);
  history.replaceState(null, "", `${location.pathname}${held ? previousHash : "#/endpoints"}`);
  if (held === credential || (held && !(await switchTo(credential)))) return;
  forgetToken();
  sessionStorage.setItem(TOKEN_KEY, credential);
  history.replaceState(null, "", `${location.pathname}#/endpoints`);
}

// Whether the user signs this tab in with a portal link instead of its current token.
function switchTo(credential) {
  const who = caller ? `${caller.actor} (${caller.tenant || "every tenant"})` : "another token";
  const tenant = linkTenant(credential);
  return confirmAction(`A portal link${tenant ? ` for ${tenant}` : ""} was opened in this tab, which is signed in as ${who}. ` +
    "Sign this tab in with the link instead? Keep the current sign-in unless you opened the link yourself.", "Switch to the link");
}

// The tenant a link names (as it says: the API checks its signature when it is used).
function linkTenant(credential) {
  try {
    const claims = credential.slice("pt_".length).split(".")[0].replace(/-/g, "+").replace(/_/g, "/");
    return JSON.parse(atob(claims)).t;
  } catch {
    return null;
  }
}

window.addEventListener("hashchange", async (event) => {
  await portalLink(new URL(event.oldURL).hash);
  route();
});
portalLink("").then(route);
