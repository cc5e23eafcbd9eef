"""loomcycle's `ensureCodeAgent` (its TS client, adapters/ts/src/client.ts): `POST /v1/_agentdef`
`{op: create, name, overlay: {provider: "code-js", code_body, tools}}`, idempotent by content hash,
then runs of that code agent; an LLM agent spawns a code agent with the Agent tool."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from tests.support.substrate import client_for, substrate_runtime
from treadle.store.runs import NewRun
from treadle.testing import user_text

pytest.importorskip("quickjs")

BODY = """
function run(input) {
  var n = Memory.incr({scope: 'agent', key: 'hits'});
  return {final_text: 'hello ' + input.prompt + ' #' + n.value};
}
"""


async def test_ensure_code_agent_registers_once_and_runs(migrated_db_url: str) -> None:
    config = {"code_agents": {"enabled": True},
              "agents": {"boss": {"model": "script", "tools": ["Agent"], "agent_def_scopes": ["any"],
                                  "mock": {"script": [{"tool": "Agent", "input": {"name": "greeter",
                                                                                  "prompt": "boss"}},
                                                      {"text": "boss done"}]}}}}
    async with substrate_runtime(migrated_db_url, config) as (rt, disp), client_for(rt) as c:
        body = {"op": "create", "name": "greeter",
                "overlay": {"provider": "code-js", "code_body": BODY, "tools": ["Memory"]}}
        first = await c.post("/v1/_agentdef", json=body)
        assert first.status_code == 200, first.text
        row = first.json()
        assert row["version"] == 1 and row["def_id"] and row.get("deduplicated") is not True
        again = (await c.post("/v1/_agentdef", json=body)).json()
        assert again.get("deduplicated") is True and again["def_id"] == row["def_id"]  # changed: false
        assert row["code_hash"] == hashlib.sha256(BODY.encode()).hexdigest()

        run, _ = await rt.start_run(NewRun(tenant_id="default", agent="greeter", segments=user_text("world")))
        await disp.drain()
        done = await rt.runs.get("default", run.id)
        assert done is not None and done.status == "completed", done
        texts = [e.payload.get("text") for e in await rt.runs.events("default", run.id) if e.type == "text"]
        assert texts == ["hello world #1"]

        # an LLM agent spawns the code agent (Agent tool): the child's final text is its answer
        boss, _ = await rt.start_run(NewRun(tenant_id="default", agent="boss", segments=user_text("go")))
        await disp.drain()
        events = await rt.runs.events("default", boss.id)
        results = [e.payload.get("text") for e in events if e.type == "tool_result"]
        assert results and "hello boss #2" in str(results[0]), results


async def test_a_code_agent_def_is_refused_when_code_agents_are_off(migrated_db_url: str) -> None:
    async with substrate_runtime(migrated_db_url, {}) as (rt, _disp), client_for(rt) as c:
        resp = await c.post("/v1/_agentdef", json={"op": "create", "name": "g2", "overlay": {
            "provider": "code-js", "code_body": BODY}})
        assert resp.status_code == 422, resp.text
        assert "code_agents.enabled" in resp.text


async def test_ensure_code_agent_with_new_code_is_a_new_version_in_its_lineage(migrated_db_url: str) -> None:
    """loomcycle's create (what `ensureCodeAgent` sends) of a code agent whose code changed mints a
    new, promoted version (treadle's create of another agent with another body is a 409: fork
    changes it); each version names its code's hash, which the runs' model spans carry."""
    from tests.support.spans import attrs, recording_spans

    v2_body = BODY.replace("hello ", "hi ")
    config = {"code_agents": {"enabled": True}}
    with recording_spans() as exporter:
        async with substrate_runtime(migrated_db_url, config) as (rt, disp), client_for(rt) as c:
            overlay: dict[str, Any] = {"provider": "code-js", "code_body": BODY, "tools": ["Memory"]}
            make: dict[str, Any] = {"op": "create", "name": "versioned", "description": "v", "overlay": overlay}
            v1 = (await c.post("/v1/_agentdef", json=make)).json()
            resp = await c.post("/v1/_agentdef", json={**make, "overlay": {**overlay, "code_body": v2_body}})
            assert resp.status_code == 200, resp.text
            v2 = resp.json()
            assert v2["version"] == 2 and v2["parent_def_id"] == v1["def_id"] and v2["active"], v2
            assert v2.get("deduplicated") is not True and v2["description"] == "v"
            assert v2["code_hash"] == hashlib.sha256(v2_body.encode()).hexdigest() != v1["code_hash"]
            got = (await c.post("/v1/_agentdef", json={"op": "get", "name": "versioned",
                                                        "include_lineage": True})).json()
            assert [v["code_hash"] for v in got["lineage"]] in ([v1["code_hash"], v2["code_hash"]],
                                                                [v2["code_hash"], v1["code_hash"]])
            run, _ = await rt.start_run(NewRun(tenant_id="default", agent="versioned", segments=user_text("x")))
            await disp.drain()
            texts = [e.payload.get("text") for e in await rt.runs.events("default", run.id) if e.type == "text"]
            assert texts == ["hi x #1"]
            # another (non-code) agent keeps treadle's rule: a changed create is a conflict
            plain = {"op": "create", "name": "plain", "overlay": {"model": "echo"}}
            assert (await c.post("/v1/_agentdef", json=plain)).status_code == 200
            clash = await c.post("/v1/_agentdef", json={**plain, "overlay": {"model": "echo", "max_iterations": 3}})
            assert clash.status_code == 409, clash.text
    chats = [attrs(s) for s in exporter.get_finished_spans() if s.name.startswith("chat ")]
    assert {a.get("provider.code_hash") for a in chats if a.get("provider.code_hash")} == {v2["code_hash"]}
