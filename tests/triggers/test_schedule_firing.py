"""Firing schedules: the sweeper's tick (on time, catch-up, max_fires, pause), run-now, the
sweeper's singleton lock, and on_complete hooks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.support.e2e import query
from treadle.store.locks import SWEEPER_LOCK_KEY
from treadle.store.schedules import ScheduleState
from treadle.triggers.firing import run_key

TENANT = "default"
EVERY_MINUTE = {"agent": "echo", "schedule": "* * * * *", "prompt": "tick"}


async def create(rt: Any, name: str, **overlay: Any) -> ScheduleState:
    svc = rt.triggers.schedules
    await svc.family.dispatch(TENANT, {"op": "create", "name": name, "overlay": {**EVERY_MINUTE, **overlay}})
    result: ScheduleState = await svc.resolve(TENANT, name)
    return result


async def runs_of(rt: Any, schedule_id: str) -> list[dict[str, Any]]:
    return await query(
        rt.database_url,
        "SELECT id, agent, user_id, metadata, idempotency_key, status FROM runs"
        " WHERE metadata->>'schedule_id' = %s ORDER BY metadata->>'scheduled_for'",
        (schedule_id,),
    )


async def test_a_due_fire_starts_one_run_carrying_the_schedule(open_rt: Any) -> None:
    rt, disp = await open_rt()
    st = await create(rt, "m", user_id="u1", metadata={"team": "ops"})
    assert st.next_fire_at is not None
    svc = rt.triggers.schedules
    early = await svc.firing.tick(st.next_fire_at - timedelta(seconds=1))
    assert early.fired == 0
    at = st.next_fire_at
    result = await svc.firing.tick(at + timedelta(seconds=2))
    assert (result.fired, result.skipped) == (1, 0)
    assert (await svc.firing.tick(at + timedelta(seconds=3))).fired == 0  # already fired

    [run] = await runs_of(rt, st.schedule_id)
    assert run["agent"] == "echo" and run["user_id"] == "u1" and run["idempotency_key"] == run_key(st.schedule_id, at)
    meta = run["metadata"]
    assert meta["team"] == "ops" and meta["schedule_name"] == "m" and meta["schedule_def_id"] == st.def_id
    assert datetime.fromisoformat(meta["scheduled_for"]) == at and meta["trigger"] == "schedule:sweeper"
    await disp.drain()
    events = await rt.runs.events(TENANT, run["id"])
    assert [e.payload.get("text") for e in events if e.type == "text"] == ["tick"]

    state = await svc.resolve(TENANT, "m")
    assert (state.fire_count, state.last_run_id, state.last_status) == (1, run["id"], "completed")  # the run ended
    assert state.next_fire_at == at + timedelta(minutes=1)
    [fire] = await svc.store.recent_fires(TENANT, st.schedule_id)
    assert fire["run_id"] == run["id"] and fire["status"] == "completed" and fire["source"] == "sweeper"


@pytest.mark.parametrize(("catch_up_max", "expected"), [(0, 1), (3, 4), (100, 11)])
async def test_catch_up_after_downtime(open_rt: Any, catch_up_max: int, expected: int) -> None:
    rt, _ = await open_rt()
    st = await create(rt, "c", catch_up_max=catch_up_max)
    assert st.next_fire_at is not None
    now = st.next_fire_at + timedelta(minutes=10, seconds=5)  # 11 due times; the newest is on time
    result = await rt.triggers.schedules.firing.tick(now)
    assert (result.fired, result.skipped) == (expected, 11 - expected)
    fired = [datetime.fromisoformat(r["metadata"]["scheduled_for"]) for r in await runs_of(rt, st.schedule_id)]
    newest = st.next_fire_at + timedelta(minutes=10)
    assert fired == [newest - timedelta(minutes=i) for i in reversed(range(expected))]
    state = await rt.triggers.schedules.resolve(TENANT, "c")
    assert state.skipped_fires == 11 - expected and state.next_fire_at == newest + timedelta(minutes=1)


async def test_max_fires_retires_after_n(open_rt: Any) -> None:
    rt, _ = await open_rt()
    st = await create(rt, "thrice", max_fires=3)
    assert st.next_fire_at is not None
    svc = rt.triggers.schedules
    fired = 0
    for i in range(5):
        fired += (await svc.firing.tick(st.next_fire_at + timedelta(minutes=i, seconds=1))).fired
    assert fired == 3 and len(await runs_of(rt, st.schedule_id)) == 3
    state = await svc.resolve(TENANT, "thrice")
    assert (state.status, state.retired_reason, state.fire_count, state.next_fire_at) == (
        "retired", "max_fires", 3, None
    )
    record = await svc.family.defs.get(TENANT, "schedule", def_id=st.def_id)
    assert record is not None and record.status == "retired" and not record.active
    # a burst of due times never overshoots max_fires either
    st2 = await create(rt, "burst", max_fires=3, catch_up_max=50)
    assert st2.next_fire_at is not None
    result = await svc.firing.tick(st2.next_fire_at + timedelta(minutes=20))
    assert result.fired == 3 and result.retired == [st2.schedule_id]


async def test_paused_and_disabled_schedules_do_not_fire(open_rt: Any) -> None:
    rt, _ = await open_rt()
    svc = rt.triggers.schedules
    st = await create(rt, "p", catch_up_max=0)
    await svc.pause(TENANT, st.schedule_id)
    off = await create(rt, "off", enabled=False)
    assert off.next_fire_at is None
    later = datetime.now(UTC) + timedelta(minutes=5)
    assert (await svc.firing.tick(later)).fired == 0
    await svc.resume(TENANT, st.schedule_id)
    assert (await svc.firing.tick(later)).fired == 1  # one on-time fire; the older due times are missed


async def test_run_now_fires_at_once_and_counts(open_rt: Any) -> None:
    rt, _ = await open_rt()
    from tests.support.triggers import client_for

    st = await create(rt, "now", max_fires=2)
    async with client_for(rt) as c:
        out = (await c.post(f"/v1/_schedules/{st.schedule_id}/run-now")).json()
        assert out["run_id"].startswith("r_") and not out["retired"]
        out = (await c.post("/v1/_schedules/now/run-now")).json()
        assert out["retired"]
        r = await c.post("/v1/_schedules/now/run-now")
        assert (r.status_code, r.json()["code"]) == (409, "schedule_retired")
    runs = await runs_of(rt, st.schedule_id)
    assert len(runs) == 2 and {r["metadata"]["trigger"] for r in runs} == {"schedule:run_now"}


async def test_the_sweeper_is_a_singleton(open_rt: Any) -> None:
    rt, _ = await open_rt()
    await create(rt, "s", catch_up_max=0)
    sweeper = rt.triggers.sweeper()
    async with rt.pool.connection() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (SWEEPER_LOCK_KEY,))
        assert await sweeper.tick_once(datetime.now(UTC) + timedelta(minutes=2)) is None
    result = await sweeper.tick_once(datetime.now(UTC) + timedelta(minutes=2))
    assert result is not None and result.fired == 1


async def test_a_claim_whose_run_never_started_is_recovered_once(open_rt: Any) -> None:
    rt, _ = await open_rt()
    st = await create(rt, "r")
    svc = rt.triggers.schedules
    assert st.next_fire_at is not None
    at = st.next_fire_at
    async with rt.pool.connection() as conn:  # a claimant that died right after its claim
        await conn.execute(
            "INSERT INTO schedule_fires (schedule_id, scheduled_for, tenant_id, def_id, version, source, fired_at)"
            " VALUES (%s, %s, %s, %s, 1, 'sweeper', now() - interval '5 minutes')",
            (st.schedule_id, at, TENANT, st.def_id),
        )
    assert await svc.firing.recover() == 1
    assert await svc.firing.recover() == 0
    result = await svc.firing.tick(at + timedelta(seconds=1))  # the sweeper finds the time taken
    assert result.fired == 0
    [run] = await runs_of(rt, st.schedule_id)
    assert run["idempotency_key"] == run_key(st.schedule_id, at)


async def test_on_complete_memory_set(open_rt: Any) -> None:
    rt, disp = await open_rt()
    hooks = [
        {"kind": "memory.set", "scope": "agent", "key": "last-tick"},
        {"kind": "memory.set", "scope": "tenant", "key": "fixed", "payload": {"ok": True}, "ttl_seconds": 60},
        {"kind": "memory.set", "scope": "user", "key": "needs-user"},
    ]
    st = await create(rt, "mem", on_complete=hooks)
    assert st.next_fire_at is not None
    svc = rt.triggers.schedules
    await svc.firing.tick(st.next_fire_at + timedelta(seconds=1))
    runner = rt.triggers.hooks
    assert await runner.run_once() == 0  # the run has not ended yet
    await disp.drain()
    assert await runner.run_once() == 1
    assert await runner.run_once() == 0  # hooks run once
    found, value = await rt.memory.get(TENANT, "agent", "echo", "last-tick")
    assert found and value["final_text"] == "tick" and value["schedule_name"] == "mem"
    assert value["status"] == "completed"
    assert await rt.memory.get(TENANT, "tenant", "", "fixed") == (True, {"ok": True})
    [fire] = await svc.store.recent_fires(TENANT, st.schedule_id)
    assert fire["hooks_status"] == "failed"
    results = fire["hooks_result"]["results"]
    assert [r["ok"] for r in results] == [True, True, False] and results[2]["code"] == "memory_scope"


async def test_on_complete_publish_wakes_a_parked_consumer(open_rt: Any) -> None:
    rt, disp = await open_rt()
    from treadle.store.runs import NewRun

    segs = [{"role": "user", "content": [{"type": "trusted-text", "text": "wait for events"}]}]
    consumer, _ = await rt.start_run(NewRun(tenant_id=TENANT, agent="listener", segments=segs))
    await disp.drain()
    assert (await rt.runs.get(TENANT, consumer.id)).status == "waiting"

    st = await create(rt, "pub", on_complete=[{"kind": "channel.publish", "channel": "events", "payload": {"n": 1}}])
    assert st.next_fire_at is not None
    await rt.triggers.schedules.firing.tick(st.next_fire_at + timedelta(seconds=1))
    await disp.drain()
    assert await rt.triggers.hooks.run_once() == 1
    await disp.drain()
    assert (await rt.runs.get(TENANT, consumer.id)).status == "completed"
    events = await rt.runs.events(TENANT, consumer.id)
    [result] = [e.payload["text"] for e in events if e.type == "tool_result"]
    assert '"schedule_name":"pub"' in result.replace(" ", "") and '"n":1' in result.replace(" ", "")


async def test_on_complete_publish_without_channels_is_recorded_not_raised(open_rt: Any) -> None:
    rt, disp = await open_rt()
    rt.triggers.hooks.publisher = None  # a runtime without a channel publisher
    st = await create(rt, "nopub", on_complete=[{"kind": "channel.publish", "channel": "events"}])
    assert st.next_fire_at is not None
    svc = rt.triggers.schedules
    await svc.firing.tick(st.next_fire_at + timedelta(seconds=1))
    await disp.drain()
    assert await rt.triggers.hooks.run_once() == 1
    [fire] = await svc.store.recent_fires(TENANT, st.schedule_id)
    assert fire["hooks_status"] == "failed"
    assert fire["hooks_result"]["results"][0]["code"] == "channels_unavailable"


async def test_last_status_follows_the_run_to_its_end(open_rt: Any) -> None:
    """A fire reads `started` while its run runs, then the run's ending: completed, failed or
    cancelled (with the run's error)."""
    from tests.support.triggers import client_for

    failing = {"model": "echo", "mock": {"error_rate": 1.0}}  # every model call fails
    rt, disp = await open_rt({"agents": {"echo": {"model": "echo"}, "broken": failing}})
    svc = rt.triggers.schedules
    st = await create(rt, "m")
    assert st.next_fire_at is not None
    await svc.firing.tick(st.next_fire_at + timedelta(seconds=1))
    state = await svc.resolve(TENANT, "m")
    assert state.last_status == "started" and state.last_run_id is not None  # queued, not run yet
    await disp.drain()
    async with client_for(rt) as c:
        view = (await c.get(f"/v1/_schedules/{st.schedule_id}/state")).json()
    assert (view["last_status"], view["last_error"]) == ("completed", None)
    assert view["recent_fires"][0]["status"] == "completed"

    await svc.firing.tick(st.next_fire_at + timedelta(minutes=1, seconds=1))
    running = (await svc.resolve(TENANT, "m")).last_run_id
    assert running is not None and running != state.last_run_id
    await rt.cancel_run(TENANT, running, "not today")
    await disp.drain()
    view = await svc.state_view(TENANT, "m")
    assert (view["last_run_id"], view["last_status"]) == (running, "cancelled")
    assert "not today" in view["last_error"]
    assert [f["status"] for f in view["recent_fires"]] == ["cancelled", "completed"]

    bad = await create(rt, "b", agent="broken")
    assert bad.next_fire_at is not None
    await svc.firing.tick(bad.next_fire_at + timedelta(seconds=1))
    await disp.drain()
    view = await svc.state_view(TENANT, "b")
    assert view["last_status"] == "failed" and view["last_error"], view


async def test_a_yaml_schedule_spent_by_max_fires_stays_retired_across_restarts(open_rt: Any) -> None:
    yaml = {"scheduled_runs": {"once": {**EVERY_MINUTE, "max_fires": 1}}}
    rt, _ = await open_rt(yaml)
    assert await rt.triggers.sync_static() == {"created": 1, "retired": 0}
    svc = rt.triggers.schedules
    st = await svc.resolve(TENANT, "once")
    assert st.next_fire_at is not None
    first = await svc.firing.tick(st.next_fire_at + timedelta(seconds=1))
    assert first.fired == 1 and first.retired == [st.schedule_id]

    rt2, _ = await open_rt(yaml)  # a restart with the same treadle.yaml
    assert await rt2.triggers.sync_static() == {"created": 0, "retired": 0}
    svc2 = rt2.triggers.schedules
    assert (await svc2.firing.tick(st.next_fire_at + timedelta(minutes=5, seconds=1))).fired == 0
    assert len(await runs_of(rt2, st.schedule_id)) == 1
    state = await svc2.resolve(TENANT, "once")
    assert (state.status, state.retired_reason, state.version) == ("retired", "max_fires", 1)

    # a changed entry is a new version: it fires afresh
    rt3, _ = await open_rt({"scheduled_runs": {"once": {**EVERY_MINUTE, "max_fires": 2}}})
    assert await rt3.triggers.sync_static() == {"created": 1, "retired": 0}
    state = await rt3.triggers.schedules.resolve(TENANT, "once")
    assert (state.status, state.version, state.fire_count) == ("active", 2, 0)
