"""`treadle mcp`: a stdio MCP server that forwards to a running treadle's /v1/_mcp (for `claude
mcp add` and other stdio-only MCP clients), and `treadle mcp install`, the config snippet.

Both sides are the official `mcp` SDK: a low-level Server on stdin/stdout, a Client over
Streamable HTTP upstream. The SDK's dispatcher handles each stdio request in a task of its own,
and the upstream is stateless (one HTTP request per call), so a slow `spawn_runs` never holds up a
cheap `get_run`. The bearer comes from the environment (TREADLE_MCP_TOKEN, else
TREADLE_AUTH_TOKEN), never from the command line (it would show in `ps`)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace as Args
from typing import Any

import click

DEFAULT_URL = "http://127.0.0.1:8787"
TOKEN_ENVS = ("TREADLE_MCP_TOKEN", "TREADLE_AUTH_TOKEN")


def upstream_url(url: str | None) -> str:
    base = (url or os.environ.get("TREADLE_URL") or DEFAULT_URL).rstrip("/")
    return base if base.endswith("/v1/_mcp") else f"{base}/v1/_mcp"


def upstream_token() -> str | None:
    return next((os.environ[k] for k in TOKEN_ENVS if os.environ.get(k)), None)


async def serve_stdio(url: str, token: str | None) -> None:
    import httpx2
    import mcp_types as types
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.server.context import ServerRequestContext
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    from treadle import __version__

    headers = {"Authorization": f"Bearer {token}"} if token else {}

    @asynccontextmanager
    async def upstream(_server: Server[Any]) -> AsyncIterator[Client]:
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=None)) as http:
            transport = streamable_http_client(url, http_client=http, terminate_on_close=False)
            async with Client(transport, cache=None) as client:
                yield client

    async def list_tools(ctx: ServerRequestContext[Client, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return await ctx.lifespan_context.list_tools(cursor=params.cursor if params else None)

    async def call_tool(ctx: ServerRequestContext[Client, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        return await ctx.lifespan_context.call_tool(params.name, params.arguments or {})

    server: Server[Client] = Server("treadle", version=__version__, lifespan=upstream,
                                    on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


# -- install ---------------------------------------------------------------------------------------


def snippet(client: str, url: str, transport: str) -> dict[str, Any]:
    """The `mcpServers` entry for Claude Code (.mcp.json; `${VAR}` is expanded from the
    environment) or Claude Desktop (claude_desktop_config.json; no expansion, no HTTP entries)."""
    if transport == "http":
        if client == "claude-desktop":
            raise SystemExit("Claude Desktop takes stdio servers only: use --transport stdio")
        return {"type": "http", "url": upstream_url(url), "headers": {"Authorization": "Bearer ${TREADLE_MCP_TOKEN}"}}
    base = upstream_url(url).removesuffix("/v1/_mcp")
    entry: dict[str, Any] = {"command": "treadle", "args": ["mcp", "--url", base]}
    if client == "claude-code":
        entry["env"] = {"TREADLE_MCP_TOKEN": "${TREADLE_MCP_TOKEN}"}
    else:
        entry["env"] = {"TREADLE_MCP_TOKEN": "<your treadle token>"}
    return entry


def default_path(client: str) -> Path:
    if client == "claude-code":
        return Path(".mcp.json")
    if sys.platform == "darwin":
        return Path.home() / "Library/Application Support/Claude/claude_desktop_config.json"
    return Path(os.environ.get("XDG_CONFIG_HOME", Path.home() / ".config")) / "Claude/claude_desktop_config.json"


def cmd_install(args: Args) -> int:
    entry = snippet(args.client, args.url, args.transport)
    doc = {"mcpServers": {args.name: entry}}
    if not args.write:
        print(json.dumps(doc, indent=2))
        if args.client == "claude-code" and args.transport == "stdio":
            print(f"\nor: claude mcp add {args.name} -e TREADLE_MCP_TOKEN=... -- treadle mcp --url "
                  f"{entry['args'][2]}", file=sys.stderr)
        return 0
    path = Path(args.path) if args.path else default_path(args.client)
    current: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    if not isinstance(current, dict) or not isinstance(current.setdefault("mcpServers", {}), dict):
        print(f"{path}: not a JSON object with an mcpServers object; left unchanged", file=sys.stderr)
        return 1
    replaced = args.name in current["mcpServers"]
    current["mcpServers"][args.name] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(current, indent=2) + "\n")
    print(f"{'updated' if replaced else 'added'} {args.name!r} in {path}")
    if args.client == "claude-desktop":
        print("set TREADLE_MCP_TOKEN in that entry's env (Claude Desktop does not expand variables)", file=sys.stderr)
    return 0


def cmd_mcp(args: Args) -> int:
    import anyio

    anyio.run(serve_stdio, upstream_url(args.url), upstream_token())
    return 0


def mcp_group() -> click.Group:
    @click.group("mcp", invoke_without_command=True, short_help="a stdio MCP server forwarding to treadle",
                 help="a stdio MCP server forwarding to a running treadle (for claude mcp add)")
    @click.option("--url", help=f"the treadle to forward to (default: $TREADLE_URL, else {DEFAULT_URL}); "
                  "the bearer is $TREADLE_MCP_TOKEN, else $TREADLE_AUTH_TOKEN")
    @click.pass_context
    def mcp(ctx: click.Context, url: str | None) -> int:
        if ctx.invoked_subcommand is None:
            return cmd_mcp(Args(url=url))
        return 0

    @mcp.command("install", help="print (or --write) the Claude Code / Claude Desktop config entry")
    @click.option("--client", type=click.Choice(["claude-code", "claude-desktop"]), default="claude-code",
                  show_default=True)
    @click.option("--transport", type=click.Choice(["stdio", "http"]), default="stdio", show_default=True,
                  help="stdio: run `treadle mcp`; http: Claude Code talks to /v1/_mcp directly")
    @click.option("--url", help="the treadle URL the entry points at")
    @click.option("--name", default="treadle", show_default=True)
    @click.option("--write", is_flag=True, help="merge the entry into the client's config file")
    @click.option("--path", help="the config file (default: ./.mcp.json, or Claude Desktop's own)")
    def install(**kw: Any) -> int:
        return cmd_install(Args(**kw))

    return mcp
