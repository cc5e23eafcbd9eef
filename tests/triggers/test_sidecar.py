"""The sidecar shape, served by uvicorn: yaml triggers synced at start, the in-process sweeper
firing and running on_complete hooks, workers running the fired runs, webhooks over real HTTP."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.signing import github_headers
from treadle.config import Settings, parse_config
from treadle.testing import until

SECRET = "gh-" + uuid.uuid4().hex


async def wait_for(fetch: Any, ok: Any, timeout: float = 15.0) -> Any:
    async def fetched() -> Any:
        value = await fetch()
        return value if ok(value) else None

    return await until(fetched, timeout, interval=0.05)


async def test_sidecar_fires_schedules_and_serves_webhooks(
    migrated_db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from treadle_sidecar.server import BackgroundServer

    monkeypatch.setenv("TREADLE_SCHEDULER_TICK_SECONDS", "0.1")
    monkeypatch.setenv("SIDECAR_GH_SECRET", SECRET)
    config = parse_config({
        "agents": {"echo": {"model": "echo"}},
        "scheduled_runs": {
            "digest": {
                "agent": "echo", "schedule": "0 3 * * *", "prompt": "digest please",
                "on_complete": [{"kind": "memory.set", "scope": "tenant", "key": "digest"}],
            }
        },
        "webhooks": {"gh": {"agent": "echo",
                            "auth": {"header": "X-Hub-Signature-256", "signing_secret_env": "SIDECAR_GH_SECRET"}}},
    })
    settings = Settings(database_url=migrated_db_url, home=Path(".treadle/test"), workers=2, auth_token=None,
                        sweep_interval_seconds=30.0, config=Path("unused.yaml"))
    server = BackgroundServer(settings, config)
    base = await server.start()
    try:
        async with httpx.AsyncClient(base_url=base, timeout=20.0) as c:
            state = (await c.get("/v1/_schedules/digest/state")).json()
            assert state["status"] == "active" and state["schedule"] == "0 3 * * *"
            fired = (await c.post("/v1/_schedules/digest/run-now")).json()
            run = await wait_for(lambda: c.get(f"/v1/runs/{fired['run_id']}"),
                                 lambda r: r.json()["status"] == "completed")
            assert run.json()["metadata"]["schedule_name"] == "digest"
            state = await wait_for(lambda: c.get("/v1/_schedules/digest/state"),
                                   lambda r: r.json()["recent_fires"][0]["hooks_status"] == "done")
            assert state.json()["recent_fires"][0]["run_id"] == fired["run_id"]

            body = json.dumps({"zen": "Keep it logically awesome."}).encode()
            r = await c.post("/v1/_webhooks/gh", content=body, headers=github_headers(SECRET, body))
            assert r.status_code == 202, r.text
            await wait_for(lambda: c.get(f"/v1/runs/{r.json()['run_id']}"),
                           lambda x: x.json()["status"] == "completed")
            r2 = await c.post("/v1/_webhooks/gh", content=body + b" ", headers=github_headers(SECRET, body))
            assert r2.status_code == 401
    finally:
        await server.stop()
