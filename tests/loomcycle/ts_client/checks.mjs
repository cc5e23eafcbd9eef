// The drivers' check harness (drive*.mjs import it; copy it beside them): `check(name, fn)` runs one
// named check — fn may return a note, and a note starting "PARTIAL" marks it partial — and
// `report()` prints a line a check and the counts, then exits 1 when a check failed.
export const results = [];

export async function check(name, fn) {
  try {
    const note = await fn();
    results.push([name, typeof note === "string" && note.startsWith("PARTIAL") ? "partial" : "ok", note || ""]);
  } catch (e) {
    results.push([name, "fail", String((e && e.stack) || e).slice(0, 400)]);
  }
}

export const assert = (cond, msg) => { if (!cond) throw new Error("assert: " + msg); };
export const seg = (t) => [{ role: "user", content: [{ type: "trusted-text", text: t }] }];
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
export const newUser = () => "u_" + Math.random().toString(16).slice(2, 10);

// every event of a stream, or those up to the first that `stopAt` accepts
export async function collect(it, stopAt) {
  const out = [];
  for await (const ev of it) { out.push(ev); if (stopAt && stopAt(ev)) break; }
  return out;
}

export function report() {
  for (const [name, status, note] of results) console.log(`${status.padEnd(7)} ${name}${note ? "  — " + note : ""}`);
  const count = (s) => results.filter((r) => r[1] === s).length;
  console.log(`\n${count("ok")} ok, ${count("partial")} partial, ${count("fail")} fail of ${results.length}`);
  process.exit(count("fail") ? 1 : 0);
}
