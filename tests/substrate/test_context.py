"""Context through the tool: all 13 of loomcycle's ops (self, tools, guide, doc, permissions, agents,
lineage, evaluations, channels, help, time, compact, capabilities)."""

from __future__ import annotations

from typing import Any

from tests.support.substrate import client_for, ok_results, run_agent, scripted, tool_results
from treadle.builtins.context import help_topics

CALLS = [("Context", {"op": o}) for o in ("self", "tools", "agents", "time", "help", "capabilities")]


async def test_every_op_for_a_runtime_def(open_rt: Any) -> None:
    rt, disp = await open_rt({"agents": {"base": {"model": "echo", "description": "the yaml one"}},
                              "memory": {"embedder": {"driver": "local"}}})
    body = scripted(*CALLS, ("Context", {"op": "help", "topic": "memory"}), tools=["Context", "Memory"],
                    memory_scopes=["agent"], skills=["terse"], agent_def_scopes=["self"])
    async with client_for(rt) as c:
        created = (await c.post("/v1/_agentdef", json={"op": "create", "name": "curious", "overlay": body,
                                                       "description": "asks"})).json()
    run = await run_agent(rt, disp, "curious", user_id="u1")
    me, tools, agents, now, topics, caps, memory_help = await ok_results(rt, run.id)

    assert me["agent"] == "curious" and me["def_id"] == created["def_id"] and me["run_id"] == run.id
    assert me["content_sha256"] == created["content_sha256"] and me["iteration"] == 1
    assert me["model"] == "script" and me["provider"] == "mock" and me["user_id"] == "u1"
    assert me["tools"] == ["Context", "Memory"] and me["memory_scopes"] == ["agent"]
    assert me["skills"] == ["terse"] and me["skill_def_ids"] == {"terse": "missing"}
    assert me["context"]["last_turn_input_tokens"] > 0 and me["context"]["max_context_tokens"] is None

    assert [t["name"] for t in tools["tools"]] == ["Context", "Memory"]
    memory_ops = tools["tools"][1]["input_schema"]["properties"]["op"]["enum"]
    assert {"get", "set", "incr", "merge", "search"} <= set(memory_ops)  # Memory's own schema, as the model sees it

    listed = {a["name"]: a for a in agents["agents"]}
    assert listed["base"] == {"name": "base", "source": "yaml", "def_id": None,
                              "content_sha256": listed["base"]["content_sha256"], "description": "the yaml one"}
    assert listed["curious"]["source"] == "runtime" and listed["curious"]["def_id"] == created["def_id"]

    assert now["timezone"] == "UTC" and now["unix"] > 0
    assert {t["topic"] for t in topics["topics"]} == set(help_topics()) >= {"getting-started", "memory", "defs"}
    assert memory_help["topic"] == "memory" and "embed" in memory_help["text"]

    assert caps["memory"]["embedder"] == {"driver": "local", "model": "multilingual-e5-small-q4"}
    assert caps["memory"]["vector_search"] is True and caps["memory"]["max_value_bytes"] == 64 * 1024
    assert caps["defs"]["agent_def_scopes"] == ["self"] and "AgentDef" in caps["tools_available"]


async def test_yaml_agent_and_bad_input(open_rt: Any) -> None:
    agent = scripted(("Context", {"op": "self"}), ("Context", {"op": "help", "topic": "nope"}),
                     ("Context", {"op": "explode"}), ("Context", {"op": "capabilities"}))
    rt, disp = await open_rt({"agents": {"plain": agent}})
    me, bad_topic, bad_op, caps = await tool_results(rt, (await run_agent(rt, disp, "plain")).id)
    assert not me[0] and me[1]["def_id"] is None and me[1]["content_sha256"].startswith("sha256:")
    assert bad_topic[0] and "unknown topic" in bad_topic[1] and "getting-started" in bad_topic[1]
    assert bad_op[0] and "op must be one of" in bad_op[1]
    assert caps[1]["memory"]["embedder"] is None and caps[1]["memory"]["vector_search"] is False


async def test_the_other_ops_guide_doc_permissions_lineage_evaluations_channels(open_rt: Any) -> None:
    """loomcycle's remaining Context ops, with its fields (name, prefix, def_id, depth,
    include_lineage, query); a field another op takes is refused by name."""
    rt, disp = await open_rt({"agents": {"base": {"model": "echo"}}})
    async with client_for(rt) as c:
        v1 = (await c.post("/v1/_agentdef", json={"op": "create", "name": "lin", "overlay": {"model": "echo"}})).json()
        v2 = (await c.post("/v1/_agentdef", json={"op": "fork", "def_id": v1["def_id"],
                                                  "overlay": {"max_tokens": 100}})).json()
        v3 = (await c.post("/v1/_agentdef", json={"op": "fork", "def_id": v2["def_id"],
                                                  "overlay": {"max_tokens": 200}})).json()
        assert (await c.post("/v1/_channels", json={"name": "ctx-news"})).status_code == 201
        assert (await c.post("/v1/_channels", json={"name": "other"})).status_code == 201
    calls = [("Context", {"op": "guide"}), ("Context", {"op": "doc", "name": "Memory"}),
             ("Context", {"op": "permissions"}), ("Context", {"op": "lineage", "def_id": v2["def_id"]}),
             ("Context", {"op": "lineage", "def_id": v3["def_id"], "depth": 1}),
             ("Context", {"op": "evaluations", "def_id": v2["def_id"], "include_lineage": True}),
             ("Context", {"op": "channels", "prefix": "ctx-"}), ("Context", {"op": "agents", "prefix": "li"}),
             ("Context", {"op": "help", "query": "embedder"}),
             # refusals
             ("Context", {"op": "doc", "name": "Bash"}), ("Context", {"op": "doc"}),
             ("Context", {"op": "lineage", "def_id": "def_nope"}), ("Context", {"op": "time", "name": "x"})]
    async with client_for(rt) as c:
        await c.post("/v1/_agentdef", json={"op": "create", "name": "probe", "overlay": scripted(
            *calls, tools=["Context", "Memory"], memory_scopes=["agent", "user"], allowed_hosts=["example.com"])})
    results = await tool_results(rt, (await run_agent(rt, disp, "probe", user_id="u1")).id)
    ok = [r for err, r in results[:9] if not err]
    assert len(ok) == 9, results[:9]
    guide, doc, perms, lineage, shallow, evals, channels, agents, found = ok

    by_name = {t["name"]: t for t in guide["tools"]}
    assert set(by_name) == {"Context", "Memory"} and by_name["Memory"]["side_effect_class"] == "state"
    assert "search" in by_name["Memory"]["ops"] and by_name["Memory"]["required"] == ["op", "scope"]
    assert "lineage" in by_name["Context"]["ops"] and by_name["Context"]["side_effect_class"] == "pure"
    assert doc["name"] == "Memory" and doc["input_schema"]["properties"]["op"] and doc["description"]

    assert perms["tools"] == ["Context", "Memory"] and perms["memory"]["allowed_scopes"] == ["agent", "user"]
    assert perms["host_policy"] == {"has_list": True, "allowed_hosts": ["example.com"], "run_allowed_hosts": None}
    assert perms["channels"] == {"publish": False, "subscribe": False}

    assert lineage["root"]["def_id"] == v2["def_id"]
    assert [a["def_id"] for a in lineage["ancestors"]] == [v1["def_id"]]
    assert [d["def_id"] for d in lineage["descendants"]] == [v3["def_id"]] and not lineage["truncated"]
    assert shallow["depth"] == 1 and [a["def_id"] for a in shallow["ancestors"]] == [v2["def_id"]]
    assert evals["overall"]["count"] == 0

    assert [ch["name"] for ch in channels["channels"]] == ["ctx-news"] and channels["count"] == 1
    assert channels["channels"][0]["publish"] is False  # the probe does not hold the Channel tool
    assert [a["name"] for a in agents["agents"]] == ["lin"]
    assert found["matches"] and all(m["score"] > 0 for m in found["matches"])
    assert any(m["topic_slug"] == "memory" for m in found["matches"])

    not_held, no_name, no_def, stray = results[9:]
    assert not_held[0] and "not in this agent's tools" in not_held[1]
    assert no_name[0] and "missing required field: name" in no_name[1]
    assert no_def[0] and "not found" in no_def[1]
    assert stray[0] and "unknown field(s) name" in stray[1]
