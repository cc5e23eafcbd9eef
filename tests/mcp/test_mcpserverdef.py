"""MCPServerDef on the def lifecycle: create discovers the server's tools (through the network
guard), an agent opts in to them, a run calls them with its credential; rediscover; refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from treadle_sidecar.server import BackgroundServer

from tests.support.db import TEST_HOME
from tests.support.mcp import CREDENTIAL, finished, tool_results
from tests.support.mcp_servers import serve_http, vault
from treadle.config import Settings, parse_config
from treadle.testing import ACCEPT_JSON

CONFIG = {
    "agents": {
        "dyn": {"model": "script", "tools": ["mcp__dynvault__*"], "mock": {
            "script": [{"tool": "mcp__dynvault__secret_lookup", "input": {"item": "silver"}}, {"text": "ok"}]}},
    },
}


async def op(client: httpx.AsyncClient, body: dict[str, Any]) -> httpx.Response:
    return await client.post("/v1/_mcpserverdef", json=body)


async def test_create_discovers_and_a_run_uses_the_def(migrated_db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TREADLE_HTTP_ALLOWED_HOSTS", "127.0.0.1")
    monkeypatch.setenv("TREADLE_HTTP_PRIVATE_HOST_ALLOWLIST", "127.0.0.1")
    settings = Settings(database_url=migrated_db_url, home=TEST_HOME, config=Path("unused.yaml"), workers=2,
                        auth_token=None, sweep_interval_seconds=30.0)
    server = BackgroundServer(settings, parse_config(CONFIG))
    base = await server.start()
    try:
        async with serve_http(vault(CREDENTIAL)) as url, \
                httpx.AsyncClient(headers=ACCEPT_JSON, base_url=base, timeout=60) as client:
            overlay = {"transport": "streamable-http", "url": url,
                       "headers": {"Authorization": "Bearer ${run.credentials.vault}"}}
            created = await op(client, {"op": "create", "name": "dynvault", "overlay": overlay})
            assert created.status_code == 200, created.text
            body = created.json()
            assert body["version"] == 1 and body["body"]["transport"] == "http"
            assert [t["name"] for t in body["body"]["tools"]] == ["leak", "other", "secret_lookup"]
            assert body["content_sha256"].startswith("sha256:")

            again = (await op(client, {"op": "rediscover", "name": "dynvault"})).json()
            assert again["changed"] is False and again["def_id"] == body["def_id"]

            resp = await client.post("/v1/runs", json={"agent": "dyn", "prompt": "go",
                                                       "user_credentials": {"vault": CREDENTIAL}})
            run, events = await finished(client, resp.json()["run_id"])
            assert run["status"] == "completed", run
            [result] = tool_results(events)
            assert not result.get("is_error") and "vault item silver: open sesame" in result["text"]
            assert CREDENTIAL not in json.dumps(events)

            refused = await op(client, {"op": "create", "name": "local", "overlay": {
                "transport": "stdio", "command": "sh"}})
            assert refused.status_code == 422 and "stdio" in refused.json()["error"]
            bad_name = await op(client, {"op": "create", "name": "a__b", "overlay": overlay})
            assert bad_name.status_code == 422
        # the vault server is gone now
        async with httpx.AsyncClient(headers=ACCEPT_JSON, base_url=base, timeout=60) as client:
            gone = await op(client, {"op": "create", "name": "down", "overlay": {"url": url}})
            assert gone.status_code == 422 and "cannot list the tools" in gone.json()["error"], gone.text
            recorded = await op(client, {"op": "create", "name": "down", "overlay": {"url": url}, "discover": False})
            assert recorded.status_code == 200 and recorded.json()["body"]["tools"] == []
            names = (await client.get("/v1/_mcpserverdef/names")).json()["names"]
            assert names == ["down", "dynvault"]
    finally:
        await server.stop()
