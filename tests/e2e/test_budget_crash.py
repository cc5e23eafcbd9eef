"""Budgets survive kill -9 (issue 42 item 2): runs of a tenant with a hard token budget, served by
`treadle serve` that is SIGKILLed mid-flight and restarted. The usage a budget counts is what the
steps committed (usage_daily, rolled up in the step's own transaction), so the restarted process
sees exactly what the killed one committed: every run still ends with `budget_exceeded`, the
roll-up equals the transcripts' usage events to the token (nothing lost, nothing counted twice),
and no run calls its model once the committed usage has reached the limit — at most the call
each run already had in flight when it was crossed lands past it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.support.e2e import query
from treadle.client import TreadleClient
from treadle.testing import until

pytestmark = pytest.mark.e2e

N_RUNS, WORKERS, LIMIT = 10, 4, 6000
AGENT = {"model": "tool-caller", "tools": ["Memory"], "max_iterations": 60,
         "mock": {"tool_calls": 50, "latency_ms": 60, "jitter_ms": 40}}
ENV = {"TREADLE_LEASE_SECONDS": "1.5", "TREADLE_SWEEP_INTERVAL_SECONDS": "0.3", "TREADLE_WORKERS": str(WORKERS)}


async def _n(url: str, sql: str) -> int:
    return int((await query(url, sql))[0]["n"])


async def test_a_hard_budget_holds_across_a_sigkill(make_db: Any, start_server: Any) -> None:
    url = make_db("budgetcrash", migrated=True)
    await query(url, "INSERT INTO token_limits (tenant_id, scope, hard_limit) VALUES ('default', 'tenant', %s)"
                " RETURNING 1", (LIMIT,))
    srv = await start_server(url, {"burner": AGENT}, name="budgetcrash", **ENV)

    async def all_ended() -> bool:
        return await _n(url, "SELECT count(*) AS n FROM runs WHERE status IN ('queued','running','waiting')") == 0

    async with TreadleClient(srv.url, timeout=10) as client:
        await asyncio.gather(*(client.start_run("burner", f"burn {i}") for i in range(N_RUNS)))

    async def some_spent() -> bool:
        spent = await _n(url, "SELECT coalesce(sum(input_tokens + output_tokens), 0) AS n FROM usage_daily")
        return spent >= LIMIT // 3

    await until(some_spent, timeout=60, interval=0.02, what="a third of the budget spent")
    srv.kill9()
    assert not await all_ended(), "the kill landed after every run ended"
    await srv.restart()
    await until(all_ended, timeout=90, interval=0.2, what="every run to end")

    runs = await query(url, "SELECT status, stop_reason FROM runs ORDER BY id")
    assert {(r["status"], r["stop_reason"]) for r in runs} == {("completed", "budget_exceeded")}, runs
    rolled = (await query(url, "SELECT sum(calls) AS calls, sum(input_tokens + output_tokens) AS tokens"
                               " FROM usage_daily"))[0]
    vendor = (await query(url, "SELECT count(*) AS calls, sum((payload->'usage'->>'input_tokens')::bigint"
                               " + (payload->'usage'->>'output_tokens')::bigint) AS tokens FROM events"
                               " WHERE type = 'usage'"))[0]
    assert (rolled["calls"], rolled["tokens"]) == (vendor["calls"], vendor["tokens"])  # exact across the kill
    # each run makes at most the one call it was already in when the committed usage reached the
    # limit (a step gives its worker slot back while its model answers, so that is one per run, not
    # one per worker): the overshoot is below one call per run, plus the call that crossed
    biggest = await _n(url, "SELECT max((payload->'usage'->>'input_tokens')::bigint"
                            " + (payload->'usage'->>'output_tokens')::bigint) AS n FROM events WHERE type = 'usage'")
    assert rolled["tokens"] < LIMIT + (N_RUNS + 1) * biggest, (rolled, biggest)
    assert rolled["tokens"] >= LIMIT
