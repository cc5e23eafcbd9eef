"""Exactly-once fires under races: two sweepers (separate runtimes, no singleton lock) over 10,000
due fires, raw claim races on the fire rows, and redelivered EventBridge invocations."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from treadle.specs.schedule import ScheduleSpec
from treadle.store.schedules import FireRow, ScheduleStore
from treadle.triggers.firing import TickResult

TENANT = "default"
SCHEDULES = 100
FIRES_EACH = 100  # 100 x 100 = 10,000 fires


async def make_schedules(rt: Any, n: int, **overlay: Any) -> list[str]:
    svc = rt.triggers.schedules
    body = ScheduleSpec.model_validate(
        {"agent": "echo", "schedule": "* * * * *", "prompt": "race", **overlay}
    ).body()
    ids = []
    for i in range(n):
        record = await svc.family.store(TENANT, f"race-{i:03d}", body, parent_def_id=None, description="", promote=True)
        ids.append((await svc.resolve(TENANT, record.name)).schedule_id)
    return ids


async def test_two_sweepers_racing_fire_10000_fires_exactly_once(open_rt: Any) -> None:
    rt_a, _ = await open_rt(db_pool_size=8)
    rt_b, _ = await open_rt(db_pool_size=8)
    await make_schedules(rt_a, SCHEDULES, catch_up_max=FIRES_EACH)
    now = datetime.now(UTC).replace(second=30, microsecond=0) + timedelta(hours=1)
    start = now.replace(second=0) - timedelta(minutes=FIRES_EACH - 1)
    async with rt_a.pool.connection() as conn:  # every schedule is 100 minutes behind
        await conn.execute("UPDATE schedules SET next_fire_at = %s", (start,))
    sweepers = [rt_a.triggers.sweeper(singleton=False), rt_b.triggers.sweeper(singleton=False)]
    for s in sweepers:
        s.service.settings.scheduler_batch = 7  # small batches: the sweepers interleave a lot
        s.service.settings.scheduler_fire_concurrency = 6

    t0 = time.monotonic()
    results: list[TickResult | None] = await asyncio.gather(*(s.tick_once(now) for s in sweepers))
    elapsed = time.monotonic() - t0
    fired = [r.fired if r else 0 for r in results]
    assert sum(fired) == SCHEDULES * FIRES_EACH, fired
    assert all(r is not None and r.failed == 0 for r in results)
    assert min(fired) > 0, f"one sweeper did all the work ({fired}); the race did not happen"

    async with rt_a.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) AS fires, count(DISTINCT run_id) AS runs, count(*) FILTER (WHERE status <> 'started')"
            " AS not_started FROM schedule_fires"
        )
        row = await cur.fetchone()
        assert row == {"fires": 10_000, "runs": 10_000, "not_started": 0}
        cur = await conn.execute(
            "SELECT count(*) AS runs, count(DISTINCT idempotency_key) AS keys,"
            " count(DISTINCT (metadata->>'schedule_id', metadata->>'scheduled_for')) AS pairs"
            " FROM runs WHERE metadata ? 'schedule_id'"
        )
        assert await cur.fetchone() == {"runs": 10_000, "keys": 10_000, "pairs": 10_000}
        cur = await conn.execute(
            "SELECT min(fire_count) AS lo, max(fire_count) AS hi, min(next_fire_at) AS nxt FROM schedules"
        )
        counts = await cur.fetchone()
        assert (counts["lo"], counts["hi"]) == (FIRES_EACH, FIRES_EACH)
        assert counts["nxt"] == now.replace(second=0) + timedelta(minutes=1)
    # a second round finds nothing to do
    again = await asyncio.gather(*(s.tick_once(now) for s in sweepers))
    assert [r.fired if r else 0 for r in again] == [0, 0]
    print(f"\n10,000 fires by two racing sweepers: {elapsed:.1f} s (fired {fired})")


async def test_raw_claims_racing_on_the_same_fires_insert_each_once(open_rt: Any) -> None:
    rt, _ = await open_rt(db_pool_size=10)
    [sid] = await make_schedules(rt, 1)
    state = await rt.triggers.schedules.resolve(TENANT, "race-000")
    base = datetime(2030, 1, 1, tzinfo=UTC)
    rows = [FireRow(sid, base + timedelta(minutes=i), TENANT, state.def_id, 1, "sweeper") for i in range(10_000)]

    async def claimant(offset: int) -> int:
        """Claims every fire in 10 chunks, starting at a different chunk than the others."""
        won = 0
        for k in range(10):
            chunk = rows[((offset + k) % 10) * 1000:((offset + k) % 10 + 1) * 1000]
            async with rt.pool.connection() as conn:
                won += len(await ScheduleStore.insert_fires(conn, chunk))
        return won

    wins = await asyncio.gather(*(claimant(i) for i in range(8)))
    assert sum(wins) == 10_000, wins
    async with rt.pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM schedule_fires WHERE schedule_id = %s", (sid,))
        assert (await cur.fetchone())["n"] == 10_000


async def test_redelivered_eventbridge_invocations_fire_once(open_rt: Any) -> None:
    rt, _ = await open_rt(db_pool_size=12)
    [sid] = await make_schedules(rt, 1)
    firing = rt.triggers.schedules.firing
    at = datetime.now(UTC).replace(second=0, microsecond=0)
    event = {"schedule_id": sid, "version": 1, "scheduled_time": at.strftime("%Y-%m-%dT%H:%M:%SZ")}
    outs = await asyncio.gather(*(firing.fire_event(dict(event), now=at + timedelta(seconds=3)) for _ in range(10)))
    fired = [o for o in outs if o["fired"]]
    dups = [o for o in outs if not o["fired"]]
    assert len(fired) == 1 and {o["reason"] for o in dups} == {"duplicate"}
    assert {o["run_id"] for o in outs} == {fired[0]["run_id"]}
    later = await firing.fire_event(dict(event), now=at + timedelta(minutes=30))  # a much later retry
    assert (later["fired"], later["reason"], later["run_id"]) == (False, "duplicate", fired[0]["run_id"])
