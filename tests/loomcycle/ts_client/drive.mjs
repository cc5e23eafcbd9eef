// Drives a served treadle with loomcycle's own TypeScript client (adapters/ts, built from source).
const { LoomcycleClient } = await import((process.env.LOOMCYCLE_TS || "../ts") + "/dist/index.js");
import { assert, check, collect, newUser, report, seg, sleep } from "./checks.mjs";

const c = new LoomcycleClient({ baseUrl: process.env.BASE || "http://127.0.0.1:18787" });
const user = newUser();

let runId, agentId;
await check("health", async () => { const h = await c.health(); assert(h.ok, JSON.stringify(h)); });
await check("runStreaming", async () => {
  const evs = await collect(c.runStreaming({ agent: "echo", segments: seg("hi there"), userId: user }));
  const types = evs.map((e) => e.type);
  assert(types[0] === "session" && types[1] === "agent", types.join(","));
  runId = evs[1].run_id; agentId = evs[1].agent_id;
  assert(types.includes("text") && types.at(-1) === "done", types.join(","));
});
await check("streamRunByID", async () => {
  const evs = await collect(c.streamRunByID(runId));
  assert(evs[0].type === "agent" && evs.some((e) => e.type === "done"), evs.map((e) => e.type).join(","));
});
await check("getAgent", async () => { const a = await c.getAgent(agentId); assert(a.run_id === runId && a.status === "completed", JSON.stringify(a)); });
await check("listUserAgents", async () => { const l = await c.listUserAgents(user); assert(l.some((a) => a.agent_id === agentId), JSON.stringify(l)); });
await check("interactiveSession (events/send/cancel)", async () => {
  const s = c.interactiveSession({ agent: "echo", segments: seg("first"), userId: user });
  const it = s.events()[Symbol.asyncIterator]();
  let sawAwait = 0, texts = [];
  while (sawAwait < 2) {
    const { value, done } = await it.next(); if (done) break;
    if (value.type === "text") texts.push(value.text);
    if (value.type === "awaiting_input") { sawAwait++; if (sawAwait === 1) await s.send("second"); }
  }
  assert(texts.join("|") === "first|second", texts.join("|"));
  await s.cancel();
  let last; for (;;) { const { value, done } = await it.next(); if (done) break; last = value; }
  const a = await c.getAgent(s.agentId); assert(a.status === "cancelled", a.status);
});
await check("sendRunInput", async () => {
  const evs = c.runStreaming({ agent: "echo", segments: seg("a"), userId: user, interactive: true });
  const it = evs[Symbol.asyncIterator](); let rid;
  for (;;) { const { value } = await it.next(); if (value.type === "agent") rid = value.run_id; if (value.type === "awaiting_input") break; }
  const r = await c.sendRunInput(rid, "b"); assert(r.delivered, JSON.stringify(r));
  for (;;) { const { value } = await it.next(); if (value.type === "steer") { assert(value.user_input.text === "b", JSON.stringify(value)); break; } }
  globalThis.parkedRun = rid; it.return();
});
await check("cancelTurn", async () => {
  const evs = c.runStreaming({ agent: "slow", segments: seg("long"), userId: user, interactive: true });
  const it = evs[Symbol.asyncIterator](); let rid;
  for (;;) { const { value } = await it.next(); if (value.type === "agent") { rid = value.run_id; globalThis.turnAgent = value.agent_id; break; } }
  await sleep(50);
  const r = await c.cancelTurn(rid, { reason: "stop" });
  assert(r.stopped === true, JSON.stringify(r));
  for (;;) { const { value } = await it.next(); if (value.type === "turn_cancelled") { assert(value.turn_cancelled.reason === "stop", JSON.stringify(value)); break; } }
  it.return(); globalThis.turnRun = rid;
});
await check("cancelAgent", async () => {
  const r = await c.cancelAgent(globalThis.turnAgent); assert(r.cancelledCount === 1, JSON.stringify(r));
});
await check("spawnRunBatch", async () => {
  const r = await c.spawnRunBatch({ spawns: [{ agent: "echo", segments: seg("one") }, { agent: "echo", segments: seg("two") }], timeoutMs: 15000 });
  assert(r.results.length === 2 && r.results[1].final_text === "two", JSON.stringify(r));
});
await check("runStreaming with sampling/tools/parentContext", async () => {
  const evs = await collect(c.runStreaming({ agent: "echo", segments: seg("x"), userId: user, tools: [],
    parentContext: { root_agent_run_id: "r_x" }, sampling: { temperature: 0 } }));
  assert(evs[1].parent_context && evs[1].parent_context.root_agent_run_id === "r_x", JSON.stringify(evs[1]));
  assert(evs.at(-1).type === "done", evs.map((e) => e.type).join(","));
});
await check("runStreaming with sessionId continues the session", async () => {
  const a = await c.getAgent(agentId);
  const evs = await collect(c.runStreaming({ agent: "echo", segments: seg("again"), sessionId: a.session_id }));
  assert(evs.find((e) => e.type === "session").text === a.session_id, JSON.stringify(evs[0]));
  assert(evs.at(-1).type === "done", evs.at(-1).type);
  let err; try { await collect(c.runStreaming({ agent: "echo", segments: seg("x"), sessionId: "s_x" })); } catch (e) { err = e; }
  assert(err && /session_not_found/.test(String(err.message)), String(err));
});
await check("listRunInterrupts + resolveInterrupt", async () => {
  const evs = c.runStreaming({ agent: "asker", segments: seg("go"), userId: user });
  const it = evs[Symbol.asyncIterator](); let rid, pending;
  for (;;) { const { value } = await it.next(); if (value.type === "agent") rid = value.run_id; if (value.type === "interruption_pending") { pending = value.interruption; break; } }
  const l = await c.listRunInterrupts(rid); assert(l.interrupts.length === 1, JSON.stringify(l));
  await c.resolveInterrupt(rid, pending.interrupt_id, { kind: pending.kind, answer: "yes" });
  for (;;) { const { value, done } = await it.next(); if (done || value.type === "done") break; }
});
await check("listUserInterrupts", async () => { const l = await c.listUserInterrupts(user, { status: "all" }); assert(l.interrupts.length >= 1, JSON.stringify(l)); });
await check("cancelInterrupt", async () => {
  const evs = c.runStreaming({ agent: "asker", segments: seg("go"), userId: user });
  const it = evs[Symbol.asyncIterator](); let rid, pending;
  for (;;) { const { value } = await it.next(); if (value.type === "agent") rid = value.run_id; if (value.type === "interruption_pending") { pending = value.interruption; break; } }
  await c.cancelInterrupt(rid, pending.interrupt_id); it.return();
});
await check("registerHook/listHooks/deleteHook", async () => {
  const h = await c.registerHook({ owner: "t", name: "h1", phase: "pre", callbackUrl: "http://127.0.0.1:9/hook", failMode: "open" });
  const l = await c.listHooks(); assert(l.some((x) => x.id === h.id), JSON.stringify(l));
  await c.deleteHook(h.id);
});
await check("agentDef create/get/verify", async () => {
  const made = await c.agentDef({ op: "create", name: "planner", overlay: { system_prompt: "Plan.", model: "echo" } });
  const got = await c.agentDef({ op: "get", name: "planner" });
  const v = await c.agentDef({ op: "verify", name: "planner", content_sha256: got.content_sha256 });
  assert(v.matches === true, JSON.stringify(v));
});
await check("skillDef list", async () => { const l = await c.skillDef({ op: "list" }); assert(l, "empty"); });
await check("listChannels", async () => { const l = await c.listChannels(); assert(Array.isArray(l) ? l.length >= 1 : (l.channels || []).length >= 1, JSON.stringify(l)); });
await check("createChannel/deleteChannel", async () => {
  const d = await c.createChannel({ name: "tmp-" + user, scope: "global", semantic: "queue", default_ttl: 60 });
  assert(d.default_ttl === 60, JSON.stringify(d)); await c.deleteChannel("tmp-" + user);
});
await check("publishChannel", async () => { await c.publishChannel("news", { scope: "global", payload: { hello: 1 } }); });
await check("peekChannel", async () => { const p = await c.peekChannel("news", { scope: "global" }); assert(JSON.stringify(p).includes("hello"), JSON.stringify(p)); });
await check("subscribeChannel", async () => { const s = await c.subscribeChannel("news", { scope: "global" }); assert(JSON.stringify(s).includes("hello"), JSON.stringify(s)); });
await check("awaitChannels", async () => { const r = await c.awaitChannels({ channels: ["news"], scope: "global", waitMs: 10 }); assert(r, "empty"); });
await check("setMemoryEntry/getMemoryEntry/listMemoryEntries/deleteMemoryEntry", async () => {
  await c.setMemoryEntry("user", user, "k1", { value: { v: 1 } });
  const g = await c.getMemoryEntry("user", user, "k1"); assert(JSON.stringify(g).includes('"v":1'), JSON.stringify(g));
  const l = await c.listMemoryEntries("user", user); assert(JSON.stringify(l).includes("k1"), JSON.stringify(l));
  await c.deleteMemoryEntry("user", user, "k1");
});
await check("memorySearch", async () => { const r = await c.memorySearch({ query: "x", scope: "user", scopeId: user, topK: 3 }); assert(Array.isArray(r.entries), JSON.stringify(r)); });
await check("continueSession", async () => {
  const a = await c.getAgent(agentId);
  const evs = await collect(c.continueSession({ sessionId: a.session_id, segments: seg("and more") }));
  assert(evs.find((e) => e.type === "session").text === a.session_id && evs.at(-1).type === "done", evs.map((e) => e.type).join(","));
});
await check("getTranscript", async () => {
  const a = await c.getAgent(agentId); const t = await c.getTranscript(a.session_id);
  assert(t.session.id === a.session_id && t.events.at(-1).type === "done", JSON.stringify(t).slice(0, 200));
});
await check("compactRun", async () => { await c.compactRun(runId); });
await check("whoami", async () => { await c.whoami(); });
await check("listMemoryScopes", async () => { await c.listMemoryScopes(); });

report();
