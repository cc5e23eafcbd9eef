"""The caller's `allowed_hosts` on POST /v1/runs: validated, stored on the run, inherited by its
sub-agent runs (a child never reaches further than its parent)."""

from __future__ import annotations

from typing import Any

import httpx

from treadle.api.app import create_app
from treadle.store.runs import NewRun
from treadle.testing import ACCEPT_JSON

SPAWNER = {"model": "script", "tools": ["Agent"],
           "mock": {"script": [{"tool": "Agent", "input": {"op": "spawn", "name": "child", "prompt": "go"}},
                               {"text": "done"}]}}


async def test_allowed_hosts_are_checked_stored_and_inherited(open_runtime: Any) -> None:
    rt, disp = await open_runtime({"parent": SPAWNER, "child": {"model": "echo"}})
    app = create_app(auth_token=None, max_request_bytes=1 << 20)
    app.state.runtime = rt
    async with httpx.AsyncClient(headers=ACCEPT_JSON, transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        bad = await c.post("/v1/runs", json={"agent": "parent", "prompt": "p", "allowed_hosts": ["no spaces!"]})
        assert bad.status_code == 422 and "allowed_hosts" in bad.text
        r = await c.post("/v1/runs", json={"agent": "parent", "prompt": "p", "allowed_hosts": ["api.example.com"]})
        assert r.status_code == 202, r.text
        run_id = r.json()["run_id"]
    await disp.drain()
    async with rt.pool.connection() as conn:
        cur = await conn.execute("SELECT id, allowed_hosts FROM runs WHERE id = %s OR parent_run_id = %s",
                                 (run_id, run_id))
        rows = {row["id"]: row["allowed_hosts"] for row in await cur.fetchall()}
    assert len(rows) == 2 and all(hosts == ["api.example.com"] for hosts in rows.values()), rows


async def test_an_agentdef_written_through_the_tool_cannot_widen_the_authors_hosts(open_runtime: Any) -> None:
    def create(name: str, **overlay: Any) -> dict[str, Any]:
        return {"tool": "AgentDef", "input": {"op": "create", "name": name,
                                              "overlay": {"model": "echo", "tools": [], **overlay}}}

    author = {"model": "script", "tools": ["AgentDef"], "agent_def_scopes": ["any"], "allowed_hosts": ["a.test"],
              "mock": {"script": [create("wider", allowed_hosts=["b.test"]), create("unnarrowed"),
                                  create("narrow", allowed_hosts=["a.test"]), {"text": "done"}]}}
    rt, disp = await open_runtime({"author": author})
    run, _ = await rt.start_run(NewRun(tenant_id="default", agent="author",
                                       segments=[{"role": "user", "content": [{"type": "text", "text": "go"}]}]))
    await disp.drain()
    results = [e.payload for e in await rt.runs.events("default", run.id) if e.type == "tool_result"]
    wider, unnarrowed, narrow = results
    assert wider["is_error"] and "b.test" in wider["text"]
    assert unnarrowed["is_error"] and "no narrowing" in unnarrowed["text"]
    assert not narrow["is_error"], narrow
