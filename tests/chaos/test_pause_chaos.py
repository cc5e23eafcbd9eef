"""Pause under load across two replicas (issue 36): two real `treadle serve` processes on one
database step 60 runs (by default); a pause declared through one replica parks every run of both
at an iteration boundary (no tool_use without its result); one replica is SIGKILLed while paused;
the state and the parked runs are unchanged; the resume through the other replica finishes every
run with each Memory `incr` (a transactional effect) applied once. TREADLE_CHAOS_PAUSE_RUNS sets
how many runs (default 60, scaled down from the issue's 200 for a shared 2-core machine; the
pause, the kill and the checks are the same at any size); a summary line with the figures is
printed either way (`-s` shows it)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.chaos import Replica, write_config
from tests.support.db import clone_database, drop_database
from tests.support.e2e import check_paired, query
from tests.waiting.test_pause_kill9 import ENV
from treadle.testing import ACCEPT_JSON, until

pytestmark = pytest.mark.e2e
RUNS = int(os.environ.get("TREADLE_CHAOS_PAUSE_RUNS") or 60)
CALLS = 6
LATENCY_MS = 1000
#: a run's last model call (its final iteration) starts CALLS model calls after the run at the
#: earliest; a run started less than this before the pause cannot have begun that iteration when
#: the pause was declared, so it cannot have ended — it must be parked (a fact of the clock, not a
#: hope about the machine's speed). Not (CALLS + 1) calls: the step in flight when the pause is
#: declared finishes its iteration, and when that is the last one the run completes (seen at 200
#: runs, whose creation outlasts a run's life: a run started 6.3 s before the pause ended 0.95 s
#: after it, its last call begun 0.07 s before it).
LAST_CALL_S = CALLS * LATENCY_MS / 1000
CONFIG = {
    "agents": {
        "looper": {"model": "tool-caller", "tools": ["Memory"], "mock": {"tool_calls": CALLS, "latency_ms": LATENCY_MS}}
    }
}


@pytest.fixture
def db(server_url: str, migrated_template: str) -> Iterator[str]:
    url = clone_database(server_url, migrated_template, "pausechaos")
    yield url
    drop_database(server_url, url)


async def _statuses(db: str) -> dict[str, str]:
    return {r["id"]: r["status"] for r in await query(db, "SELECT id, status FROM runs")}


async def test_a_pause_across_two_replicas_survives_killing_one_and_the_resume_finishes_every_run(
    db: str, tmp_path: Path
) -> None:
    t0 = time.monotonic()
    config = write_config(tmp_path / "treadle.yaml", CONFIG)
    a = Replica(name="a", database_url=db, config_path=config, workdir=tmp_path, env=ENV)
    b = Replica(name="b", database_url=db, config_path=config, workdir=tmp_path, env=ENV)
    for rep in (a, b):
        rep.start()
    try:
        for rep in (a, b):
            await rep.wait_ready()
        async with httpx.AsyncClient(headers=ACCEPT_JSON, timeout=60) as c:
            gate = asyncio.Semaphore(16)  # started 16 at a time, so that at 200 runs most are still live at the pause

            async def start(i: int) -> None:  # half through each replica
                async with gate:
                    r = await c.post(f"{(a, b)[i % 2].url}/v1/runs", json={"agent": "looper", "prompt": f"run {i}"})
                assert r.status_code == 202, r.text

            t_start = time.monotonic()
            await asyncio.gather(*(start(i) for i in range(RUNS)))
            t_pause = time.monotonic()
            r = await c.post(f"{a.url}/v1/_pause", json={"timeout_ms": 60_000})
            paused_s = time.monotonic() - t_pause
            assert r.status_code == 200, r.text
            out = r.json()
            assert out["state"] == "paused" and "warnings" not in out and out["force_cancelled_count"] == 0, out
            before = await _statuses(db)
            parked = [k for k, v in before.items() if v == "waiting"]
            assert set(before.values()) <= {"waiting", "completed"} and out["paused_runs_count"] == len(parked)
            young = await query(
                db,
                "SELECT r.id FROM runs r, runtime_state s WHERE r.created_at > s.since - make_interval(secs => %s)",
                (LAST_CALL_S,),
            )
            ended_young = [y["id"] for y in young if before[y["id"]] != "waiting"]
            if not young or ended_young:  # every run that could not end must be parked; else say when each ran
                detail = await query(
                    db,
                    "SELECT r.id, r.created_at, r.completed_at, s.since, (SELECT array_agg(e.type || '@' ||"
                    " e.created_at::time::text ORDER BY e.seq) FROM events e WHERE e.run_id = r.id) AS events"
                    " FROM runs r, runtime_state s WHERE r.id = ANY(%s)",
                    (ended_young[:3],),
                )
                raise AssertionError(f"{len(young)} young runs, {len(ended_young)} ended: {detail}")
            for run_id in parked:
                events = (await c.get(f"{b.url}/v1/runs/{run_id}/events")).json()["events"]
                assert check_paired(events) == [] and events[-1]["type"] == "runtime_paused", run_id

            b.kill9()  # while paused
            r = await c.get(f"{a.url}/v1/_state")
            assert r.json() == {"state": "paused", "paused_runs_count": len(parked), "active_runs_count": 0}
            assert await _statuses(db) == before
            t_resume = time.monotonic()
            r = await c.post(f"{a.url}/v1/_resume")
            assert r.status_code == 200 and r.json()["resumed_runs_count"] == len(parked), r.text

            async def ended() -> bool:
                return set((await _statuses(db)).values()) == {"completed"}

            await until(
                ended, timeout=90 + RUNS * 0.25, interval=0.2, what="every run to complete on the surviving replica"
            )
            for run_id in before:
                events = (await c.get(f"{a.url}/v1/runs/{run_id}/events")).json()["events"]
                assert check_paired(events) == [] and [e["type"] for e in events].count("done") == 1, run_id
                assert sum(e["type"] == "tool_result" for e in events) == CALLS
            [row] = await query(db, "SELECT value FROM memory WHERE key = 'calls'")
            assert row["value"] == RUNS * CALLS  # every incr once: none lost to the kill, none doubled
            print(
                f"\n[pause chaos] {RUNS} runs on 2 replicas (started in {t_pause - t_start:.1f} s): "
                f"{len(parked)} parked at an iteration boundary "
                f"({len(before) - len(parked)} had completed before the pause; {len(young)} started within "
                f"{LAST_CALL_S:g} s of it, all parked), pause answered in {paused_s:.1f} s; 0 tool calls without "
                f"their result; 1 kill -9 (replica b) while paused; resume -> all {RUNS} completed in "
                f"{time.monotonic() - t_resume:.1f} s on replica a; Memory incr total {row['value']} = "
                f"{RUNS} x {CALLS} (each once); {time.monotonic() - t0:.1f} s with the replicas' start"
            )
    finally:
        for rep in (a, b):
            with contextlib.suppress(Exception):
                rep.stop()
