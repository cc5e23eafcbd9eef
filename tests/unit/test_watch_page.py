"""The run-watching page: served with a strict CSP, its script only calls routes that exist and
never writes HTML, and its SSE parser and event formatting work (run under node)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from importlib import resources

import httpx
import pytest

from treadle.api.app import api_routers, create_app

JS = resources.files("treadle.api.watch").joinpath("watch.js").read_text()


async def get(path: str) -> httpx.Response:
    app = create_app(auth_token="t0ken-for-the-api", max_request_bytes=1 << 20)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://treadle") as c:
        return await c.get(path)


async def test_the_page_and_its_files_are_served_with_a_strict_csp() -> None:
    page = await get("/ui")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "default-src 'none'" in csp and "unsafe-inline" not in csp
    assert page.headers["x-content-type-options"] == "nosniff"
    assert '<script src="/ui/watch.js"' in page.text and "<script>" not in page.text  # no inline script
    js = await get("/ui/watch.js")
    assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript") and js.text == JS
    assert (await get("/ui/watch.css")).headers["content-type"].startswith("text/css")
    missing = await get("/ui/secrets.txt")
    assert (missing.status_code, missing.json()["code"]) == (404, "not_found")
    root = await get("/")
    assert root.status_code == 307 and root.headers["location"] == "/ui"


def test_the_script_calls_only_routes_that_exist_and_writes_no_html() -> None:
    literals = re.findall(r"`(/v1/[^`?]*)", JS) + re.findall(r'"(/v1/[^"?]*)"', JS)
    called = {re.sub(r"\$\{[^}]+\}", "X", m) for m in literals}
    assert len(called) >= 6
    patterns = [re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", r.path) + "$")  # type: ignore[attr-defined]
                for router in api_routers() for r in router.routes]
    unknown = sorted(p for p in called if not any(pat.match(p) for pat in patterns))
    assert unknown == []
    assert "innerHTML" not in JS and "insertAdjacentHTML" not in JS and "document.write" not in JS


NODE_CHECK = """
const { parseSse, describe } = require(process.argv[1]);
const out = {};
let r = parseSse(": keepalive\\n\\nid: 3\\nevent: text\\ndata: {\\"text\\": \\"hi\\"}\\n\\n" +
                 "id: 4\\nevent: tool_call\\ndata: {\\"a\\"");
out.first = r;
r = parseSse(r.rest + ": 1}\\r\\n\\r\\ndata: line1\\ndata: line2\\n\\n");
out.second = r;
out.d = [
  describe("tool_result", {tool_use: {name: "Memory"}, text: "boom", is_error: true}),
  describe("tool_call", {tool_use: {name: "Memory", input: {op: "get"}}}),
  describe("done", {stop_reason: "end_turn", usage: {input_tokens: 5, output_tokens: 2}}),
  describe("text", {text: "<b>not html</b>"}),
  describe("something_new", {x: 1}),
];
console.log(JSON.stringify(out));
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_sse_parsing_and_event_formatting_under_node() -> None:
    path = resources.files("treadle.api.watch").joinpath("watch.js")
    proc = subprocess.run(["node", "-e", NODE_CHECK, str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["first"]["events"] == [{"id": "3", "event": "text", "data": '{"text": "hi"}'}]
    assert out["first"]["rest"].startswith("id: 4")
    assert out["second"]["events"] == [
        {"id": "4", "event": "tool_call", "data": '{"a": 1}'},
        {"id": None, "event": "message", "data": "line1\nline2"},
    ]
    assert out["second"]["rest"] == ""
    err, call, done, text, other = out["d"]
    assert err == {"cls": "tool_result error", "text": "✗ Memory boom"}
    assert call == {"cls": "tool_call", "text": '→ Memory {"op":"get"}'}
    assert done["text"] == "■ done: end_turn · 5 in / 2 out tokens"
    assert text == {"cls": "text", "text": "<b>not html</b>"}  # shown as text by the page
    assert other == {"cls": "other", "text": 'something_new {"x":1}'}
