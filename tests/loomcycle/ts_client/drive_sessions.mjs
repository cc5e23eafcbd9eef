// Issue 34's sessions, driven with loomcycle's own TypeScript client (adapters/ts, built from
// source; LOOMCYCLE_TS names its folder) against a served treadle whose yaml has agent `script`
// (answers "one", "two", "three" by how many assistant turns it sees) and `slow` (an echo that
// takes 400 ms). tests/loomcycle/test_ts_client.py runs it; README.md says how by hand.
const { LoomcycleClient, SessionNotFoundError, SessionBusyError } =
  await import((process.env.LOOMCYCLE_TS || "../ts") + "/dist/index.js");
const { assert, check, collect, newUser, report, seg } = await import("./checks.mjs");

const c = new LoomcycleClient({ baseUrl: process.env.BASE || "http://127.0.0.1:18817", authToken: process.env.TOKEN });
const user = newUser();
const texts = (evs) => evs.filter((e) => e.type === "text").map((e) => e.text);

let sessionId, thirdRun;
await check("runStreaming opens a session; continueSession continues it with its history", async () => {
  const first = await collect(c.runStreaming({ agent: "script", segments: seg("hi"), userId: user }));
  const s = first.find((e) => e.type === "session");
  sessionId = s.text;
  assert(sessionId && sessionId.startsWith("s_"), JSON.stringify(s));
  assert(JSON.stringify(texts(first)) === '["one"]', JSON.stringify(texts(first)));
  const second = await collect(c.continueSession({ sessionId, segments: seg("and?") }));
  assert(JSON.stringify(texts(second)) === '["two"]', JSON.stringify(texts(second)));
  assert(second.find((e) => e.type === "session").text === sessionId, "same session");
  assert(second[second.length - 1].type === "done", second[second.length - 1].type);
});
await check("a loomcycle-shaped session_id run (runStreaming { sessionId }) continues the conversation", async () => {
  const third = await collect(c.runStreaming({ agent: "script", segments: seg("more"), sessionId }));
  assert(JSON.stringify(texts(third)) === '["three"]', JSON.stringify(texts(third)));
  thirdRun = third.find((e) => e.type === "agent").run_id;
});
await check("getTranscript spans the session's runs", async () => {
  const t = await c.getTranscript(sessionId);
  assert(t.session.id === sessionId && t.session.agent === "script", JSON.stringify(t.session));
  const said = t.events.filter((e) => e.type === "text").map((e) => e.event.text);
  assert(JSON.stringify(said) === '["one","two","three"]', JSON.stringify(said));
  assert(new Set(t.events.map((e) => e.run_id)).size === 3, "three runs");
});
await check("compactRun on an ended run → the marker; the session goes on from it", async () => {
  const r = await c.compactRun(thirdRun, { reason: "tidy" });
  assert(r.run_id === thirdRun && r.compacted === true && r.applied === "marker", JSON.stringify(r));
  const t = await c.getTranscript(sessionId);
  const mark = t.events.find((e) => e.type === "context_compaction");
  assert(mark && mark.event.trigger === "manual", JSON.stringify(mark));
  const next = await collect(c.continueSession({ sessionId, segments: seg("go on") }));
  assert(next[next.length - 1].type === "done", next[next.length - 1].type);
});
await check("replaySession seeds a new session from the conversation; continueSession goes on there", async () => {
  const r = await c.replaySession(sessionId, { agent: "script" });
  assert(r.new_session_id && r.new_session_id !== sessionId && r.seed_run_id, JSON.stringify(r));
  assert(r.compacted === false && r.events_copied > 0, JSON.stringify(r));
  const t = await c.getTranscript(r.new_session_id);
  const said = t.events.filter((e) => e.type === "text").map((e) => e.event.text);
  assert(said.length >= 3 && said[0] === "one", JSON.stringify(said));
  const next = await collect(c.continueSession({ sessionId: r.new_session_id, segments: seg("again") }));
  assert(next.find((e) => e.type === "session").text === r.new_session_id, "the new session");
  assert(next[next.length - 1].type === "done", next[next.length - 1].type);
  let err; try { await c.replaySession("s_nope", { agent: "script" }); } catch (e) { err = e; }
  assert(err instanceof SessionNotFoundError, String(err));
});
await check("continueSession on an unknown session → SessionNotFoundError", async () => {
  let err; try { await collect(c.continueSession({ sessionId: "s_nope", segments: seg("x") })); } catch (e) { err = e; }
  assert(err instanceof SessionNotFoundError, String(err));
});
await check("continueSession while a run of the session is live → SessionBusyError", async () => {
  const it = c.runStreaming({ agent: "slow", segments: seg("x"), userId: user })[Symbol.asyncIterator]();
  let sid; for (;;) { const { value } = await it.next(); if (value.type === "session") { sid = value.text; break; } }
  let err; try { await collect(c.continueSession({ sessionId: sid, segments: seg("y") })); } catch (e) { err = e; }
  assert(err instanceof SessionBusyError, String(err));
  for (;;) { const { done } = await it.next(); if (done) break; }
});

report();
