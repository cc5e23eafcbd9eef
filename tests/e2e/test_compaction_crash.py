"""Compaction survives kill -9 (issue 34): runs that auto-compact again and again through `treadle
serve`, SIGKILLed three times at seeded moments — some kills land between a summary call and the
commit of its `context_compaction` event, some between that commit and the next model call.
Afterwards every run has ended with a whole transcript: every tool_call answered once, at most one
compaction per iteration, and the replay of each transcript (what any worker sends the model next)
keeps every tool_use beside its tool_result."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from typing import Any

import pytest

from tests.support.e2e import check_paired, query
from tests.unit.test_replay import assert_pairing
from treadle.client import TreadleClient
from treadle.engine.replay import replay
from treadle.testing import until

pytestmark = pytest.mark.e2e

SEED = 3434
N_RUNS = 10
AGENT = {
    "model": "tool-caller", "tools": ["Memory"], "max_iterations": 20,
    "mock": {"tool_calls": 40, "context_window": 300, "latency_ms": 60, "jitter_ms": 60},
    "compaction": {"enabled": True, "autocompact_at_pct": 50, "keep_last_n": 2},
}
ENV = {"TREADLE_LEASE_SECONDS": "1.5", "TREADLE_SWEEP_INTERVAL_SECONDS": "0.3", "TREADLE_WORKERS": "4"}


async def _n(url: str, sql: str) -> int:
    return int((await query(url, sql))[0]["n"])


async def test_compaction_survives_sigkill(make_db: Any, start_server: Any) -> None:
    url = make_db("compactcrash", migrated=True)
    srv = await start_server(url, {"long": AGENT}, name="compactcrash", **ENV)
    rng = random.Random(SEED)
    async with TreadleClient(srv.url, timeout=10) as client:
        await asyncio.gather(*(client.start_run("long", f"job {i}") for i in range(N_RUNS)))

    async def all_ended() -> bool:
        return await _n(url, "SELECT count(*) AS n FROM runs WHERE status IN ('queued','running','waiting')") == 0

    for k in range(3):
        target = 3 + 4 * k + rng.randint(0, 2)

        async def reached(t: int = target) -> bool:
            return await _n(url, "SELECT count(*) AS n FROM events WHERE type = 'context_compaction'") >= t

        await until(reached, timeout=90, interval=0.02, what=f"{target} compactions")
        await asyncio.sleep(rng.uniform(0.0, 0.15))
        srv.kill9()
        assert not await all_ended(), "the kill landed after the work was done"
        await srv.restart()
    await until(all_ended, timeout=120, interval=0.2, what="every run to end")

    problems: list[str] = []
    total = await _n(url, "SELECT count(*) AS n FROM events WHERE type = 'context_compaction'")
    for run in await query(url, "SELECT id, status, stop_reason FROM runs"):
        rows = await query(url, "SELECT seq, type, payload FROM events WHERE run_id = %s ORDER BY seq", (run["id"],))
        events = [{"seq": r["seq"], "type": r["type"], **r["payload"]} for r in rows]
        if (run["status"], run["stop_reason"]) != ("completed", "max_iterations"):
            problems.append(f"{run['id']}: {run['status']}/{run['stop_reason']}")
        if [e["seq"] for e in events] != list(range(1, len(events) + 1)):
            problems.append(f"{run['id']}: seqs with gaps")
        problems += [f"{run['id']}: {p}" for p in check_paired(events)]
        marks = Counter(e["iteration"] for e in events if e["type"] == "context_compaction")
        if not marks or max(marks.values()) > 1:
            problems.append(f"{run['id']}: compactions per iteration {dict(marks)}")
        try:
            assert_pairing(replay([(r["seq"], r["type"], r["payload"]) for r in rows]).messages)
        except AssertionError as exc:
            problems.append(f"{run['id']}: replay not paired: {exc}")
    assert not problems, "\n".join(problems)
    print(f"{total} compactions in {N_RUNS} runs across 3 kills")
