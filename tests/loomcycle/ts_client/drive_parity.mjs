// Issue 39's run and channel items, driven with loomcycle's own TypeScript client (adapters/ts, built
// from source) against a served treadle whose yaml has agents echo, asker (an Interruption) and
// channels news (global) and inbox (user scope); see README.md.
const { LoomcycleClient } = await import((process.env.LOOMCYCLE_TS || "../ts") + "/dist/index.js");
import { assert, check, newUser, report, seg, sleep } from "./checks.mjs";

const c = new LoomcycleClient({ baseUrl: process.env.BASE || "http://127.0.0.1:18807" });
const user = newUser();

await check("cancelTurn on a non-interactive run → 409 not_interactive, the run goes on", async () => {
  const it = c.runStreaming({ agent: "asker", segments: seg("ask"), userId: user })[Symbol.asyncIterator]();
  let rid, aid;
  for (;;) { const { value } = await it.next(); if (value.type === "agent") { rid = value.run_id; aid = value.agent_id; }
             if (value.type === "interruption_pending") break; }
  let err; try { await c.cancelTurn(rid, { reason: "esc" }); } catch (e) { err = e; }
  assert(err && err.status === 409 && JSON.stringify(err.body || err.message).includes("not_interactive"), String(err));
  const a = await c.getAgent(aid); assert(a.status === "waiting", a.status);
  const r = await c.cancelAgent(aid); assert(r.cancelledCount === 1, JSON.stringify(r));
  it.return();
});
await check("streamUserRunStates (stream_open, run_state, statuses filter)", async () => {
  const ac = new AbortController(); const seen = [];
  const reading = (async () => {
    try { for await (const item of c.streamUserRunStates(user, { statuses: ["completed"], signal: ac.signal })) {
      seen.push(item); if (item.kind === "event") break; } } catch (e) { if (!ac.signal.aborted) throw e; }
  })();
  while (seen.length === 0) await sleep(20);  // the stream is open
  for await (const _ of c.runStreaming({ agent: "echo", segments: seg("x"), userId: user })) { /* to the end */ }
  await Promise.race([reading, sleep(10000)]); ac.abort();
  assert(seen[0].kind === "open" && seen[0].payload.user_id === user, JSON.stringify(seen[0]));
  const ev = seen.find((s) => s.kind === "event");
  assert(ev && ev.payload.status === "completed" && ev.payload.agent === "echo", JSON.stringify(seen));
});
await check("updateChannel", async () => {
  const name = "p-" + user; await c.createChannel({ name, scope: "global", semantic: "queue", default_ttl: 60 });
  const d = await c.updateChannel(name, { description: "patched", default_ttl: 120 });
  assert(d.description === "patched" && d.default_ttl === 120, JSON.stringify(d)); await c.deleteChannel(name);
});
await check("purgeChannel", async () => {
  await c.publishChannel("news", { scope: "global", payload: { n: 1 } });
  const r = await c.purgeChannel("news"); assert(r.name === "news" && r.purged >= 1, JSON.stringify(r));
});
await check("broadcastChannels", async () => {
  const r = await c.broadcastChannels({ channels: ["news"], scope: "global", payload: { all: true } });
  assert(r.published === 1 && r.failed === 0 && r.results[0].msg_id, JSON.stringify(r));
});
await check("publish/peek/subscribe/ackChannel with scope user", async () => {
  await c.publishChannel("inbox", { scope: "user", userId: user, payload: { to: user } });
  const p = await c.peekChannel("inbox", { scope: "user", userId: user });
  assert(JSON.stringify(p).includes(user), JSON.stringify(p));
  const s = await c.subscribeChannel("inbox", { scope: "user", userId: user, fromCursor: "cur_0" });
  assert(s.messages.length === 1 && s.next_cursor, JSON.stringify(s));
  const a = await c.ackChannel("inbox", { scope: "user", userId: user, cursor: s.next_cursor });
  assert(a.ok === true, JSON.stringify(a));
});
await check("subscribeChannel waitMs", async () => {
  await c.subscribeChannel("news", { scope: "global", maxMessages: 100 });  // take what is there
  setTimeout(() => c.publishChannel("news", { scope: "global", payload: "late" }), 300);
  const s = await c.subscribeChannel("news", { scope: "global", waitMs: 5000 });
  assert(JSON.stringify(s.messages).includes("late"), JSON.stringify(s));
});

report();
