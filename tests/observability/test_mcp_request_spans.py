"""A call into treadle's own MCP server is a SERVER span named by its route (`POST /v1/_mcp`,
`POST /mcp`), as every HTTP route's span is (issue 43 item 9: the mounted MCP app's requests were
named by their method alone)."""

from __future__ import annotations

from typing import Any

from tests.support.sidecar import sidecar_client, sidecar_settings
from tests.support.spans import attrs, recording_spans
from treadle.config import TreadleConfig

TOKEN = "mcp-spans-token"


async def test_mcp_requests_are_named_by_their_route(db_url: str) -> None:
    settings = sidecar_settings(db_url, token=TOKEN)
    config = TreadleConfig.model_validate({"agents": {"echo": {"model": "echo"}}})
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2025-11-25"}
    with recording_spans() as exporter:
        async with sidecar_client(settings, config) as c:
            for path in ("/v1/_mcp", "/mcp"):
                r = await c.post(path, json=body, headers=headers)
                assert r.status_code in (200, 400), r.text
    servers: list[Any] = [s for s in exporter.get_finished_spans() if attrs(s).get("http.request.method") == "POST"]
    assert [(s.name, attrs(s).get("http.route")) for s in servers] == [
        ("POST /v1/_mcp", "/v1/_mcp"), ("POST /mcp", "/mcp")]
