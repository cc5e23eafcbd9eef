"""A client that stops reading a run's SSE stream early (issue 43 item 7) cancels the stream, not
the query it was in: no psycopg "query cancellation interrupted" warning, no pooled connection
closed and dropped — over repeated tries against a real served treadle."""

from __future__ import annotations

import logging
import secrets
from pathlib import Path

import httpx
import pytest
from treadle_sidecar.server import BackgroundServer

from tests.support.db import TEST_HOME
from treadle.config import Settings, parse_config
from treadle.testing import ACCEPT_JSON

TRIES = 12


async def test_leaving_a_stream_early_drops_no_connection(db_url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    token = "tok-" + secrets.token_hex(8)
    settings = Settings(database_url=db_url, home=TEST_HOME, config=Path("unused.yaml"), workers=2,
                        auth_token=token, sweep_interval_seconds=30.0)
    # a run that goes on: its stream keeps polling the store while the client leaves
    config = parse_config({"agents": {"long": {"model": "tool-caller", "tools": ["Context"], "max_iterations": 10000,
                                                "mock": {"tool_calls": 10000, "latency_ms": 5}}}})
    server = BackgroundServer(settings, config)
    base = await server.start()
    try:
        headers = {**ACCEPT_JSON, "Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=base, timeout=20.0, headers=headers) as c:
            run_id = (await c.post("/v1/runs", json={"agent": "long", "prompt": "go"})).json()["run_id"]
            for _ in range(TRIES):
                async with c.stream("GET", f"/v1/runs/{run_id}/stream") as resp:
                    assert resp.status_code == 200
                    async for line in resp.aiter_lines():
                        if line.startswith("data:"):
                            break  # the client leaves mid-stream
            await c.post(f"/v1/runs/{run_id}/cancel", json={"scope": "run"})
    finally:
        await server.stop()
    noisy = [r.getMessage() for r in caplog.records
             if r.name.startswith("psycopg") and ("cancellation" in r.getMessage() or "discarding" in r.getMessage())]
    assert noisy == []
