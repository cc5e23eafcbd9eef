"""A code agent survives kill -9 (issue 35's done-when): `treadle serve` runs a code-js agent
that makes 50 tool calls (Memory writes, a transactional tool) and is SIGKILLed four times at
seeded points mid-run, then restarted. The JavaScript holds nothing between steps — every step
replays `run(input)` from the transcript in Postgres — so after the restarts the run completes
with each of the 50 calls executed once (the Memory rows and the counter say so: a kill between a
write and its step's commit rolls the write back with the step) and the same final text as an
uninterrupted run of the same code.

Memory inserts are made slow (a 150 ms `pg_sleep` trigger) so kills land between a tool's write
and the step's commit, not only between steps."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from tests.support.e2e import execute, query, slow_trigger
from treadle.client import TreadleClient
from treadle.testing import until

pytest.importorskip("quickjs")
pytestmark = pytest.mark.e2e

SEED = 3535
CALLS = 50
KILL_WINDOWS = ((0.08, 0.2), (0.3, 0.45), (0.55, 0.7), (0.78, 0.92))  # fractions of the 50 results
CODE = """
function run(input) {
  var n = parseInt(input.prompt, 10), sum = 0, r = Math.random(), t = Date.now();
  for (var i = 0; i < n; i += 2) {  // two calls a turn of the loop
    Memory.set({scope: 'agent', key: 'k' + i, value: i * i});
    sum += Memory.incr({scope: 'agent', key: 'calls'}).value;
  }
  return {final_text: 'wrote ' + n + ' sum=' + sum + ' r=' + r + ' t=' + t};
}
"""
AGENT = {"provider": "code-js", "tools": ["Memory"], "memory_scopes": ["agent"], "code": CODE}
EXTRA = {"code_agents": {"enabled": True, "deterministic": True}}
ENV = {"TREADLE_LEASE_SECONDS": "1.5", "TREADLE_SWEEP_INTERVAL_SECONDS": "0.3", "TREADLE_WORKERS": "4"}
SLOW_MEMORY = slow_trigger("e2e_slow_code_memory", 0.15, "INSERT OR UPDATE ON memory")


async def _n(url: str, sql: str, *params: Any) -> int:
    return int((await query(url, sql, params or None))[0]["n"])


async def _final(url: str, run_id: str) -> list[str]:
    rows = await query(url, "SELECT payload FROM events WHERE run_id = %s AND type = 'text' ORDER BY seq", (run_id,))
    return [r["payload"]["text"] for r in rows]


async def test_a_code_agent_survives_sigkill_each_call_once_same_text(make_db: Any, start_server: Any) -> None:
    url = make_db("codecrash", migrated=True)
    srv = await start_server(url, {"clean": AGENT, "crashy": AGENT}, name="codecrash", extra_config=EXTRA, **ENV)
    rng = random.Random(SEED)

    async def ended(run_id: str) -> bool:
        return await _n(url, "SELECT count(*) AS n FROM runs WHERE id = %s AND status IN ('completed','failed',"
                             "'cancelled')", run_id) == 1

    async with TreadleClient(srv.url, timeout=10) as client:  # the uninterrupted run, before any slowness
        clean_id = (await client.start_run("clean", str(CALLS)))["run_id"]
    await until(lambda: ended(clean_id), timeout=120, interval=0.1, what="the clean run to end")
    await execute(url, SLOW_MEMORY)

    async with TreadleClient(srv.url, timeout=10) as client:
        run_id = (await client.start_run("crashy", str(CALLS)))["run_id"]

    async def results() -> int:
        return await _n(url, "SELECT count(*) AS n FROM events WHERE run_id = %s AND type = 'tool_result'", run_id)

    kills: list[dict[str, Any]] = []
    for lo, hi in KILL_WINDOWS:
        threshold = int(CALLS * rng.uniform(lo, hi))

        async def reached(t: int = threshold) -> bool:
            return await results() >= t

        await until(reached, timeout=90, interval=0.02, what=f"{threshold} tool results")
        await asyncio.sleep(rng.uniform(0.0, 0.2))
        srv.kill9()
        kills.append({
            "threshold": threshold, "results": await results(),
            "leased_by_the_dead": await _n(url, "SELECT count(*) AS n FROM runs WHERE id = %s AND lease_owner IS NOT"
                                                " NULL AND lease_until > now()", run_id),
            "status": (await query(url, "SELECT status FROM runs WHERE id = %s", (run_id,)))[0]["status"],
        })
        await srv.restart()
    try:
        await until(lambda: ended(run_id), timeout=180, interval=0.2, what="the crashed run to end")
    except TimeoutError:
        raise AssertionError(f"kills: {kills}\n{srv.log_tail(all_starts=True)}") from None

    assert all(k["status"] == "running" and k["results"] < CALLS for k in kills), kills  # each landed mid-run
    assert sum(k["leased_by_the_dead"] for k in kills) > 0, kills  # …and some inside a step
    for rid, agent in ((clean_id, "clean"), (run_id, "crashy")):
        run = (await query(url, "SELECT status, stop_reason, error FROM runs WHERE id = %s", (rid,)))[0]
        assert (run["status"], run["stop_reason"]) == ("completed", "end_turn"), (agent, run, kills)
        # each call once: 50 answered calls, 25 Memory rows k0..k48 and the counter at 25
        assert await _n(url, "SELECT count(DISTINCT tool_use_id) AS n FROM events WHERE run_id = %s"
                             " AND type = 'tool_result'", rid) == CALLS
        assert await _n(url, "SELECT count(*) AS n FROM events WHERE run_id = %s AND type = 'tool_result'",
                        rid) == CALLS
        rows = await query(url, "SELECT key, value FROM memory WHERE scope = 'agent' AND scope_id = %s", (agent,))
        values = {r["key"]: r["value"] for r in rows}
        assert values == {"calls": CALLS // 2, **{f"k{i}": i * i for i in range(0, CALLS, 2)}}, (agent, values, kills)
    clean, crashy = await _final(url, clean_id), await _final(url, run_id)
    assert crashy == clean == [expected_text()], (crashy, clean)


def expected_text() -> str:
    """The final text under the deterministic pin (loomcycle's seed 0x9e3779b9, clock 1700000000000)."""
    seed = (0x9E3779B9 * 1103515245 + 12345) % 2**32
    r = (seed & 0x7FFFFFFF) / 0x7FFFFFFF
    return f"wrote {CALLS} sum={sum(range(1, CALLS // 2 + 1))} r={r!r} t=1700000000000"
