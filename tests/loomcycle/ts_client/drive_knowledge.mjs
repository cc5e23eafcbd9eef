// Issue 41's knowledge surface driven with loomcycle's own TypeScript client (adapters/ts, built from
// source; LOOMCYCLE_TS names its folder): path() with each Path op, document() with every op of the
// client's DocumentToolInput (those treadle builds answer; the others must be refused by name, as
// SubstrateToolRefusedError — counted "partial"), memorySearch() with rank/dedup/sources, and SQL
// memory through a run of an agent whose config grants sql_scopes (loomcycle's field). The served
// treadle needs the local embedder, memory.sql, and agent `sqler` (tests/loomcycle/test_ts_client.py).
const { LoomcycleClient, SubstrateToolRefusedError, InvalidArgumentError } =
  await import((process.env.LOOMCYCLE_TS || "../ts") + "/dist/index.js");
const { assert, check, collect, newUser, report, seg } = await import("./checks.mjs");

const c = new LoomcycleClient({ baseUrl: process.env.BASE || "http://127.0.0.1:18827", authToken: process.env.TOKEN });
const who = newUser(); // the agent-scope store the checks browse (?scope_id=)
const P = (input) => c.path({ scope: "agent", ...input }, { scopeId: who });
const D = (input) => c.document({ scope: "agent", ...input }, { scopeId: who });
const J = (x) => JSON.stringify(x);

// -- Path ------------------------------------------------------------------------------------------
await check("path mkdir", async () => { const r = await P({ op: "mkdir", path: "/teams/alpha" }); assert(r.ok && r.created === true, J(r)); });
await check("path ls (recursive, kind_filter)", async () => {
  const r = await P({ op: "ls", path: "/", recursive: true, kind_filter: "directory" });
  assert(r.entries.map((e) => e.full_path).includes("/teams/alpha"), J(r));
});
await check("path stat", async () => { const r = await P({ op: "stat", path: "/teams/alpha" }); assert(r.kind === "directory" && r.scope === "agent", J(r)); });
await check("path mv", async () => { const r = await P({ op: "mv", path: "/teams/alpha", to: "/teams/beta" }); assert(r.ok && r.to === "/teams/beta", J(r)); });
await check("path rm", async () => { const r = await P({ op: "rm", path: "/teams/beta" }); assert(r.ok && r.n_removed >= 1, J(r)); });

// -- Document: the ops treadle builds ------------------------------------------------------------------
let doc, phase, task, other, imported;
await check("document create_document (path, tags)", async () => {
  doc = await D({ op: "create_document", title: "Launch", path: "/docs/launch", type: "plan", tags: ["q3"] });
  assert(doc.document_id && doc.root_chunk_id && doc.path === "/docs/launch", J(doc));
});
await check("path resolve (a document's name)", async () => {
  const r = await P({ op: "resolve", path: "/docs/launch" });
  assert(r.kind === "document" && r.resource_ref.document_id === doc.document_id, J(r));
});
await check("document get_document (by path)", async () => { const r = await D({ op: "get_document", path: "/docs/launch" }); assert(r.document_id === doc.document_id && r.type === "plan", J(r)); });
await check("document set_path", async () => { const r = await D({ op: "set_path", id: doc.document_id, path: "/docs/launch-q3" }); assert(r.path === "/docs/launch-q3", J(r)); });
await check("document define_type (JSON Schema fields)", async () => {
  const r = await D({ op: "define_type", name: "task", fields: { type: "object", properties: { owner: { type: "string" } }, required: ["owner"] } });
  assert(r.ok, J(r));
});
await check("document list_types", async () => { const r = await D({ op: "list_types" }); assert(r.types.some((t) => t.name === "task"), J(r)); });
await check("document create_chunk", async () => {
  phase = await D({ op: "create_chunk", document_id: doc.document_id, title: "Phase 1", type: "phase" });
  task = await D({ op: "create_chunk", document_id: doc.document_id, parent_id: phase.id, title: "Docs", type: "task",
    status: "open", fields: { owner: "ada" }, body: "draft one\nline two\n", tags: ["area/docs"] });
  other = await D({ op: "create_chunk", document_id: doc.document_id, title: "Phase 2" });
  assert(task.revision === 1 && task.parent_id === phase.id, J(task));
});
await check("document create_chunk refused on bad fields (fields_invalid)", async () => {
  try { await D({ op: "create_chunk", document_id: doc.document_id, title: "x", type: "task", fields: {} }); }
  catch (e) { assert(e instanceof SubstrateToolRefusedError && /fields_invalid|owner/.test(e.message), e.name + e.message); return; }
  throw new Error("not refused");
});
await check("document get_chunk", async () => { const r = await D({ op: "get_chunk", id: task.id }); assert(r.body.startsWith("draft one") && r.tags[0] === "area/docs", J(r)); });
await check("document update_chunk (revision), a stale one refused", async () => {
  const r = await D({ op: "update_chunk", id: task.id, revision: 1, body: "draft two\nline two\n", status: "doing" });
  assert(r.revision === 2, J(r));
  try { await D({ op: "update_chunk", id: task.id, revision: 1, body: "lost" }); }
  catch (e) { assert(e instanceof SubstrateToolRefusedError && /stale_revision|revision conflict/.test(e.message), e.name + e.message); return; }
  throw new Error("stale edit not refused");
});
await check("document history", async () => { const r = await D({ op: "history", id: task.id }); assert(J(r.revisions.map((x) => x.revision)) === "[2,1]", J(r)); });
await check("document get_version", async () => { const r = await D({ op: "get_version", id: task.id, revision: 1 }); assert(r.body.startsWith("draft one"), J(r)); });
await check("document diff", async () => { const r = await D({ op: "diff", id: task.id, from_revision: 1, to_revision: 2 }); assert(r.diff.includes("-draft one") && r.diff.includes("+draft two"), J(r)); });
await check("document move_chunk", async () => { const r = await D({ op: "move_chunk", id: task.id, new_parent_id: other.id }); assert(r.ok && r.new_parent_id === other.id, J(r)); });
await check("document reorder_chunk", async () => { const r = await D({ op: "reorder_chunk", id: other.id, direction: "up" }); assert(r.reordered === true, J(r)); });
await check("document link_chunks", async () => { const r = await D({ op: "link_chunks", from_id: phase.id, to_id: task.id, kind: "blocks" }); assert(r.ok, J(r)); });
await check("document get_edges", async () => { const r = await D({ op: "get_edges", document_id: doc.document_id }); assert(r.edges.some((e) => e.kind === "blocks"), J(r)); });
await check("document backlinks", async () => { const r = await D({ op: "backlinks", id: task.id }); assert(r.backlinks[0].from_id === phase.id, J(r)); });
await check("document unlink_chunks", async () => { const r = await D({ op: "unlink_chunks", from_id: phase.id, to_id: task.id, kind: "blocks" }); assert(r.removed === true, J(r)); });
await check("document add_tags", async () => { const r = await D({ op: "add_tags", id: other.id, tags: ["area/ops"] }); assert(J(r.tags) === '["area/ops"]', J(r)); });
await check("document remove_tags", async () => { const r = await D({ op: "remove_tags", id: other.id, tags: ["area/ops"] }); assert(J(r.tags) === "[]", J(r)); });
await check("document list_tags", async () => { const r = await D({ op: "list_tags" }); assert(r.tags.some((t) => t.tag === "q3"), J(r)); });
await check("document query_chunks (type/status, tag_prefix)", async () => {
  const r = await D({ op: "query_chunks", document_id: doc.document_id, type: "task", status: "doing" });
  const t = await D({ op: "query_chunks", tag_prefix: "area" });
  assert(r.chunks.length === 1 && t.chunks[0].id === task.id, J([r, t]));
});
await check("document query_documents", async () => { const r = await D({ op: "query_documents", tag: "q3" }); assert(r.documents[0].document_id === doc.document_id, J(r)); });
await check("document search (bodies by meaning)", async () => { const r = await D({ op: "search", query: "second draft", limit: 1 }); assert(r.chunks[0].chunk_id === task.id, J(r)); });
await check("document export_md", async () => {
  const r = await D({ op: "export_md", document_id: doc.document_id });
  assert(r.markdown.includes("Phase 1") && r.markdown.includes("loom:"), r.markdown.slice(0, 200));
  imported = r.markdown;
});
await check("document import_md", async () => { const r = await D({ op: "import_md", markdown: imported, path: "/docs/copy" }); assert(r.chunks_created >= 3, J(r)); });
await check("document delete_chunk", async () => { const r = await D({ op: "delete_chunk", id: other.id }); assert(r.deleted === true && r.cascade_deleted_descendants === 1, J(r)); });
await check("document delete_document", async () => { const r = await D({ op: "delete_document", id: doc.document_id }); assert(r.deleted === true, J(r)); });

// -- Document: loomcycle's ops treadle does not build — refused by name -------------------------------
for (const op of ["documents_summary", "upsert_chunk", "supersede_chunk", "graph_recall", "set_asset", "get_asset",
  "related", "unlinked_mentions", "export_canvas", "import_canvas", "list_facts", "judge_fact", "verbatim_answer",
  "verification_stats", "remember", "propose_entity", "set_remote", "sync", "diff_remote"]) {
  await check(`document ${op}`, async () => {
    try { await D({ op, id: "x" }); }
    catch (e) { assert(e instanceof SubstrateToolRefusedError && /op_not_supported/.test(e.message), e.name + e.message); return "PARTIAL refused by name: " + e.message.split(": ").slice(-1)[0].slice(0, 70); }
    throw new Error("not refused");
  });
}

// -- memorySearch --------------------------------------------------------------------------------------
await check("memorySearch with rank, dedup and sources (a document chunk and notes)", async () => {
  await c.setMemoryEntry("agent", who, "note", { value: "The Postgres runbook lives in the wiki.", embed: true });
  const d = await D({ op: "create_document", title: "Ops" });
  await D({ op: "create_chunk", document_id: d.document_id, title: "Runbook", body: "Postgres deploys follow the wiki runbook." });
  const r = await c.memorySearch({ query: "postgres runbook", scope: "agent", scopeId: who, topK: 5,
    rank: { recency_weight: 0.1 }, dedup: { enabled: true, mode: "keep" }, sources: ["documents", "facts", "notes"] });
  const kinds = new Set(r.entries.map((e) => e.kind));
  assert(kinds.has("document") && kinds.has("note") && r.entries.every((e) => typeof e.rank_score === "number"), J(r));
  assert(r.entries[0].kind === "document" && r.entries[0].title === "Runbook" && r.entries[0].chunk_id, J(r.entries[0]));
});
await check("memorySearch refuses documents with only notes (InvalidArgumentError, invalid_sources)", async () => {
  try { await c.memorySearch({ query: "x", scope: "agent", scopeId: who, sources: ["documents", "notes"] }); }
  catch (e) { assert(e instanceof InvalidArgumentError && /sources/.test(e.message), e.name + e.message); return; }
  throw new Error("not refused");
});

// -- SQL memory through a run of an agent configured with sql_scopes ----------------------------------------
await check("SQL memory (sql_exec, sql_query; a scope outside sql_scopes refused) in a run", async () => {
  const evs = await collect(c.runStreaming({ agent: "sqler", segments: seg("count"), userId: newUser() }));
  const results = evs.filter((e) => e.type === "tool_result");
  assert(results.length === 4, J(evs.map((e) => e.type)));
  const [made, put, read, denied] = results;
  assert(!made.is_error && !put.is_error && JSON.parse(put.text).rows_affected === 2, J([made, put]));
  assert(J(JSON.parse(read.text).rows) === '[["a",1],["b",2]]', read.text);
  assert(denied.is_error && /sql_scope_not_permitted|not permitted/.test(denied.text), denied.text);
});

report();
