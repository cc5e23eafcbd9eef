// Parses Mermaid source from stdin with mermaid's own parser (a jsdom window for its sanitizer).
import { JSDOM } from "jsdom";
const dom = new JSDOM("<!doctype html><html><body></body></html>");
globalThis.window = dom.window;
globalThis.document = dom.window.document;
const { default: mermaid } = await import("mermaid");
const src = await new Promise((r) => { let d = ""; process.stdin.on("data", (c) => (d += c)); process.stdin.on("end", () => r(d)); });
try {
  const res = await mermaid.parse(src);
  console.log(JSON.stringify({ ok: true, type: res.diagramType }));
} catch (e) {
  console.log(JSON.stringify({ ok: false, error: String(e && e.message || e).slice(0, 300) }));
}
