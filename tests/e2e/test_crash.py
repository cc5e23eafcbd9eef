"""Crash anywhere, lose nothing (invariants 1, 2, 4): 20 runs in flight through `treadle serve`,
which is SIGKILLed three times at seeded moments mid-flight and restarted each time. Afterwards
every run has completed with a whole transcript: seqs 1..N without gaps, every tool_call answered
by exactly one tool_result, the run row's counters agreeing with the transcript. Readers that
follow runs over SSE reconnect across the crashes with Last-Event-ID and miss nothing.

The Memory tool is made slow (a 200 ms `pg_sleep` trigger on the memory table) so that kills
regularly land between a tool's write and the step's commit. Memory is a transactional tool: its
write, the assistant turn, the results and the step advance commit together, so a kill there
leaves no trace at all — never a tool_call without its result — and the next attempt runs the
whole step again."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import httpx
import pytest

from tests.support.e2e import check_paired, execute, query, slow_trigger, sum_usage, tool_caller_types
from treadle.client import TreadleClient
from treadle.client.http import SseEvent, parse_sse
from treadle.testing import until

pytestmark = pytest.mark.e2e

SEED = 7301
N_RUNS = 20
TOOL_CALLS = 5
KILL_WINDOWS = ((0.10, 0.25), (0.35, 0.50), (0.60, 0.75))  # fractions of all tool results
FOLLOWED = 5
AGENT = {
    "model": "tool-caller",
    "tools": ["Memory"],
    "mock": {"tool_calls": TOOL_CALLS, "latency_ms": 50, "jitter_ms": 50},
}
ENV = {
    "TREADLE_LEASE_SECONDS": "1.5",
    "TREADLE_SWEEP_INTERVAL_SECONDS": "0.3",
    "TREADLE_WORKERS": "8",
}
SLOW_MEMORY = slow_trigger("e2e_slow_memory", 0.2, "INSERT ON memory")

UNANSWERED = """
SELECT count(*) AS n FROM events c
WHERE c.type = 'tool_call' AND NOT EXISTS (
    SELECT 1 FROM events r WHERE r.run_id = c.run_id AND r.type = 'tool_result'
      AND r.tool_use_id = c.payload->'tool_use'->>'id')
"""


async def _scalar(url: str, sql: str) -> int:
    return int((await query(url, sql))[0]["n"])


async def follow(srv: Any, run_id: str, deadline: float) -> tuple[list[SseEvent], int]:
    """Read a run's SSE stream to its end, reconnecting (to whatever port the server has now)
    with Last-Event-ID after every broken connection. Returns (frames, reconnects)."""
    frames: list[SseEvent] = []
    reconnects = 0
    while time.monotonic() < deadline:
        headers = {"Accept": "text/event-stream"}
        if frames:
            headers["Last-Event-ID"] = str(frames[-1].id)
        try:
            async with (
                httpx.AsyncClient(base_url=srv.url, timeout=httpx.Timeout(30.0, connect=2.0)) as http,
                http.stream("GET", f"/v1/runs/{run_id}/stream", headers=headers) as resp,
            ):
                if resp.status_code == 200:
                    async for ev in parse_sse(resp.aiter_lines()):
                        if ev.id is not None:  # live-only frames (text deltas) carry no id
                            frames.append(ev)
            if frames and frames[-1].event in ("done", "error"):
                return frames, reconnects
        except httpx.HTTPError:
            pass
        reconnects += 1
        await asyncio.sleep(0.1)
    raise TimeoutError(f"follower of {run_id} did not see the run end ({len(frames)} frames)")


async def test_sigkill_three_times_loses_nothing(make_db: Any, start_server: Any) -> None:
    url = make_db("crash", migrated=True)
    await execute(url, SLOW_MEMORY)
    srv = await start_server(url, {"crash": AGENT}, name="crash", **ENV)
    rng = random.Random(SEED)
    total_results = N_RUNS * TOOL_CALLS
    hard_deadline = time.monotonic() + 150

    async with TreadleClient(srv.url, timeout=10) as client:
        started = await asyncio.gather(*(client.start_run("crash", f"job {i}") for i in range(N_RUNS)))
    run_ids = [s["run_id"] for s in started]
    followers = [asyncio.create_task(follow(srv, rid, hard_deadline)) for rid in run_ids[:FOLLOWED]]

    async def progress() -> int:
        return await _scalar(url, "SELECT count(*) AS n FROM events WHERE type = 'tool_result'")

    kills: list[dict[str, Any]] = []
    try:
        for lo, hi in KILL_WINDOWS:
            threshold = int(total_results * rng.uniform(lo, hi))
            pause = rng.uniform(0.0, 0.25)

            async def reached(t: int = threshold) -> bool:
                return await progress() >= t

            await until(reached, timeout=60, interval=0.02, what=f"{threshold} tool results")
            await asyncio.sleep(pause)
            srv.kill9()
            snap = {
                "threshold": threshold,
                "results": await progress(),
                "unfinished_runs": await _scalar(
                    url, "SELECT count(*) AS n FROM runs WHERE status NOT IN ('completed','failed','cancelled')"
                ),
                "leases_of_the_dead": await _scalar(
                    url, "SELECT count(*) AS n FROM runs WHERE lease_owner IS NOT NULL AND lease_until > now()"
                ),
                "unanswered_tool_calls": await _scalar(url, UNANSWERED),
            }
            kills.append(snap)
            assert snap["unfinished_runs"] > 0, f"kill landed after the work was done: {kills}"
            await srv.restart()

        async def all_terminal() -> bool:
            n = await _scalar(url, "SELECT count(*) AS n FROM runs WHERE status IN ('queued','running','waiting')")
            return n == 0

        try:
            await until(all_terminal, timeout=60, interval=0.2, what="every run to end")
        except TimeoutError:
            stuck = await query(url, "SELECT id, status, step_no, lease_owner, lease_until FROM runs"
                                     " WHERE status NOT IN ('completed','failed','cancelled')")
            raise AssertionError(f"runs still unfinished 60 s after the last restart: {stuck}\n"
                                 f"kills: {kills}\n{srv.log_tail(all_starts=True)}") from None
        followed = await asyncio.wait_for(asyncio.gather(*followers), timeout=30)
    finally:
        for t in followers:
            t.cancel()

    # the kills hit work in progress (leases held by the dead process), yet no transcript ever showed
    # a half-done turn: the turn of a transactional tool commits with its results
    assert sum(k["leases_of_the_dead"] for k in kills) > 0, kills
    assert all(k["unanswered_tool_calls"] == 0 for k in kills), kills

    # -- every run completed, with a whole transcript ----------------------------------------------
    runs = {r["id"]: r for r in await query(url, "SELECT * FROM runs")}
    assert sorted(runs) == sorted(run_ids)
    rows = await query(url, "SELECT run_id, seq, type, payload, tool_use_id FROM events ORDER BY run_id, seq")
    transcripts: dict[str, list[dict[str, Any]]] = {rid: [] for rid in run_ids}
    for r in rows:
        transcripts[r["run_id"]].append({"seq": r["seq"], "type": r["type"], "_tuid": r["tool_use_id"], **r["payload"]})

    expected_types = tool_caller_types(TOOL_CALLS)
    problems: list[str] = []
    for rid in run_ids:
        run, events = runs[rid], transcripts[rid]
        if (run["status"], run["stop_reason"]) != ("completed", "end_turn"):
            problems.append(f"{rid}: {run['status']}/{run['stop_reason']} {run['error']}")
            continue
        seqs = [e["seq"] for e in events]
        if seqs != list(range(1, len(events) + 1)) or run["last_seq"] != len(events):
            problems.append(f"{rid}: seqs {seqs}, last_seq {run['last_seq']}")
        if [e["type"] for e in events] != expected_types:
            problems.append(f"{rid}: types {[e['type'] for e in events]}")
        problems += [f"{rid}: {p}" for p in check_paired(events)]
        for e in events:
            if e["type"] == "tool_result" and e["_tuid"] != e["tool_use"]["id"]:
                problems.append(f"{rid}: tool_result seq {e['seq']} keyed {e['_tuid']}")
        if [e["text"] for e in events if e["type"] == "text"] != [f"done after {TOOL_CALLS} tool calls"]:
            problems.append(f"{rid}: final text {[e.get('text') for e in events if e['type'] == 'text']}")
        usage = sum_usage(e["usage"] for e in events if e["type"] == "usage")
        if events[-1].get("usage") != usage:
            problems.append(f"{rid}: done usage {events[-1].get('usage')} != sum of usage events {usage}")
        # the run row's counters must agree with the transcript, however the steps were cut
        counters = (run["iterations"], run["input_tokens"], run["output_tokens"])
        if counters != (TOOL_CALLS + 1, usage["input_tokens"], usage["output_tokens"]):
            problems.append(f"{rid}: run row (iterations, in, out) = {counters}, transcript says "
                            f"{(TOOL_CALLS + 1, usage['input_tokens'], usage['output_tokens'])}")
        if run["lease_owner"] is not None:
            problems.append(f"{rid}: still leased by {run['lease_owner']}")
    assert not problems, "\n".join(problems) + f"\nkills: {kills}"

    # the database agrees: one result per tool_use_id, no call left unanswered
    dup = await query(url, "SELECT run_id, tool_use_id, count(*) AS n FROM events WHERE type = 'tool_result'"
                           " GROUP BY run_id, tool_use_id HAVING count(*) <> 1")
    assert dup == []
    assert await _scalar(url, UNANSWERED) == 0
    answered = await _scalar(url, "SELECT count(DISTINCT tool_use_id) AS n FROM events WHERE type = 'tool_result'")
    assert answered == total_results
    # every tool ran at least once (a kill between a tool's effect and its result re-runs it)
    counter = await query(
        url, "SELECT value FROM memory WHERE scope = 'agent' AND scope_id = 'crash' AND key = 'calls'"
    )
    assert counter and int(counter[0]["value"]) >= total_results

    # leftover jobs (stale duplicates from sweeps) are consumed and dropped
    async def queue_empty() -> bool:
        return await _scalar(url, "SELECT count(*) AS n FROM jobs") == 0

    await until(queue_empty, timeout=15, interval=0.1, what="the job queue to drain")

    # -- the SSE followers saw every event once, in order, across the crashes --------------------
    async with TreadleClient(srv.url, timeout=10) as client:
        for rid, (frames, _reconnects) in zip(run_ids, followed, strict=False):
            ids = [f.id for f in frames]
            assert ids == list(range(1, len(transcripts[rid]) + 1)), f"{rid}: follower ids {ids}"
            assert [dict(f.data) for f in frames] == await client.events(rid)
            assert all(f.data["seq"] == f.id for f in frames)
    assert sum(r for _f, r in followed) >= 1, "no follower was cut off by a crash"
    print(f"kills: {kills}; follower reconnects: {[r for _f, r in followed]}")
