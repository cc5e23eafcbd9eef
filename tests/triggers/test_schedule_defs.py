"""ScheduleDef over HTTP (POST /v1/_scheduledef, /v1/_schedules/*), yaml `scheduled_runs:`, and
the ScheduleDef tool's default-deny gate."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.support.triggers import client_for
from treadle.builtins.scheduledef import ScheduleDefTool
from treadle.errors import DefRefused
from treadle.tools.base import ToolContext, ToolResult

NIGHTLY = {"agent": "echo", "schedule": "0 3 * * *", "timezone": "Europe/Berlin", "prompt": "nightly report"}


async def op(client: Any, body: dict[str, Any], status: int = 200) -> dict[str, Any]:
    r = await client.post("/v1/_scheduledef", json=body)
    assert r.status_code == status, r.text
    return dict(r.json())


async def test_create_fork_get_list_retire(open_rt: Any) -> None:
    rt, _ = await open_rt()
    async with client_for(rt) as c:
        created = await op(c, {"op": "create", "name": "nightly", "overlay": NIGHTLY, "description": "3 am"})
        assert created["version"] == 1 and created["active"] and created["content_sha256"].startswith("sha256:")
        assert created["body"]["prompt"] == [
            {"role": "user", "content": [{"type": "trusted-text", "text": "nightly report"}]}
        ]
        sched = created["schedule"]
        assert sched["schedule_id"].startswith("sch_") and sched["status"] == "active"
        nxt = datetime.fromisoformat(sched["next_fire_at"]).astimezone(ZoneInfo("Europe/Berlin"))
        assert (nxt.hour, nxt.minute) == (3, 0) and nxt > datetime.now(UTC)

        again = await op(c, {"op": "create", "name": "nightly", "overlay": NIGHTLY})  # a retry: the same def
        assert again["deduplicated"] and again["def_id"] == created["def_id"]
        clash = await op(c, {"op": "create", "name": "nightly", "overlay": {**NIGHTLY, "prompt": "other"}}, 409)
        assert clash["code"] == "conflict" and "fork it" in clash["error"]

        forked = await op(c, {"op": "fork", "name": "nightly", "overlay": {"schedule": "30 4 * * 1-5"}})
        assert forked["version"] == 2 and forked["parent_def_id"] == created["def_id"]
        assert forked["schedule"]["schedule_id"] == sched["schedule_id"] and forked["schedule"]["version"] == 2
        assert forked["description"] == "3 am"
        same = await op(c, {"op": "fork", "name": "nightly", "overlay": {"schedule": "30 4 * * 1-5"}})
        assert same.get("deduplicated") and same["def_id"] == forked["def_id"]

        got = await op(c, {"op": "get", "def_id": created["def_id"], "include_lineage": True})
        assert got["version"] == 1 and not got["active"]
        got = await op(c, {"op": "get", "name": "nightly", "include_lineage": True})
        assert got["version"] == 2 and [d["version"] for d in got["lineage"]] == [2, 1]
        listed = await op(c, {"op": "list"})
        assert [(d["name"], d["version"]) for d in listed["defs"]] == [("nightly", 2), ("nightly", 1)]

        state = (await c.get(f"/v1/_schedules/{sched['schedule_id']}/state")).json()
        assert state["schedule"] == "30 4 * * 1-5" and state["version"] == 2 and state["recent_fires"] == []
        for ident in ("nightly", forked["def_id"], created["def_id"]):
            assert (await c.get(f"/v1/_schedules/{ident}/state")).json()["schedule_id"] == sched["schedule_id"]
        assert (await c.get("/v1/_scheduledef/names")).json() == {"names": ["nightly"]}

        retired = await op(c, {"op": "retire", "name": "nightly"})
        assert retired["status"] == "retired" and retired["schedule"]["status"] == "retired"
        assert retired["schedule"]["next_fire_at"] is None
        # v1 was never retired (only the active version is): it stays listed, promotable
        assert [(d["version"], d["active"]) for d in (await op(c, {"op": "list"}))["defs"]] == [(1, False)]
        assert len((await op(c, {"op": "list", "retired": True}))["defs"]) == 2
        r = await c.get("/v1/_schedules/nope/state")
        assert (r.status_code, r.json()["code"]) == (404, "unknown_schedule")


async def test_invalid_defs_are_refused_with_reasons(open_rt: Any) -> None:
    rt, _ = await open_rt()
    cases = [
        ({**NIGHTLY, "schedule": "0 3 * * * *"}, "6 fields"),
        ({**NIGHTLY, "schedule": "61 3 * * *"}, "not a valid cron"),
        ({**NIGHTLY, "schedule": "0 0 L * *"}, "day-of-month field 'L' has characters"),
            ({**NIGHTLY, "schedule": "0 0 * * 5L"}, "not valid in the day-of-week"),
        ({**NIGHTLY, "schedule": "0 0 1 * 1"}, "both day-of-month and day-of-week"),
        ({**NIGHTLY, "timezone": "Mars/Olympus"}, "unknown timezone"),
        ({**NIGHTLY, "agent": "ghost"}, "unknown agent 'ghost'"),
        ({**NIGHTLY, "max_fires": -1}, "max_fires"),
        ({**NIGHTLY, "on_complete": [{"kind": "mcp.call"}]}, "on_complete"),
        ({**NIGHTLY, "surprise": 1}, "surprise"),
    ]
    async with client_for(rt) as c:
        for overlay, needle in cases:
            body = await op(c, {"op": "create", "name": "bad", "overlay": overlay}, 422)
            assert body["code"] == "tool_refused" and needle in body["error"], (needle, body)
        r = await c.post("/v1/_scheduledef", content=b"not json")
        assert (r.status_code, r.json()["code"]) == (400, "bad_request")
        assert (await op(c, {"op": "explode"}, 422))["code"] == "tool_refused"


async def test_add_and_remove_hooks_make_versions(open_rt: Any) -> None:
    rt, _ = await open_rt()
    async with client_for(rt) as c:
        await op(c, {"op": "create", "name": "h", "overlay": NIGHTLY})
        hook = {"kind": "memory.set", "scope": "agent", "key": "last-report"}
        v2 = await op(c, {"op": "add_hook", "name": "h", "hook": hook})
        assert v2["version"] == 2 and v2["body"]["on_complete"] == [hook]
        v3 = await op(c, {"op": "add_hook", "name": "h", "hook": {"kind": "channel.publish", "channel": "events"}})
        assert [h["kind"] for h in v3["body"]["on_complete"]] == ["memory.set", "channel.publish"]
        v4 = await op(c, {"op": "remove_hook", "name": "h", "hook_index": 0})
        assert [h["kind"] for h in v4["body"]["on_complete"]] == ["channel.publish"]
        bad = await op(c, {"op": "remove_hook", "name": "h", "hook_index": 5}, 422)
        assert "out of range" in bad["error"]
        bad = await op(c, {"op": "add_hook", "name": "h", "hook": {"kind": "memory.set", "scope": "galaxy"}}, 422)
        assert "hook" in bad["error"]


async def test_pause_resume(open_rt: Any) -> None:
    rt, _ = await open_rt()
    async with client_for(rt) as c:
        sid = (await op(c, {"op": "create", "name": "p", "overlay": NIGHTLY}))["schedule"]["schedule_id"]
        paused = (await c.post(f"/v1/_schedules/{sid}/pause")).json()
        assert paused["paused"] and paused["next_fire_at"] is None
        resumed = (await c.post(f"/v1/_schedules/{sid}/resume")).json()
        assert not resumed["paused"] and resumed["next_fire_at"] is not None
        listed = (await c.get("/v1/_schedules/list-all")).json()["schedules"]
        assert [s["name"] for s in listed] == ["p"]


async def test_yaml_scheduled_runs_become_defs(open_rt: Any) -> None:
    yaml_v1 = {"scheduled_runs": {"digest": {**NIGHTLY, "max_fires": 5}}}
    rt, _ = await open_rt(yaml_v1)
    assert await rt.triggers.sync_static() == {"created": 1, "retired": 0}
    assert await rt.triggers.sync_static() == {"created": 0, "retired": 0}  # unchanged: no new version
    svc = rt.triggers.schedules
    state = await svc.resolve("default", "digest")
    assert state.version == 1 and state.status == "active"

    rt2, _ = await open_rt({"scheduled_runs": {"digest": {**NIGHTLY, "max_fires": 7}}})
    assert await rt2.triggers.sync_static() == {"created": 1, "retired": 0}
    state = await rt2.triggers.schedules.resolve("default", "digest")
    assert state.version == 2

    rt3, _ = await open_rt({})
    assert await rt3.triggers.sync_static() == {"created": 0, "retired": 1}
    state = await rt3.triggers.schedules.resolve("default", "digest")
    assert state.status == "retired"


def tool_ctx(rt: Any, agent: str) -> ToolContext:
    return rt.tool_context("default", "r_test", agent, tool_use_id="tu_1")  # type: ignore[no-any-return]


async def test_tool_is_default_deny_and_scoped(open_rt: Any) -> None:
    extra_agents = {
        "plain": {"model": "echo", "tools": ["ScheduleDef"]},
        "self_only": {"model": "echo", "tools": ["ScheduleDef"], "schedule_def_scopes": ["self"]},
        "boss": {"model": "echo", "tools": ["ScheduleDef"], "schedule_def_scopes": ["named:echo"]},
    }
    from tests.support.triggers import AGENTS

    rt, _ = await open_rt({"agents": {**AGENTS, **extra_agents}})
    tool = ScheduleDefTool()
    import pytest

    from treadle.errors import ToolError

    with pytest.raises(ToolError, match="default-deny"):
        await tool.invoke(tool_ctx(rt, "plain"), {"op": "list"})
    with pytest.raises(ToolError, match="outside this agent's schedule_def_scopes"):
        await tool.invoke(tool_ctx(rt, "self_only"), {"op": "create", "name": "x", "overlay": NIGHTLY})
    ok = await tool.invoke(
        tool_ctx(rt, "self_only"), {"op": "create", "name": "mine", "overlay": {**NIGHTLY, "agent": "self_only"}}
    )
    assert isinstance(ok, ToolResult) and not ok.is_error
    assert '"version":1' in ok.content and '"created_by_run_id":"r_test"' in ok.content
    ok = await tool.invoke(tool_ctx(rt, "boss"), {"op": "create", "name": "theirs", "overlay": NIGHTLY})
    assert isinstance(ok, ToolResult) and not ok.is_error
    listed = await tool.invoke(tool_ctx(rt, "boss"), {"op": "list"})
    assert isinstance(listed, ToolResult) and '"theirs"' in listed.content and '"mine"' not in listed.content
    with pytest.raises(ToolError, match="outside"):
        await tool.invoke(tool_ctx(rt, "boss"), {"op": "retire", "name": "mine"})


async def test_triggers_may_target_an_agent_that_exists_only_as_a_promoted_agentdef(open_rt: Any) -> None:
    """A ScheduleDef or WebhookDef may start an agent created at run time (AgentDef), not only a
    treadle.yaml one; its runs get that AgentDef. Another tenant's AgentDef does not count."""
    rt, _ = await open_rt()
    async with client_for(rt) as c:
        refused = await op(c, {"op": "create", "name": "digest", "overlay": {**NIGHTLY, "agent": "digester"}}, 422)
        assert "unknown agent 'digester'" in refused["error"]
        r = await c.post("/v1/_agentdef", json={"op": "create", "name": "digester", "overlay": {
            "provider": "mock", "model": "echo", "system_prompt": "Digest."}})
        assert r.status_code == 200, r.text
        agent_def = r.json()
        created = await op(c, {"op": "create", "name": "digest", "overlay": {**NIGHTLY, "agent": "digester"}})
        fired = (await c.post(f"/v1/_schedules/{created['schedule']['schedule_id']}/run-now")).json()
        run = (await c.get(f"/v1/runs/{fired['run_id']}")).json()
        assert run["agent"] == "digester" and run["def_id"] == agent_def["def_id"]

        r = await c.post("/v1/_webhookdef", json={"op": "create", "name": "inbox", "overlay": {
            "agent": "digester", "auth": {"kind": "bearer", "bearer_token_env": "TREADLE_TEST_INBOX_TOKEN"}}})
        assert r.status_code == 200, r.text
    with pytest.raises(DefRefused, match="unknown agent 'digester'"):  # another tenant's AgentDef
        await rt.triggers.schedules.family.dispatch(
            "other-tenant", {"op": "create", "name": "digest", "overlay": {**NIGHTLY, "agent": "digester"}})
