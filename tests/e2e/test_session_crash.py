"""Sessions survive kill -9 (issue 34): sessions continued through `treadle serve` while it is
SIGKILLed mid-flight and restarted. Every continuation then completes with the answer its
history implies (the script model answers by how many assistant turns it sees, so a run that lost
its session's history answers wrongly), every transcript is paired, and no run holds another's
events (the history is read in place, never copied)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from tests.support.e2e import check_paired, execute, query, slow_trigger
from treadle.client import TreadleClient
from treadle.testing import until

pytestmark = pytest.mark.e2e

SEED = 3404
N_SESSIONS = 12
MEMORY = {"op": "incr", "scope": "agent", "key": "calls"}
#: turn k of the conversation: a Memory call, then a text naming the turn
AGENT = {"model": "script", "tools": ["Memory"], "mock": {"latency_ms": 150, "jitter_ms": 100, "script": [
    {"tool": "Memory", "input": MEMORY}, {"text": "turn 1"},
    {"tool": "Memory", "input": MEMORY}, {"text": "turn 2"},
    {"tool": "Memory", "input": MEMORY}, {"text": "turn 3"},
]}}
ENV = {"TREADLE_LEASE_SECONDS": "1.5", "TREADLE_SWEEP_INTERVAL_SECONDS": "0.3", "TREADLE_WORKERS": "4"}
SLOW_MEMORY = slow_trigger("e2e_slow_memory", 0.15, "INSERT ON memory")


async def _n(url: str, sql: str) -> int:
    return int((await query(url, sql))[0]["n"])


async def test_continuations_survive_sigkill(make_db: Any, start_server: Any) -> None:
    url = make_db("sesscrash", migrated=True)
    await execute(url, SLOW_MEMORY)
    srv = await start_server(url, {"chat": AGENT}, name="sesscrash", **ENV)
    rng = random.Random(SEED)

    async def all_ended() -> bool:
        return await _n(url, "SELECT count(*) AS n FROM runs WHERE status IN ('queued','running','waiting')") == 0

    async with TreadleClient(srv.url, timeout=10) as client:
        first = await asyncio.gather(*(client.start_run("chat", f"hello {i}", user_id=f"u{i}")
                                       for i in range(N_SESSIONS)))
    sessions = [r["session_id"] for r in first]
    await until(all_ended, timeout=60, interval=0.1, what="the first turns")
    kills = 0
    for turn in (2, 3):
        results_before = await _n(url, "SELECT count(*) AS n FROM events WHERE type = 'tool_result'")
        async with TreadleClient(srv.url, timeout=10) as client:
            for sid in sessions:
                resp = await client.http.post(f"/v1/sessions/{sid}/messages", json={"prompt": f"turn {turn}?"})
                assert resp.status_code == 202, resp.text
        target = results_before + int(N_SESSIONS * rng.uniform(0.1, 0.4))

        async def reached(t: int = target) -> bool:
            return await _n(url, "SELECT count(*) AS n FROM events WHERE type = 'tool_result'") >= t

        await until(reached, timeout=60, interval=0.02, what=f"{target} tool results")
        await asyncio.sleep(rng.uniform(0.0, 0.1))
        srv.kill9()
        kills += 1
        assert not await all_ended(), "the kill landed after the turn was done"
        await srv.restart()
        await until(all_ended, timeout=90, interval=0.2, what=f"turn {turn} to end")
        bad = await query(url, "SELECT id, status, error FROM runs WHERE status <> 'completed'")
        assert not bad, f"turn {turn}: {bad}\n{srv.log_tail(all_starts=True)}"

    problems: list[str] = []
    for sid in sessions:
        runs = await query(url, "SELECT id, status, stop_reason, session_seq FROM runs WHERE session_id = %s"
                                " ORDER BY session_seq", (sid,))
        if [r["session_seq"] for r in runs] != [0, 1, 2]:
            problems.append(f"{sid}: places {[r['session_seq'] for r in runs]}")
            continue
        for n, run in enumerate(runs, start=1):
            events = [{"seq": e["seq"], "type": e["type"], **e["payload"]} for e in await query(
                url, "SELECT seq, type, payload FROM events WHERE run_id = %s ORDER BY seq", (run["id"],))]
            if (run["status"], run["stop_reason"]) != ("completed", "end_turn"):
                problems.append(f"{run['id']}: {run['status']}/{run['stop_reason']}")
            texts = [e["text"] for e in events if e["type"] == "text"]
            if texts != [f"turn {n}"]:  # the script's answer for the history it saw
                problems.append(f"{run['id']} (turn {n}): texts {texts}")
            if [e["type"] for e in events].count("tool_call") != 1:  # its own turn only, nothing copied
                problems.append(f"{run['id']}: {[e['type'] for e in events]}")
            problems += [f"{run['id']}: {p}" for p in check_paired(events)]
    assert not problems, "\n".join(problems)
    assert kills == 2
