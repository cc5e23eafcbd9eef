// treadle's web page: the shell (token, tenant, tabs, header counts), the runs tree with one run's
// events live (SSE over fetch, so the bearer token travels in a header; resumes with from_seq when a
// stream ends), pending questions (the run's own and its sub-agents'), the inbox, steering, start and
// cancel. panels.js adds the library, schedules, webhooks and channels tabs.
// Everything the model, a tool or a user wrote is shown as text (textContent), never as HTML.
"use strict";

// the run events' types, from the catalogue (events.js, generated from domain/events.py)
const EVENTS = typeof module !== "undefined" ? require("./events.js").EVENTS : EVENT_TYPES;
const TERMINAL = new Set(["completed", "failed", "cancelled"]);
// the events after which the run's row reads differently
const STATE_EVENTS = new Set([EVENTS.DONE, EVENTS.ERROR, EVENTS.TOOL_PARKED, EVENTS.AWAITING_INPUT,
  EVENTS.INTERRUPTION_PENDING, EVENTS.SPAWN_CHILD_RESULT]);
const SHORT = 400; // characters of a tool's input or output shown before "show all"

// -- pure helpers (exported for tests/unit/test_watch_page.py and tests/browser, run under node) --

/** Split an SSE byte stream's text into complete events; returns {events, rest}. */
function parseSse(buffer) {
  const events = [];
  const blocks = buffer.replace(/\r\n/g, "\n").split("\n\n");
  const rest = blocks.pop();
  for (const block of blocks) {
    const ev = { id: null, event: "message", data: "" };
    const data = [];
    for (const line of block.split("\n")) {
      if (!line || line.startsWith(":")) continue;
      const i = line.indexOf(":");
      const field = i < 0 ? line : line.slice(0, i);
      const value = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
      if (field === "data") data.push(value);
      else if (field === "event") ev.event = value;
      else if (field === "id") ev.id = value;
    }
    if (data.length || ev.id !== null) {
      ev.data = data.join("\n");
      events.push(ev);
    }
  }
  return { events, rest };
}

/** The text of content segments [{role, content: [{type, text}]}] (other blocks by their type). */
function segmentText(segments) {
  if (!Array.isArray(segments)) return short(segments ?? "");
  return segments.flatMap((s) => (s.content || []).map((b) => (typeof b.text === "string" ? b.text : `[${b.type}]`))).join(" ");
}

function asText(value) {
  return typeof value === "string" ? value : JSON.stringify(value);
}

function short(value, max = SHORT) {
  const text = asText(value);
  return text.length > max ? text.slice(0, max) + "…" : text;
}

/** How one transcript event is shown: {cls, text}. */
function describe(type, d) {
  const tu = d.tool_use || {};
  const u = d.usage || {};
  switch (type) {
    case EVENTS.STARTED: return { cls: "other", text: `▶ run ${d.run_id} · agent ${d.agent}` };
    case EVENTS.USER_INPUT: return { cls: "user", text: `user: ${d.text ?? segmentText(d.segments)}` };
    case EVENTS.TEXT: return { cls: "text", text: String(d.text ?? "") };
    case EVENTS.THINKING: return { cls: "other", text: `(thinking) ${short(d.text ?? "")}` };
    case EVENTS.TOOL_CALL: return { cls: "tool_call", text: `→ ${tu.name} ${short(tu.input ?? {})}` };
    case EVENTS.TOOL_RESULT: {
      const mark = d.replayed ? `↺ (replayed from seq ${d.replayed.seq}) ` : "";
      return { cls: d.is_error ? "tool_result error" : "tool_result", text: `${d.is_error ? "✗" : "←"} ${mark}${tu.name} ${short(d.text ?? "")}` };
    }
    case EVENTS.REPLAY_DIVERGED: {
      const want = d.want ? `${d.want.name} ${short(d.want.input ?? {})}` : "nothing (past the record)";
      return { cls: "other", text: `⑂ diverged at call #${d.index} (${d.reason}): ${d.got?.name} ${short(d.got?.input ?? {})}, the original made ${want}; from here tools run` };
    }
    case EVENTS.TOOL_PARKED: return { cls: "other", text: `‖ ${tu.name} waits (${d.wait?.kind ?? "park"}), holding no worker` };
    case EVENTS.RETRY: {
      const r = d.retry || {};
      return { cls: "other", text: `↻ retry ${r.attempt} in ${r.wait_ms} ms (${r.reason})` };
    }
    case EVENTS.USAGE:
      return { cls: "usage", text: `· iteration ${d.iteration}: ${u.input_tokens} in / ${u.output_tokens} out (${u.provider}/${u.model})` };
    case EVENTS.INTERRUPTION_PENDING: return { cls: "other", text: `? ${d.question ?? ""}` };
    case EVENTS.AWAITING_INPUT: return { cls: "other", text: "… awaiting input" };
    case EVENTS.DONE:
      return { cls: "done", text: `■ done: ${d.stop_reason} · ${u.input_tokens ?? 0} in / ${u.output_tokens ?? 0} out tokens` };
    case EVENTS.ERROR: return { cls: "error", text: `■ error ${d.code}: ${d.error}` };
    default: return { cls: "other", text: `${type} ${short(d, 300)}` };
  }
}

/** The whole of what `describe` shortened (a tool's input or output, thinking), or null. */
function fullText(type, d) {
  let text = null;
  if (type === EVENTS.TOOL_CALL) text = asText(d.tool_use?.input ?? {});
  else if (type === EVENTS.TOOL_RESULT || type === EVENTS.THINKING) text = asText(d.text ?? "");
  return text !== null && text.length > SHORT ? text : null;
}

/** Whether a parked run waits on a question (a wait keyed `interrupt:<id>`). */
function asks(run) {
  return (run.waits || []).some((w) => String(w.key || "").startsWith("interrupt:"));
}

/** The runs (newest first) as a tree: [{run, depth, asking}] in display order — each run under
 *  its parent when the parent is in the list; `asking` counts the pending questions of the run's
 *  sub-agents (at any depth), so a parent shows that a child waits on someone. */
function buildTree(runs) {
  const byId = new Map(runs.map((r) => [r.run_id, r]));
  const kids = new Map();
  const roots = [];
  for (const r of runs) {
    if (r.parent_run_id && byId.has(r.parent_run_id) && r.parent_run_id !== r.run_id) {
      if (!kids.has(r.parent_run_id)) kids.set(r.parent_run_id, []);
      kids.get(r.parent_run_id).push(r);
    } else {
      roots.push(r);
    }
  }
  const out = [];
  const seen = new Set();
  function visit(r, depth) {
    if (seen.has(r.run_id)) return 0;
    seen.add(r.run_id);
    const row = { run: r, depth, asking: 0 };
    out.push(row);
    let below = 0;
    for (const c of (kids.get(r.run_id) || []).slice().reverse()) below += visit(c, depth + 1); // oldest child first
    row.asking = below;
    return below + (asks(r) ? 1 : 0);
  }
  for (const r of roots) visit(r, 0);
  return out;
}

/** JSON with sorted keys, two-space indented: two versions of a def compare line by line. */
function stableJson(value) {
  const sort = (v) => {
    if (Array.isArray(v)) return v.map(sort);
    if (v && typeof v === "object") return Object.fromEntries(Object.keys(v).sort().map((k) => [k, sort(v[k])]));
    return v;
  };
  return JSON.stringify(sort(value), null, 2);
}

/** A line diff (longest common subsequence): [{op: " " | "-" | "+", line}]. */
function lineDiff(a, b) {
  const x = a.split("\n");
  const y = b.split("\n");
  const n = x.length;
  const m = y.length;
  const lcs = Array.from({ length: n + 1 }, () => new Array(m + 1).fill(0));
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) lcs[i][j] = x[i] === y[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
  }
  const out = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (x[i] === y[j]) { out.push({ op: " ", line: x[i] }); i++; j++; }
    else if (lcs[i + 1][j] >= lcs[i][j + 1]) out.push({ op: "-", line: x[i++] });
    else out.push({ op: "+", line: y[j++] });
  }
  while (i < n) out.push({ op: "-", line: x[i++] });
  while (j < m) out.push({ op: "+", line: y[j++] });
  return out;
}

/** A timestamp as the page shows it: the time of day today, else the date and time. */
function clock(iso, now = new Date()) {
  if (!iso) return "";
  const t = new Date(iso);
  if (Number.isNaN(t.getTime())) return String(iso);
  const hms = t.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  return t.toDateString() === now.toDateString() ? hms : `${t.toLocaleDateString()} ${hms}`;
}

/** The run header's counts, live: the run row's counts lag while a step is in flight (it records
 *  them when the step ends), so the usage events seen so far are counted too. */
function liveCounts(run, usages) {
  const u = run.usage || {};
  let iterations = run.iterations || 0;
  let input = 0;
  let output = 0;
  for (const e of usages) {
    iterations = Math.max(iterations, e.iteration || 0);
    input += e.usage?.input_tokens || 0;
    output += e.usage?.output_tokens || 0;
  }
  return { iterations, input: Math.max(u.input_tokens || 0, input), output: Math.max(u.output_tokens || 0, output) };
}

if (typeof module !== "undefined") {
  module.exports = { parseSse, describe, segmentText, fullText, buildTree, asks, stableJson, lineDiff, clock, liveCounts };
}

// -- the page -------------------------------------------------------------------------------------

if (typeof document !== "undefined") document.addEventListener("DOMContentLoaded", () => {
  const $ = (id) => document.getElementById(id);
  let token = sessionStorage.getItem("treadle-token") || "";
  // the operator (an admin) may look at another tenant: X-Treadle-Tenant on every call
  let tenant = sessionStorage.getItem("treadle-tenant") || "";
  let selected = null;
  let stream = null; // AbortController of the open stream
  let lastSeq = 0;
  let live = null; // the <li> collecting text_delta frames of the current iteration
  let forkSeq = null; // the seq the fork form is set to ("fork from here" on an event)
  let usages = []; // the selected run's usage events (the header's live counts)
  let runsById = new Map();
  let residents = new Map(); // run id → its resident sub-agent row (GET /v1/_resident)
  const tabHooks = {}; // tab name → function that (re)loads it (panels.js adds its own)

  /** An element with text children only: strings become text nodes, never HTML. */
  function el(tag, props = {}, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(props)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else if (k in node && typeof v !== "string") node[k] = v;
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat()) if (c !== null && c !== undefined && c !== false) node.append(c instanceof Node ? c : String(c));
    return node;
  }

  class ApiError extends Error {
    constructor(status, code, message) {
      super(code ? `${message} (${code})` : message);
      this.status = status;
      this.code = code;
    }
  }

  function showAuth(message) {
    $("auth").hidden = false;
    $("auth-msg").textContent = message;
  }

  async function api(path, init = {}) {
    const used = token;
    const headers = {
      ...(init.headers || {}),
      ...(used ? { authorization: `Bearer ${used}` } : {}),
      ...(tenant ? { "x-treadle-tenant": tenant } : {}),
    };
    const resp = await fetch(path, { ...init, headers });
    if (resp.status === 401) {
      if (used === token) { // not a late answer to a call made with an earlier token
        showAuth(used
          ? "invalid token: the server does not accept this bearer token — paste a current one"
          : "this server needs a bearer token — paste one to continue");
      }
      throw new ApiError(401, used ? "invalid_token" : "missing_token", used ? "invalid token" : "a bearer token is needed");
    }
    return resp;
  }

  async function json(path, init) {
    const resp = await api(path, init);
    let body = {};
    try { body = await resp.json(); } catch { body = { error: `HTTP ${resp.status}` }; }
    if (!resp.ok) throw new ApiError(resp.status, body.code, body.error || body.detail || `HTTP ${resp.status}`);
    return body;
  }

  const post = (path, body) => json(path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body ?? {}) });

  /** Run `fn`; an error shows in `box` (the form's own error line) instead of far away. */
  async function guard(box, fn) {
    $(box).textContent = "";
    try {
      return await fn();
    } catch (err) {
      $(box).textContent = String(err.message || err);
      return undefined;
    }
  }

  function notice(text, id = "notice") { $(id).textContent = text; }

  // -- tabs ---------------------------------------------------------------------------------------

  let tab = "runs";
  function showTab(name) {
    if (!$(`tab-${name}`)) name = "runs";
    tab = name;
    for (const m of document.querySelectorAll("main.tab")) m.hidden = m.id !== `tab-${name}`;
    for (const a of document.querySelectorAll("#tabs a")) a.classList.toggle("active", a.dataset.tab === name);
    document.title = `treadle · ${name}`;
    if (tabHooks[name]) tabHooks[name]();
  }

  function route() {
    const hash = decodeURIComponent(location.hash.slice(1));
    if (hash.startsWith("r_") || hash.startsWith("runs/")) {
      showTab("runs");
      const id = hash.replace(/^runs\//, "");
      if (id && id !== selected) select(id);
    } else {
      showTab(hash || "runs");
    }
  }
  window.addEventListener("hashchange", route);

  // -- header: who, counts, agents ------------------------------------------------------------------

  let mayListResidents = Promise.resolve(false); // whether GET /v1/_resident answers this token (scope tenant)

  function whoami() {
    mayListResidents = (async () => {
      try {
        const who = await json("/v1/_whoami");
        $("who").textContent = `tenant ${who.tenant_id}`;
        const scopes = who.scopes || [];
        $("tenant-box").hidden = !(who.open_mode || scopes.includes("substrate:admin"));
        $("auth").hidden = true;
        return who.open_mode || scopes.includes("substrate:admin") || scopes.includes("substrate:tenant");
      } catch (err) {
        if (err.status !== 401) notice(err.message);
        return false;
      }
    })();
    return mayListResidents;
  }

  /** The names new runs can use: the defs' names (scope `tenant`), else the agents among the
   *  OpenAI-compatible models (any token that reads runs); else the picker becomes a text box. */
  async function agentNames() {
    try {
      return (await json("/v1/_agentdef/names")).names;
    } catch (err) {
      if (err.status !== 403) throw err;
    }
    const models = await json("/v1/models");
    return models.data.filter((m) => m.owned_by === "treadle:agent").map((m) => m.id);
  }

  async function loadAgents() {
    const select = $("agent");
    const chosen = select.value;
    let names;
    try {
      names = await agentNames();
    } catch (err) {
      if (err.status === 401) return;
      select.hidden = true;
      select.required = false;
      $("agent-text").hidden = false;
      $("agent-text").required = true;
      return;
    }
    select.replaceChildren(el("option", { value: "", text: "agent…" }), ...names.map((n) => el("option", { value: n, text: n })));
    if (names.includes(chosen)) select.value = chosen;
    else if (names.length === 1) select.value = names[0];
  }

  let pending = []; // [{q, run}] every pending question of the tenant
  async function loadCounts() {
    try {
      const c = await json("/v1/_concurrency");
      const asked = pending.length;
      $("counts").textContent = `${c.running} running · ${c.queued} queued · ${c.waiting} waiting · ${asked} question${asked === 1 ? "" : "s"}`;
    } catch (err) {
      $("counts").textContent = "";
    }
  }

  // -- the runs tree --------------------------------------------------------------------------------

  /** pages of 200 runs shown (the "older runs" button adds one; a refresh reloads as many) */
  let runPages = 1;

  async function loadRuns() {
    const query = new URLSearchParams({ limit: "200" });
    if ($("status").value) query.set("status", $("status").value);
    if ($("user").value.trim()) query.set("user_id", $("user").value.trim());
    try {
      const body = { runs: [], next_cursor: null };
      for (let page = 0; page < runPages; page++) {
        const got = await json(`/v1/runs?${query}`);
        body.runs.push(...got.runs);
        body.next_cursor = got.next_cursor || null;
        if (!body.next_cursor) break;
        query.set("cursor", body.next_cursor);
      }
      $("runs-more").hidden = !body.next_cursor;
      runsById = new Map(body.runs.map((r) => [r.run_id, r]));
      residents = await loadResidents();
      const rows = buildTree(body.runs).map(({ run: r, depth, asking }) => {
        const badges = [el("span", { class: `status ${r.status}`, text: r.status })];
        const resident = residents.get(r.run_id);
        if (resident) {
          badges.push(el("span", { class: "pill resident", text: `resident · ${resident.state.replace("_", " ")}`,
            title: `a resident sub-agent (Agent op=open): idle TTL ${resident.idle_ttl_seconds} s, last sent to ${resident.last_used_at}` }));
        }
        if (asks(r)) badges.push(el("span", { class: "pill ask", text: "? asks", title: "waits on a question" }));
        if (asking) badges.push(el("span", { class: "pill ask", text: `? ${asking} in sub-agent${asking === 1 ? "" : "s"}`, title: "a sub-agent waits on a question" }));
        const li = el("li", {
          class: `run depth-${Math.min(depth, 6)}${r.run_id === selected ? " selected" : ""}`,
          "data-run": r.run_id, tabindex: "0",
          onclick: () => { location.hash = r.run_id; },
          onkeydown: (e) => { if (e.key === "Enter") location.hash = r.run_id; },
        },
        el("span", { class: "agent", text: (depth ? "└ " : "") + r.agent }),
        ...badges,
        el("span", { class: "meta", text: `${r.run_id.slice(0, 12)} · iter ${r.iterations}` }),
        el("time", { class: "meta", datetime: r.created_at, title: r.created_at, text: clock(r.created_at) }));
        return li;
      });
      $("runs").replaceChildren(...rows);
      notice(body.runs.length ? "" : "no runs yet — start one above");
    } catch (err) {
      if (err.status !== 401) notice(String(err.message || err));
    }
  }

  /** "fork from here" (POST /v1/runs/{id}/fork, docs/conversations.md): the form under the events,
   *  set to this event's seq. A sub-agent run has no session to fork: no button. */
  function forkButton(seq) {
    const run = runsById.get(selected);
    if (seq === null || seq === undefined || !run || run.parent_run_id) return null;
    return el("button", {
      type: "button", class: "fork-here", title: `fork from here (seq ${seq})`, text: "⑂", "data-seq": seq,
      onclick: () => {
        forkSeq = Number(seq);
        $("fork-at").textContent = `fork at seq ${seq}`;
        $("fork").hidden = false;
        $("fork-error").textContent = "";
        $("fork-prompt").focus();
      },
    });
  }

  async function residentAction(runId, op) {
    try {
      const id = encodeURIComponent(runId);
      await json(op === "close" ? `/v1/_resident/${id}/close` : `/v1/_resident/${id}/cancel`, { method: "POST" });
      await loadRuns();
      if (selected === runId) await showRun(runId);
    } catch (err) {
      notice(String(err.message || err));
    }
  }

  /** The open resident sub-agents (GET /v1/_resident) by run id; none when the token may not list them. */
  async function loadResidents() {
    if (!(await mayListResidents)) return new Map();
    try {
      const body = await json("/v1/_resident");
      return new Map(body.resident.map((r) => [r.child_run_id, r]));
    } catch (err) {
      return new Map();
    }
  }

  function eventItem(type, data, seq = null) {
    const { cls, text } = describe(type, data);
    const li = el("li", { class: cls });
    const fork = forkButton(seq);
    if (fork) li.append(fork);
    if (data.ts) li.append(el("time", { datetime: data.ts, title: data.ts, text: clock(data.ts) }));
    const full = fullText(type, data);
    if (full === null) {
      li.append(el("span", { text }));
    } else {
      const pre = el("pre", { text: full });
      const details = el("details", {}, el("summary", { text }), pre);
      li.append(details);
    }
    return li;
  }

  function append(type, data, seq = null) {
    if (type === EVENTS.TEXT_DELTA) {
      if (!live) {
        live = el("li", { class: "text live" });
        $("events").append(live);
      }
      live.textContent += data.text || "";
      return;
    }
    if (type === EVENTS.TEXT && live) { live.remove(); live = null; }
    if (type === EVENTS.USAGE) {
      usages.push(data);
      const run = runsById.get(selected);
      if (run) showCounts(run);
    }
    const li = eventItem(type, data, seq);
    $("events").append(li);
    li.scrollIntoView({ block: "nearest" });
  }

  function showCounts(run) {
    const c = liveCounts(run, usages);
    $("run-meta").textContent = `iterations ${c.iterations} · ${c.input} in / ${c.output} out tokens · started ${clock(run.created_at)}`
      + (run.completed_at ? ` · ended ${clock(run.completed_at)}` : "") + (run.user_id ? ` · user ${run.user_id}` : "");
  }

  function runLink(runId, label) {
    return el("a", { href: `#${runId}`, text: label || runId });
  }

  async function showRun(runId) {
    const run = await json(`/v1/runs/${runId}`);
    if (runId !== selected) return run;
    runsById.set(run.run_id, { ...(runsById.get(run.run_id) || {}), ...run });
    $("run-title").textContent = `${run.agent} · ${run.run_id}`;
    const badge = $("run-status");
    badge.textContent = run.status;
    badge.className = `status ${run.status}`;
    showCounts(run);
    const family = [];
    if (run.parent_run_id) family.push("parent ", runLink(run.parent_run_id), " ");
    const kids = [...runsById.values()].filter((r) => r.parent_run_id === run.run_id);
    if (kids.length) {
      family.push(`sub-agents (${kids.length}): `);
      kids.forEach((k, i) => family.push(i ? ", " : "", runLink(k.run_id, `${k.agent} ${k.status}`)));
    }
    const resident = residents.get(run.run_id);
    if (resident) {  // loomcycle's resident controls: stop its turn (it stays alive), or close it
      family.push(` · resident sub-agent (${resident.state.replace("_", " ")}) `,
        el("button", { type: "button", class: "small", id: "resident-cancel", text: "stop turn",
          onclick: () => residentAction(run.run_id, "cancel") }), " ",
        el("button", { type: "button", class: "small", id: "resident-close", text: "close",
          onclick: () => residentAction(run.run_id, "close") }));
    }
    $("run-family").replaceChildren(...family);
    await showTeam(run);
    $("cancel").hidden = TERMINAL.has(run.status);
    $("steer").hidden = !(run.interactive && !TERMINAL.has(run.status));
    await showQuestions(run);
    return run;
  }

  /** A team run (agent team:<name>): the state its walk is in, and its diagram — a picture (the
   *  server's SVG, teams/svg.py) with that state outlined, and the Mermaid source — docs/teams.md. */
  let teamShown = "";  // "<run id> <status>" of the team run last drawn

  async function showTeam(run) {
    const box = $("run-team");
    box.hidden = !run.agent.startsWith("team:");
    if (box.hidden) return;
    try {
      const where = await post("/v1/_teamdef", { op: "render_diagram", run_id: run.run_id, format: "svg" });
      if (run.run_id !== selected) return;
      $("run-team-state").textContent = `team ${where.name} v${where.version}: state ${where.state} · ${where.steps.length} transition(s)`;
      drawSvg($("run-team-picture"), where.diagram);
      $("run-team-picture").dataset.state = where.state;
      teamShown = `${run.run_id} ${run.status}`;
      const text = await post("/v1/_teamdef", { op: "render_diagram", run_id: run.run_id });
      if (run.run_id === selected) $("run-team-diagram").textContent = text.diagram;
    } catch (err) {
      $("run-team-state").textContent = `team: ${err.message}`;
    }
  }

  // The SVG elements and attributes a diagram may carry; anything else is dropped.
  const SVG_NS = "http://www.w3.org/2000/svg";
  const SVG_TAGS = new Set(["svg", "g", "rect", "circle", "path", "polygon", "text", "title"]);
  const SVG_ATTRS = new Set(["x", "y", "width", "height", "rx", "cx", "cy", "r", "d", "points", "fill", "fill-opacity",
    "stroke", "stroke-width", "stroke-dasharray", "font-family", "font-size", "font-weight", "text-anchor", "viewBox",
    "class", "data-state", "role", "aria-label"]);

  /** Put the server's SVG text into `box` as a picture: parsed as XML (never as HTML) and rebuilt
   *  element by element from the lists above, text as text. */
  function drawSvg(box, source) {
    const doc = new DOMParser().parseFromString(source, "image/svg+xml");
    const root = doc.documentElement;
    if (!root || root.localName !== "svg" || doc.getElementsByTagName("parsererror").length) {
      box.replaceChildren(el("p", { class: "form-error", text: "the diagram could not be read" }));
      return;
    }
    const copy = (node) => {
      if (node.nodeType === Node.TEXT_NODE) return document.createTextNode(node.nodeValue);
      if (node.nodeType !== Node.ELEMENT_NODE || node.namespaceURI !== SVG_NS || !SVG_TAGS.has(node.localName)) return null;
      const out = document.createElementNS(SVG_NS, node.localName);
      for (const a of node.attributes) if (SVG_ATTRS.has(a.name)) out.setAttribute(a.name, a.value);
      for (const child of node.childNodes) {
        const c = copy(child);
        if (c) out.appendChild(c);
      }
      return out;
    };
    box.replaceChildren(copy(root));
  }

  /** The run's descendants in the loaded list that are parked. */
  function waitingDescendants(runId) {
    const out = [];
    const walk = (id) => {
      for (const r of runsById.values()) {
        if (r.parent_run_id === id && r.run_id !== id) {
          if (r.status === "waiting") out.push(r);
          walk(r.run_id);
        }
      }
    };
    walk(runId);
    return out;
  }

  /** One question with its answer buttons and box; `after` runs once it is answered. */
  function questionCard(q, run, after, errorBox) {
    const err = el("p", { class: "form-error", role: "alert" });
    const answer = async (text) => {
      err.textContent = "";
      try {
        await post(`/v1/runs/${q.run_id}/interrupts/${q.interrupt_id}/resolve`, { answer: text, resolved_by: "webui" });
        after();
      } catch (e) {
        err.textContent = e.message;
        if (errorBox) $(errorBox).textContent = "";
      }
    };
    const input = el("input", { placeholder: "or type an answer, then Enter", "aria-label": "answer" });
    input.addEventListener("keydown", (e) => { if (e.key === "Enter" && input.value.trim()) answer(input.value); });
    const head = [el("span", { class: "meta", text: `${run?.agent ?? ""} · ` }), runLink(q.run_id, q.run_id.slice(0, 14)),
      run?.parent_run_id ? el("span", { class: "meta", text: " · sub-agent of " }) : null,
      run?.parent_run_id ? runLink(run.parent_run_id, run.parent_run_id.slice(0, 14)) : null,
      el("time", { class: "meta", datetime: q.created_at, text: ` · asked ${clock(q.created_at)}` })];
    return el("div", { class: "question", "data-interrupt": q.interrupt_id },
      el("p", { class: "q-head" }, ...head),
      el("p", { class: "q-text", text: q.question }),
      q.context ? el("p", { class: "meta", text: asText(q.context) }) : null,
      el("div", { class: "row" },
        ...(q.options || []).map((o) => el("button", { type: "button", text: String(o), onclick: () => answer(String(o)) })),
        input),
      err);
  }

  /** The pending questions of the run and of its parked sub-agents (a child's question is shown
   *  on its parent). The cards are rebuilt only when the set of questions changed, so a polled
   *  refresh never wipes an answer being typed. */
  async function showQuestions(run) {
    const box = $("questions");
    const runs = [...(run.status === "waiting" ? [run] : []), ...waitingDescendants(run.run_id)];
    const found = [];
    for (const r of runs) {
      try {
        const body = await json(`/v1/runs/${r.run_id}/interrupts?status=pending`);
        for (const q of body.interrupts) found.push({ q, r });
      } catch (err) {
        $("detail-error").textContent = err.message;
      }
    }
    if (run.run_id !== selected) return;
    const shown = [...box.querySelectorAll(".question")].map((d) => d.dataset.interrupt).join(" ");
    if (shown === found.map(({ q }) => q.interrupt_id).join(" ")) return;
    box.replaceChildren(...found.map(({ q, r }) => {
      const card = questionCard(q, r, () => { showRun(run.run_id).catch(() => {}); refreshInbox(); }, "detail-error");
      if (r.run_id !== run.run_id) card.prepend(el("p", { class: "pill ask", text: "asked by a sub-agent" }));
      return card;
    }));
  }

  async function follow(runId, controller) {
    while (!controller.signal.aborted) {
      try {
        const resp = await api(`/v1/runs/${runId}/stream?from_seq=${lastSeq}`, {
          headers: { accept: "text/event-stream" }, signal: controller.signal,
        });
        if (!resp.ok) throw new Error(`stream: HTTP ${resp.status}`);
        const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          const parsed = parseSse(buffer + value);
          buffer = parsed.rest;
          for (const ev of parsed.events) {
            if (ev.id !== null) lastSeq = Math.max(lastSeq, Number(ev.id));
            let data = {};
            try { data = JSON.parse(ev.data || "{}"); } catch { data = { text: ev.data }; }
            if (ev.event === EVENTS.AGENT || ev.event === EVENTS.SESSION) continue; // loomcycle's preamble frames
            append(ev.event, data, ev.id);
            if (STATE_EVENTS.has(ev.event)) {
              loadRuns().then(() => showRun(runId)).catch(() => {});
            }
          }
        }
      } catch (err) {
        if (controller.signal.aborted) return;
        $("detail-error").textContent = String(err.message || err);
      }
      const run = await showRun(runId).catch(() => null);
      if (!run || TERMINAL.has(run.status)) return;
      await new Promise((r) => setTimeout(r, 1000)); // the stream ended early (a time budget): resume
    }
  }

  async function select(runId) {
    if (stream) stream.abort();
    selected = runId;
    lastSeq = 0;
    live = null;
    usages = [];
    forkSeq = null;
    $("fork").hidden = true;
    $("run-json").open = false;  // another run: its JSON is read when opened
    $("run-json-text").textContent = "";
    $("run-download").hidden = true;
    $("events").replaceChildren();
    $("questions").replaceChildren();
    $("detail-error").textContent = "";
    $("detail").hidden = false;
    for (const li of document.querySelectorAll("#runs li")) li.classList.toggle("selected", li.dataset.run === runId);
    await loadRuns();
    try {
      await showRun(runId);
    } catch (err) {
      $("detail-error").textContent = err.message;
      return;
    }
    stream = new AbortController();
    follow(runId, stream);
  }

  // -- the inbox --------------------------------------------------------------------------------------

  async function scanQuestions() {
    const body = await json("/v1/interrupts?status=pending&limit=500");
    // each question comes with its run's agent, user and parent: what a card shows
    return body.interrupts.map((q) => ({ q, run: { run_id: q.run_id, agent: q.agent, user_id: q.user_id,
      parent_run_id: q.parent_run_id } }));
  }

  async function refreshInbox() {
    try {
      pending = await scanQuestions();
    } catch (err) {
      if (err.status !== 401) notice(err.message, "inbox-notice");
      return;
    }
    const badge = $("inbox-count");
    badge.hidden = pending.length === 0;
    badge.textContent = String(pending.length);
    loadCounts();
    if (tab !== "inbox") return;
    const shown = new Set([...document.querySelectorAll("#inbox .question")].map((d) => d.dataset.interrupt));
    const now = new Set(pending.map((p) => p.q.interrupt_id));
    if (shown.size === now.size && [...now].every((id) => shown.has(id))) return; // keep what the user types
    $("inbox").replaceChildren(...pending.map(({ q, run }) => questionCard(q, run, refreshInbox, null)));
    notice(pending.length ? "" : "no pending questions", "inbox-notice");
  }
  tabHooks.inbox = refreshInbox;
  tabHooks.runs = loadRuns;

  // -- forms --------------------------------------------------------------------------------------------

  $("start").addEventListener("submit", async (e) => {
    e.preventDefault();
    // the run's JSON answer (202): POST /v1/runs streams the run unless asked for JSON
    const body = await guard("start-error", () => json("/v1/runs", {
      method: "POST", headers: { "content-type": "application/json", accept: "application/json" },
      body: JSON.stringify({
        agent: $("agent").hidden ? $("agent-text").value.trim() : $("agent").value,
        prompt: $("prompt").value, interactive: $("interactive").checked,
      }),
    }));
    if (body) {
      $("prompt").value = "";
      location.hash = body.run_id;
    }
  });
  $("runs-more").addEventListener("click", () => { runPages += 1; loadRuns(); });
  $("status").addEventListener("change", () => { runPages = 1; });
  $("user").addEventListener("change", () => { runPages = 1; });

  /** the run as JSON (its state and every event, GET /v1/runs/{id} and …/events page by page):
   *  shown on the page and offered as a download (`<run id>.json`) */
  $("run-json").addEventListener("toggle", async () => {
    if (!$("run-json").open || !selected) return;
    const runId = selected;
    const run = await json(`/v1/runs/${runId}`);
    const events = [];
    for (let from = 0; ;) {
      const page = await json(`/v1/runs/${runId}/events?from_seq=${from}&limit=1000`);
      events.push(...page.events);
      if (!page.events.length || page.events.length < 1000) break;
      from = page.events[page.events.length - 1].seq;
    }
    if (runId !== selected) return;
    const text = JSON.stringify({ run, events }, null, 2);
    $("run-json-text").textContent = text;
    const link = $("run-download");
    if (link.href.startsWith("blob:")) URL.revokeObjectURL(link.href);
    link.href = URL.createObjectURL(new Blob([text], { type: "application/json" }));
    link.download = `${runId}.json`;
    link.hidden = false;
  });

  $("cancel").addEventListener("click", () => {
    if (selected) {
      guard("detail-error", () => post(`/v1/runs/${selected}/cancel`, { scope: "run" }).then(() => showRun(selected)));
    }
  });
  $("fork").addEventListener("submit", async (e) => {
    e.preventDefault();
    if (!selected || forkSeq === null) return;
    const body = { at_seq: forkSeq, mode: $("fork-mode").value };
    if ($("fork-prompt").value.trim()) body.prompt = $("fork-prompt").value;
    const out = await guard("fork-error", () => post(`/v1/runs/${selected}/fork`, body));
    if (out) {
      $("fork").hidden = true;
      $("fork-prompt").value = "";
      location.hash = out.run_id;
    }
  });
  $("fork-close").addEventListener("click", () => { $("fork").hidden = true; forkSeq = null; });
  $("steer").addEventListener("submit", async (e) => {
    e.preventDefault();
    const text = $("steer-text").value;
    if (!selected || !text.trim()) return;
    if (await guard("steer-error", () => post(`/v1/runs/${selected}/input`, { text }))) $("steer-text").value = "";
  });
  $("auth").addEventListener("submit", (e) => {
    e.preventDefault();
    token = $("token").value.trim();
    sessionStorage.setItem("treadle-token", token);
    $("auth-msg").textContent = "";
    $("auth").hidden = true;
    refreshAll();
    if (selected) select(selected);
  });
  $("status").addEventListener("change", loadRuns);
  $("user").addEventListener("change", loadRuns);
  $("tenant").value = tenant;
  $("tenant").addEventListener("change", () => {
    tenant = $("tenant").value.trim();
    sessionStorage.setItem("treadle-tenant", tenant);
    selected = null;
    $("detail").hidden = true;
    refreshAll();
  });

  function refreshAll() {
    whoami();
    loadAgents();
    loadRuns();
    refreshInbox();
    if (tabHooks[tab] && tab !== "runs" && tab !== "inbox") tabHooks[tab]();
  }

  // what panels.js uses
  window.treadleUI = { $, el, json, post, guard, clock, stableJson, lineDiff, tabHooks, asText, loadAgents, drawSvg };

  refreshAll();
  setInterval(() => {
    if (tab === "runs") {
      loadRuns().then(() => {
        const run = runsById.get(selected);
        if (run && !TERMINAL.has(run.status)) showQuestions(run).catch(() => {}); // a sub-agent may have asked since
        // a team run's walk moves on: its current state again (once more after it ended)
        if (run && run.agent.startsWith("team:") && (!TERMINAL.has(run.status) || teamShown !== `${run.run_id} ${run.status}`)) {
          showTeam(run).catch(() => {});
        }
      });
    }
    refreshInbox();
  }, 3000);
  // panels.js registers its tabs in its own DOMContentLoaded handler, which runs after this one
  setTimeout(route, 0);
});
