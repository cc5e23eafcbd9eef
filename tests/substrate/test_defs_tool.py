"""AgentDef and SkillDef through the tools (scripted mock agents): every op, default-deny,
no widening, one hash from yaml, tool and HTTP, and skills reaching the system prompt."""

from __future__ import annotations

from typing import Any

from tests.support.substrate import (
    TENANT,
    TemplatingMock,
    client_for,
    ok_results,
    run_agent,
    scripted,
    tool_results,
)
from treadle.config import AgentConfig
from treadle.providers.base import ModelRequest, ModelResponse
from treadle.providers.mock import MockProvider
from treadle.store.runs import NewRun
from treadle.substrate.agentdefs import agent_hash, agent_loomcycle_hash
from treadle.testing import user_text

SHARED = {"system_prompt": "Same everywhere.", "tools": ["Memory"], "max_iterations": 7, "model": "echo"}
PEER = {"system_prompt": "Peer v1", "model": "echo"}
LEAN = {**PEER, "memory_scopes": ["agent"]}


class RecordingMock(MockProvider):
    """The mock provider, remembering every system prompt it was sent."""

    def __init__(self) -> None:
        self.systems: list[str] = []

    async def call(self, req: ModelRequest, on_delta: Any = None) -> ModelResponse:
        self.systems.append(req.system)
        return await super().call(req, on_delta)


async def test_every_agentdef_op_through_the_tool(open_rt: Any) -> None:
    calls: list[tuple[str, dict[str, Any]]] = [
        ("AgentDef", {"op": "create", "name": "peer", "overlay": PEER}),
        ("AgentDef", {"op": "get", "name": "peer"}),
        ("AgentDef", {"op": "fork", "name": "peer", "overlay": {"system_prompt": "Peer v2"}}),
        ("AgentDef", {"op": "list"}),
        ("AgentDef", {"op": "verify", "name": "peer", "content_sha256": agent_hash(AgentConfig.model_validate(PEER))}),
        ("AgentDef", {"op": "get", "name": "peer", "version": 2, "include_lineage": True}),
        ("AgentDef", {"op": "retire", "name": "peer", "version": 2}),
    ]
    author = scripted(*calls, agent_def_scopes=["named:peer"])
    rt, disp = await open_rt({"agents": {"author": author}})
    run = await run_agent(rt, disp, "author")
    assert run.status == "completed"
    created, got, forked, listing, verified, v2, retired = await ok_results(rt, run.id)
    assert created["version"] == 1 and created["active"] and created["created_by_run_id"] == run.id
    assert got["def_id"] == created["def_id"]
    assert forked["version"] == 2 and forked["parent_def_id"] == created["def_id"] and not forked["active"]
    assert [d["version"] for d in listing["defs"]] == [2, 1] and listing["static"] == []  # author is outside
    assert verified["matches"] and verified["current_def_id"] == created["def_id"]
    assert [d["version"] for d in v2["lineage"]] == [2, 1]
    assert retired["status"] == "retired"


async def test_promote_through_the_tool_changes_new_runs(open_rt: Any) -> None:
    rt, disp = await open_rt({"agents": {"seed": scripted(("AgentDef", {"op": "create", "name": "peer",
                                                                        "overlay": PEER}),
                                                          agent_def_scopes=["any"])}})
    first = await ok_results(rt, (await run_agent(rt, disp, "seed")).id)
    async with client_for(rt) as c:
        v2 = (await c.post("/v1/_agentdef", json={"op": "fork", "name": "peer", "overlay": {"model": "script",
              "mock": {"script": [{"text": "I am v2"}]}}})).json()
    promoter = scripted(("AgentDef", {"op": "promote", "def_id": v2["def_id"]}), agent_def_scopes=["named:peer"])
    rt2, disp2 = await open_rt({"agents": {"promoter": promoter}})
    assert (await ok_results(rt2, (await run_agent(rt2, disp2, "promoter")).id))[0]["active"]
    peer_run = await run_agent(rt2, disp2, "peer")
    assert peer_run.def_id == v2["def_id"] != first[0]["def_id"]
    assert [e.payload["text"] for e in await rt2.runs.events(TENANT, peer_run.id) if e.type == "text"] == ["I am v2"]


async def test_default_deny_scopes_and_no_widening(open_rt: Any) -> None:
    agents = {
        "nobody": scripted(("AgentDef", {"op": "list"}), ("AgentDef", {"op": "create", "name": "x", "overlay": PEER})),
        "narrow": scripted(
            ("AgentDef", {"op": "create", "name": "other", "overlay": LEAN}),
            ("AgentDef", {"op": "create", "name": "mine", "overlay": {**LEAN, "tools": ["Memory", "Context"]}}),
            ("AgentDef", {"op": "create", "name": "mine", "overlay": {**LEAN, "agent_def_scopes": ["any"]}}),
            ("AgentDef", {"op": "create", "name": "mine", "overlay": {**LEAN, "memory_scopes": ["tenant"]}}),
            ("AgentDef", {"op": "create", "name": "mine", "overlay": PEER}),
            ("AgentDef", {"op": "create", "name": "mine", "overlay": {**LEAN, "tools": ["Memory"]}}),
            agent_def_scopes=["named:mine"], tools=["AgentDef", "Memory"], memory_scopes=["agent"],
        ),
    }
    rt, disp = await open_rt({"agents": agents})
    denied = await tool_results(rt, (await run_agent(rt, disp, "nobody")).id)
    assert all(err and "default-deny" in text for err, text in denied), denied
    narrow = await tool_results(rt, (await run_agent(rt, disp, "narrow")).id)
    assert narrow[0][0] and "outside this agent's agent_def_scopes" in narrow[0][1]
    assert narrow[1][0] and "tools ['Context'] would widen" in narrow[1][1]
    assert narrow[2][0] and "agent_def_scopes ['any'] would widen" in narrow[2][1]
    assert narrow[3][0] and "memory_scopes ['tenant'] would widen" in narrow[3][1]
    assert narrow[4][0] and "memory_scopes ['user'] would widen" in narrow[4][1]  # the default it lacks
    assert not narrow[5][0] and narrow[5][1]["name"] == "mine"  # only what it holds itself


async def test_same_def_hashes_alike_from_yaml_tool_and_http(open_rt: Any) -> None:
    maker = scripted(("AgentDef", {"op": "create", "name": "via-tool", "overlay": SHARED}),
                     agent_def_scopes=["any"], tools=["AgentDef", "Memory"])
    rt, disp = await open_rt({"agents": {"from-yaml": SHARED, "maker": maker}})
    # treadle's name-independent hash (treadle_sha256) is alike on every path; content_sha256 is
    # loomcycle's, which includes the name
    tool_view = (await ok_results(rt, (await run_agent(rt, disp, "maker")).id))[0]
    async with client_for(rt) as c:
        http = (await c.post("/v1/_agentdef", json={"op": "create", "name": "via-http",
                                                    "overlay": {**SHARED, "system_prompt": "Same everywhere.\r\n",
                                                                "max_tokens": 4096}})).json()
        yaml_view = (await c.post("/v1/_agentdef", json={"op": "get", "name": "from-yaml"})).json()
    yaml_run = await run_agent(rt, disp, "from-yaml")
    tool = tool_view["treadle_sha256"]
    assert tool == http["treadle_sha256"] == yaml_view["treadle_sha256"]
    assert tool == agent_hash(AgentConfig.model_validate(SHARED))
    cfg = AgentConfig.model_validate(SHARED)
    assert tool_view["content_sha256"] == agent_loomcycle_hash("via-tool", cfg)
    # loomcycle hashes what is written: the explicit max_tokens (a default) counts there
    assert http["content_sha256"] == agent_loomcycle_hash("via-http", AgentConfig.model_validate(
        {**SHARED, "max_tokens": 4096}))
    assert http["content_sha256"] != agent_loomcycle_hash("via-http", cfg)
    assert yaml_view["content_sha256"] == yaml_run.def_content_sha256 == agent_loomcycle_hash("from-yaml", cfg)


async def test_skills_from_yaml_and_skilldef_reach_the_system_prompt(open_rt: Any) -> None:
    recorder = RecordingMock()
    agents = {
        "helper": {"model": "echo", "system_prompt": "You help.", "skills": ["tone", "facts"]},
        "curator": scripted(
            ("SkillDef", {"op": "create", "name": "facts", "overlay": {"body": "Cite sources.", "tools": ["Memory"]}}),
            ("SkillDef", {"op": "get", "name": "facts"}),
            ("SkillDef", {"op": "list"}),
            ("SkillDef", {"op": "verify", "name": "tone", "content_sha256": "sha256:nope"}),
            ("SkillDef", {"op": "create", "name": "unlisted", "overlay": {"body": "x"}}),
            skill_def_scopes=["self"], skills=["tone", "facts"]),
    }
    config = {"agents": agents, "skills": {"tone": {"body": "Be brief."}}}
    rt, disp = await open_rt(config, providers={"mock": recorder})

    early = await run_agent(rt, disp, "helper")  # 'facts' does not exist yet: the run goes without it
    assert early.skill_def_ids == {"tone": "yaml", "facts": "missing"}
    assert recorder.systems[-1] == "You help.\n\n## Skill: tone\n\nBe brief."

    curator = await tool_results(rt, (await run_agent(rt, disp, "curator")).id)
    created, got, listing, verify, refused = curator
    assert not created[0] and created[1]["version"] == 1
    assert got[1]["body"]["body"] == "Cite sources."
    assert {s["name"] for s in listing[1]["static"]} == {"tone"}
    assert verify[1]["source"] == "yaml" and not verify[1]["matches"]
    assert refused[0] and "outside this agent's skill_def_scopes" in refused[1]

    recorder.systems.clear()
    run = await run_agent(rt, disp, "helper")
    assert run.skill_def_ids == {"tone": "yaml", "facts": created[1]["def_id"]}
    assert recorder.systems[-1] == "You help.\n\n## Skill: tone\n\nBe brief.\n\n## Skill: facts\n\nCite sources."

    async with client_for(rt) as c:  # a new version reaches new runs only
        v2 = (await c.post("/v1/_skilldef", json={"op": "fork", "name": "facts", "promote": True,
                                                  "overlay": {"body": "Cite two sources."}})).json()
        assert v2["version"] == 2 and v2["parent_def_id"] == created[1]["def_id"]
        names = (await c.get("/v1/_skilldef/names")).json()["names"]
        assert names == ["facts", "tone"]
    recorder.systems.clear()
    await run_agent(rt, disp, "helper")
    assert recorder.systems[-1].endswith("## Skill: facts\n\nCite two sources.")


async def test_every_skilldef_op_through_tool_and_http(open_rt: Any) -> None:
    mock = TemplatingMock()
    calls: list[tuple[str, dict[str, Any]]] = [
        ("SkillDef", {"op": "create", "name": "brief", "overlay": {"body": "Be brief."}}),
        ("SkillDef", {"op": "fork", "name": "brief", "overlay": {"body": "Be very brief."}}),
        ("SkillDef", {"op": "promote", "def_id": "$RESULT.def_id"}),
        ("SkillDef", {"op": "get", "name": "brief", "include_lineage": True}),
        ("SkillDef", {"op": "verify", "name": "brief", "content_sha256": "$RESULT.content_sha256"}),
        ("SkillDef", {"op": "list"}),
        ("SkillDef", {"op": "retire", "name": "brief"}),
    ]
    rt, disp = await open_rt({"agents": {"editor": scripted(*calls, skill_def_scopes=["named:brief"])}},
                             providers={"mock": mock})
    created, forked, promoted, got, verified, listing, retired = await ok_results(
        rt, (await run_agent(rt, disp, "editor")).id)
    assert created["active"] and not forked["active"] and promoted["active"]
    assert promoted["def_id"] == forked["def_id"] and forked["parent_def_id"] == created["def_id"]
    assert [d["version"] for d in got["lineage"]] == [2, 1]
    assert [d["version"] for d in listing["defs"]] == [2, 1]
    assert verified["matches"] and verified["source"] == "runtime" and verified["current_def_id"] == forked["def_id"]
    assert retired["status"] == "retired"

    async with client_for(rt) as c:
        async def op(body: dict[str, Any], status: int = 200) -> Any:
            resp = await c.post("/v1/_skilldef", json=body)
            assert resp.status_code == status, resp.text
            return resp.json()

        made = await op({"op": "create", "name": "cite", "overlay": {"body": "Cite.\r\n", "tools": ["Memory"]}})
        assert made["body"]["body"] == "Cite.\n"
        v2 = await op({"op": "fork", "def_id": made["def_id"], "overlay": {"description": "citations"}})
        # loomcycle's hash covers the description; treadle's earlier one (treadle_sha256) does not
        assert v2["treadle_sha256"] == made["treadle_sha256"] and v2["content_sha256"] != made["content_sha256"]
        assert (await op({"op": "promote", "def_id": v2["def_id"]}))["active"]
        assert (await op({"op": "get", "name": "cite"}))["def_id"] == v2["def_id"]
        assert (await op({"op": "list", "name": "cite"}))["count"] == 2
        assert (await op({"op": "verify", "name": "cite", "content_sha256": v2["content_sha256"]}))["matches"]
        assert (await op({"op": "verify", "name": "cite", "content_sha256": made["treadle_sha256"]}))["matches"]
        assert (await op({"op": "retire", "def_id": v2["def_id"]}))["status"] == "retired"
        assert (await op({"op": "create", "name": "cite", "overlay": {"body": " "}}, 422))["code"] == "tool_refused"
        assert (await op({"op": "get", "name": "nothing"}, 404))["code"] == "not_found"


async def test_a_sub_agent_can_be_a_promoted_def_and_queued_runs_keep_their_version(open_rt: Any) -> None:
    boss = scripted(("Agent", {"op": "spawn", "name": "helper", "prompt": "ping"}))
    rt, disp = await open_rt({"agents": {"boss": boss}})
    async with client_for(rt) as c:
        v1 = (await c.post("/v1/_agentdef", json={"op": "create", "name": "helper", "overlay": {"model": "echo"}})
              ).json()
        queued, _ = await rt.start_run(NewRun(tenant_id=TENANT, agent="helper", segments=user_text("queued")))
        v2 = (await c.post("/v1/_agentdef", json={"op": "fork", "name": "helper", "promote": True, "overlay": {
            "model": "script", "mock": {"script": [{"text": "v2 here"}]}}})).json()
    boss_run = await run_agent(rt, disp, "boss")  # drains the queued run too
    [spawned] = await ok_results(rt, boss_run.id)
    assert spawned["ok"] and spawned["output"] == "v2 here"
    child = await rt.runs.get(TENANT, spawned["run_id"])
    assert child is not None and child.def_id == v2["def_id"] and child.parent_run_id == boss_run.id
    old = await rt.runs.get(TENANT, queued.id)
    assert old is not None and old.def_id == v1["def_id"] and old.status == "completed"
    assert [e.payload["text"] for e in await rt.runs.events(TENANT, old.id) if e.type == "text"] == ["queued"]
