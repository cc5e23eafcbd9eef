// Issue 36's pause and snapshots, driven with loomcycle's own TypeScript client (adapters/ts, built
// from source; LOOMCYCLE_TS names its folder) against a served treadle whose yaml has agent `slow`
// (an echo that takes 400 ms). tests/loomcycle/test_ts_client.py runs it; README.md says how by hand.
const { LoomcycleClient, AlreadyPausingError, NotPausedError, SnapshotNotFoundError, SnapshotTooLargeError,
  SnapshotVersionError } = await import((process.env.LOOMCYCLE_TS || "../ts") + "/dist/index.js");
const { assert, check, collect, newUser, report, seg } = await import("./checks.mjs");

const c = new LoomcycleClient({ baseUrl: process.env.BASE || "http://127.0.0.1:18817", authToken: process.env.TOKEN });
const user = newUser();
const refused = async (fn, cls) => { let err; try { await fn(); } catch (e) { err = e; } assert(err instanceof cls, String(err)); };

let snapId, envelope;
await check("pauseRuntime parks the runtime, getRuntimeState says so, a second pause → AlreadyPausingError", async () => {
  const p = await c.pauseRuntime({ timeoutMs: 5000 });
  assert(p.state === "paused" && p.force_cancelled_count === 0, JSON.stringify(p));
  const s = await c.getRuntimeState();
  assert(s.state === "paused" && typeof s.paused_runs_count === "number", JSON.stringify(s));
  await refused(() => c.pauseRuntime(), AlreadyPausingError);
});
await check("resumeRuntime → running; a second resume → NotPausedError", async () => {
  const r = await c.resumeRuntime();
  assert(r.state === "running" && typeof r.resumed_runs_count === "number", JSON.stringify(r));
  await refused(() => c.resumeRuntime(), NotPausedError);
});
await check("createSnapshot / listSnapshots / getSnapshot (a run's transcript inside)", async () => {
  const ran = await collect(c.runStreaming({ agent: "slow", segments: seg("keep me"), userId: user }));
  const runId = ran.find((e) => e.type === "agent").run_id;
  const label = "ts-" + user;
  const made = await c.createSnapshot({ label, includeHistory: true });
  snapId = made.id;
  assert(snapId.startsWith("snap_") && made.schema_version === 1 && made.byte_size > 0, JSON.stringify(made));
  const listed = await c.listSnapshots({ labelContains: label });
  assert(listed.length === 1 && listed[0].id === snapId, JSON.stringify(listed));
  const got = await c.getSnapshot(snapId);
  envelope = got.json_content;
  assert(envelope.sections.runs.entries.some((r) => r.id === runId), "the run is in the snapshot");
  const url = c.exportSnapshotURL(snapId);
  const res = await fetch(url, { headers: process.env.TOKEN ? { authorization: "Bearer " + process.env.TOKEN } : {} });
  assert(res.ok, "export answers " + res.status);
  const exported = await res.json();
  assert(exported.checksum === envelope.checksum && exported.sections.runs.entries.length === envelope.sections.runs.entries.length,
    "the export is the document");
});
await check("restoreSnapshot by id and inline: rows already here are not written again", async () => {
  const byId = await c.restoreSnapshot({ snapshotId: snapId, includeHistory: true });
  assert(byId.restored.runs === 0 && byId.transcript_events_restored === 0, JSON.stringify(byId));
  const inline = await c.restoreSnapshot({ json: envelope });
  assert(typeof inline.paused_runs_restored === "number", JSON.stringify(inline));
});
await check("typed errors: SnapshotNotFoundError, SnapshotTooLargeError, SnapshotVersionError", async () => {
  await refused(() => c.getSnapshot("snap_0_missing"), SnapshotNotFoundError);
  await refused(() => c.createSnapshot({ maxBytes: 10 }), SnapshotTooLargeError);
  await refused(() => c.restoreSnapshot({ json: { ...envelope, schema_version: 99 } }), SnapshotVersionError);
});
await check("deleteSnapshot is idempotent", async () => {
  await c.deleteSnapshot(snapId);
  await c.deleteSnapshot(snapId);
  await refused(() => c.getSnapshot(snapId), SnapshotNotFoundError);
});

report();
