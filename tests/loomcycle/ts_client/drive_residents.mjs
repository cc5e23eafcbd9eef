// Issue 36's resident sub-agents, driven with loomcycle's own TypeScript: its client (adapters/ts,
// LOOMCYCLE_TS) and — the only place loomcycle has resident methods — its web console's API module
// (web/src/api.ts: listResidentChildren, closeResidentChild, cancelResidentChildTurn; compiled with
// tsc, LOOMCYCLE_WEB names the folder holding dist/api.js). The server's yaml has agents `holder`
// (opens an `echo` resident and an `asker` resident, then asks a question of its own), `echo` and
// `asker` (asks a question at the start of every turn). tests/loomcycle/test_ts_client.py runs it.
const base = process.env.BASE || "http://127.0.0.1:18827";
const { LoomcycleClient } = await import((process.env.LOOMCYCLE_TS || "../ts") + "/dist/index.js");
// the web module fetches same-origin paths ("/v1/_resident"): point them at the served treadle
const realFetch = globalThis.fetch;
globalThis.fetch = (url, init) => realFetch(typeof url === "string" && url.startsWith("/") ? base + url : url, init);
const web = await import((process.env.LOOMCYCLE_WEB || "../web") + "/dist/api.js");
const { assert, check, report, sleep } = await import("./checks.mjs");

const c = new LoomcycleClient({ baseUrl: base, authToken: process.env.TOKEN });

async function until(fn, what, ms = 20000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error("timed out waiting for " + what + ": " + JSON.stringify(await residents()));
    await sleep(50);
  }
}

async function answerPending(runId) {
  const pending = await until(async () => {
    const got = await c.listRunInterrupts(runId);
    const rows = got.interrupts || got;
    return rows.length ? rows : null;
  }, "a pending question of " + runId);
  await c.resolveInterrupt(runId, pending[0].interrupt_id || pending[0].id, { answer: "yes" });
}

const residents = async () => (await web.listResidentChildren()).resident;
let parent, echo, asker;
await check("a run opens two residents; listResidentChildren shows them with loomcycle's residentInfo fields", async () => {
  const started = await realFetch(base + "/v1/runs", { method: "POST", headers: { "content-type": "application/json", accept: "application/json" },
    body: JSON.stringify({ agent: "holder", prompt: "go" }) });
  assert(started.status === 202, "start answers " + started.status);
  parent = (await started.json()).run_id;
  // the asker's opening turn asks first: answer it, then both are open and parked for input
  const askerRow = await until(async () => (await residents()).find((r) => r.agent === "asker"), "the asker resident");
  await answerPending(askerRow.child_run_id);
  const rows = await until(async () => {
    const rs = (await residents()).filter((r) => r.parent_run_id === parent);
    return rs.length === 2 && rs.every((r) => r.state === "awaiting_input") ? rs : null;
  }, "two parked residents");
  echo = rows.find((r) => r.agent === "echo");
  asker = rows.find((r) => r.agent === "asker");
  for (const r of rows) {
    for (const k of ["child_run_id", "agent_id", "agent", "parent_agent_id", "tenant_id", "state", "idle_ttl_seconds", "last_used_at"]) {
      assert(k in r, `residentInfo field ${k}: ${JSON.stringify(r)}`);
    }
  }
  assert(echo.idle_ttl_seconds === 90 && asker.idle_ttl_seconds === 1800, JSON.stringify(rows));
});
await check("getAgent: a resident says resident: true and its resident_state; its parent does not", async () => {
  const p = await c.getAgent(echo.parent_agent_id);
  assert(p.resident === undefined && p.run_id === parent, JSON.stringify(p));
  const a = await c.getAgent(echo.child_run_id);
  assert(a.resident === true && a.resident_state === "awaiting_input" && a.parent_agent_id === p.agent_id,
    JSON.stringify({ resident: a.resident, state: a.resident_state, parent: a.parent_agent_id }));
});
await check("sendRunInput starts a turn (running); cancelResidentChildTurn stops it and the resident parks again", async () => {
  await c.sendRunInput(asker.child_run_id, "again");
  await until(async () => (await residents()).find((r) => r.child_run_id === asker.child_run_id)?.state === "running", "running");
  const out = await web.cancelResidentChildTurn(asker.child_run_id);
  assert(out.run_id === asker.child_run_id && out.stopped === true, JSON.stringify(out));
  try {
    await until(async () => (await residents()).find((r) => r.child_run_id === asker.child_run_id)?.state === "awaiting_input",
      "parked again", 5000);
  } catch (e) {
    const evs = await (await realFetch(base + `/v1/runs/${asker.child_run_id}/events`)).json();
    const waits = await (await realFetch(base + `/v1/runs/${asker.child_run_id}`)).json();
    throw new Error(evs.events.map((x) => x.type + (x.input_id ? ":" + x.input_id : "")).join(",") + " " + JSON.stringify(waits).slice(0, 300));
  }
  const idle = await web.cancelResidentChildTurn(echo.child_run_id);
  assert(idle.stopped === false, "a parked resident has no turn to stop: " + JSON.stringify(idle));
});
await check("closeResidentChild ends it (gone from the list, its agent not live); an unknown one is a 404", async () => {
  const out = await web.closeResidentChild(echo.child_run_id);
  assert(out.closed === true, JSON.stringify(out));
  await until(async () => !(await c.getAgent(echo.child_run_id)).live, "the closed resident to end");
  assert(!(await residents()).some((r) => r.child_run_id === echo.child_run_id), "still listed");
  let err;
  try { await web.closeResidentChild("r_nope"); } catch (e) { err = e; }
  assert(err && String(err.message).startsWith("404"), String(err));
});
await check("the parent's end closes what it left open", async () => {
  await answerPending(parent);  // the holder's own question: it then says bye and ends
  await until(async () => !(await residents()).some((r) => r.parent_run_id === parent), "no residents of the ended parent");
  const a = await until(async () => { const x = await c.getAgent(asker.child_run_id); return x.live ? null : x; }, "the asker to end");
  assert(a.status === "cancelled", JSON.stringify(a));
});
report();
