"""Context through the tool: self, tools, agents, time, help and capabilities."""

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
    assert tools["tools"][1]["input_schema"]["properties"]["op"]["enum"][5] == "search"

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
