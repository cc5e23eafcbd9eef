// treadle's run-watching page: the runs list, one run's events live (SSE over fetch, so the bearer
// token travels in a header; resumes with from_seq when a stream ends), pending questions, steering,
// start and cancel. Everything the model or a tool wrote is shown as text (textContent), never HTML.
"use strict";

const TERMINAL = new Set(["completed", "failed", "cancelled"]);

// -- pure helpers (exported for tests/unit/test_watch_page.py, run under node) ---------------------

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

function short(value, max = 400) {
  const text = typeof value === "string" ? value : JSON.stringify(value);
  return text.length > max ? text.slice(0, max) + "…" : text;
}

/** How one transcript event is shown: {cls, text}. */
function describe(type, d) {
  const tu = d.tool_use || {};
  const u = d.usage || {};
  switch (type) {
    case "started": return { cls: "other", text: `▶ run ${d.run_id} · agent ${d.agent}` };
    case "user_input": return { cls: "user", text: `user: ${d.text ?? segmentText(d.segments)}` };
    case "text": return { cls: "text", text: String(d.text ?? "") };
    case "thinking": return { cls: "other", text: `(thinking) ${short(d.text ?? "")}` };
    case "tool_call": return { cls: "tool_call", text: `→ ${tu.name} ${short(tu.input ?? {})}` };
    case "tool_result":
      return { cls: d.is_error ? "tool_result error" : "tool_result", text: `${d.is_error ? "✗" : "←"} ${tu.name} ${short(d.text ?? "")}` };
    case "tool_parked": return { cls: "other", text: `‖ ${tu.name} waits (${d.wait?.kind ?? "park"}), holding no worker` };
    case "retry": {
      const r = d.retry || {};
      return { cls: "other", text: `↻ retry ${r.attempt} in ${r.wait_ms} ms (${r.reason})` };
    }
    case "usage":
      return { cls: "usage", text: `· iteration ${d.iteration}: ${u.input_tokens} in / ${u.output_tokens} out (${u.provider}/${u.model})` };
    case "interruption_pending": return { cls: "other", text: `? ${d.question ?? ""}` };
    case "awaiting_input": return { cls: "other", text: "… awaiting input" };
    case "done":
      return { cls: "done", text: `■ done: ${d.stop_reason} · ${u.input_tokens ?? 0} in / ${u.output_tokens ?? 0} out tokens` };
    case "error": return { cls: "error", text: `■ error ${d.code}: ${d.error}` };
    default: return { cls: "other", text: `${type} ${short(d, 300)}` };
  }
}

if (typeof module !== "undefined") module.exports = { parseSse, describe, segmentText };

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

  async function api(path, init = {}) {
    const headers = {
      ...(init.headers || {}),
      ...(token ? { authorization: `Bearer ${token}` } : {}),
      ...(tenant ? { "x-treadle-tenant": tenant } : {}),
    };
    const resp = await fetch(path, { ...init, headers });
    if (resp.status === 401) {
      $("auth").hidden = false;
      throw new Error("a bearer token is needed");
    }
    return resp;
  }

  async function json(path, init) {
    const resp = await api(path, init);
    const body = await resp.json();
    if (!resp.ok) throw new Error(`${body.code}: ${body.error}`);
    return body;
  }

  function notice(text) { $("notice").textContent = text; }

  async function loadRuns() {
    const query = new URLSearchParams({ limit: "50" });
    if ($("status").value) query.set("status", $("status").value);
    if ($("user").value.trim()) query.set("user_id", $("user").value.trim());
    try {
      const body = await json(`/v1/runs?${query}`);
      const rows = body.runs.map((r) => {
        const tr = document.createElement("tr");
        if (r.run_id === selected) tr.className = "selected";
        for (const v of [r.run_id.slice(0, 14), r.agent, r.status, r.iterations, new Date(r.created_at).toLocaleTimeString()]) {
          const td = document.createElement("td");
          td.textContent = String(v);
          tr.append(td);
        }
        tr.addEventListener("click", () => select(r.run_id));
        return tr;
      });
      $("runs").replaceChildren(...rows);
      notice(body.runs.length ? "" : "no runs yet — start one above");
    } catch (err) {
      notice(String(err.message || err));
    }
  }

  function append(type, data) {
    if (type === "text_delta") {
      if (!live) {
        live = document.createElement("li");
        live.className = "text live";
        $("events").append(live);
      }
      live.textContent += data.text || "";
      return;
    }
    if (type === "text" && live) { live.remove(); live = null; }
    const { cls, text } = describe(type, data);
    const li = document.createElement("li");
    li.className = cls;
    li.textContent = text;
    $("events").append(li);
    li.scrollIntoView({ block: "nearest" });
  }

  async function showRun(runId) {
    const run = await json(`/v1/runs/${runId}`);
    $("run-title").textContent = `${run.run_id} · ${run.agent}`;
    const badge = $("run-status");
    badge.textContent = run.status;
    badge.className = `status ${run.status}`;
    const u = run.usage || {};
    $("run-meta").textContent = `iterations ${run.iterations} · ${u.input_tokens ?? 0} in / ${u.output_tokens ?? 0} out tokens`
      + (run.user_id ? ` · user ${run.user_id}` : "") + (run.parent_run_id ? ` · parent ${run.parent_run_id}` : "");
    $("cancel").hidden = TERMINAL.has(run.status);
    $("steer").hidden = !(run.interactive && !TERMINAL.has(run.status));
    await showQuestions(run);
    return run;
  }

  async function showQuestions(run) {
    const box = $("questions");
    if (run.status !== "waiting") { box.replaceChildren(); return; }
    const body = await json(`/v1/runs/${run.run_id}/interrupts?status=pending`);
    box.replaceChildren(...body.interrupts.map((q) => {
      const div = document.createElement("div");
      div.className = "question";
      const p = document.createElement("p");
      p.textContent = q.question;
      div.append(p);
      const answer = (text) => json(`/v1/runs/${run.run_id}/interrupts/${q.interrupt_id}/resolve`, {
        method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ answer: text, resolved_by: "webui" }),
      }).then(() => showRun(run.run_id)).catch((err) => notice(err.message));
      for (const option of q.options || []) {
        const b = document.createElement("button");
        b.type = "button";
        b.textContent = String(option);
        b.addEventListener("click", () => answer(String(option)));
        div.append(b);
      }
      const input = document.createElement("input");
      input.placeholder = "or type an answer, then Enter";
      input.addEventListener("keydown", (e) => { if (e.key === "Enter" && input.value.trim()) answer(input.value); });
      div.append(input);
      return div;
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
            append(ev.event, data);
            if (["done", "error", "tool_parked", "awaiting_input", "interruption_pending"].includes(ev.event)) {
              showRun(runId).catch(() => {});
            }
          }
        }
      } catch (err) {
        if (controller.signal.aborted) return;
        notice(String(err.message || err));
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
    $("events").replaceChildren();
    $("detail").hidden = false;
    history.replaceState(null, "", `#${runId}`);
    loadRuns();
    try {
      await showRun(runId);
    } catch (err) {
      notice(err.message);
      return;
    }
    stream = new AbortController();
    follow(runId, stream);
  }

  $("start").addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      const body = await json("/v1/runs", {
        method: "POST", headers: { "content-type": "application/json" },
        body: JSON.stringify({ agent: $("agent").value, prompt: $("prompt").value, interactive: $("interactive").checked }),
      });
      $("prompt").value = "";
      select(body.run_id);
    } catch (err) {
      notice(err.message);
    }
  });
  $("cancel").addEventListener("click", () => {
    if (selected) json(`/v1/runs/${selected}/cancel`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ scope: "run" }) }).then(() => showRun(selected)).catch((err) => notice(err.message));
  });
  $("steer").addEventListener("submit", (e) => {
    e.preventDefault();
    const text = $("steer-text").value;
    if (!selected || !text.trim()) return;
    json(`/v1/runs/${selected}/input`, {
      method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ text }),
    }).then(() => { $("steer-text").value = ""; }).catch((err) => notice(err.message));
  });
  $("auth").addEventListener("submit", (e) => {
    e.preventDefault();
    token = $("token").value.trim();
    sessionStorage.setItem("treadle-token", token);
    $("auth").hidden = true;
    whoami();
    loadRuns();
    if (selected) select(selected);
  });
  $("status").addEventListener("change", loadRuns);
  $("user").addEventListener("change", loadRuns);

  // who the page acts as; an admin gets the tenant box
  async function whoami() {
    try {
      const who = await json("/v1/_whoami");
      $("who").textContent = `tenant ${who.tenant_id}`;
      $("tenant-box").hidden = !(who.open_mode || (who.scopes || []).includes("substrate:admin"));
    } catch (err) {
      notice(err.message);
    }
  }
  $("tenant").value = tenant;
  $("tenant").addEventListener("change", () => {
    tenant = $("tenant").value.trim();
    sessionStorage.setItem("treadle-tenant", tenant);
    selected = null;
    whoami();
    loadRuns();
  });

  whoami();
  loadRuns();
  setInterval(loadRuns, 3000);
  if (location.hash.length > 1) select(location.hash.slice(1));
});
