"""Channels and the park/wake mechanism, through scripted mock agents on a real Postgres."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from treadle.store.runs import NewRun

CHANNELS = {
    "news": {"semantic": "broadcast"},
    "work": {"semantic": "queue"},
    "other": {"semantic": "broadcast"},
}


def listener(channel: str, wait_ms: int = 600_000) -> dict[str, Any]:
    script = [
        {"tool": "Channel", "input": {"op": "subscribe", "channel": channel, "wait_ms": wait_ms}},
        {"text": "got it"},
    ]
    return {"model": "script", "tools": ["Channel"], "mock": {"script": script}}


async def start(rt: Any, agent: str, tenant: str) -> str:
    segs = [{"role": "user", "content": [{"type": "trusted-text", "text": "listen"}]}]
    run, _ = await rt.start_run(NewRun(tenant_id=tenant, agent=agent, segments=segs))
    return run.id


async def open_with_channels(open_runtime: Any, agents: dict[str, Any], **settings: Any) -> Any:
    rt, disp = await open_runtime(agents, **settings)
    for name, spec in CHANNELS.items():
        from treadle.store.channels import ChannelDef

        rt.channels.declared[name] = ChannelDef(name, semantic=spec["semantic"], source="yaml")
    return rt, disp


@pytest.fixture
def tenant() -> str:
    return f"t-{time.monotonic_ns()}"


def tool_result(events: list[Any]) -> dict[str, Any]:
    [res] = [e.payload for e in events if e.type == "tool_result"]
    return json.loads(res["text"])


async def test_subscriber_parks_holding_nothing_and_a_publish_wakes_it(open_runtime: Any, tenant: str) -> None:
    rt, disp = await open_with_channels(open_runtime, {"l": listener("news")})
    run_id = await start(rt, "l", tenant)
    await disp.drain()
    run = await rt.runs.get(tenant, run_id)
    assert run.status == "waiting" and run.lease_owner is None
    assert disp.queue == []  # no message, no worker, nothing scheduled
    events = await rt.runs.events(tenant, run_id)
    assert [e.type for e in events][-2:] == ["usage", "tool_parked"]
    assert not [e for e in events if e.type == "tool_result"]

    published = await rt.publish(tenant, "news", {"headline": "hello"})
    assert published["woken"] == 1
    await disp.drain()
    run = await rt.runs.get(tenant, run_id)
    assert run.status == "completed"
    events = await rt.runs.events(tenant, run_id)
    result = tool_result(events)
    assert [m["value"] for m in result["messages"]] == [{"headline": "hello"}]
    assert "channel_delivery" in [e.type for e in events]
    calls = [e for e in events if e.type == "tool_call"]
    results = [e for e in events if e.type == "tool_result"]
    assert [c.payload["tool_use"]["id"] for c in calls] == [r.payload["tool_use"]["id"] for r in results]


async def test_a_wait_times_out_through_the_sweeper(open_runtime: Any, tenant: str) -> None:
    rt, disp = await open_with_channels(open_runtime, {"l": listener("other", wait_ms=300)})
    run_id = await start(rt, "l", tenant)
    await disp.drain()
    assert (await rt.runs.get(tenant, run_id)).status == "waiting"
    assert await rt.wake_due() == 0  # not yet
    await asyncio.sleep(0.4)
    assert await rt.wake_due() >= 1
    await disp.drain()
    run = await rt.runs.get(tenant, run_id)
    assert run.status == "completed"
    result = tool_result(await rt.runs.events(tenant, run_id))
    assert result["timed_out"] is True and result["messages"] == []


async def test_a_queue_message_goes_to_exactly_one_subscriber(open_runtime: Any, tenant: str) -> None:
    rt, disp = await open_with_channels(open_runtime, {"l": listener("work", wait_ms=500)})
    a, b = await start(rt, "l", tenant), await start(rt, "l", tenant)
    await disp.drain()
    await rt.publish(tenant, "work", "job-1")
    await disp.drain()
    await asyncio.sleep(0.55)
    await rt.wake_due()
    await disp.drain()
    got = [tool_result(await rt.runs.events(tenant, r))["messages"] for r in (a, b)]
    assert sorted(len(m) for m in got) == [0, 1]
    assert [m["value"] for ms in got for m in ms] == ["job-1"]


async def test_publish_between_check_and_park_is_not_lost(open_runtime: Any, tenant: str) -> None:
    """A publish that lands after the subscriber looked but before it parked must wake it."""
    rt, disp = await open_with_channels(open_runtime, {"l": listener("news")})
    store = rt.channels
    original_read = store.read
    published = False

    async def read_then_publish(*a: Any, **kw: Any) -> Any:
        nonlocal published
        out = await original_read(*a, **kw)
        if not published:
            published = True
            await rt.publish(tenant, "news", "raced")
        return out

    store.read = read_then_publish
    run_id = await start(rt, "l", tenant)
    await disp.drain()
    store.read = original_read
    run = await rt.runs.get(tenant, run_id)
    assert run.status == "completed", run.status
    results = [tool_result([e]) for e in await rt.runs.events(tenant, run_id) if e.type == "tool_result"]
    assert [m["value"] for m in results[0]["messages"]] == ["raced"]


async def test_await_any_and_all(open_runtime: Any, tenant: str) -> None:
    script = [
        {"tool": "Channel", "input": {"op": "await", "channels": ["news", "other"], "mode": "all",
                                       "wait_ms": 600_000}},
        {"text": "both"},
    ]
    rt, disp = await open_with_channels(open_runtime, {"w": {"model": "script", "tools": ["Channel"],
                                                              "mock": {"script": script}}})
    run_id = await start(rt, "w", tenant)
    await disp.drain()
    await rt.publish(tenant, "news", 1)
    await disp.drain()
    assert (await rt.runs.get(tenant, run_id)).status == "waiting"  # woke, checked, parked again
    await rt.publish(tenant, "other", 2)
    await disp.drain()
    assert (await rt.runs.get(tenant, run_id)).status == "completed"
    result = tool_result(await rt.runs.events(tenant, run_id))
    assert result["satisfied"] and sorted(result["fired"]) == ["news", "other"]


async def test_cancel_a_parked_run(open_runtime: Any, tenant: str) -> None:
    rt, disp = await open_with_channels(open_runtime, {"l": listener("news")})
    run_id = await start(rt, "l", tenant)
    await disp.drain()
    await rt.cancel_run(tenant, run_id, "bored")
    await disp.drain()
    run = await rt.runs.get(tenant, run_id)
    assert run.status == "cancelled"
    res = [e.payload for e in await rt.runs.events(tenant, run_id) if e.type == "tool_result"]
    assert len(res) == 1 and res[0]["is_error"]
    async with rt.pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM run_waits WHERE run_id = %s", (run_id,))
        assert (await cur.fetchone())["n"] == 0


async def test_two_thousand_parked_runs_hold_no_worker_and_one_broadcast_wakes_all(
    open_runtime: Any, tenant: str
) -> None:
    rt, disp = await open_with_channels(
        open_runtime, {"l": listener("news"), "e": {"model": "echo"}}, chain_steps=4
    )
    n = 2000
    ids = [await start(rt, "l", tenant) for _ in range(n)]
    await disp.drain(max_steps=10 * n)
    async with rt.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) FILTER (WHERE status = 'waiting') AS w, count(*) FILTER (WHERE lease_owner IS NOT NULL)"
            " AS leased FROM runs WHERE tenant_id = %s", (tenant,))
        row = await cur.fetchone()
    assert (row["w"], row["leased"]) == (n, 0)
    # the workers are free: another run completes while 2,000 wait
    other = await start(rt, "e", tenant)
    assert await disp.drain() == 1
    assert (await rt.runs.get(tenant, other)).status == "completed"
    published = await rt.publish(tenant, "news", "go")
    assert published["woken"] == n
    await disp.drain(max_steps=10 * n)
    async with rt.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) AS done FROM runs WHERE tenant_id = %s AND status = 'completed'", (tenant,))
        assert (await cur.fetchone())["done"] == n + 1
    assert len(ids) == n


async def test_parked_runs_survive_a_restart(open_runtime: Any, tenant: str) -> None:
    rt, disp = await open_with_channels(open_runtime, {"l": listener("news")})
    ids = [await start(rt, "l", tenant) for _ in range(100)]
    await disp.drain()
    await rt.close()
    rt2, disp2 = await open_with_channels(open_runtime, {"l": listener("news")})
    assert (await rt2.publish(tenant, "news", "after restart"))["woken"] == 100
    await disp2.drain()
    statuses = {(await rt2.runs.get(tenant, r)).status for r in ids}
    assert statuses == {"completed"}
