"""Channels over HTTP, served by a real uvicorn: a publish wakes a run parked on Channel.subscribe."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from treadle_sidecar.server import BackgroundServer

from tests.support.db import TEST_HOME
from treadle.config import Settings, parse_config
from treadle.testing import ACCEPT_JSON, until

SUFFIX = secrets.token_hex(3)
NEWS, WORK = f"http-news-{SUFFIX}", f"http-work-{SUFFIX}"


def config() -> Any:
    script = [{"tool": "Channel", "input": {"op": "subscribe", "channel": NEWS, "wait_ms": 600_000}}, {"text": "ok"}]
    return parse_config(
        {
            "channels": {NEWS: {"semantic": "broadcast"}},
            "agents": {"listener": {"model": "script", "tools": ["Channel"], "mock": {"script": script}}},
        }
    )


@pytest.fixture(scope="module")
async def http(db_url: str) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(database_url=db_url, home=TEST_HOME, config=Path("unused.yaml"), workers=2)
    server = BackgroundServer(settings, config())
    base = await server.start()
    async with httpx.AsyncClient(headers=ACCEPT_JSON, base_url=base, timeout=20.0) as client:
        yield client
    await server.stop()


async def wait_status(http: httpx.AsyncClient, run_id: str, want: str) -> dict[str, Any]:
    async def there() -> dict[str, Any] | None:
        run: dict[str, Any] = (await http.get(f"/v1/runs/{run_id}")).json()
        return run if run["status"] == want else None

    found: dict[str, Any] = await until(there, 10, interval=0.05, what=f"run {run_id} to become {want}")
    return found


async def test_publish_over_http_wakes_a_parked_subscriber(http: httpx.AsyncClient) -> None:
    started = (await http.post("/v1/runs", json={"agent": "listener", "prompt": "wait"})).json()
    await wait_status(http, started["run_id"], "waiting")
    parked = (await http.get("/v1/runs", params={"status": "waiting"})).json()["runs"]
    mine = [r for r in parked if r["run_id"] == started["run_id"]]
    assert mine and mine[0]["waits"][0]["kind"] == "channel"

    resp = await http.post(f"/v1/_channels/{NEWS}/publish", json={"value": {"n": 1}})
    assert resp.status_code == 202 and resp.json()["woken"] == 1
    await wait_status(http, started["run_id"], "completed")
    events = (await http.get(f"/v1/runs/{started['run_id']}/events")).json()["events"]
    [result] = [e for e in events if e["type"] == "tool_result"]
    assert [m["value"] for m in json.loads(result["text"])["messages"]] == [{"n": 1}]
    assert "channel_delivery" in [e["type"] for e in events]


async def test_channel_crud_peek_and_await(http: httpx.AsyncClient) -> None:
    created = await http.post("/v1/_channels", json={"name": WORK, "semantic": "queue", "max_messages": 2})
    assert created.status_code == 201
    assert (await http.post("/v1/_channels", json={"name": WORK})).json()["code"] == "conflict"
    names = [c["name"] for c in (await http.get("/v1/_channels")).json()["channels"]]
    assert {NEWS, WORK} <= set(names)
    before = (await http.post("/v1/_channels/_await", json={"channels": [WORK]})).json()
    assert before["satisfied"] is False
    for i in range(3):
        assert (await http.post(f"/v1/_channels/{WORK}/publish", json={"value": i})).status_code == 202
    peek = (await http.get(f"/v1/_channels/{WORK}/peek")).json()
    assert [m["value"] for m in peek["messages"]] == [1, 2]  # max_messages dropped the oldest
    after = (await http.post("/v1/_channels/_await", json={"channels": [WORK, NEWS], "mode": "any"})).json()
    assert after["satisfied"] and WORK in after["fired"]
    assert (await http.delete(f"/v1/_channels/{WORK}")).json()["deleted"] is True
    missing = await http.post(f"/v1/_channels/{WORK}/publish", json={"value": 1})
    assert (missing.status_code, missing.json()["code"]) == (404, "not_found")
    bad = await http.post(f"/v1/_channels/{NEWS}/publish", json={"value": "x" * 70_000})
    assert bad.status_code in (400, 413)


async def test_publish_over_http_honours_deliver_at(http: httpx.AsyncClient) -> None:
    from datetime import UTC, datetime, timedelta

    channel = f"http-later-{SUFFIX}"
    assert (await http.post("/v1/_channels", json={"name": channel})).status_code == 201
    later = (datetime.now(UTC) + timedelta(minutes=5)).isoformat()
    resp = await http.post(f"/v1/_channels/{channel}/publish", json={"value": "later", "deliver_at": later})
    assert resp.status_code == 202, resp.text
    body = resp.json()
    assert body["woken"] == 0 and datetime.fromisoformat(body["visible_at"]) == datetime.fromisoformat(later)
    await http.post(f"/v1/_channels/{channel}/publish", json={"value": "now"})
    peek = (await http.get(f"/v1/_channels/{channel}/peek")).json()
    assert [m["value"] for m in peek["messages"]] == ["now"]  # the delayed one is invisible until then
    past = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    for bad in (past, "soon", "2030-01-02T03:04:05"):
        resp = await http.post(f"/v1/_channels/{channel}/publish", json={"value": 1, "deliver_at": bad})
        assert (resp.status_code, resp.json()["code"]) == (400, "bad_deliver_at"), resp.text
    resp = await http.post(f"/v1/_channels/{channel}/publish",
                           json={"value": 1, "deliver_at": later, "ttl_seconds": 10})
    assert (resp.status_code, resp.json()["code"]) == (400, "bad_deliver_at")
