// Drives a served treadle's team workflows with loomcycle's own TypeScript client (adapters/ts,
// built from source): the 7 team methods, and a refused graph as the client's typed error.
// The served treadle needs agents `echo` and `echo2` (model echo); see README.md.
import { LoomcycleClient, SubstrateToolRefusedError } from "../ts/dist/index.js";
import { assert, check, report } from "./checks.mjs";

const c = new LoomcycleClient({ baseUrl: process.env.BASE || "http://127.0.0.1:18787" });
const team = "ts-team-" + Math.random().toString(16).slice(2, 8);
const graph = {
  entry: "write", max_iterations: 2,
  states: [
    { state: "write", handler: { kind: "agent", agent: "echo" } },
    { state: "review", handler: { kind: "parallel", agents: ["echo", "echo2"], consolidator: "echo" } },
    { state: "done", handler: { kind: "terminal" } },
  ],
  transitions: [
    { from: "write", to: "review", on: "success" },
    { from: "review", to: "write", on: "pushback:rework" },
    { from: "review", to: "done", on: "success" },
  ],
};
let created;
await check("listTeams (before)", async () => { const l = await c.listTeams(); assert(!(l.names || []).some((n) => n.name === team), JSON.stringify(l)); });
await check("createTeam", async () => {
  created = await c.createTeam(team, graph);
  assert(created.name === team && created.version === 1 && created.def_id, JSON.stringify(created));
});
await check("createTeam refuses an invalid graph (SubstrateToolRefusedError)", async () => {
  try { await c.createTeam(team + "-bad", { ...graph, transitions: [graph.transitions[0]] }); }
  catch (e) { assert(e instanceof SubstrateToolRefusedError && /invalid TeamDef: state .done. is unreachable/.test(e.message), e.name + " " + e.message); return; }
  throw new Error("not refused");
});
await check("getTeamDef", async () => {
  const d = await c.getTeamDef(created.def_id);
  assert(d.definition.entry === "write" && d.content_sha256.startsWith("sha256:") && d.retired === false, JSON.stringify(d));
});
await check("renderTeamDiagram", async () => {
  const d = await c.renderTeamDiagram(team, { highlightState: "review" });
  assert(d.format === "mermaid" && d.diagram.startsWith("stateDiagram-v2") && d.diagram.includes("_hl"), d.diagram);
});
await check("forkTeam", async () => {
  const f = await c.forkTeam(team, { colors: { states: { write: "green" } } });
  assert(f.version === 2 && f.name === team, JSON.stringify(f));
});
await check("runTeam", async () => {
  const r = await c.runTeam({ name: team, input: "owls" });
  assert(r.status === "completed" && r.final_state === "done" && r.steps.length === 2, JSON.stringify(r).slice(0, 300));
});
await check("listTeams (after)", async () => {
  const l = await c.listTeams(); const me = (l.names || []).find((n) => n.name === team);
  assert(me && me.version_count === 2 && me.active_def_id === created.def_id, JSON.stringify(l));
});
await check("deleteTeam", async () => { const r = await c.deleteTeam(team); assert(r.deleted === true && r.name === team, JSON.stringify(r)); });

report();
