"""MCP servers written with the SDK's FastMCP (`MCPServer`) that tests mount as agent tools.

`vault()` (served over Streamable HTTP on a loopback port by `serve_http`) checks the caller's
bearer against the credential the test expects; `python -m tests.support.mcp_servers stdio` is a
stdio server with an `add` tool. Nothing here reaches another host."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn
from mcp.server.mcpserver import Context, MCPServer

from treadle.testing import until


def vault(expected_bearer: str) -> MCPServer:
    server = MCPServer("vault")

    @server.tool()
    def secret_lookup(item: str, ctx: Context) -> str:
        """Look an item up in the vault (needs the caller's bearer)."""
        auth = (ctx.headers or {}).get("authorization", "")
        if auth != f"Bearer {expected_bearer}":
            raise ValueError("unauthorized: wrong or missing bearer")
        return f"vault item {item}: open sesame"

    @server.tool()
    def leak(ctx: Context) -> str:
        """Echoes the Authorization header (a careless server)."""
        return f"you sent: {(ctx.headers or {}).get('authorization', '')}"

    @server.tool()
    def other() -> str:
        """A tool no agent opted in to."""
        return "should never be called"

    return server


@asynccontextmanager
async def serve_http(server: MCPServer, port: int = 0) -> AsyncIterator[str]:
    """Serve `server` at http://127.0.0.1:<port>/mcp (stateless, JSON responses; port 0: any)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    port = sock.getsockname()[1]
    app = server.streamable_http_app(stateless_http=True, json_response=True)
    uv = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    task = asyncio.create_task(uv.serve(sockets=[sock]))

    def started() -> bool:
        if task.done():
            task.result()  # serving ended before it started: its error
        return bool(uv.started)

    await until(started, 30, what="the MCP server to start")
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        uv.should_exit = True
        await task
        sock.close()


def calculator() -> MCPServer:
    server = MCPServer("calc")

    @server.tool()
    def add(a: int, b: int) -> str:
        """Add two integers."""
        return str(a + b)

    return server


if __name__ == "__main__" and sys.argv[1:] == ["stdio"]:
    calculator().run("stdio")
