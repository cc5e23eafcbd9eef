"""Memory `merge` (loomcycle's reducer op) against a real Postgres: deep merge, its refusals, the
expiry it keeps, quotas, concurrent merges of different fields, and its write riding the step's
transaction (a crash before the commit leaves nothing)."""

from __future__ import annotations

import asyncio
import json
import secrets
from contextlib import AsyncExitStack
from typing import Any

import pytest

from tests.support.tally import Crash
from treadle.builtins.memory import MemoryTool
from treadle.config import AgentConfig
from treadle.errors import ToolError
from treadle.runtime import Runtime
from treadle.store.memory import deep_merge
from treadle.store.runs import NewRun
from treadle.testing import expire_lease, open_test_runtime, sweep, user_text
from treadle.tools.base import Park, ToolContext, ToolResult

TOOL = MemoryTool()


@pytest.fixture
async def rt(open_runtime: Any) -> Any:
    runtime, _ = await open_runtime({})
    return runtime


def ctx(rt: Any, tenant: str, *, quota: int | None = None) -> ToolContext:
    return rt.tool_context(  # type: ignore[no-any-return]
        tenant, "r_" + secrets.token_hex(4), "agent-a", user_id="user-1",
        agent_config=AgentConfig(tools=["Memory"], memory_scopes=["agent", "user"], memory_quota_bytes=quota),
    )


async def call(c: ToolContext, **args: Any) -> dict[str, Any]:
    result = await TOOL.invoke(c, args)
    assert isinstance(result, ToolResult) and not result.is_error
    return json.loads(result.content)  # type: ignore[no-any-return]


def test_deep_merge_is_loomcycles() -> None:
    assert deep_merge({"a": {"x": 1}, "l": [1], "s": 1}, {"a": {"y": 2}, "l": [2], "s": {"o": 1}}) == {
        "a": {"x": 1, "y": 2}, "l": [2], "s": {"o": 1}}
    assert deep_merge({"a": {"x": 1}}, {"a": None}) == {"a": None}  # null replaces, as in loomcycle


async def test_merge_overlays_nested_objects_and_replaces_the_rest(rt: Any) -> None:
    c = ctx(rt, f"t_{secrets.token_hex(6)}")
    assert await call(c, op="merge", scope="user", key="profile", value={"name": "Alice", "likes": ["rock"]}) == {
        "key": "profile", "value": {"name": "Alice", "likes": ["rock"]}}
    out = await call(c, op="merge", scope="user", key="profile", value={"likes": ["jazz"], "age": 30,
                                                                        "cfg": {"a": {"x": 1}}})
    assert out["value"] == {"name": "Alice", "likes": ["jazz"], "age": 30, "cfg": {"a": {"x": 1}}}
    await call(c, op="merge", scope="user", key="profile", value={"cfg": {"a": {"y": 2}}})
    got = await call(c, op="get", scope="user", key="profile")
    assert got["value"] == {"name": "Alice", "likes": ["jazz"], "age": 30, "cfg": {"a": {"x": 1, "y": 2}}}


async def test_merge_refuses_a_non_object_on_either_side(rt: Any) -> None:
    c = ctx(rt, f"t_{secrets.token_hex(6)}")
    await call(c, op="set", scope="agent", key="n", value=42)
    with pytest.raises(ToolError, match="memory_not_an_object: existing value is not a JSON object"):
        await TOOL.invoke(c, {"op": "merge", "scope": "agent", "key": "n", "value": {"x": 1}})
    assert (await call(c, op="get", scope="agent", key="n"))["value"] == 42  # untouched
    for bad in ([1, 2, 3], "text", 1, None):
        with pytest.raises(ToolError, match=r"Memory\.merge: value must be a JSON object"):
            await TOOL.invoke(c, {"op": "merge", "scope": "agent", "key": "k", "value": bad})
    with pytest.raises(ToolError, match=r"Memory\.merge: missing required field: value"):
        await TOOL.invoke(c, {"op": "merge", "scope": "agent", "key": "k"})
    with pytest.raises(ToolError, match="key is required"):
        await TOOL.invoke(c, {"op": "merge", "scope": "agent", "value": {}})
    for field in ({"delta": 1}, {"embed": True}, {"prefix": "a"}):
        with pytest.raises(ToolError, match="applies to other ops only") as err:
            await TOOL.invoke(c, {"op": "merge", "scope": "agent", "key": "k", "value": {}, **field})
        assert err.value.code == "field_not_applicable"
    with pytest.raises(ToolError, match="unknown field"):
        await TOOL.invoke(c, {"op": "merge", "scope": "agent", "key": "k", "value": {}, "nonsense": 1})


async def test_merge_keeps_the_expiry_unless_given_a_ttl(rt: Any) -> None:
    tenant = f"t_{secrets.token_hex(6)}"
    c = ctx(rt, tenant)
    await call(c, op="set", scope="agent", key="k", value={"a": 1}, ttl_seconds=600)
    before = (await rt.memory.entry(tenant, "agent", "agent-a", "k"))["expires_at"]
    await call(c, op="merge", scope="agent", key="k", value={"b": 2})
    entry = await rt.memory.entry(tenant, "agent", "agent-a", "k")
    assert entry["expires_at"] == before and entry["value"] == {"a": 1, "b": 2}
    await call(c, op="merge", scope="agent", key="k", value={"c": 3}, ttl=0)  # loomcycle's 0: keep it
    assert (await rt.memory.entry(tenant, "agent", "agent-a", "k"))["expires_at"] == before
    await call(c, op="merge", scope="agent", key="k", value={"c": 4}, ttl=7200)
    assert (await rt.memory.entry(tenant, "agent", "agent-a", "k"))["expires_at"] > before
    await call(c, op="merge", scope="agent", key="fresh", value={"x": 1})
    assert (await rt.memory.entry(tenant, "agent", "agent-a", "fresh"))["expires_at"] is None


async def test_merge_counts_against_the_quota_and_then_changes_nothing(rt: Any) -> None:
    tenant = f"t_{secrets.token_hex(6)}"
    c = ctx(rt, tenant, quota=64)
    await call(c, op="merge", scope="agent", key="k", value={"a": "x" * 20})
    with pytest.raises(ToolError, match="memory_quota_exceeded"):
        await TOOL.invoke(c, {"op": "merge", "scope": "agent", "key": "k", "value": {"b": "y" * 60}})
    assert (await call(c, op="get", scope="agent", key="k"))["value"] == {"a": "x" * 20}


async def test_concurrent_merges_of_different_fields_lose_nothing(rt: Any) -> None:
    tenant = f"t_{secrets.token_hex(6)}"
    await asyncio.gather(*(rt.memory.merge(tenant, "user", "u", "profile", {f"f{i}": i, "nested": {f"n{i}": i}},
                                           None) for i in range(16)))
    found, value = await rt.memory.get(tenant, "user", "u", "profile")
    assert found and value == {**{f"f{i}": i for i in range(16)}, "nested": {f"n{i}": i for i in range(16)}}


class CrashingMemory(MemoryTool):
    """The Memory tool under another name, dying as a kill -9 would right after its first call wrote."""

    name = "CrashingMemory"
    calls = 0

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        result = await super().invoke(ctx, args)
        CrashingMemory.calls += 1
        if CrashingMemory.calls == 1:
            raise Crash
        return result


async def test_a_crash_before_the_step_commits_leaves_no_merge(db_url: str, tmp_path: Any) -> None:
    tenant = f"t_merge_{secrets.token_hex(4)}"
    agent = {"model": "script", "tools": ["CrashingMemory"], "memory_scopes": ["agent"],
             "mock": {"script": [{"tool": "CrashingMemory", "input": {"op": "merge", "scope": "agent", "key": "p",
                                                               "value": {"seen": {"x": 1}}}},
                                 {"text": "done"}]}}
    async with AsyncExitStack() as stack:
        rt, disp = await stack.enter_async_context(open_test_runtime(
            {"merger": agent}, database_url=db_url, tools=[CrashingMemory()], home=tmp_path, workers=1))
        await _crash_then_recover(rt, disp, tenant)


async def _crash_then_recover(rt: Runtime, disp: Any, tenant: str) -> None:
    run, _ = await rt.start_run(NewRun(tenant_id=tenant, agent="merger", segments=user_text("go")))
    with pytest.raises(Crash):
        await disp.drain()
    assert await rt.memory.get(tenant, "agent", "merger", "p") == (False, None)  # rolled back with the step
    assert await expire_lease(rt, run.id)
    await sweep(rt)
    await disp.drain()
    done = await rt.runs.get(tenant, run.id)
    assert done is not None and done.status == "completed"
    assert await rt.memory.get(tenant, "agent", "merger", "p") == (True, {"seen": {"x": 1}})
    results = [e.payload for e in await rt.runs.events(tenant, run.id) if e.type == "tool_result"]
    assert [json.loads(r["text"]) for r in results] == [{"key": "p", "value": {"seen": {"x": 1}}}]
