"""Regression (architecture issue): every tool reads the permissions of the run's own resolved agent
— the AgentDef it was pinned to — never the treadle.yaml agent looked up by name. ScheduleDef used
to read the yaml agent, so an AgentDef granting `schedule_def_scopes` was refused."""

from __future__ import annotations

from typing import Any

from tests.support.substrate import TENANT, run_agent, scripted, tool_results

SCHEDULE = {"schedule": "0 3 * * *", "prompt": "nightly"}


def planner(**scopes: Any) -> dict[str, Any]:
    """A mock agent that asks ScheduleDef to create a schedule that starts itself."""
    call = ("ScheduleDef", {"op": "create", "name": "nightly", "overlay": {"agent": "planner", **SCHEDULE}})
    return scripted(call, **scopes)


async def test_an_agentdef_that_grants_schedule_def_scopes_can_create_a_schedule(open_rt: Any) -> None:
    rt, disp = await open_rt({"agents": {}})
    await rt.substrate.agents.dispatch(TENANT, {"op": "create", "name": "planner",
                                                "overlay": planner(schedule_def_scopes=["self"])})
    run = await run_agent(rt, disp, "planner")
    assert run.def_id is not None  # the run is pinned to the AgentDef: no yaml agent of that name exists
    [(is_error, created)] = await tool_results(rt, run.id)
    assert not is_error, created
    assert created["name"] == "nightly" and created["body"]["agent"] == "planner"
    state = await rt.triggers.schedules.resolve(TENANT, "nightly")
    assert state.status == "active"


async def test_an_agentdef_without_the_grant_is_refused_even_when_its_yaml_namesake_has_it(open_rt: Any) -> None:
    rt, disp = await open_rt({"agents": {"planner": planner(schedule_def_scopes=["self"])}})
    # the tenant's promoted version of `planner` drops the grant: runs of `planner` get that version
    await rt.substrate.agents.dispatch(TENANT, {"op": "fork", "name": "planner", "promote": True,
                                                "overlay": {"schedule_def_scopes": None}})
    run = await run_agent(rt, disp, "planner")
    assert run.def_id is not None
    [(is_error, refused)] = await tool_results(rt, run.id)
    assert is_error and "default-deny" in refused
    listing = await rt.triggers.schedules.family.dispatch(TENANT, {"op": "list"})
    assert listing["count"] == 0
