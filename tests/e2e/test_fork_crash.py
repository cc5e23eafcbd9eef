"""A fork survives kill -9 (issue 36 item 4): a real `treadle serve` is SIGKILLed inside the fork
request — once while its seed session is being written, once after the seed committed and before
the fork's run row — and inside a replay fork's steps — once while a step commits results
answered from the original's record, once while it commits the first call that runs for real.
Slow triggers hold each statement and the test waits until Postgres reports the backend inside
it, so every kill lands there, not by luck; the dead server's backend is then terminated (as the
database does once it notices the client gone), so its transaction rolls back rather than finish
its sleep and commit — the kill cuts the statement in half. After each restart the client retries with the same
`Idempotency-Key`: in the end there is one fork run and one seed session, the fork finished once,
the replayed Memory calls wrote nothing and the diverged one wrote once."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import httpx
import pytest

from tests.support.e2e import check_paired, execute, query, slow_trigger
from treadle.testing import ACCEPT_JSON, until

pytestmark = pytest.mark.e2e

ENV = {"TREADLE_LEASE_SECONDS": "1.5", "TREADLE_SWEEP_INTERVAL_SECONDS": "0.3", "TREADLE_WORKERS": "2"}
KEY = "fork-once-1"


def counter(keys: list[str]) -> dict[str, Any]:
    """Increments each tenant Memory key in turn, then answers."""
    turns: list[dict[str, Any]] = [{"tool": "Memory", "input": {"op": "incr", "scope": "tenant", "key": k}}
                                   for k in keys]
    return {"model": "script", "tools": ["Memory"], "memory_scopes": ["tenant"],
            "mock": {"script": [*turns, {"text": "counted " + ",".join(keys)}]}}


AGENTS = {"counter": counter(["calls", "calls", "calls"]), "counter2": counter(["calls", "calls", "diverged"])}
SLEEPING = "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND datname = current_database()"
CUT = ("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE wait_event = 'PgSleep'"
       " AND datname = current_database()")


async def _memory(url: str) -> dict[str, Any]:
    return {r["key"]: r["value"] for r in await query(url, "SELECT key, value FROM memory WHERE scope = 'tenant'")}


async def test_a_replay_fork_killed_in_its_request_and_in_its_steps_finishes_once(
    make_db: Any, start_server: Any
) -> None:
    url = make_db("forkcrash", migrated=True)
    srv = await start_server(url, AGENTS, name="forkcrash", **ENV)

    async def inside() -> bool:
        return int((await query(url, SLEEPING))[0]["n"]) >= 1

    async with httpx.AsyncClient(headers=ACCEPT_JSON, base_url=srv.url, timeout=60) as c:
        r = await c.post("/v1/runs", json={"agent": "counter", "prompt": "count"})
        original = r.json()["run_id"]

        async def ended(run_id: str) -> bool:
            return bool((await c.get(f"/v1/runs/{run_id}")).json()["status"] == "completed")

        await until(lambda: ended(original), timeout=30, interval=0.05, what="the original run")
        assert await _memory(url) == {"calls": 3}
        first = next(e["seq"] for e in (await c.get(f"/v1/runs/{original}/events")).json()["events"]
                     if e["type"] == "tool_result")
        # the history holds the first call; the fork's script goes on with its second turn
        body = {"at_seq": first, "prompt": "go on", "agent": "counter2", "mode": "replay"}
        headers = {"Idempotency-Key": KEY}

        async def fork_killed_in(trigger: str, table: str) -> None:
            request = asyncio.create_task(c.post(f"/v1/runs/{original}/fork", json=body, headers=headers))
            await until(inside, timeout=30, interval=0.02, what=f"the fork inside {trigger}")
            srv.kill9()
            await query(url, CUT)
            with contextlib.suppress(httpx.HTTPError):
                await request
            await execute(url, f"DROP TRIGGER {trigger} ON {table}")  # the cut backend's locks are gone
            await srv.restart(same_port=True)

        # 1. killed while the seed session is written: nothing of it stays
        await execute(url, slow_trigger("fk_seed", 30, "INSERT ON events",
                                        "NEW.type = 'done' AND NEW.payload->>'reason' = 'fork seed'"))
        await fork_killed_in("fk_seed", "events")
        seeds = "SELECT count(*) AS n FROM events WHERE seq = 1 AND payload->>'forked_from' = %s"
        assert await query(url, seeds, (original,)) == [{"n": 0}]
        assert await query(url, "SELECT count(*) AS n FROM runs WHERE idempotency_key = %s", (KEY,)) == [{"n": 0}]

        # 2. killed after the seed committed, while the fork's run row is inserted (and paused
        # before any step: its steps' kills come next)
        await execute(url, slow_trigger("fk_run", 30, "INSERT ON runs", f"NEW.idempotency_key = '{KEY}'"))
        await fork_killed_in("fk_run", "runs")
        assert await query(url, seeds, (original,)) == [{"n": 1}]  # the seed stayed, whole
        assert await query(url, "SELECT count(*) AS n FROM runs WHERE idempotency_key = %s", (KEY,)) == [{"n": 0}]

        # 3. the retry starts the fork on the same seed; it is killed while a step commits a
        # replayed result, then while the diverged call's result commits
        await execute(url, slow_trigger("fk_replayed", 30, "INSERT ON events",
                                        "NEW.type = 'tool_result' AND NEW.payload ? 'replayed'"))
        await execute(url, slow_trigger("fk_diverged", 30, "INSERT ON events",
                                        "NEW.type = 'tool_result' AND NEW.payload->'tool_use'->'input'->>'key'"
                                        " = 'diverged'"))
        r = await c.post(f"/v1/runs/{original}/fork", json=body, headers=headers)
        assert r.status_code == 202, r.text
        fork = r.json()["run_id"]
        assert r.json()["events_copied"] > 0 and r.json()["mode"] == "replay"
        for trigger in ("fk_replayed", "fk_diverged"):
            await until(inside, timeout=30, interval=0.02, what=f"the fork's step inside {trigger}")
            srv.kill9()
            await query(url, CUT)
            await execute(url, f"DROP TRIGGER {trigger} ON events")
            await srv.restart(same_port=True)
        again = await c.post(f"/v1/runs/{original}/fork", json=body, headers=headers)
        assert again.status_code == 202 and again.json()["run_id"] == fork, again.text
        await until(lambda: ended(fork), timeout=60, interval=0.05, what="the fork to finish")

        assert await query(url, "SELECT count(*) AS n FROM runs WHERE idempotency_key = %s", (KEY,)) == [{"n": 1}]
        assert await query(url, seeds, (original,)) == [{"n": 1}]
        events = (await c.get(f"/v1/runs/{fork}/events")).json()["events"]
        assert check_paired(events) == [] and [e["type"] for e in events].count("done") == 1
        results = [e for e in events if e["type"] == "tool_result"]
        assert [e.get("replayed") is not None for e in results] == [True, False]
        assert [e["type"] for e in events].count("replay_diverged") == 1
        assert [e["text"] for e in events if e["type"] == "text"] == ["counted calls,calls,diverged"]
        assert await _memory(url) == {"calls": 3, "diverged": 1}  # replayed: no write; diverged: once
