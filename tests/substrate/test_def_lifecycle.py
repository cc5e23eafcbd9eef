"""The one def lifecycle (treadle/defs), driven the same way for every kind — AgentDef, SkillDef,
ScheduleDef, WebhookDef — through the operator path (`family.dispatch(tenant, args)`), plus the
rules that used to differ between the substrate and the trigger families, now decided once:
strict booleans, one description limit, idempotent create, one fork dedupe rule, one list shape,
verify for every kind, default-deny before any input is read, and tool schemas that match."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from treadle.builtins.agentdef import AgentDefTool
from treadle.builtins.scheduledef import ScheduleDefTool
from treadle.builtins.skilldef import SkillDefTool
from treadle.builtins.volumedef import VolumeDefTool
from treadle.builtins.webhookdef import WebhookDefTool
from treadle.defs import MAX_DESCRIPTION, AgentGate, DefLifecycle, Gate, NameGate
from treadle.errors import Conflict, DefRefused, NotFound, ToolError

TENANT = "default"


@dataclass(frozen=True)
class Kind:
    label: str
    name: str
    overlay: dict[str, Any]
    change: dict[str, Any]
    family: Callable[[Any], DefLifecycle]
    tool: Any
    scopes_field: str
    #: a gate that allows this kind's test def (the operator path passes none)
    allowing: Callable[[tuple[str, ...]], Gate]

    def __str__(self) -> str:
        return self.label


KINDS = [
    Kind("AgentDef", "peer", {"model": "echo", "system_prompt": "Peer v1."}, {"system_prompt": "Peer v2."},
         lambda rt: rt.substrate.agents, AgentDefTool, "agent_def_scopes",
         lambda scopes: NameGate(scopes=scopes, field="agent_def_scopes", own=frozenset({"author"}))),
    Kind("SkillDef", "brief", {"body": "Be brief."}, {"body": "Be very brief."},
         lambda rt: rt.substrate.skills, SkillDefTool, "skill_def_scopes",
         lambda scopes: NameGate(scopes=scopes, field="skill_def_scopes")),
    Kind("ScheduleDef", "nightly", {"agent": "echo", "schedule": "0 3 * * *", "prompt": "report"},
         {"schedule": "30 4 * * *"}, lambda rt: rt.triggers.schedules.family, ScheduleDefTool,
         "schedule_def_scopes", lambda scopes: AgentGate(scopes=scopes, field="schedule_def_scopes",
                                                         self_agent="author")),
    Kind("WebhookDef", "inbox", {"agent": "echo", "auth": {"kind": "bearer", "bearer_token_env": "TREADLE_TEST_TOKEN"}},
         {"metadata": {"v": 2}}, lambda rt: rt.triggers.webhooks.family, WebhookDefTool, "webhook_def_scopes",
         lambda scopes: AgentGate(scopes=scopes, field="webhook_def_scopes", self_agent="author")),
    Kind("VolumeDef", "scratchpad", {"mode": "rw"}, {"mode": "ro"}, lambda rt: rt.volumedefs, VolumeDefTool,
         "volume_def_scopes", lambda scopes: NameGate(scopes=scopes, field="volume_def_scopes")),
]
#: the scope that allows each kind's test def: its name (AgentDef, SkillDef) or its agent (triggers)
ALLOW = {"AgentDef": "named:peer", "SkillDef": "named:brief", "ScheduleDef": "named:echo", "WebhookDef": "named:echo",
         "VolumeDef": "named:scratchpad"}
CONFIG: dict[str, Any] = {"agents": {"echo": {"model": "echo"}}}


@pytest.fixture(params=KINDS, ids=str)
def kind(request: pytest.FixtureRequest) -> Kind:
    return request.param  # type: ignore[no-any-return]


async def family_of(open_rt: Any, kind: Kind, config: dict[str, Any] | None = None) -> tuple[Any, DefLifecycle]:
    rt, _ = await open_rt(config or CONFIG)
    return rt, kind.family(rt)


async def test_every_op_through_the_operator_path(open_rt: Any, kind: Kind) -> None:
    _, family = await family_of(open_rt, kind)

    async def op(**args: Any) -> dict[str, Any]:
        return await family.dispatch(TENANT, args)

    v1 = await op(op="create", name=kind.name, overlay=kind.overlay, description="first")
    assert (v1["version"], v1["active"], v1["source"], v1["description"]) == (1, True, "runtime", "first")
    assert v1["content_sha256"].startswith("sha256:") and v1["created_by_run_id"] is None

    v2 = await op(op="fork", name=kind.name, overlay=kind.change)
    assert v2["version"] == 2 and v2["parent_def_id"] == v1["def_id"] and v2["description"] == "first"
    assert v2["active"] is family.fork_promotes and v2["content_sha256"] != v1["content_sha256"]
    promoted = await op(op="promote", def_id=v2["def_id"])
    assert promoted["active"] and promoted["def_id"] == v2["def_id"]

    got = await op(op="get", name=kind.name, include_lineage=True)
    assert got["def_id"] == v2["def_id"] and [d["version"] for d in got["lineage"]] == [2, 1]
    assert (await op(op="get", def_id=v1["def_id"]))["version"] == 1
    assert (await op(op="get", name=kind.name, version=1))["def_id"] == v1["def_id"]

    listed = await op(op="list")
    assert set(listed) == {"defs", "count", "static"}  # static: the yaml base (AgentDef: the yaml agents)
    assert [s["name"] for s in listed["static"]] == family.static_names()
    assert [(d["version"], d["active"]) for d in listed["defs"]] == [(2, True), (1, False)]
    assert await family.active_names(TENANT) == sorted({kind.name, *family.static_names()})

    verified = await op(op="verify", name=kind.name, content_sha256=v2["content_sha256"])
    assert verified["matches"] and verified["deployed"] and verified["current_def_id"] == v2["def_id"]
    assert not (await op(op="verify", name=kind.name, content_sha256=v1["content_sha256"]))["matches"]
    assert not (await op(op="verify", name="nothing-here", content_sha256="sha256:00"))["deployed"]

    retired = await op(op="retire", name=kind.name)
    assert retired["def_id"] == v2["def_id"] and retired["status"] == "retired" and not retired["active"]
    assert [d["version"] for d in (await op(op="list"))["defs"]] == [1]
    for switch in ("include_retired", "retired"):  # both spellings, one meaning
        assert [d["version"] for d in (await op(op="list", **{switch: True}))["defs"]] == [2, 1]
    assert await family.active_names(TENANT) == family.static_names()
    with pytest.raises(NotFound):
        await op(op="get", name="nobody")


async def test_create_of_an_identical_def_is_deduplicated_any_other_clash_conflicts(open_rt: Any, kind: Kind) -> None:
    _, family = await family_of(open_rt, kind)
    created = await family.dispatch(TENANT, {"op": "create", "name": kind.name, "overlay": kind.overlay,
                                             "description": "d"})
    again = await family.dispatch(TENANT, {"op": "create", "name": kind.name, "overlay": kind.overlay})
    assert again["deduplicated"] and again["def_id"] == created["def_id"] and again["version"] == 1
    same_description = await family.dispatch(TENANT, {"op": "create", "name": kind.name, "overlay": kind.overlay,
                                                       "description": "d"})
    assert same_description["deduplicated"]
    with pytest.raises(Conflict, match="fork it"):
        await family.dispatch(TENANT, {"op": "create", "name": kind.name, "overlay": {**kind.overlay, **kind.change}})
    with pytest.raises(Conflict, match="fork it"):
        await family.dispatch(TENANT, {"op": "create", "name": kind.name, "overlay": kind.overlay,
                                       "description": "another"})
    assert (await family.dispatch(TENANT, {"op": "list", "include_retired": True}))["count"] == 1


async def test_fork_dedupe_is_one_rule(open_rt: Any, kind: Kind) -> None:
    """Same name, identical body, no new description: no new version — the parent answers, and is
    promoted when `promote` says so. A retired parent is revived as a new version instead."""
    _, family = await family_of(open_rt, kind)

    async def op(**args: Any) -> dict[str, Any]:
        return await family.dispatch(TENANT, args)

    v1 = await op(op="create", name=kind.name, overlay=kind.overlay)
    same = await op(op="fork", name=kind.name, overlay={})
    assert same["deduplicated"] and same["def_id"] == v1["def_id"]
    v2 = await op(op="fork", name=kind.name, overlay=kind.change, promote=False)
    assert not v2["active"]
    promoted = await op(op="fork", def_id=v2["def_id"], overlay={}, promote=True)  # identical: promotes v2
    assert promoted["deduplicated"] and promoted["def_id"] == v2["def_id"] and promoted["active"]
    described = await op(op="fork", def_id=v2["def_id"], overlay={}, description="new words")
    assert described["version"] == 3 and described["content_sha256"] == v2["content_sha256"]
    await op(op="retire", def_id=v1["def_id"])
    revived = await op(op="fork", def_id=v1["def_id"], overlay={}, promote=True)
    assert revived["version"] == 4 and revived["parent_def_id"] == v1["def_id"] and revived["active"]
    assert "deduplicated" not in revived


@pytest.mark.parametrize(("args", "field"), [
    ({"op": "get", "include_lineage": "yes"}, "include_lineage"),
    ({"op": "get", "include_lineage": 1}, "include_lineage"),
    ({"op": "list", "include_retired": "true"}, "include_retired"),
    ({"op": "list", "retired": 1}, "retired"),
    ({"op": "create", "promote": "false"}, "promote"),
    ({"op": "fork", "promote": 0}, "promote"),
])
async def test_non_boolean_switches_are_refused_by_every_kind(
    open_rt: Any, kind: Kind, args: dict[str, Any], field: str
) -> None:
    _, family = await family_of(open_rt, kind)
    await family.dispatch(TENANT, {"op": "create", "name": kind.name, "overlay": kind.overlay})
    full = {"name": kind.name, "overlay": kind.overlay if args["op"] == "create" else kind.change, **args}
    with pytest.raises(DefRefused, match=f"{kind.label}.{args['op']}: {field} must be a boolean"):
        await family.dispatch(TENANT, full)


async def test_the_two_spellings_of_the_retired_switch_must_agree(open_rt: Any, kind: Kind) -> None:
    _, family = await family_of(open_rt, kind)
    with pytest.raises(DefRefused, match="disagree"):
        await family.dispatch(TENANT, {"op": "list", "include_retired": True, "retired": False})
    assert (await family.dispatch(TENANT, {"op": "list", "include_retired": True, "retired": True}))["count"] == 0


async def test_the_description_limit_is_the_same_for_every_kind(open_rt: Any, kind: Kind) -> None:
    _, family = await family_of(open_rt, kind)
    longest = "d" * MAX_DESCRIPTION
    made = await family.dispatch(TENANT, {"op": "create", "name": kind.name, "overlay": kind.overlay,
                                          "description": longest})
    assert made["description"] == longest and MAX_DESCRIPTION == 4096
    for op in ("create", "fork"):
        with pytest.raises(DefRefused, match=f"description must be a string \\(≤{MAX_DESCRIPTION}"):
            await family.dispatch(TENANT, {"op": op, "name": f"{kind.name}", "overlay": kind.overlay,
                                           "description": longest + "d"})


async def test_an_empty_gate_refuses_every_op_before_reading_its_input(open_rt: Any, kind: Kind) -> None:
    _, family = await family_of(open_rt, kind)
    deny = kind.allowing(())
    for op in family.ops():
        with pytest.raises(DefRefused, match=f"{kind.label}.{op}: denied .* {kind.scopes_field} is empty"):
            await family.dispatch(TENANT, {"op": op}, gate=deny)


async def test_a_gate_sees_only_its_subjects(open_rt: Any, kind: Kind) -> None:
    """Name kinds are gated by the def's name, trigger kinds by the agent the def starts."""
    _, family = await family_of(open_rt, kind)
    allowed, other = kind.allowing((ALLOW[kind.label],)), kind.allowing(("named:someone-else",))
    made = await family.dispatch(TENANT, {"op": "create", "name": kind.name, "overlay": kind.overlay},
                                 gate=allowed, run_id="r_caller")
    assert made["created_by_run_id"] == "r_caller"
    assert (await family.dispatch(TENANT, {"op": "list"}, gate=allowed))["count"] == 1
    assert (await family.dispatch(TENANT, {"op": "list"}, gate=other))["count"] == 0
    for args in ({"op": "get", "name": kind.name}, {"op": "retire", "name": kind.name},
                 {"op": "fork", "name": kind.name, "overlay": kind.change},
                 {"op": "verify", "name": kind.name, "content_sha256": made["content_sha256"]}):
        with pytest.raises(DefRefused, match=f"outside this agent's {kind.scopes_field}"):
            await family.dispatch(TENANT, args, gate=other)
    verified = await family.dispatch(TENANT, {"op": "verify", "name": kind.name,
                                              "content_sha256": made["content_sha256"]}, gate=allowed)
    assert verified["matches"]


async def test_the_tool_reaches_its_family_and_its_schema_matches(open_rt: Any, kind: Kind) -> None:
    agents = {**CONFIG["agents"], "author": {"model": "echo", "tools": [kind.label]}}
    rt, family = await family_of(open_rt, kind, {"agents": agents})
    tool = kind.tool()
    props = tool.input_schema["properties"]
    assert props["op"]["enum"] == list(family.ops())
    assert (f"create: default {str(family.create_promotes).lower()}, "
            f"fork: default {str(family.fork_promotes).lower()}") in props["promote"]["description"]
    assert props["description"]["maxLength"] == MAX_DESCRIPTION
    assert all(props[k]["type"] == "boolean" for k in ("promote", "include_lineage", "include_retired", "retired"))
    ctx = rt.tool_context(TENANT, "r_tool", "author")
    assert ctx.services.ops[kind.label] is family
    with pytest.raises(ToolError, match=f"^{kind.label}.list: denied"):
        await tool.invoke(ctx, {"op": "list"})


def test_descendants_is_accepted_but_grants_nothing_in_either_gate() -> None:
    """treadle keeps no agent lineage: `descendants` (valid in the config, loomcycle's word) opens
    nothing, in the name gate and in the agent gate alike; `any` opens everything, even a def
    without a subject (a channel webhook)."""
    name_gate = NameGate(scopes=("descendants",), field="agent_def_scopes", own=frozenset({"me"}))
    agent_gate = AgentGate(scopes=("descendants",), field="schedule_def_scopes", self_agent="me")
    for gate in (name_gate, agent_gate):
        assert not gate.allows("me") and not gate.allows("child") and not gate.allows(None)
    assert AgentGate(scopes=("any",), field="webhook_def_scopes", self_agent="me").allows(None)
    assert NameGate(scopes=("self",), field="skill_def_scopes", own=frozenset({"tone"})).allows("tone")
