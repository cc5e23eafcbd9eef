"""Pooled MCP sessions: one session serves many calls, a server that goes away gives a clear
`mcp_unavailable`, and the next call after it is back reconnects by itself; stdio sessions too."""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.support.mcp import CREDENTIAL
from tests.support.mcp_servers import serve_http, vault
from treadle.errors import ToolError
from treadle.mcp.connections import Endpoint, McpConnections
from treadle.security.network import NetworkSetup
from treadle.specs.mcp import McpServerSpec

ROOT = Path(__file__).resolve().parents[2]
GUARD = NetworkSetup(env={"TREADLE_HTTP_ALLOWED_HOSTS": "127.0.0.1",
                          "TREADLE_HTTP_PRIVATE_HOST_ALLOWLIST": "127.0.0.1"}).guard([], None, None)


async def test_a_pooled_session_reconnects_after_the_server_comes_back() -> None:
    pool = McpConnections()
    headers = {"Authorization": f"Bearer {CREDENTIAL}"}
    try:
        async with serve_http(vault(CREDENTIAL)) as url:
            endpoint = Endpoint("vault", McpServerSpec(url=url, timeout_seconds=10), headers, GUARD)
            for item in ("a", "b"):
                result = await pool.call(endpoint, "secret_lookup", {"item": item})
                assert not result.is_error and f"vault item {item}" in result.content[0].text  # type: ignore[union-attr]
            assert len(pool._sessions) == 1  # one session served both calls
        port = urlsplit(url).port
        with pytest.raises(ToolError) as down:
            await pool.call(endpoint, "secret_lookup", {"item": "c"})
        assert down.value.code == "mcp_unavailable" and "vault" in down.value.message
        async with serve_http(vault(CREDENTIAL), port=port or 0):
            result = await pool.call(endpoint, "secret_lookup", {"item": "d"})
            assert not result.is_error and "vault item d" in result.content[0].text  # type: ignore[union-attr]
    finally:
        await pool.close()


async def test_a_stdio_session_is_reused_and_closed() -> None:
    pool = McpConnections()
    spec = McpServerSpec(transport="stdio", command=sys.executable, args=["-m", "tests.support.mcp_servers", "stdio"],
                         env={"PYTHONPATH": str(ROOT)})
    endpoint = Endpoint("calc", spec)
    try:
        tools = await pool.list_tools(endpoint)
        assert [t.name for t in tools] == ["add"]
        for a in range(3):
            result = await pool.call(endpoint, "add", {"a": a, "b": 1})
            assert result.content[0].text == str(a + 1)  # type: ignore[union-attr]
        assert len(pool._sessions) == 1
    finally:
        await pool.close()
    assert pool._sessions == {}
