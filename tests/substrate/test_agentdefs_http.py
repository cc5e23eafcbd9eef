"""AgentDef over HTTP (POST /v1/_agentdef): every op, lineage, the yaml base, refusals, tenants."""

from __future__ import annotations

from typing import Any

from tests.support.substrate import TENANT, client_for, run_agent
from treadle.config import AgentConfig
from treadle.substrate.agentdefs import agent_hash, agent_loomcycle_hash

YAML_AGENT = {"system_prompt": "You are the yaml writer.", "tools": ["Memory"], "max_iterations": 4}
CONFIG: dict[str, Any] = {"agents": {"writer": YAML_AGENT, "echo": {"model": "echo"}}}
OVERLAY = {"system_prompt": "Summarize.\r\n", "tools": ["Memory", "Context"], "max_iterations": 3, "model": "echo"}


async def op(client: Any, path: str, body: dict[str, Any], status: int = 200) -> Any:
    resp = await client.post(path, json=body)
    assert resp.status_code == status, resp.text
    return resp.json()


async def test_create_get_list_verify_retire(open_rt: Any) -> None:
    rt, disp = await open_rt(CONFIG)
    async with client_for(rt) as c:
        created = await op(c, "/v1/_agentdef", {"op": "create", "name": "summarizer", "overlay": OVERLAY,
                                                 "description": "summarizes"})
        assert created["version"] == 1 and created["active"] and created["source"] == "runtime"
        assert created["def_id"].startswith("def_") and created["parent_def_id"] is None
        # content_sha256 is loomcycle's hash (name included); treadle's earlier one is treadle_sha256
        assert created["content_sha256"] == agent_loomcycle_hash("summarizer", AgentConfig.model_validate(OVERLAY))
        assert created["treadle_sha256"] == agent_hash(AgentConfig.model_validate(OVERLAY))
        assert created["body"]["system_prompt"] == "Summarize.\n"  # line endings normalized

        again = await op(c, "/v1/_agentdef", {"op": "create", "name": "summarizer", "overlay": OVERLAY})
        assert again["deduplicated"] and again["def_id"] == created["def_id"]
        clash = await op(c, "/v1/_agentdef", {"op": "create", "name": "summarizer",
                                               "overlay": {**OVERLAY, "max_iterations": 9}}, 409)
        assert clash["code"] == "conflict" and "fork it" in clash["error"]

        got = await op(c, "/v1/_agentdef", {"op": "get", "name": "summarizer"})
        assert got["def_id"] == created["def_id"] and got["description"] == "summarizes"
        assert (await op(c, "/v1/_agentdef", {"op": "get", "def_id": created["def_id"]}))["name"] == "summarizer"

        listing = await op(c, "/v1/_agentdef", {"op": "list"})
        assert [d["name"] for d in listing["defs"]] == ["summarizer"]
        assert {s["name"]: s["source"] for s in listing["static"]} == {"echo": "yaml", "writer": "yaml"}
        names = (await c.get("/v1/_agentdef/names")).json()["names"]
        assert names == ["echo", "summarizer", "writer"]

        ok = await op(c, "/v1/_agentdef", {"op": "verify", "name": "summarizer",
                                            "content_sha256": created["content_sha256"]})
        assert ok["matches"] and ok["current_def_id"] == created["def_id"] and ok["source"] == "runtime"
        drift = await op(c, "/v1/_agentdef", {"op": "verify", "name": "summarizer", "content_sha256": "sha256:00"})
        assert not drift["matches"] and drift["current_sha256"] == created["content_sha256"]

        run = await run_agent(rt, disp, "summarizer", text="hello")
        assert run.status == "completed" and run.def_id == created["def_id"]
        assert run.def_content_sha256 == created["content_sha256"]
        run_view = (await c.get(f"/v1/runs/{run.id}")).json()
        assert run_view["def_id"] == created["def_id"]

        retired = await op(c, "/v1/_agentdef", {"op": "retire", "def_id": created["def_id"]})
        assert retired["status"] == "retired" and not retired["active"]
        gone = await c.post("/v1/runs", json={"agent": "summarizer", "prompt": "x"})
        assert gone.status_code == 400 and gone.json()["code"] == "unknown_agent"
        assert (await op(c, "/v1/_agentdef", {"op": "verify", "name": "summarizer",
                                               "content_sha256": created["content_sha256"]}))["deployed"] is False
        listed = await op(c, "/v1/_agentdef", {"op": "list", "include_retired": True})
        assert [d["status"] for d in listed["defs"]] == ["retired"]


async def test_fork_chain_of_three_keeps_lineage_and_promote_switches_new_runs(open_rt: Any) -> None:
    rt, disp = await open_rt(CONFIG)
    async with client_for(rt) as c:
        v1 = await op(c, "/v1/_agentdef", {"op": "create", "name": "chain", "overlay": OVERLAY})
        v2 = await op(c, "/v1/_agentdef", {"op": "fork", "def_id": v1["def_id"], "overlay": {"max_iterations": 5}})
        v3 = await op(c, "/v1/_agentdef", {"op": "fork", "def_id": v2["def_id"],
                                            "overlay": {"model": "script", "mock": {"script": [{"text": "v3"}]}}})
        assert [v["version"] for v in (v1, v2, v3)] == [1, 2, 3]
        assert v2["parent_def_id"] == v1["def_id"] and v3["parent_def_id"] == v2["def_id"]
        assert not v2["active"] and not v3["active"]  # forks do not promote by default
        assert len({v["content_sha256"] for v in (v1, v2, v3)}) == 3
        assert v3["body"]["max_iterations"] == 5 and v3["body"]["tools"] == ["Memory", "Context"]  # inherited

        got = await op(c, "/v1/_agentdef", {"op": "get", "def_id": v3["def_id"], "include_lineage": True})
        assert [d["def_id"] for d in got["lineage"]] == [v3["def_id"], v2["def_id"], v1["def_id"]]

        before = await run_agent(rt, disp, "chain", text="echo me")
        assert before.def_id == v1["def_id"]
        promoted = await op(c, "/v1/_agentdef", {"op": "promote", "def_id": v3["def_id"]})
        assert promoted["active"]
        after = await run_agent(rt, disp, "chain")
        assert after.def_id == v3["def_id"]
        texts = [e.payload["text"] for e in await rt.runs.events(TENANT, after.id) if e.type == "text"]
        assert texts == ["v3"]

        dropped = await op(c, "/v1/_agentdef", {"op": "fork", "name": "chain", "overlay": {"mock": None,
                                                                                         "model": "echo"}})
        assert "mock" not in dropped["body"] and dropped["parent_def_id"] == v3["def_id"]


async def test_yaml_agent_is_the_base_fork_overrides_it_for_new_runs_only(open_rt: Any) -> None:
    rt, disp = await open_rt(CONFIG)
    async with client_for(rt) as c:
        refused = await op(c, "/v1/_agentdef", {"op": "create", "name": "writer", "overlay": OVERLAY}, 422)
        assert refused["code"] == "tool_refused" and "treadle.yaml" in refused["error"]
        static = await op(c, "/v1/_agentdef", {"op": "get", "name": "writer"})
        assert static["source"] == "yaml" and static["def_id"] is None
        assert static["content_sha256"] == agent_loomcycle_hash("writer", AgentConfig.model_validate(YAML_AGENT))

        same = await op(c, "/v1/_agentdef", {"op": "fork", "name": "writer", "overlay": {}})
        assert same["version"] == 1 and same["description"] == "from treadle.yaml"
        assert same["content_sha256"] == static["content_sha256"]  # yaml and runtime hash alike

        queued, _ = await rt.start_run(_new("writer"))  # starts on the yaml agent
        fork = await op(c, "/v1/_agentdef", {"op": "fork", "name": "writer", "promote": True,
                                              "overlay": {"model": "script", "mock": {"script": [{"text": "forked"}]}}})
        assert fork["version"] == 2 and fork["parent_def_id"] == same["def_id"] and fork["active"]
        fresh = await run_agent(rt, disp, "writer")  # also drains the queued run
        assert fresh.def_id == fork["def_id"]
        old = await rt.runs.get(TENANT, queued.id)
        assert old is not None and old.def_id is None and old.status == "completed"
        old_texts = [e.payload["text"] for e in await rt.runs.events(TENANT, old.id) if e.type == "text"]
        assert old_texts == ["hi"]  # the yaml writer (mock echo), untouched by the later fork

        await op(c, "/v1/_agentdef", {"op": "retire", "def_id": fork["def_id"]})
        back = await run_agent(rt, disp, "writer")
        assert back.def_id is None  # retired override: new runs fall back to treadle.yaml


async def test_refusals_and_not_found(open_rt: Any) -> None:
    rt, _ = await open_rt(CONFIG)
    async with client_for(rt) as c:
        cases: list[tuple[dict[str, Any], str]] = [
            ({"op": "explode"}, "op must be one of"),
            ({"op": "create", "name": "bad name!", "overlay": OVERLAY}, "name is required"),
            ({"op": "create", "name": "x"}, "overlay"),
            ({"op": "create", "name": "x", "overlay": {"max_iterations": 0}}, "max_iterations"),
            ({"op": "create", "name": "x", "overlay": {"tools": ["Shell"]}}, "unknown tool"),
            ({"op": "create", "name": "x", "overlay": {"provider": "nope"}}, "unknown provider"),
            ({"op": "create", "name": "x", "overlay": {"surprise": 1}}, "surprise"),
            ({"op": "promote", "name": "x"}, "def_id is required"),
            ({"op": "verify", "name": "x"}, "content_sha256"),
        ]
        for body, needle in cases:
            err = await op(c, "/v1/_agentdef", body, 422)
            assert err["code"] == "tool_refused" and needle in err["error"], (body, err)
        assert (await op(c, "/v1/_agentdef", {"op": "get", "name": "nobody"}, 404))["code"] == "not_found"
        assert (await op(c, "/v1/_agentdef", {"op": "fork", "def_id": "def_0000", "overlay": {}}, 404))
        bad = await c.post("/v1/_agentdef", content=b"[1]")
        assert bad.status_code == 400


async def test_another_tenants_defs_are_invisible(open_rt: Any) -> None:
    rt, _ = await open_rt(CONFIG)
    family = rt.substrate.agents
    theirs = await family.dispatch("tenant-b", {"op": "create", "name": "secret", "overlay": OVERLAY})
    async with client_for(rt) as c:
        for body in ({"op": "get", "def_id": theirs["def_id"]}, {"op": "get", "name": "secret"},
                     {"op": "retire", "def_id": theirs["def_id"]}, {"op": "promote", "def_id": theirs["def_id"]},
                     {"op": "fork", "def_id": theirs["def_id"], "overlay": {}}):
            assert (await op(c, "/v1/_agentdef", body, 404))["code"] == "not_found", body
        assert (await op(c, "/v1/_agentdef", {"op": "list"}))["defs"] == []
        assert "secret" not in (await c.get("/v1/_agentdef/names")).json()["names"]
        assert (await c.post("/v1/runs", json={"agent": "secret", "prompt": "x"})).status_code == 400
    mine = await family.dispatch("tenant-b", {"op": "get", "def_id": theirs["def_id"]})
    assert mine["name"] == "secret"


def _new(agent: str) -> Any:
    from treadle.store.runs import NewRun
    from treadle.testing import user_text

    return NewRun(tenant_id=TENANT, agent=agent, segments=user_text("hi"))


async def test_a_def_whose_route_cannot_run_is_refused_at_write(open_rt: Any) -> None:
    """The def gate runs the route checks (engine/model_routes.py route_errors), not only the
    reference checks: an alias to the mock's `script` model without a script is refused."""
    rt, _ = await open_rt({**CONFIG, "models": {"scripted": {"provider": "mock", "model": "script"}}})
    async with client_for(rt) as c:
        err = await op(c, "/v1/_agentdef", {"op": "create", "name": "x", "overlay": {"model": "scripted"}}, 422)
        assert err["code"] == "tool_refused" and "needs mock.script" in err["error"], err
        ok = {"model": "scripted", "mock": {"script": [{"text": "hi"}]}}
        assert (await op(c, "/v1/_agentdef", {"op": "create", "name": "x", "overlay": ok}))["def_id"]
