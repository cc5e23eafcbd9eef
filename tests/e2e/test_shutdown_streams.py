"""A graceful shutdown is not a client leaving (issue 39 item 1): `treadle serve` (a real
subprocess) gets SIGTERM while a client reads a run's stream from `POST /v1/runs` — a run that
would be cancelled ("client disconnected") if its client left. The server ends the stream itself
(`: server shutting down; resume with from_seq`) and exits promptly instead of waiting for the
stream; the run is not flagged for cancelling, and after the restart it goes on to complete,
with the reader resuming from its last id."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.support.e2e import check_paired, query, read_stream
from treadle.client.http import parse_sse
from treadle.testing import until

pytestmark = pytest.mark.e2e

TOOL_CALLS = 20
AGENTS: dict[str, Any] = {
    # long enough to be mid-run at the SIGTERM, short enough to finish after the restart
    "slow": {"model": "tool-caller", "tools": ["Memory"], "max_iterations": 100,
             "mock": {"tool_calls": TOOL_CALLS, "latency_ms": 100}},
}
ENV = {"TREADLE_LEASE_SECONDS": "1.5", "TREADLE_SWEEP_INTERVAL_SECONDS": "0.3"}
SHUTTING_DOWN = ": server shutting down; resume with from_seq"


async def test_sigterm_ends_the_stream_and_the_run_survives(make_db: Any, start_server: Any) -> None:
    db = make_db("shutdown")
    srv = await start_server(db, AGENTS, name="shutdown", **ENV)
    run_id, frames, lines = "", [], []

    async def recorded(source: AsyncIterator[str]) -> AsyncIterator[str]:
        async for line in source:
            lines.append(line)
            yield line

    async with httpx.AsyncClient(base_url=srv.url, timeout=httpx.Timeout(10, read=60)) as http, \
            http.stream("POST", "/v1/runs", json={"agent": "slow", "prompt": "go"}) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        events = parse_sse(recorded(resp.aiter_lines()))
        async for ev in events:
            frames.append(ev)
            if ev.event == "agent":
                run_id = str(ev.data["run_id"])
            if ev.event == "tool_result":  # mid-run: stop the server under the open stream
                srv.proc.terminate()
                break
        async with asyncio.timeout(20):  # the server ends the stream (EOF): it does not wait for it
            frames += [ev async for ev in events]
    assert await asyncio.to_thread(srv.proc.wait, 30) is not None, srv.log_tail()
    assert SHUTTING_DOWN in lines, lines[-5:]

    row = (await query(db, "SELECT status, cancel_requested, cancel_reason FROM runs WHERE id = %s", (run_id,)))[0]
    assert not row["cancel_requested"] and row["cancel_reason"] is None, row
    assert row["status"] not in ("cancelled", "completed", "failed"), row

    await srv.restart()
    last = max(f.id for f in frames if f.id is not None)
    resumed = await read_stream(srv.url, run_id, from_seq=last, timeout=60)
    assert resumed[0].id == last + 1 and resumed[-1].event == "done", [f.event for f in resumed]
    run = await until(lambda: _run(srv.url, run_id), timeout=30, what="the run's final state")
    assert run["status"] == "completed", run
    async with httpx.AsyncClient(base_url=srv.url, timeout=10) as http:
        stored = (await http.get(f"/v1/runs/{run_id}/events", params={"limit": 5000})).json()["events"]
    assert check_paired(stored) == []
    assert sum(e["type"] == "tool_result" for e in stored) == TOOL_CALLS


async def _run(base: str, run_id: str) -> dict[str, Any] | None:
    async with httpx.AsyncClient(base_url=base, timeout=10) as http:
        run: dict[str, Any] = (await http.get(f"/v1/runs/{run_id}")).json()
    return run if run["status"] in ("completed", "failed", "cancelled") else None
