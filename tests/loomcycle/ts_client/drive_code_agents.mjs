// Issue 35's code agents, driven with loomcycle's own TypeScript client (adapters/ts, built from
// source; LOOMCYCLE_TS names its folder) against a served treadle with `code_agents.enabled` and an
// LLM agent `boss` (a scripted mock that spawns `ts-greeter` with the Agent tool).
// tests/loomcycle/test_ts_client.py runs it; README.md says how by hand.
const { LoomcycleClient } = await import((process.env.LOOMCYCLE_TS || "../ts") + "/dist/index.js");
const { assert, check, collect, newUser, report, seg } = await import("./checks.mjs");

const c = new LoomcycleClient({ baseUrl: process.env.BASE || "http://127.0.0.1:18827", authToken: process.env.TOKEN });
const user = newUser();
const CODE = `
function run(input) {
  var n = Memory.incr({scope: 'agent', key: 'ts-hits'});
  var t = Date.now(), r = Math.random();
  return {final_text: 'hello ' + input.prompt + ' #' + n.value + ' from ' + input.metadata.agent};
}
`;
const text = (events) => events.filter((e) => e.type === "text").map((e) => e.text).join("");

let first;
await check("ensureCodeAgent registers the code agent (changed: true, version 1)", async () => {
  first = await c.ensureCodeAgent({ name: "ts-greeter", code: CODE, tools: ["Memory"], description: "greets" });
  assert(first.name === "ts-greeter" && first.defId && first.version === 1 && first.changed === true, JSON.stringify(first));
});
await check("ensureCodeAgent with the same code is a no-op (changed: false, same def)", async () => {
  const again = await c.ensureCodeAgent({ name: "ts-greeter", code: CODE, tools: ["Memory"], description: "greets" });
  assert(again.changed === false && again.defId === first.defId && again.version === first.version, JSON.stringify(again));
});
await check("a run of the code agent streams its tool call and final text", async () => {
  const events = await collect(c.runStreaming({ agent: "ts-greeter", segments: seg("world"), userId: user }));
  const types = events.map((e) => e.type);
  assert(types.includes("tool_call") && types.includes("tool_result"), types.join(","));
  assert(text(events) === "hello world #1 from ts-greeter", text(events));
});
await check("ensureCodeAgent with new code makes version 2; the next run runs it", async () => {
  const v2 = await c.ensureCodeAgent({ name: "ts-greeter", code: CODE.replace("hello ", "hi "), tools: ["Memory"] });
  assert(v2.changed === true && v2.version === 2, JSON.stringify(v2));
  const events = await collect(c.runStreaming({ agent: "ts-greeter", segments: seg("again"), userId: user }));
  assert(text(events) === "hi again #2 from ts-greeter", text(events));
});
await check("an LLM agent spawns the code agent with the Agent tool", async () => {
  const events = await collect(c.runStreaming({ agent: "boss", segments: seg("go"), userId: user }));
  const result = events.find((e) => e.type === "tool_result");
  assert(result && JSON.stringify(result).includes("hi boss #3 from ts-greeter"), JSON.stringify(result));
  assert(text(events) === "boss done", text(events));
});
report();
