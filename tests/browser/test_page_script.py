"""The page's scripts without a browser: every file is served with the strict CSP, every route
they call exists, none writes HTML, and the tree, diff and live-count helpers work (under node)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from importlib import resources

import httpx
import pytest

from treadle.api.app import api_routers, create_app
from treadle.api.watchpage import ASSETS

WATCH = resources.files("treadle.api.watch")
SCRIPTS = {name: WATCH.joinpath(name).read_text() for name in ASSETS if name.endswith(".js")}


async def test_every_file_of_the_page_is_served_with_the_strict_csp() -> None:
    app = create_app(auth_token="t0ken-for-the-api", max_request_bytes=1 << 20)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://treadle") as c:
        page = (await c.get("/ui")).text
        for name, media in ASSETS.items():
            resp = await c.get(f"/ui/{name}")
            assert resp.status_code == 200 and resp.headers["content-type"].startswith(media.split(";")[0]), name
            assert "unsafe-inline" not in resp.headers["content-security-policy"]
            if name.endswith((".js", ".css")):
                assert f"/ui/{name}" in page, f"index.html does not load {name}"
        icon = await c.get("/favicon.ico")
        assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
    assert "<script>" not in page and "style=" not in page  # no inline code: the CSP would block it


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_a_script_calls_only_routes_that_exist_and_writes_no_html(name: str) -> None:
    js = SCRIPTS[name]
    literals = re.findall(r"`(/v1/[^`?]*)", js) + re.findall(r'"(/v1/[^"?]*)"', js)
    called = {re.sub(r"\$\{[^}]+\}", "X", m) for m in literals}
    assert called or name == "events.js", name  # events.js is data: the event catalogue's names
    patterns = [re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", r.path) + "$")  # type: ignore[attr-defined]
                for router in api_routers() for r in router.routes]
    assert sorted(p for p in called if not any(pat.match(p) for pat in patterns)) == []
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert sink not in js, f"{name} uses {sink}"


NODE = """
const m = require(process.argv[1]);
const runs = [  // newest first, as GET /v1/runs answers
  {run_id: "r_kid2", parent_run_id: "r_top", status: "completed"},
  {run_id: "r_grand", parent_run_id: "r_kid1", status: "waiting", waits: [{kind: "interrupt", key: "interrupt:i1"}]},
  {run_id: "r_kid1", parent_run_id: "r_top", status: "waiting", waits: [{kind: "agent", key: "agent:r_kid1:t"}]},
  {run_id: "r_top", parent_run_id: null, status: "waiting"},
  {run_id: "r_orphan", parent_run_id: "r_gone", status: "completed"},
];
const out = {
  tree: m.buildTree(runs).map((r) => [r.run.run_id, r.depth, r.asking]),
  diff: m.lineDiff(m.stableJson({b: 1, a: {y: 2, x: 1}}), m.stableJson({a: {x: 1, y: 3}, b: 1})),
  counts: m.liveCounts({iterations: 0, usage: {input_tokens: 0, output_tokens: 0}},
                       [{iteration: 1, usage: {input_tokens: 5, output_tokens: 2}},
                        {iteration: 3, usage: {input_tokens: 7, output_tokens: 1}}]),
  full: [m.fullText("tool_result", {text: "y".repeat(401)}).length, m.fullText("tool_result", {text: "short"}),
         m.fullText("tool_call", {tool_use: {input: {v: "z".repeat(500)}}}).length],
};
console.log(JSON.stringify(out));
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_tree_diff_and_live_counts_under_node() -> None:
    path = WATCH.joinpath("watch.js")
    proc = subprocess.run(["node", "-e", NODE, str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    # children under their parent (oldest first), a grandchild's question counted on both ancestors
    assert out["tree"] == [["r_top", 0, 1], ["r_kid1", 1, 1], ["r_grand", 2, 0], ["r_kid2", 1, 0],
                           ["r_orphan", 0, 0]]
    assert [(d["op"], d["line"].strip()) for d in out["diff"] if d["op"] != " "] == [("-", '"y": 2'), ("+", '"y": 3')]
    # the header counts the usage events the run row has not recorded yet ("iterations 0" was shown)
    assert out["counts"] == {"iterations": 3, "input": 12, "output": 3}
    assert out["full"] == [401, None, len(json.dumps({"v": "z" * 500}, separators=(",", ":")))]
