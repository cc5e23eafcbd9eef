"""loomcycle's channel routes as its TypeScript client calls them (adapters/ts/src/client.ts
updateChannel, purgeChannel, broadcastChannels, publish/subscribe/peek/ackChannel with
`scope: "user"`, subscribe's `waitMs`), against a served treadle; shapes from loomcycle's
internal/api/http/channels_admin.go and internal/connector/types.go."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from treadle_sidecar.server import BackgroundServer

from tests.support.db import TEST_HOME
from treadle.config import Settings, parse_config

SUFFIX = secrets.token_hex(3)
YAML_CH = f"lc-yaml-{SUFFIX}"


@pytest.fixture(scope="module")
async def http(db_url: str) -> AsyncIterator[httpx.AsyncClient]:
    config = parse_config({"channels": {YAML_CH: {"semantic": "broadcast"}}, "agents": {"echo": {"model": "echo"}}})
    settings = Settings(database_url=db_url, home=TEST_HOME, config=Path("unused.yaml"), workers=1)
    server = BackgroundServer(settings, config)
    base = await server.start()
    async with httpx.AsyncClient(base_url=base, timeout=20.0) as client:
        yield client
    await server.stop()


async def create(http: httpx.AsyncClient, **body: Any) -> str:
    name = f"lc-{secrets.token_hex(4)}"
    resp = await http.post("/v1/_channels", json={"name": name, **body})
    assert resp.status_code == 201, resp.text
    return name


async def test_update_channel_patches_the_fields_given(http: httpx.AsyncClient) -> None:
    name = await create(http, description="before", default_ttl=60, max_messages=5)
    resp = await http.patch(f"/v1/_channels/{name}", json={"description": "after", "max_messages": 0})
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert (out["name"], out["description"], out["default_ttl"], out.get("max_messages")) == (name, "after", 60, None)
    resp = await http.patch(f"/v1/_channels/{name}", json={"default_ttl": 0, "semantic": "queue"})
    assert resp.json()["default_ttl"] == 0 and resp.json()["semantic"] == "queue"
    [listed] = [c for c in (await http.get("/v1/_channels")).json()["channels"] if c["name"] == name]
    assert listed["semantic"] == "queue" and listed["description"] == "after"
    yaml = await http.patch(f"/v1/_channels/{YAML_CH}", json={"description": "x"})
    assert yaml.status_code == 409 and yaml.json()["code"] == "channel_yaml_immutable"
    missing = await http.patch("/v1/_channels/lc-nobody", json={"description": "x"})
    assert missing.status_code == 404 and missing.json()["code"] == "channel_not_found"
    assert (await http.patch(f"/v1/_channels/{name}", json={"publisher": "x"})).status_code == 422  # named, not ignored


async def test_purge_clears_messages_and_keeps_the_channel(http: httpx.AsyncClient) -> None:
    for ch in (await create(http), YAML_CH):  # a channel from treadle.yaml can be purged too
        for n in range(3):
            assert (await http.post(f"/v1/_channels/{ch}/publish", json={"payload": {"n": n}})).status_code == 202
        resp = await http.post(f"/v1/_channels/{ch}/purge", json={})
        assert resp.status_code == 200 and resp.json() == {"name": ch, "purged": 3}
        assert (await http.get(f"/v1/_channels/{ch}/peek")).json()["messages"] == []
        assert (await http.post(f"/v1/_channels/{ch}/publish", json={"payload": 1})).status_code == 202
    assert (await http.post("/v1/_channels/lc-nobody/purge", json={})).status_code == 404


async def test_broadcast_publishes_to_each_channel_or_none(http: httpx.AsyncClient) -> None:
    a, b = await create(http), await create(http)
    resp = await http.post("/v1/_channels/_broadcast", json={"channels": [a, b, a], "payload": {"go": True}})
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert (out["published"], out["failed"]) == (2, 0)
    assert [r["channel"] for r in out["results"]] == [a, b]
    assert all(r["msg_id"] and r["created_at"] for r in out["results"])
    for ch in (a, b):
        [msg] = (await http.get(f"/v1/_channels/{ch}/peek")).json()["messages"]
        assert msg["value"] == {"go": True}
    refused = await http.post("/v1/_channels/_broadcast", json={"channels": [a, "lc-nobody"], "payload": 2})
    assert refused.status_code == 404
    assert len((await http.get(f"/v1/_channels/{a}/peek")).json()["messages"]) == 1  # nothing published
    scoped = await http.post("/v1/_channels/_broadcast", json={"channels": [a], "scope": "user", "payload": 3})
    assert scoped.status_code == 400 and scoped.json()["code"] == "channel_scope_invalid"


async def test_user_scope_routes_publish_subscribe_peek_ack(http: httpx.AsyncClient) -> None:
    ch = await create(http, scope="user")
    alice, bob = f"u_{secrets.token_hex(4)}", f"u_{secrets.token_hex(4)}"
    base = f"/v1/users/{alice}/channels/{ch}"
    resp = await http.post(f"{base}/publish", json={"payload": {"for": "alice"}})
    assert resp.status_code == 202 and resp.json()["scope_id"] == alice and resp.json()["msg_id"]
    assert (await http.get(f"/v1/users/{bob}/channels/{ch}/peek")).json()["messages"] == []  # another user's
    [peeked] = (await http.get(f"{base}/peek")).json()["messages"]
    assert peeked["value"] == {"for": "alice"}
    got = (await http.post(f"{base}/subscribe", json={"max_messages": 5})).json()
    assert [m["value"] for m in got["messages"]] == [{"for": "alice"}] and got["next_cursor"]
    acked = await http.post(f"{base}/ack", json={"cursor": got["next_cursor"]})
    assert acked.status_code == 200 and acked.json()["ok"] is True
    # cur_0 is loomcycle's "from the start": a replay
    again = (await http.post(f"{base}/subscribe", json={"from_cursor": "cur_0"})).json()
    assert [m["value"] for m in again["messages"]] == [{"for": "alice"}]
    wrong = await http.post(f"/v1/users/{alice}/channels/{YAML_CH}/publish", json={"payload": 1})
    assert wrong.status_code == 400 and wrong.json()["code"] == "channel_scope_invalid"


async def test_subscribe_wait_ms_long_polls_for_a_publish(http: httpx.AsyncClient) -> None:
    ch = await create(http)

    async def later() -> None:
        await asyncio.sleep(0.3)
        await http.post(f"/v1/_channels/{ch}/publish", json={"payload": "late"})

    started = time.monotonic()
    task = asyncio.create_task(later())
    got = (await http.post(f"/v1/_channels/{ch}/subscribe", json={"wait_ms": 10_000})).json()
    await task
    assert [m["value"] for m in got["messages"]] == ["late"] and time.monotonic() - started < 5
    started = time.monotonic()
    empty = (await http.post(f"/v1/_channels/{ch}/subscribe", json={"wait_ms": 300})).json()
    assert empty["messages"] == [] and empty["next_cursor"] == "" and time.monotonic() - started >= 0.3
    assert (await http.post(f"/v1/_channels/{ch}/subscribe", json={"wait_ms": 30_001})).status_code == 422
