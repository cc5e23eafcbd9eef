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
process.exit(failed ? 1 : 0);
