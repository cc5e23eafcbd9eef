"""loomcycle's per-agent Channel allowlists (agent `channels: {publish, subscribe}`): with the
block, each side allows only the names and `prefix/*` wildcards it lists — an empty side allows
nothing — and every channel a call names is checked before anything is read or written; without
it, an agent may use every channel of its tenant (treadle's rule). Real Postgres, scripted agents."""

from __future__ import annotations

import json
import time
from typing import Any

from treadle.store.channels import ChannelDef
from treadle.store.runs import NewRun

ACL = {"publish": ["team/*"], "subscribe": ["team/status"]}


def agent(calls: list[dict[str, Any]], channels: dict[str, Any] | None) -> dict[str, Any]:
    script = [{"tool": "Channel", "input": c} for c in calls] + [{"text": "done"}]
    spec: dict[str, Any] = {"model": "script", "tools": ["Channel"], "mock": {"script": script}}
    if channels is not None:
        spec["channels"] = channels
    return spec


async def results(open_runtime: Any, calls: list[dict[str, Any]], channels: dict[str, Any] | None
                  ) -> tuple[Any, str, list[dict[str, Any]]]:
    rt, disp = await open_runtime({"a": agent(calls, channels)})
    for name in ("team/status", "team/results", "team", "news"):
        rt.channels.declared[name] = ChannelDef(name, semantic="broadcast", source="yaml")
    tenant = f"t-{time.monotonic_ns()}"
    segs = [{"role": "user", "content": [{"type": "trusted-text", "text": "go"}]}]
    run, _ = await rt.start_run(NewRun(tenant_id=tenant, agent="a", segments=segs))
    await disp.drain()
    assert (await rt.runs.get(tenant, run.id)).status == "completed"
    return rt, tenant, [e.payload for e in await rt.runs.events(tenant, run.id) if e.type == "tool_result"]


async def test_each_side_allows_only_what_it_lists(open_runtime: Any) -> None:
    rt, tenant, out = await results(open_runtime, [
        {"op": "publish", "channel": "team/results", "value": 1},  # team/* covers it
        {"op": "publish", "channel": "news", "value": 2},  # not listed
        {"op": "publish", "channel": "team", "value": 3},  # team/* does not cover `team` itself
        {"op": "subscribe", "channel": "team/status"},  # listed exactly
        {"op": "subscribe", "channel": "team/results"},  # publish-only
        {"op": "broadcast", "channels": ["team/status", "news"], "value": 4},  # one refused: nothing sent
        {"op": "list_channels"},
    ], ACL)
    assert [r["is_error"] for r in out] == [False, True, True, False, True, True, False]
    assert "publish not allowed on channel 'news'" in out[1]["text"]
    assert "subscribe not allowed on channel 'team/results'" in out[4]["text"]
    listed = json.loads(out[6]["text"])
    assert sorted(c["name"] for c in listed["channels"]) == ["team/results", "team/status"]
    assert (listed["publish"], listed["subscribe"]) == (ACL["publish"], ACL["subscribe"])
    news = next(d for d in await rt.channels.list_defs(tenant) if d.name == "news")
    msgs, _ = await rt.channels.read(tenant, news, "", "probe", 10, consume=False)
    assert msgs == []  # the refused broadcast wrote nothing, also not to its allowed channel
    status = next(d for d in await rt.channels.list_defs(tenant) if d.name == "team/status")
    assert (await rt.channels.read(tenant, status, "", "probe", 10, consume=False))[0] == []


async def test_an_empty_side_allows_nothing_and_no_block_allows_every_channel(open_runtime: Any) -> None:
    _, _, denied = await results(open_runtime, [{"op": "peek", "channel": "team/status"}], {"publish": ["news"]})
    assert denied[0]["is_error"] and "has no subscribe allowlist" in denied[0]["text"]
    _, _, free = await results(open_runtime, [{"op": "peek", "channel": "team/status"},
                                              {"op": "publish", "channel": "news", "value": 1}], None)
    assert [r["is_error"] for r in free] == [False, False]


async def test_a_def_written_through_a_tool_cannot_widen_its_authors_allowlist(open_runtime: Any) -> None:
    author = {"model": "script", "tools": ["AgentDef"], "agent_def_scopes": ["any"], "channels": ACL,
              "mock": {"script": [
                  {"tool": "AgentDef", "input": {"op": "create", "name": "wide", "overlay": {"model": "echo"}}},
                  {"tool": "AgentDef", "input": {"op": "create", "name": "more", "overlay": {
                      "model": "echo", "channels": {"publish": ["news"]}}}},
                  {"tool": "AgentDef", "input": {"op": "create", "name": "same", "overlay": {
                      "model": "echo", "channels": {"publish": ["team/*"]}}}},
                  {"text": "done"}]}}
    rt, disp = await open_runtime({"author": author})
    tenant = f"t-{time.monotonic_ns()}"
    segs = [{"role": "user", "content": [{"type": "trusted-text", "text": "go"}]}]
    run, _ = await rt.start_run(NewRun(tenant_id=tenant, agent="author", segments=segs))
    await disp.drain()
    out = [e.payload for e in await rt.runs.events(tenant, run.id) if e.type == "tool_result"]
    assert [r["is_error"] for r in out] == [True, True, False], out
    assert "channels absent would mean no narrowing" in out[0]["text"]
    assert "would widen" in out[1]["text"]
