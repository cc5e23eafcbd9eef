// The `openai` npm SDK against a served treadle (tests/frontdoors/test_openai_npm.py runs it).
// Env: BASE (http://127.0.0.1:port/v1), TOKEN, OPENAI_NPM (a folder whose node_modules holds `openai`).
// Prints one line per check ("ok name" / "FAIL name: why"); exits 1 if any failed.
const { default: OpenAI } = await import(`${process.env.OPENAI_NPM}/node_modules/openai/index.mjs`);
const client = new OpenAI({ baseURL: process.env.BASE, apiKey: process.env.TOKEN, maxRetries: 0 });
let failed = 0;
async function check(name, fn) {
  try {
    await fn();
    console.log(`ok ${name}`);
  } catch (e) {
    failed += 1;
    console.log(`FAIL ${name}: ${e && e.message}`);
  }
}
function expect(cond, why) { if (!cond) throw new Error(why); }

await check("chat.completions.create", async () => {
  const r = await client.chat.completions.create({ model: "echo-alias", messages: [{ role: "user", content: "hi npm" }] });
  expect(r.choices[0].message.content === "hi npm", JSON.stringify(r));
});
await check("chat stream with usage", async () => {
  const s = await client.chat.completions.create({ model: "echo-alias", stream: true,
    stream_options: { include_usage: true }, messages: [{ role: "user", content: "streamed" }] });
  let text = "", usage = null;
  for await (const c of s) { text += c.choices[0]?.delta?.content ?? ""; usage = c.usage ?? usage; }
  expect(text === "streamed" && usage && usage.total_tokens > 0, text);
});
await check("responses.create", async () => {
  const r = await client.responses.create({ model: "echo-alias", input: "respond npm" });
  expect(r.status === "completed" && r.output_text === "respond npm", JSON.stringify(r));
});
await check("responses.stream", async () => {
  const s = client.responses.stream({ model: "echo-alias", input: "stream npm" });
  let deltas = "";
  s.on("response.output_text.delta", (e) => { deltas += e.delta; });
  const final = await s.finalResponse();
  expect(deltas === "stream npm" && final.output[0].content[0].text === "stream npm", JSON.stringify(final));
});
await check("an agent's function call as a responses item", async () => {
  const tools = [{ type: "function", name: "get_weather", description: "The weather", strict: false,
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } }];
  const r = await client.responses.create({ model: "weather", input: "weather in Paris?", tools });
  const call = r.output.at(-1);
  expect(call.type === "function_call" && call.name === "get_weather", JSON.stringify(r.output));
  const r2 = await client.responses.create({ model: "weather", tools, input: [
    { role: "user", content: "weather in Paris?" }, ...r.output,
    { type: "function_call_output", call_id: call.call_id, output: "22 C" }] });
  expect(r2.output_text === "It is sunny in Paris.", r2.output_text);
});
await check("errors in OpenAI's shape", async () => {
  try {
    await client.responses.create({ model: "echo-alias", input: "x", background: true });
    throw new Error("no error");
  } catch (e) {
    expect(e.status === 400 && e.param === "background" && e.code === "unsupported_parameter", String(e));
  }
});
await check("embeddings echo the model name", async () => {
  const r = await client.embeddings.create({ model: "text-embedding-3-small", input: "the cat" });
  expect(r.model === "text-embedding-3-small" && r.data[0].embedding.length === 384, r.model);
});
const { zodResponseFormat, zodTextFormat } = await import(`${process.env.OPENAI_NPM}/node_modules/openai/helpers/zod.mjs`);
const { z } = await import(`${process.env.OPENAI_NPM}/node_modules/zod/index.js`);
const City = z.object({ name: z.string(), population: z.number().int() });
const oslo = '{"name": "Oslo", "population": 709000}';
await check("chat.completions.parse with zod", async () => {
  const r = await client.chat.completions.parse({ model: "echo-alias", messages: [{ role: "user", content: oslo }],
    response_format: zodResponseFormat(City, "city") });
  const parsed = r.choices[0].message.parsed;
  expect(parsed && parsed.name === "Oslo" && parsed.population === 709000, JSON.stringify(r.choices[0].message));
});
await check("responses.parse with zod", async () => {
  const r = await client.responses.parse({ model: "echo-alias", input: oslo, text: { format: zodTextFormat(City, "city") } });
  expect(r.output_parsed && r.output_parsed.population === 709000, JSON.stringify(r.output));
});
async function settled(id) {
  for (let i = 0; i < 300; i++) {
    const r = await client.responses.retrieve(id);
    if (!["queued", "in_progress"].includes(r.status)) return r;
    await new Promise((ok) => setTimeout(ok, 100));  // poll, as a client of a background response does
  }
  throw new Error(`response ${id} never settled`);
}
await check("background: retrieve, resume with starting_after, input_items, delete", async () => {
  const bg = await client.responses.create({ model: "counter", input: "count", background: true });
  expect(bg.status === "queued" && bg.background === true, JSON.stringify(bg));
  const done = await settled(bg.id);
  expect(done.status === "completed" && done.output_text, JSON.stringify(done));
  const whole = [], rest = [];
  for await (const e of await client.responses.retrieve(bg.id, { stream: true })) whole.push(e);
  for await (const e of await client.responses.retrieve(bg.id, { stream: true, starting_after: 2 })) rest.push(e);
  expect(whole.every((e, i) => e.sequence_number === i) && whole.at(-1).type === "response.completed",
    JSON.stringify(whole.map((e) => e.type)));
  expect(JSON.stringify(rest) === JSON.stringify(whole.slice(3)), JSON.stringify(rest.map((e) => e.sequence_number)));
  const items = await client.responses.inputItems.list(bg.id);
  expect(items.data.length === 1 && items.data[0].role === "user", JSON.stringify(items.data));
  await client.responses.delete(bg.id);
  try {
    await client.responses.retrieve(bg.id);
    throw new Error("still there");
  } catch (e) {
    expect(e.status === 404 && e.code === "response_not_found", String(e));
  }
});
await check("responses.cancel of a running background response", async () => {
  // the Python side scripted the fake vendor's next answer to come late: the run is in its model call
  const bg = await client.responses.create({ model: "vendor-agent", input: "x", background: true });
  const cancelled = await client.responses.cancel(bg.id);
  expect(cancelled.status === "cancelled", JSON.stringify(cancelled));
  expect((await client.responses.retrieve(bg.id)).status === "cancelled", "not kept cancelled");
});
await check("conversation: the agent's session", async () => {
  const first = await client.responses.create({ model: "helper", input: "hello" });
  const session = first.treadle.session_id;
  const second = await client.responses.create({ model: "helper", input: "again", conversation: session });
  expect(second.conversation && second.conversation.id === session, JSON.stringify(second));
});
console.log(`checks ${failed ? "failed" : "passed"}: ${failed} failed`);
process.exit(failed ? 1 : 0);
