"""POST /v1/runs answers as loomcycle does (issue 39 item 1), against a served treadle (uvicorn on
loopback, real Postgres): with no `Accept` (or `*/*`, or loomcycle's client's) the answer is the
run's SSE stream until it ends; `Accept: application/json` gets `202 {run_id, …}`; a client that
leaves the stream early cancels the run with loomcycle's reason `client disconnected` — unless
the run was started with `detach: true` or `interactive: true`. (The graceful-shutdown case, a
real `treadle serve` and SIGTERM: tests/e2e/test_shutdown_streams.py.)"""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from treadle_sidecar.server import BackgroundServer

from tests.support.db import TEST_HOME
from tests.support.e2e import query
from treadle.client.http import SseEvent, parse_sse
from treadle.config import Settings, parse_config
from treadle.testing import until

AGENTS = {
    "short": {"model": "tool-caller", "tools": ["Context"], "mock": {"tool_calls": 2}},
    # goes on until cancelled
    "long": {"model": "tool-caller", "tools": ["Context"], "max_iterations": 10000,
             "mock": {"tool_calls": 10000, "latency_ms": 5}},
}


class Served:
    def __init__(self, http: httpx.AsyncClient, db_url: str) -> None:
        self.http = http
        self.db_url = db_url

    async def run(self, run_id: str) -> dict[str, Any]:
        resp = await self.http.get(f"/v1/runs/{run_id}")
        assert resp.status_code == 200, resp.text
        body: dict[str, Any] = resp.json()
        return body

    async def cancel_flag(self, run_id: str) -> tuple[bool, str | None]:
        row = (await query(self.db_url, "SELECT cancel_requested, cancel_reason FROM runs WHERE id = %s",
                           (run_id,)))[0]
        return bool(row["cancel_requested"]), row["cancel_reason"]

    async def last_event(self, run_id: str) -> dict[str, Any]:
        events = (await self.http.get(f"/v1/runs/{run_id}/events", params={"limit": 5000})).json()["events"]
        last: dict[str, Any] = events[-1]
        return last


@pytest.fixture
async def served(db_url: str) -> AsyncIterator[Served]:
    token = "tok-" + secrets.token_hex(8)
    settings = Settings(database_url=db_url, home=TEST_HOME, config=Path("unused.yaml"), workers=2,
                        auth_token=token, sweep_interval_seconds=30.0)
    server = BackgroundServer(settings, parse_config({"agents": AGENTS}))
    base = await server.start()
    try:
        # no Accept header of its own: httpx sends `*/*`, as curl and fetch do
        async with httpx.AsyncClient(base_url=base, timeout=20.0, headers={"Authorization": f"Bearer {token}"}) as c:
            yield Served(c, db_url)
    finally:
        await server.stop()


async def _events(resp: httpx.Response) -> AsyncIterator[SseEvent]:
    async for ev in parse_sse(resp.aiter_lines()):
        yield ev


async def _leave_after_start(served: Served, body: dict[str, Any], frames: int = 3) -> str:
    """POST /v1/runs, read its first `frames` frames (loomcycle's `session`, `agent`, the first
    stored event), then close the connection; the run's id."""
    run_id = ""
    async with served.http.stream("POST", "/v1/runs", json=body) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        seen = 0
        async for ev in _events(resp):
            if ev.event == "agent":
                run_id = str(ev.data["run_id"])
            seen += 1
            if seen == frames:
                break  # the client leaves mid-stream
    assert run_id
    return run_id


async def _answered(caplog: pytest.LogCaptureFixture, count: int) -> None:
    """Until the server has logged `count` answers to POST /v1/runs: its handler returned (and
    cancelled the run first, if it was going to)."""
    await until(lambda: sum(r.getMessage().startswith("POST /v1/runs ") for r in caplog.records) >= count,
                timeout=15, what="the access log line of POST /v1/runs")


async def test_without_accept_the_answer_is_the_runs_stream_to_its_end(served: Served) -> None:
    for headers in ({}, {"Accept": "text/event-stream, application/json"}):  # httpx's */*; loomcycle's client
        async with served.http.stream("POST", "/v1/runs", json={"agent": "short", "prompt": "hi"},
                                      headers=headers) as resp:
            assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
            frames = [ev async for ev in _events(resp)]
        assert [f.event for f in frames[:2]] == ["session", "agent"], frames[:2]
        stored = [f for f in frames if f.id is not None]
        assert [f.id for f in stored] == list(range(1, len(stored) + 1))
        assert stored[-1].event == "done"
        run = await served.run(str(frames[1].data["run_id"]))
        assert run["status"] == "completed", run
    # and a request with no Accept header at all
    bare = httpx.AsyncClient(base_url=served.http.base_url, headers=dict(served.http.headers), timeout=20.0)
    del bare.headers["Accept"]
    async with bare, bare.stream("POST", "/v1/runs", json={"agent": "short", "prompt": "hi"}) as resp:
        assert "accept" not in resp.request.headers
        assert resp.headers["content-type"].startswith("text/event-stream")
        assert [ev.event async for ev in _events(resp)][-1] == "done"


async def test_accept_json_gets_the_202(served: Served) -> None:
    for accept in ("application/json", "application/json, */*;q=0.8"):
        resp = await served.http.post("/v1/runs", json={"agent": "short", "prompt": "hi"}, headers={"Accept": accept})
        assert resp.status_code == 202 and resp.headers["content-type"] == "application/json", resp.text
        body = resp.json()
        assert body["created"] is True and body["run_id"].startswith("r_"), body
        run = await until(partial(_ended, served, body["run_id"]), timeout=30, what="the run ends")
        assert run["status"] == "completed", run


async def test_leaving_the_stream_cancels_the_run(served: Served) -> None:
    run_id = await _leave_after_start(served, {"agent": "long", "prompt": "go"})
    run = await until(lambda: _ended(served, run_id), timeout=30, what="the run ends")
    assert run["status"] == "cancelled", run
    assert await served.cancel_flag(run_id) == (True, "client disconnected")
    last = await served.last_event(run_id)
    assert (last["type"], last["reason"]) == ("done", "client disconnected"), last


async def _ended(served: Served, run_id: str) -> dict[str, Any] | None:
    run = await served.run(run_id)
    return run if run["status"] in ("completed", "failed", "cancelled") else None


async def test_a_detached_run_outlives_its_stream(served: Served, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="treadle.access")
    run_id = await _leave_after_start(served, {"agent": "short", "prompt": "go", "detach": True})
    await _answered(caplog, 1)
    run = await until(lambda: _ended(served, run_id), timeout=30, what="the run ends")
    assert run["status"] == "completed", run
    assert await served.cancel_flag(run_id) == (False, None)


async def test_an_interactive_run_outlives_its_stream(served: Served, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="treadle.access")
    run_id = await _leave_after_start(served, {"agent": "short", "prompt": "go", "interactive": True})
    await _answered(caplog, 1)
    # it finishes its turn and parks for the next input, as loomcycle's interactive runs do
    await until(lambda: _parked(served, run_id), timeout=30, what="the run parks awaiting input")
    assert await served.cancel_flag(run_id) == (False, None)
    resp = await served.http.post(f"/v1/runs/{run_id}/cancel", json={"scope": "run"})
    assert resp.status_code == 200, resp.text


async def _parked(served: Served, run_id: str) -> bool:
    return bool((await served.run(run_id))["status"] == "waiting")
