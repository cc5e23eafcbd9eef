"""A session replay survives kill -9 (issue 34): `treadle serve` is SIGKILLed while replays are
writing their new sessions (a slow trigger holds each write at its last event, the seed's `done`,
so every kill lands inside the statement). Afterwards no half-seeded session exists — every seed
run holds all its events (`started`, the carried conversation, `done`; seqs 1..last_seq without a
gap) and has its session row, or neither exists — and after the restart a replay continues with
the answer its carried history implies."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.support.e2e import execute, query, slow_trigger
from treadle.client import TreadleClient
from treadle.testing import until

pytestmark = pytest.mark.e2e

SCRIPT = {
    "model": "script",
    "mock": {"script": [{"text": "one"}, {"text": "two"}, {"text": "three"}, {"text": "four"}]},
}
SLOW_SEED = slow_trigger(
    "e2e_slow_seed", 2.0, "INSERT ON events", "NEW.type = 'done' AND NEW.payload->>'reason' = 'replay seed'"
)
N_REPLAYS = 6


async def _seeds_whole(url: str) -> list[str]:
    """What is wrong with the seeded sessions (empty: each is whole)."""
    problems: list[str] = []
    seeds = await query(
        url,
        "SELECT r.id, r.session_id, r.last_seq, r.status, s.id AS sid FROM runs r"
        " JOIN events e ON e.run_id = r.id AND e.seq = 1 AND e.payload ? 'replay_of'"
        " LEFT JOIN sessions s ON s.id = r.session_id",
    )
    for seed in seeds:
        types = [
            e["type"] for e in await query(url, "SELECT type FROM events WHERE run_id = %s ORDER BY seq", (seed["id"],))
        ]
        if seed["sid"] is None or seed["status"] != "completed":
            problems.append(f"{seed['id']}: session {seed['sid']}, status {seed['status']}")
        if len(types) != seed["last_seq"] or types[0] != "started" or types[-1] != "done" or len(types) != 6:
            problems.append(f"{seed['id']}: last_seq {seed['last_seq']}, events {types}")
    orphans = await query(
        url, "SELECT s.id FROM sessions s WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.session_id = s.id)"
    )
    problems += [f"session {o['id']} without runs" for o in orphans]
    return problems


async def test_replay_is_whole_or_absent_across_sigkill(make_db: Any, start_server: Any) -> None:
    url = make_db("replaycrash", migrated=True)
    srv = await start_server(url, {"chat": SCRIPT}, name="replaycrash")
    async with TreadleClient(srv.url, timeout=10) as client:
        first = await client.start_run("chat", "q1", user_id="ada")
        sid = first["session_id"]
        await until(lambda: _ended(url), timeout=30, interval=0.05, what="the first turn")
        resp = await client.http.post(f"/v1/sessions/{sid}/messages", json={"prompt": "q2"})
        assert resp.status_code == 202, resp.text
        await until(lambda: _ended(url), timeout=30, interval=0.05, what="the second turn")
    await execute(url, SLOW_SEED)
    for kill in range(2):
        async with httpx.AsyncClient(base_url=srv.url, timeout=30) as http:
            replays = [
                asyncio.create_task(http.post(f"/v1/sessions/{sid}/replay", json={"agent": "chat"}))
                for _ in range(N_REPLAYS)
            ]

            async def sleeping() -> bool:
                rows = await query(url, "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event = 'PgSleep'")
                return int(rows[0]["n"]) >= 1

            await until(sleeping, timeout=30, interval=0.02, what=f"a seed write in flight (kill {kill})")
            srv.kill9()
            outcomes = await asyncio.gather(*replays, return_exceptions=True)
        assert any(isinstance(o, httpx.HTTPError) for o in outcomes), outcomes
        await srv.restart()
        problems = await _seeds_whole(url)
        assert not problems, "\n".join(problems)
    await execute(url, "DROP TRIGGER e2e_slow_seed ON events")
    async with httpx.AsyncClient(base_url=srv.url, timeout=30) as http:
        resp = await http.post(f"/v1/sessions/{sid}/replay", json={"agent": "chat"})
        assert resp.status_code == 200, resp.text
        new_sid = resp.json()["new_session_id"]
        resp = await http.post(f"/v1/sessions/{new_sid}/messages", json={"prompt": "q3"})
        assert resp.status_code == 202, resp.text
        run_id = resp.json()["run_id"]
    await until(lambda: _ended(url), timeout=30, interval=0.05, what="the replayed session's turn")
    texts = [
        r["payload"]["text"]
        for r in await query(url, "SELECT payload FROM events WHERE run_id = %s AND type = 'text'", (run_id,))
    ]
    assert texts == ["three"], texts
    assert not await _seeds_whole(url)


async def _ended(url: str) -> bool:
    rows = await query(url, "SELECT count(*) AS n FROM runs WHERE status IN ('queued','running','waiting')")
    return int(rows[0]["n"]) == 0
