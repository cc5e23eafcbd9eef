"""A sidecar served for real (uvicorn on an ephemeral loopback port) inside the test's event loop:
the one way tests start one, so the settings every such test shares are written once."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from treadle_sidecar.server import BackgroundServer

from tests.support.db import TEST_HOME
from treadle.client.http import SseEvent, parse_sse
from treadle.config import Settings, TreadleConfig
from treadle.testing import ACCEPT_JSON
from treadle.testing import until as wait_for


def sidecar_settings(db_url: str, *, token: str | None = None, workers: int = 2,
                     provider_retries: int = 4) -> Settings:
    """The settings of a test sidecar: the test database, the test home, a slow sweeper (tests sweep
    themselves), `token` as the bearer (None: no auth)."""
    return Settings(database_url=db_url, home=TEST_HOME, config=Path("unused.yaml"), workers=workers,
                    auth_token=token, sweep_interval_seconds=30.0, provider_retries=provider_retries)


@asynccontextmanager
async def sidecar_url(settings: Settings, config: TreadleConfig) -> AsyncIterator[str]:
    """The base URL of a sidecar serving `config`, stopped on leaving."""
    server = BackgroundServer(settings, config)
    try:
        yield await server.start()
    finally:
        await server.stop()


@asynccontextmanager
async def sidecar_client(settings: Settings, config: TreadleConfig,
                         timeout: float = 20.0) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client on a sidecar serving `config` (see `sidecar_url`)."""
    async with sidecar_url(settings, config) as base, \
            httpx.AsyncClient(headers=ACCEPT_JSON, base_url=base, timeout=timeout) as client:
        yield client


async def run_ended(c: httpx.AsyncClient, who: dict[str, str], agent: str, prompt: str,
                    user_id: str) -> tuple[str, dict[str, Any]]:
    """Start `agent` as `who` (a bearer header) and wait until its run ends (20 s at most): (run
    id, the run)."""
    r = await c.post("/v1/runs", headers=who, json={"agent": agent, "prompt": prompt, "user_id": user_id})
    assert r.status_code == 202, r.text
    run_id: str = r.json()["run_id"]

    async def ended() -> dict[str, Any] | None:
        run: dict[str, Any] = (await c.get(f"/v1/runs/{run_id}", headers=who)).json()
        return run if run["status"] in ("completed", "failed", "cancelled") else None

    found: dict[str, Any] = await wait_for(ended, 20, interval=0.05, what=f"run {run_id}")
    return run_id, found


class Served:
    """A served sidecar as a test calls it: JSON in and out with the status asserted, runs started
    as one user of its own, waited on, streamed as SSE frames."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self.user = "u_" + secrets.token_hex(6)

    async def post(self, path: str, body: Any = None, status: int = 200) -> Any:
        resp = await self.client.post(path, json=body)
        assert resp.status_code == status, resp.text
        return resp.json()

    async def get(self, path: str, status: int = 200) -> Any:
        resp = await self.client.get(path)
        assert resp.status_code == status, resp.text
        return resp.json()

    async def start(self, agent: str, **body: Any) -> dict[str, Any]:
        body = {"agent": agent, "prompt": "hello", "user_id": self.user, **body}
        result: dict[str, Any] = await self.post("/v1/runs", body, 202)
        return result

    async def wait(self, run_id: str, until: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, Any]:
        """The run once `until` holds of it (default: it has ended); fails after 20 s."""
        done = until or (lambda r: r["status"] in ("completed", "failed", "cancelled"))

        async def settled() -> dict[str, Any] | None:
            run = await self.get(f"/v1/runs/{run_id}")
            return run if done(run) else None

        found: dict[str, Any] = await wait_for(settled, 20, interval=0.02, what=f"run {run_id}")
        return found

    async def stream(self, method: str, url: str, **kw: Any) -> list[SseEvent]:
        """Every SSE frame of `url` until the server ends the stream (at most 20 s)."""
        async with self.client.stream(method, url, headers={"Accept": "text/event-stream"}, **kw) as resp:
            assert resp.status_code in (200, 202), await resp.aread()
            assert resp.headers["content-type"].startswith("text/event-stream")
            return await asyncio.wait_for(_collect(parse_sse(resp.aiter_lines())), 20)

    async def final_text(self, run_id: str) -> str:
        events = (await self.get(f"/v1/runs/{run_id}/events"))["events"]
        return str([e["text"] for e in events if e["type"] == "text"][-1])


async def _collect(frames: AsyncIterator[SseEvent]) -> list[SseEvent]:
    return [f async for f in frames]
