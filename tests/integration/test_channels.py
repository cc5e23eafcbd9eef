"""Channels and the park/wake mechanism, through scripted mock agents on a real Postgres."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from treadle.store.runs import NewRun
from treadle.testing import age_message, age_run, until

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
    return str(run.id)


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
    result: dict[str, Any] = json.loads(res["text"])
    return result


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
    rt, disp = await open_with_channels(open_runtime, {"l": listener("other", wait_ms=60_000)})
    run_id = await start(rt, "l", tenant)
    await disp.drain()
    assert (await rt.runs.get(tenant, run_id)).status == "waiting"
    assert await rt.wake_due() == 0  # not yet
    await age_run(rt, run_id, 61)  # the minute passes
    assert await rt.wake_due() >= 1
    await disp.drain()
    run = await rt.runs.get(tenant, run_id)
    assert run.status == "completed"
    result = tool_result(await rt.runs.events(tenant, run_id))
    assert result["timed_out"] is True and result["messages"] == []


async def test_a_queue_message_goes_to_exactly_one_subscriber(open_runtime: Any, tenant: str) -> None:
    rt, disp = await open_with_channels(open_runtime, {"l": listener("work", wait_ms=60_000)})
    a, b = await start(rt, "l", tenant), await start(rt, "l", tenant)
    await disp.drain()
    await rt.publish(tenant, "work", "job-1")
    await disp.drain()
    for run_id in (a, b):  # the one still waiting times out
        await age_run(rt, run_id, 61)
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


def in_s(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()


def channel_ctx(rt: Any, tenant: str) -> Any:
    return rt.tool_context(tenant, "r_" + secrets.token_hex(4), "l", user_id="u1")


async def test_deliver_at_hides_a_message_until_then_and_wakes_the_parked_subscriber(
    open_runtime: Any, tenant: str
) -> None:
    rt, disp = await open_with_channels(open_runtime, {"l": listener("news")})
    run_id = await start(rt, "l", tenant)
    await disp.drain()
    assert (await rt.runs.get(tenant, run_id)).status == "waiting"

    published = await rt.publish(tenant, "news", "later", deliver_at=datetime.now(UTC) + timedelta(hours=1))
    assert published["woken"] == 0 and "visible_at" in published  # nothing to see yet: nobody woken
    d = await rt.channels.get_def(tenant, "news")
    assert (await rt.channels.read(tenant, d, "", "someone", 10, consume=False))[0] == []
    assert await rt.wake_due() == 0
    await disp.drain()
    assert (await rt.runs.get(tenant, run_id)).status == "waiting"

    assert await age_message(rt, published["message_id"], 3600)  # the hour passes
    assert await rt.wake_due() == 1  # the timed poke at deliver_at
    await disp.drain()
    run = await rt.runs.get(tenant, run_id)
    assert run.status == "completed", run.status
    result = tool_result(await rt.runs.events(tenant, run_id))
    assert [m["value"] for m in result["messages"]] == ["later"] and not result["timed_out"]
    aged = datetime.fromisoformat(published["visible_at"]) - timedelta(hours=1)
    assert datetime.fromisoformat(result["messages"][0]["visible_at"]) == aged


async def test_a_delayed_message_is_not_skipped_by_a_cursor_that_moved_past_its_id(
    open_runtime: Any, tenant: str
) -> None:
    rt, _ = await open_with_channels(open_runtime, {"l": listener("news")})
    store = rt.channels
    news, work = await store.get_def(tenant, "news"), await store.get_def(tenant, "work")
    later = datetime.now(UTC) + timedelta(hours=1)
    delayed_ids = []
    for d in (news, work):
        delayed, _ = await store.publish(tenant, d, "", "delayed", deliver_at=later)
        now, _ = await store.publish(tenant, d, "", "now")
        assert delayed.delayed and not now.delayed and delayed.id < now.id
        delayed_ids.append(delayed.id)
    msgs, cursor = await store.read(tenant, news, "", "c", 10, consume=True)
    assert [m.value for m in msgs] == ["now"]
    assert [m.value for m in (await store.read(tenant, work, "", "c", 10, consume=True))[0]] == ["now"]
    for message_id in delayed_ids:
        assert await age_message(rt, message_id, 3600)  # the hour passes
    msgs, after = await store.read(tenant, news, "", "c", 10, consume=True)
    assert [m.value for m in msgs] == ["delayed"] and after > cursor  # after the cursor, though its id is older
    assert (await store.read(tenant, news, "", "c", 10, consume=True))[0] == []
    assert [m.value for m in (await store.read(tenant, work, "", "c", 10, consume=True))[0]] == ["delayed"]


async def test_channel_tool_deliver_at_ttl_and_refusals(open_runtime: Any, tenant: str) -> None:
    from treadle.builtins.channel import ChannelTool
    from treadle.errors import ToolError

    rt, _ = await open_with_channels(open_runtime, {"l": listener("news")})
    tool, c = ChannelTool(), channel_ctx(rt, tenant)

    async def ok(**args: Any) -> dict[str, Any]:
        result = await tool.invoke(c, args)
        assert not result.is_error  # type: ignore[union-attr]
        return json.loads(result.content)  # type: ignore[union-attr,no-any-return]

    out = await ok(op="publish", channel="news", value="hidden", deliver_at=in_s(60), ttl=600)
    assert "visible_at" in out
    assert (await ok(op="peek", channel="news"))["messages"] == []
    await ok(op="publish", channel="news", value="shown", ttl_seconds=30, ttl=30)
    assert [m["value"] for m in (await ok(op="peek", channel="news"))["messages"]] == ["shown"]
    async with rt.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT payload, extract(epoch FROM expires_at - published_at)::int AS ttl FROM channel_messages"
            " WHERE tenant_id = %s ORDER BY id", (tenant,))
        assert [(r["payload"], r["ttl"]) for r in await cur.fetchall()] == [("hidden", 600), ("shown", 30)]
    # a deliver_at within the clock skew is delivered at once
    out = await ok(op="publish", channel="other", value="skew", deliver_at=in_s(-2))
    assert "visible_at" not in out
    assert [m["value"] for m in (await ok(op="peek", channel="other"))["messages"]] == ["skew"]

    cases: list[tuple[dict[str, Any], str]] = [
        ({"deliver_at": in_s(-3600)}, "deliver_at .* is in the past"),
        ({"deliver_at": "tomorrow"}, "not an RFC 3339 time"),
        ({"deliver_at": "2030-01-02T03:04:05"}, "not an RFC 3339 time with an offset"),
        ({"deliver_at": 1893456000}, "deliver_at must be an RFC 3339 time string"),
        ({"deliver_at": in_s(120), "ttl": 60}, "after the message expires"),
        ({"ttl": 5, "ttl_seconds": 6}, "disagree"),
        ({"ttl": -1}, "ttl must be a number"),
        ({"wait": 5}, "Channel: unknown field 'wait'"),
    ]
    for extra, message in cases:
        with pytest.raises(ToolError, match=message):
            await tool.invoke(c, {"op": "publish", "channel": "news", "value": 1, **extra})
    with pytest.raises(ToolError, match=r"Channel\.subscribe: deliver_at applies to publish and broadcast only"):
        await tool.invoke(c, {"op": "subscribe", "channel": "news", "deliver_at": in_s(60)})
    with pytest.raises(ToolError, match="unknown field 'from_cursor'") as info:
        await tool.invoke(c, {"op": "subscribe", "channel": "news", "from_cursor": "cur_0"})
    assert info.value.code == "unknown_field"
    assert [m["value"] for m in (await ok(op="peek", channel="news"))["messages"]] == ["shown"]  # none published


async def test_every_documented_channel_field_is_accepted(open_runtime: Any, tenant: str) -> None:
    from treadle.builtins.channel import ChannelTool
    from treadle.errors import ToolError

    rt, _ = await open_with_channels(open_runtime, {"l": listener("news")})
    tool, c = ChannelTool(), channel_ctx(rt, tenant)
    samples = {"op": "peek", "channel": "news", "channels": ["news"], "value": 1, "ttl_seconds": 5, "ttl": 5,
               "deliver_at": in_s(60), "max_messages": 5, "wait_ms": 0, "cursor": 0, "consumer": "me",
               "mode": "any", "n": 1}
    assert set(samples) == set(tool.input_schema["properties"])
    for field, sample in samples.items():
        for op in ("publish", "peek", "await", "ack", "broadcast"):
            try:
                await tool.invoke(c, {"op": op, "channel": "news", "channels": ["news"], "value": 1, field: sample})
            except ToolError as exc:
                assert exc.code != "unknown_field", (field, op, exc.message)


async def test_publishes_to_one_stream_commit_in_id_order(open_runtime: Any, tenant: str) -> None:
    """A tool publishes inside its step's transaction, which may commit after a later publish: the
    later one waits for it, so a broadcast reader's cursor never passes a message still to come."""
    rt, _ = await open_with_channels(open_runtime, {"e": {"model": "echo"}})
    news = await rt.channels.get_def(tenant, "news")
    later: list[asyncio.Task[Any]] = []
    async with rt.pool.step_transaction():
        first, _ = await rt.channels.publish(tenant, news, "", {"n": 1})  # not committed yet
        later.append(asyncio.create_task(rt.channels.publish(tenant, news, "", {"n": 2})))

        async def second_waits() -> bool:  # for the first one's commit
            async with rt.pool.connection() as conn:
                await conn.execute("SELECT pg_stat_clear_snapshot()")
                cur = await conn.execute(
                    "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND query LIKE '%%INSERT INTO channel_messages%%'"
                )
                row = await cur.fetchone()
                return row is not None and bool(row["n"])

        await until(second_waits, 10, what="the second publisher to wait for the first one's commit")
        # a reader meanwhile (another task: it does not join this transaction) sees neither
        seen, _ = await asyncio.create_task(rt.channels.read(tenant, news, "", "outside", 10, consume=False))
        assert seen == []
    second, _ = await later[0]
    assert first.id < second.id
    seen, _ = await rt.channels.read(tenant, news, "", "reader", 10, consume=True)
    assert [m.value for m in seen] == [{"n": 1}, {"n": 2}]
