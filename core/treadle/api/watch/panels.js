// treadle's web page, the operator's tabs: the library (agent, skill and team defs: create, fork,
// promote, retire, a diff between two versions), schedules (state, pause/resume/run-now, recent
// fires), webhooks (recent deliveries), channels (peek, publish) and sessions (a conversation's runs in
// order; rename, pin, archive) and usage (a bar per day, totals grouped). All over the same API a
// client uses, with the token and tenant of watch.js (window.treadleUI). Text only, never HTML.
"use strict";

if (typeof document !== "undefined") document.addEventListener("DOMContentLoaded", () => {
  const { $, el, json, post, guard, clock, stableJson, lineDiff, tabHooks, asText, loadAgents, drawSvg } = window.treadleUI;

  /** A clickable list item (Enter works too). */
  function item(props, onpick, ...children) {
    return el("li", { ...props, tabindex: "0", onclick: onpick, onkeydown: (e) => { if (e.key === "Enter") onpick(); } }, ...children);
  }

  function parseJson(text, what) {
    try {
      return JSON.parse(text);
    } catch (err) {
      throw new Error(`${what}: not valid JSON (${err.message})`);
    }
  }

  function markSelected(list, attr, value) {
    for (const li of document.querySelectorAll(`#${list} li`)) li.classList.toggle("selected", li.getAttribute(attr) === value);
  }

  // -- library: agent and skill defs ------------------------------------------------------------------

  let libDefs = []; // the versions of the listed kind
  let libPicked = null; // the version shown
  const LIBRARY = { agentdef: "/v1/_agentdef", skilldef: "/v1/_skilldef", teamdef: "/v1/_teamdef" }; // the <select>'s values
  const op = (body) => post(LIBRARY[$("lib-kind").value], body);

  async function loadLibrary(keep) {
    const body = await guard("lib-create-error", () => op({ op: "list", include_retired: $("lib-retired").checked }));
    if (!body) return;
    libDefs = [...body.defs, ...body.static.filter((s) => !s.overridden)];
    const names = [...new Set(libDefs.map((d) => d.name))].sort();
    $("lib-list").replaceChildren(...names.map((name) => {
      const versions = libDefs.filter((d) => d.name === name);
      const active = versions.find((d) => d.active);
      const label = active ? (active.source === "yaml" ? "treadle.yaml" : `v${active.version} active`) : "retired";
      return item({ "data-name": name }, () => pick(active || versions[0]),
        el("span", { class: "agent", text: name }), el("span", { class: `status ${active ? "completed" : "cancelled"}`, text: label }),
        el("span", { class: "meta", text: `${versions.length} version${versions.length === 1 ? "" : "s"}` }));
    }));
    if (keep) {
      const again = libDefs.find((d) => d.def_id && d.def_id === keep);
      if (again) await pick(again);
    }
  }

  function versionLabel(d) {
    if (!d.def_id) return "treadle.yaml";
    return `v${d.version}${d.active ? " (active)" : ""}${d.status === "retired" ? " (retired)" : ""}`;
  }

  async function pick(def) {
    libPicked = def;
    $("lib-detail").hidden = false;
    $("lib-action-error").textContent = "";
    $("lib-fork-error").textContent = "";
    markSelected("lib-list", "data-name", def.name);
    $("lib-title").textContent = `${def.name} · ${versionLabel(def)}`;
    $("lib-meta").textContent = [def.description, def.def_id, def.content_sha256, def.created_at ? `created ${clock(def.created_at)}` : "",
      def.parent_def_id ? `forked from ${def.parent_def_id}` : ""].filter(Boolean).join(" · ");
    $("lib-body").textContent = stableJson(def.body);
    $("lib-team").hidden = $("lib-kind").value !== "teamdef";
    $("lib-diagram").textContent = "";
    $("lib-picture").replaceChildren();
    if (!$("lib-team").hidden) {  // a team: its picture (the server's SVG) and its Mermaid stateDiagram-v2 as text
      const which = def.def_id ? { def_id: def.def_id } : { overlay: def.body, name: def.name };
      const picture = await guard("lib-action-error", () => op({ op: "render_diagram", format: "svg", ...which }));
      if (picture && libPicked === def) drawSvg($("lib-picture"), picture.diagram);
      const shown = await guard("lib-action-error", () => op({ op: "render_diagram", ...which }));
      if (shown && libPicked === def) $("lib-diagram").textContent = shown.diagram;
    }
    $("lib-fork-body").value = stableJson(def.body);
    $("lib-promote").hidden = !def.def_id || def.active;
    $("lib-retire").hidden = !def.def_id || def.status === "retired";
    const versions = libDefs.filter((d) => d.name === def.name);
    $("lib-versions").replaceChildren(...versions.map((d) => item({ "data-def": d.def_id || "yaml", class: d === def ? "selected" : "" }, () => pick(d),
      el("span", { text: versionLabel(d) }), el("span", { class: "meta", text: `${d.description || ""} ${d.created_at ? clock(d.created_at) : ""}` }))));
    const options = () => versions.map((d, i) => el("option", { value: String(i), text: versionLabel(d) }));
    $("lib-diff-a").replaceChildren(...options());
    $("lib-diff-b").replaceChildren(...options());
    const me = versions.indexOf(def);
    $("lib-diff-b").value = String(me);
    $("lib-diff-a").value = String(Math.min(me + 1, versions.length - 1)); // the version before (the list is newest first)
    $("lib-diff-out").replaceChildren();
  }

  const STARTER = { agentdef: '{"model": "echo", "system_prompt": ""}', skilldef: '{"body": "what the skill teaches"}',
    teamdef: '{"entry": "work", "states": [{"state": "work", "handler": {"kind": "agent", "agent": "echo"}}, {"state": "done", "handler": {"kind": "terminal"}}], "transitions": [{"from": "work", "to": "done", "on": "success"}]}' };
  $("lib-kind").addEventListener("change", () => {
    $("lib-detail").hidden = true;
    $("lib-create-body").value = STARTER[$("lib-kind").value];
    loadLibrary();
  });
  $("lib-retired").addEventListener("change", () => loadLibrary(libPicked?.def_id));
  $("lib-create").addEventListener("submit", async (e) => {
    e.preventDefault();
    const made = await guard("lib-create-error", () => op({
      op: "create", name: $("lib-create-name").value.trim(), overlay: parseJson($("lib-create-body").value, "body"),
      ...($("lib-create-desc").value.trim() ? { description: $("lib-create-desc").value.trim() } : {}),
    }));
    if (made) {
      $("lib-create-name").value = "";
      await loadLibrary(made.def_id);
      loadAgents();
    }
  });
  $("lib-fork").addEventListener("submit", async (e) => {
    e.preventDefault();
    if (!libPicked) return;
    const parent = libPicked.def_id ? { def_id: libPicked.def_id } : { name: libPicked.name };
    const made = await guard("lib-fork-error", () => op({
      op: "fork", ...parent, overlay: parseJson($("lib-fork-body").value, "overlay"), promote: $("lib-fork-promote").checked,
      ...($("lib-fork-desc").value.trim() ? { description: $("lib-fork-desc").value.trim() } : {}),
    }));
    if (made) {
      $("lib-fork-desc").value = "";
      await loadLibrary(made.def_id);
      if (made.deduplicated) $("lib-fork-error").textContent = "nothing changed: the fork is the same as its parent";
      loadAgents();
    }
  });
  for (const [id, verb] of [["lib-promote", "promote"], ["lib-retire", "retire"]]) {
    $(id).addEventListener("click", async () => {
      if (!libPicked?.def_id) return;
      const done = await guard("lib-action-error", () => op({ op: verb, def_id: libPicked.def_id }));
      if (done) { await loadLibrary(done.def_id); loadAgents(); }
    });
  }
  $("lib-diff").addEventListener("submit", (e) => {
    e.preventDefault();
    const versions = libDefs.filter((d) => d.name === libPicked?.name);
    const a = versions[Number($("lib-diff-a").value)];
    const b = versions[Number($("lib-diff-b").value)];
    if (!a || !b) return;
    const lines = lineDiff(stableJson(a.body), stableJson(b.body));
    const changed = lines.some((l) => l.op !== " ");
    $("lib-diff-out").replaceChildren(...(changed
      ? lines.map((l) => el("span", { class: l.op === "+" ? "add" : l.op === "-" ? "del" : "same", text: `${l.op} ${l.line}\n` }))
      : [el("span", { class: "same", text: "the two versions have the same body" })]));
  });
  tabHooks.library = () => loadLibrary(libPicked?.def_id);

  // -- schedules ------------------------------------------------------------------------------------------

  let schedPicked = null;

  function schedState(s) {
    if (s.status !== "active") return ["retired", "cancelled"];
    if (s.paused) return ["paused", "waiting"];
    return ["active", "completed"];
  }

  async function loadSchedules() {
    try {
      const body = await json("/v1/_schedules/list-all");
      $("sched-list").replaceChildren(...body.schedules.map((s) => {
        const [label, cls] = schedState(s);
        return item({ "data-schedule": s.schedule_id }, () => showSchedule(s.schedule_id),
          el("span", { class: "agent", text: s.name }), el("span", { class: `status ${cls}`, text: label }),
          el("span", { class: "meta", text: s.next_fire_at ? `next ${clock(s.next_fire_at)}` : "no next fire" }));
      }));
      $("sched-notice").textContent = body.schedules.length ? "" : "no schedules (declare them in treadle.yaml or with POST /v1/_scheduledef)";
      if (schedPicked) markSelected("sched-list", "data-schedule", schedPicked);
    } catch (err) {
      $("sched-notice").textContent = err.message;
    }
  }

  async function showSchedule(id) {
    schedPicked = id;
    markSelected("sched-list", "data-schedule", id);
    $("sched-detail").hidden = false;
    const s = await guard("sched-error", () => json(`/v1/_schedules/${encodeURIComponent(id)}/state`));
    if (!s) return;
    const [label, cls] = schedState(s);
    $("sched-title").textContent = `${s.name} · v${s.version}`;
    $("sched-state").textContent = label;
    $("sched-state").className = `status ${cls}`;
    $("sched-meta").textContent = [`${s.schedule} (${s.timezone})`, s.enabled ? "" : "disabled in its def",
      s.next_fire_at ? `next ${clock(s.next_fire_at)}` : "", `${s.total_fires} fires`,
      s.max_fires ? `max ${s.max_fires}` : "", s.last_error ? `last error: ${s.last_error}` : ""].filter(Boolean).join(" · ");
    $("sched-pause").hidden = s.paused || s.status !== "active";
    $("sched-resume").hidden = !s.paused || s.status !== "active";
    $("sched-run").hidden = s.status !== "active";
    $("sched-fires").replaceChildren(...(s.recent_fires.length ? s.recent_fires.map((f) => el("li", {},
      el("time", { datetime: f.scheduled_for, text: clock(f.scheduled_for) }),
      el("span", { class: `status ${f.status}`, text: f.status }),
      el("span", { class: "meta", text: `${f.source}${f.error ? ` · ${asText(f.error)}` : ""}` }),
      f.run_id ? el("a", { href: `#${f.run_id}`, text: f.run_id.slice(0, 14) }) : null)) : [el("li", { class: "meta", text: "no fires yet" })]));
  }

  const SCHEDULE_ACTIONS = {
    "sched-pause": (id) => `/v1/_schedules/${id}/pause`,
    "sched-resume": (id) => `/v1/_schedules/${id}/resume`,
    "sched-run": (id) => `/v1/_schedules/${id}/run-now`,
  };
  for (const [button, path] of Object.entries(SCHEDULE_ACTIONS)) {
    $(button).addEventListener("click", async () => {
      if (!schedPicked) return;
      const done = await guard("sched-error", () => post(path(encodeURIComponent(schedPicked))));
      if (done) { await showSchedule(schedPicked); loadSchedules(); }
    });
  }
  tabHooks.schedules = () => { loadSchedules(); if (schedPicked) showSchedule(schedPicked); };

  // -- webhooks ---------------------------------------------------------------------------------------------

  async function loadWebhooks() {
    try {
      const body = await post("/v1/_webhookdef", { op: "list" });
      const defs = [...body.defs, ...body.static.filter((s) => !s.overridden)];
      $("hook-list").replaceChildren(...defs.map((d) => item({ "data-hook": d.name }, () => showWebhook(d),
        el("span", { class: "agent", text: d.name }), el("span", { class: "meta", text: `→ ${d.body.agent ?? d.body.channel ?? d.body.delivery ?? ""}` }))));
      $("hook-notice").textContent = defs.length ? "" : "no webhooks (declare them in treadle.yaml or with POST /v1/_webhookdef)";
    } catch (err) {
      $("hook-notice").textContent = err.message;
    }
  }

  async function showWebhook(d) {
    markSelected("hook-list", "data-hook", d.name);
    $("hook-detail").hidden = false;
    $("hook-title").textContent = d.name;
    $("hook-meta").textContent = `POST /v1/_webhooks/${d.name} · ${versionLabel(d)}`;
    const body = await guard("hook-error", () => json(`/v1/_webhooks/${encodeURIComponent(d.name)}/recent-deliveries?limit=50`));
    if (!body) return;
    $("hook-deliveries").replaceChildren(...(body.deliveries.length ? body.deliveries.map((x) => el("li", {},
      el("time", { datetime: x.received_at, text: clock(x.received_at) }),
      el("span", { class: `status ${x.verdict === "accepted" ? "completed" : "failed"}`, text: String(x.verdict) }),
      el("span", { class: "meta", text: [x.delivery_id, `v${x.version}`, x.delivery, x.error].filter(Boolean).map(asText).join(" · ") }),
      x.run_id ? el("a", { href: `#${x.run_id}`, text: x.run_id.slice(0, 14) }) : null)) : [el("li", { class: "meta", text: "no deliveries yet" })]));
  }
  tabHooks.webhooks = loadWebhooks;

  // -- channels ---------------------------------------------------------------------------------------------

  let chanPicked = null;

  async function loadChannels() {
    try {
      const body = await json("/v1/_channels");
      $("chan-list").replaceChildren(...body.channels.map((c) => item({ "data-channel": c.name }, () => showChannel(c),
        el("span", { class: "agent", text: c.name }), el("span", { class: "meta", text: `${c.semantic} · ${c.scope}` }))));
      $("chan-notice").textContent = body.channels.length ? "" : "no channels";
      if (chanPicked) markSelected("chan-list", "data-channel", chanPicked.name);
    } catch (err) {
      $("chan-notice").textContent = err.message;
    }
  }

  async function peek() {
    if (!chanPicked) return;
    const q = new URLSearchParams({ max_messages: "50" });
    if ($("chan-scope").value.trim()) q.set("scope_id", $("chan-scope").value.trim());
    const body = await guard("chan-error", () => json(`/v1/_channels/${encodeURIComponent(chanPicked.name)}/peek?${q}`));
    if (!body) return;
    $("chan-messages").replaceChildren(...(body.messages.length ? body.messages.map((m) => el("li", {},
      el("time", { datetime: m.published_at, text: clock(m.published_at) }),
      el("pre", { text: stableJson(m.value) }))) : [el("li", { class: "meta", text: "no messages (for consumer http)" })]));
  }

  async function showChannel(c) {
    chanPicked = c;
    markSelected("chan-list", "data-channel", c.name);
    $("chan-detail").hidden = false;
    $("chan-title").textContent = c.name;
    $("chan-meta").textContent = [`${c.semantic} · scope ${c.scope}`, c.default_ttl_seconds ? `ttl ${c.default_ttl_seconds} s` : "",
      c.description].filter(Boolean).join(" · ");
    $("chan-error").textContent = "";
    await peek();
  }

  $("chan-peek").addEventListener("click", peek);
  $("chan-publish").addEventListener("submit", async (e) => {
    e.preventDefault();
    if (!chanPicked) return;
    const raw = $("chan-value").value;
    let value;
    try { value = JSON.parse(raw); } catch { value = raw; } // plain text is published as a string
    const done = await guard("chan-error", () => post(`/v1/_channels/${encodeURIComponent(chanPicked.name)}/publish`,
      { value, scope_id: $("chan-scope").value.trim() }));
    if (done) { $("chan-value").value = ""; await peek(); }
  });
  tabHooks.channels = loadChannels;

  // -- sessions ---------------------------------------------------------------------------------------------

  let sessPicked = null;
  const patchSession = (id, body) => json(`/v1/sessions/${encodeURIComponent(id)}`,
    { method: "PATCH", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });

  async function loadSessions() {
    const q = new URLSearchParams({ limit: "100" });
    if ($("sess-user").value.trim()) q.set("user_id", $("sess-user").value.trim());
    if ($("sess-archived").checked) q.set("archived", "true");
    try {
      const body = await json(`/v1/sessions?${q}`);
      const sessions = [...body.sessions].sort((a, b) => Number(b.pinned) - Number(a.pinned)); // pinned first
      $("sess-list").replaceChildren(...sessions.map((s) => item({ "data-session": s.id }, () => showSession(s.id),
        el("span", { class: "agent", text: `${s.pinned ? "★ " : ""}${s.title || s.id}` }),
        el("span", { class: "meta", text: `${s.agent} · ${s.user_id || "-"} · ${s.run_count} turns${s.archived ? " · archived" : ""}` }))));
      $("sess-notice").textContent = sessions.length ? "" : "no sessions";
      if (sessPicked) markSelected("sess-list", "data-session", sessPicked.id);
    } catch (err) {
      $("sess-notice").textContent = err.message;
    }
  }

  function drawSession(s) {
    sessPicked = s;
    markSelected("sess-list", "data-session", s.id);
    $("sess-detail").hidden = false;
    $("sess-title").textContent = s.title || s.id;
    $("sess-state").textContent = s.live_run_id ? "live" : s.archived ? "archived" : "idle";
    $("sess-state").className = `status ${s.live_run_id ? "running" : s.archived ? "cancelled" : "completed"}`;
    $("sess-meta").textContent = [s.id, `agent ${s.agent}`, `user ${s.user_id || "-"}`, `${s.run_count} turns`,
      s.tags.length ? `tags ${s.tags.join(", ")}` : "", `started ${clock(s.created_at)}`].filter(Boolean).join(" · ");
    $("sess-new-title").value = s.title;
    $("sess-pin").textContent = s.pinned ? "unpin" : "pin";
    $("sess-archive").textContent = s.archived ? "unarchive" : "archive";
    $("sess-summary").textContent = s.summary ? `summary: ${s.summary}` : "";
    $("sess-runs").replaceChildren(...(s.runs || []).map((id) => el("li", {},
      el("a", { href: `#${id}`, text: id }), id === s.live_run_id ? el("span", { class: "status running", text: "live" }) : null)));
  }

  async function showSession(id) {
    const s = await guard("sess-error", () => json(`/v1/sessions/${encodeURIComponent(id)}`));
    if (s) drawSession(s);
  }

  async function change(body) {
    if (!sessPicked) return;
    const s = await guard("sess-error", () => patchSession(sessPicked.id, body));
    if (s) { drawSession(s); await loadSessions(); }
  }

  $("sess-load").addEventListener("click", loadSessions);
  $("sess-rename").addEventListener("submit", (e) => { e.preventDefault(); change({ title: $("sess-new-title").value }); });
  $("sess-pin").addEventListener("click", () => change({ pinned: !sessPicked?.pinned }));
  $("sess-archive").addEventListener("click", () => change({ archived: !sessPicked?.archived }));
  tabHooks.sessions = () => { loadSessions(); if (sessPicked) showSession(sessPicked.id); };

  // -- documents ----------------------------------------------------------------------------------------------
  // a scope's documents (query_documents), one document's chunk tree (query_chunks: type, status, revision)
  // and one chunk (get_chunk: fields, body; history: its body revisions), over POST /v1/_document

  let docPicked = null;
  function docCall(body) {
    const q = $("doc-scope-id").value.trim() ? `?${new URLSearchParams({ scope_id: $("doc-scope-id").value.trim() })}` : "";
    return post("/v1/_document" + q, { scope: $("doc-scope").value, ...body });
  }

  async function loadDocuments() {
    try {
      const body = await docCall({ op: "query_documents" });
      $("doc-list").replaceChildren(...body.documents.map((d) => item({ "data-document": d.document_id }, () => showDocument(d),
        el("span", { class: "agent", text: d.title }),
        el("span", { class: "meta", text: [d.type, d.status, `${d.chunks} chunks`].filter(Boolean).join(" · ") }))));
      $("doc-notice").textContent = body.documents.length ? "" : "no documents";
      if (docPicked) markSelected("doc-list", "data-document", docPicked.document_id);
    } catch (err) {
      $("doc-notice").textContent = err.message;
    }
  }

  function chunkLine(c) {
    const tags = [c.type && `type ${c.type}`, c.status && `status ${c.status}`, `rev ${c.revision}`].filter(Boolean);
    return [el("span", { class: "agent", text: c.title || "(untitled)" }), el("span", { class: "meta", text: tags.join(" · ") })];
  }

  function drawTree(chunks, parentId, depth) {
    const here = chunks.filter((c) => (c.parent_id || null) === parentId).sort((a, b) => a.position - b.position);
    return here.flatMap((c) => [
      item({ "data-chunk": c.id, class: `depth-${Math.min(depth, 6)}` }, () => showChunk(c.id), ...chunkLine(c)),
      ...drawTree(chunks, c.id, depth + 1),
    ]);
  }

  async function showDocument(d) {
    docPicked = d;
    markSelected("doc-list", "data-document", d.document_id);
    $("doc-detail").hidden = false;
    $("chunk-detail").hidden = true;
    $("doc-title").textContent = d.title;
    $("doc-meta").textContent = [d.document_id, d.type && `type ${d.type}`, d.status && `status ${d.status}`,
      `${d.chunks} chunks`, `updated ${clock(d.updated_at)}`].filter(Boolean).join(" · ");
    const body = await guard("doc-error", () => docCall({ op: "query_chunks", document_id: d.document_id, limit: 1000 }));
    if (body) $("doc-tree").replaceChildren(...drawTree(body.chunks, null, 0));
  }

  async function showChunk(id) {
    markSelected("doc-tree", "data-chunk", id);
    const c = await guard("doc-error", () => docCall({ op: "get_chunk", id }));
    if (!c) return;
    const revs = await guard("doc-error", () => docCall({ op: "history", id }));
    $("chunk-detail").hidden = false;
    $("chunk-title").textContent = c.title || "(untitled)";
    $("chunk-meta").textContent = [c.id, c.type && `type ${c.type}`, c.status && `status ${c.status}`, `revision ${c.revision}`,
      c.tags && c.tags.length ? `tags ${c.tags.join(", ")}` : ""].filter(Boolean).join(" · ");
    $("chunk-fields").textContent = c.fields ? stableJson(c.fields) : "";
    $("chunk-fields").hidden = !c.fields;
    $("chunk-body").textContent = c.body || "";
    $("chunk-revisions").replaceChildren(...((revs && revs.revisions) || []).map((r) => el("li", {},
      el("span", { class: "agent", text: `revision ${r.revision}` }),
      el("span", { class: "meta", text: [r.actor, r.created_at && clock(r.created_at / 1e6)].filter(Boolean).join(" · ") }))));
  }

  $("doc-browse").addEventListener("submit", (e) => { e.preventDefault(); loadDocuments(); });
  tabHooks.documents = () => { loadDocuments(); if (docPicked) showDocument(docPicked); };

  // -- usage: a chart per day and grouped totals (GET /v1/_usage) ---------------------------------------

  const SVG = "http://www.w3.org/2000/svg";
  const svg = (tag, attrs, text) => {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    return node;
  };
  const num = (n) => Number(n || 0).toLocaleString("en-US");
  const money = (n) => String(Number(Number(n || 0).toFixed(6)));
  const tokensOf = (r) => Number(r.input_tokens) + Number(r.output_tokens) + Number(r.cache_creation_tokens) + Number(r.cache_read_tokens);

  function usageQuery(groupBy) {
    const q = new URLSearchParams({ group_by: groupBy });
    for (const [field, id] of [["from", "usage-from"], ["to", "usage-to"], ["user", "usage-user"], ["agent", "usage-agent"]]) {
      const v = $(id).value.trim();
      if (v) q.set(field, v);
    }
    return `/v1/_usage?${q}`;
  }

  /** Costs per currency, as text ("1.5 USD + 0.2 EUR"); rows are never summed across currencies. */
  function costs(rows) {
    const by = new Map();
    for (const r of rows) if (r.currency) by.set(r.currency, (by.get(r.currency) || 0) + Number(r.cost || 0));
    return [...by].map(([c, v]) => `${money(v)} ${c}`).join(" + ") || "0";
  }

  /** One stacked bar per day (input, output, cache tokens); its <title> says the figures and cost. */
  function drawChart(rows) {
    const days = new Map();
    for (const r of rows) {
      const d = days.get(r.day) || [];
      d.push(r);
      days.set(r.day, d);
    }
    const order = [...days.keys()].sort();
    if (!order.length) { $("usage-chart").replaceChildren(); $("usage-legend").textContent = ""; return; }
    const W = 640, H = 200, left = 48, bottom = 34, top = 8;
    const step = (W - left) / order.length, bw = Math.max(2, Math.min(40, step * 0.7));
    const max = Math.max(1, ...order.map((d) => days.get(d).reduce((a, r) => a + tokensOf(r), 0)));
    const scale = (H - bottom - top) / max;
    const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": `tokens per day, ${order.length} days` });
    root.append(svg("line", { class: "grid", x1: left, x2: W, y1: H - bottom, y2: H - bottom }),
      svg("text", { class: "axis", x: left - 4, y: top + 8, "text-anchor": "end" }, num(max)),
      svg("text", { class: "axis", x: left - 4, y: H - bottom, "text-anchor": "end" }, "0"));
    order.forEach((day, i) => {
      const rs = days.get(day);
      const sum = (k) => rs.reduce((a, r) => a + Number(r[k] || 0), 0);
      const parts = [["bar-in", sum("input_tokens")], ["bar-out", sum("output_tokens")],
        ["bar-cache", sum("cache_creation_tokens") + sum("cache_read_tokens")]];
      const total = parts.reduce((a, [, v]) => a + v, 0);
      const g = svg("g", { class: "day", "data-day": day, "data-tokens": total, "data-calls": sum("call_count"), "data-cost": costs(rs) });
      g.append(svg("title", {}, `${day}: ${num(total)} tokens (input ${num(parts[0][1])}, output ${num(parts[1][1])}, cache ${num(parts[2][1])}), ` +
        `${num(sum("call_count"))} calls, cost ${costs(rs)}`));
      let y = H - bottom;
      const x = left + i * step + (step - bw) / 2;
      for (const [cls, v] of parts) {
        const h = v * scale;
        if (h > 0) { y -= h; g.append(svg("rect", { class: cls, x, y, width: bw, height: h })); }
      }
      if (order.length <= 16 || i % Math.ceil(order.length / 16) === 0) {
        g.append(svg("text", { class: "axis", x: x + bw / 2, y: H - bottom + 14, "text-anchor": "middle" }, day.slice(5)));
      }
      root.append(g);
    });
    $("usage-chart").replaceChildren(root);
    $("usage-legend").textContent = `■ input · ■ output · ■ cache — ${order[0]} … ${order[order.length - 1]}: ` +
      `${num(rows.reduce((a, r) => a + tokensOf(r), 0))} tokens, cost ${costs(rows)}`;
  }

  const DIM_FIELD = { tenant: "tenant_id", user: "user_id", agent: "agent", def: "def_id", provider: "provider", model: "model" };

  function drawTable(dim, rows) {
    const head = [dim, "input", "output", "cache write", "cache read", "calls", "unpriced", "cost", "currency"];
    $("usage-table").replaceChildren(el("thead", {}, el("tr", {}, ...head.map((h) => el("th", { text: h })))),
      el("tbody", {}, ...rows.map((r) => el("tr", { "data-key": r[DIM_FIELD[dim]] || "" },
        el("td", { text: r[DIM_FIELD[dim]] || "-" }), el("td", { text: num(r.input_tokens) }), el("td", { text: num(r.output_tokens) }),
        el("td", { text: num(r.cache_creation_tokens) }), el("td", { text: num(r.cache_read_tokens) }), el("td", { text: num(r.call_count) }),
        el("td", { text: num(r.unpriced_calls) }), el("td", { text: money(r.cost) }), el("td", { text: r.currency || "-" })))));
  }

  async function loadUsage() {
    const dim = $("usage-group").value;
    const got = await guard("usage-error", () => Promise.all([json(usageQuery("day")), json(usageQuery(dim))]));
    if (!got) return;
    const [daily, grouped] = got;
    drawChart(daily.rows);
    drawTable(dim, grouped.rows);
    $("usage-notice").textContent = daily.rows.length ? "" : "no usage recorded for these filters";
  }

  if (!$("usage-from").value) {  // the last 30 UTC days
    const today = new Date();
    $("usage-to").value = today.toISOString().slice(0, 10);
    $("usage-from").value = new Date(today.getTime() - 29 * 86400e3).toISOString().slice(0, 10);
  }
  $("usage-form").addEventListener("submit", (e) => { e.preventDefault(); loadUsage(); });
  $("usage-group").addEventListener("change", loadUsage);
  tabHooks.usage = loadUsage;
});
