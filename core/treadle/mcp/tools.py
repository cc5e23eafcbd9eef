"""MCP servers' tools as agent tools: `mcp__<server>__<tool>`.

The engine asks `McpToolSource` for the MCP tools of a step's agent (engine/step.py `McpTools`):
the agent's `tools:` entries `mcp__<server>__<tool>` / `mcp__<server>__*` select from the tools the
server lists (default-deny: nothing else is offered). A server is treadle.yaml's `mcp_servers:`
entry, else the tenant's active MCPServerDef (which stores the tools discovered at create). What a
server lists is cached per process and refreshed after `DISCOVERY_TTL_S`.

A call: the run's credentials are opened (only when the server's headers name one), substituted
into the headers, the host checked by the network guard (HTTP), and the call sent over a pooled
session. Its result text has every credential value masked before it is stored or shown."""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import mcp_types as types

from treadle.config import TreadleConfig
from treadle.errors import ToolError
from treadle.governance.credentials import TenantCredentials, substitute_headers
from treadle.governance.credentials import refs as tenant_refs
from treadle.mcp.connections import Endpoint, McpConnections
from treadle.mcp.credentials import credential_refs, load_credentials, mask, substitute
from treadle.security.network import NetworkGuard, NetworkSetup
from treadle.specs.mcp import McpServerSpec, split_tool_name, tool_name
from treadle.store.db import Pool
from treadle.tools.base import Tool, ToolContext, ToolEffects, ToolResult

log = logging.getLogger("treadle.mcp")

DISCOVERY_TTL_S = 300.0
#: the tool names model APIs accept (Anthropic, OpenAI): mcp__<server>__<tool> must fit
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_RESULT_CHARS = 256 * 1024

#: (tenant, server name) → the server's spec and, for an MCPServerDef, the tools it discovered
ServerLookup = Callable[[str, str], Awaitable[tuple[McpServerSpec, list[dict[str, Any]] | None] | None]]


class McpRefused(ToolError):
    code = "mcp_refused"


def stdio_allowed() -> bool:
    """stdio servers are subprocesses of a long-lived treadle process: the sidecar, not a Lambda."""
    return not os.environ.get("AWS_LAMBDA_FUNCTION_NAME")


def render(result: types.CallToolResult) -> str:
    """A tool result as text: its text blocks, other blocks summarized, structured content as JSON."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        else:
            parts.append(f"[{block.type} content]")
    if not parts and result.structured_content is not None:
        import json

        parts.append(json.dumps(result.structured_content, default=str))
    text = "\n".join(parts)
    return text if len(text) <= MAX_RESULT_CHARS else text[:MAX_RESULT_CHARS] + "\n[truncated]"


class McpToolSource:
    def __init__(self, config: TreadleConfig, connections: McpConnections, network: NetworkSetup | None = None,
                 *, pool: Pool, lookup: ServerLookup | None = None) -> None:
        self.config = config
        self.connections = connections
        self.network = network or NetworkSetup()
        self.pool = pool
        self.lookup = lookup
        self.credentials = TenantCredentials(pool)
        self._discovered: dict[tuple[str, str, str], tuple[float, list[types.Tool]]] = {}

    # -- the servers -------------------------------------------------------------------------------

    async def server(self, tenant: str, name: str) -> tuple[McpServerSpec, list[dict[str, Any]] | None] | None:
        spec = self.config.mcp_servers.get(name)
        if spec is not None:
            return spec, None
        return await self.lookup(tenant, name) if self.lookup is not None else None

    def guard(self, agent_hosts: Sequence[str] | None, caller_hosts: Sequence[str] | None) -> NetworkGuard:
        return self.network.guard(self.config.http.allowed_hosts, agent_hosts, caller_hosts)

    async def endpoint(self, tenant: str, run_id: str | None, server: str, spec: McpServerSpec,
                       guard: NetworkGuard | None, *, listing: bool = False) -> tuple[Endpoint, dict[str, str]]:
        """The endpoint with the run's credentials in its headers, and those credentials (to mask).
        A call without a credential its headers need fails (CredentialMissing); `listing` the
        server's tools leaves such headers out instead."""
        if spec.is_stdio:
            if not stdio_allowed():
                raise McpRefused(f"MCP server {server!r} uses transport stdio, which runs in the sidecar only")
            return Endpoint(server, spec), {}
        credentials: dict[str, str] = {}
        if credential_refs(spec.headers):
            credentials = await load_credentials(self.pool, tenant, run_id) if run_id else {}
        headers = substitute(spec.headers, credentials, server=server, drop_missing=listing)
        names = tenant_refs(headers.values())
        if names:  # the tenant's CredentialDefs (governance/credentials.py): agent > user > tenant
            resolved = await self.credentials.resolve_for_run(tenant, run_id, names) if tenant else {}
            headers = substitute_headers(headers, resolved)
            credentials = {**credentials, **{f"credential.{k}": v for k, v in resolved.items()}}
        assert guard is not None and spec.url is not None
        from urllib.parse import urlsplit

        parts = urlsplit(spec.url)
        host, port = guard.check_target(parts.scheme, parts.hostname or "", parts.port)
        await guard.resolve(host, port)  # refused here with the guard's own code; re-checked at connect
        return Endpoint(server, spec, headers, guard), credentials

    async def discover(self, endpoint: Endpoint, *, refresh: bool = False) -> list[types.Tool]:
        key = (endpoint.server, endpoint.spec.model_dump_json(), endpoint.key())
        hit = self._discovered.get(key)
        if hit is not None and not refresh and time.monotonic() - hit[0] < DISCOVERY_TTL_S:
            return hit[1]
        tools = await self.connections.list_tools(endpoint)
        self._discovered[key] = (time.monotonic(), tools)
        return tools

    async def discover_for_def(self, name: str, spec: McpServerSpec) -> list[dict[str, Any]]:
        """An MCPServerDef's tools (create, rediscover): through the operator's floor, headers that
        need a run credential left out, never from the cache."""
        endpoint, _ = await self.endpoint("", None, name, spec, self.guard(None, None), listing=True)
        return stored_tools(await self.discover(endpoint, refresh=True))

    async def call_hook(self, tenant: str, server: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        """An `mcp.call` on_complete hook (triggers/hooks.py): no run, so no run credentials;
        through the operator's floor."""
        found = await self.server(tenant, server)
        if found is None:
            raise McpRefused(f"no MCP server {server!r} (treadle.yaml mcp_servers or an MCPServerDef)")
        spec = found[0]
        guard = None if spec.is_stdio else self.guard(None, None)
        endpoint, _ = await self.endpoint(tenant, None, server, spec, guard)
        result = await self.connections.call(endpoint, tool, args)
        return {"is_error": result.is_error, "text": render(result)}

    # -- the engine's hook -------------------------------------------------------------------------

    async def tools_for(self, tenant: str, run_id: str, names: Sequence[str], agent_hosts: Sequence[str] | None,
                        caller_hosts: Sequence[str] | None) -> list[Tool]:
        """The MCP tools an agent's `tools:` select, for one step (sorted by name: stable prompts)."""
        wanted: dict[str, set[str]] = {}
        for name in names:
            parts = split_tool_name(name)
            if parts is not None:
                wanted.setdefault(parts[0], set()).add(parts[1])
        out: list[Tool] = []
        for server, selected in wanted.items():
            found = await self.server(tenant, server)
            if found is None:
                log.warning("agent tools name MCP server %r, which is not configured", server)
                continue
            spec, stored = found
            guard = None if spec.is_stdio else self.guard(agent_hosts, caller_hosts)
            if stored is not None:
                remote = [types.Tool.model_validate(t) for t in stored]
            else:
                try:
                    endpoint, _ = await self.endpoint(tenant, run_id, server, spec, guard, listing=True)
                    remote = await self.discover(endpoint)
                except ToolError as exc:
                    # the tools named exactly stay offered: a call then reports what is wrong
                    log.warning("MCP server %r: cannot list its tools for this step: %s", server, exc.message)
                    remote = [types.Tool(name=t, input_schema={"type": "object"}) for t in sorted(selected - {"*"})]
            for t in sorted(remote, key=lambda t: t.name):
                if "*" not in selected and t.name not in selected:
                    continue
                if not TOOL_NAME.match(tool_name(server, t.name)):  # what model APIs accept as a name
                    log.warning("MCP server %r: tool %r skipped: %s is not a valid tool name", server, t.name,
                                tool_name(server, t.name))
                    continue
                out.append(McpTool(self, server, spec, t, agent_hosts, caller_hosts))
        return out


class McpTool:
    """One tool of an MCP server, as the agent sees it (`mcp__<server>__<tool>`)."""

    effects: ToolEffects = "external"

    def __init__(self, source: McpToolSource, server: str, spec: McpServerSpec, remote: types.Tool,
                 agent_hosts: Sequence[str] | None, caller_hosts: Sequence[str] | None) -> None:
        self.source = source
        self.server = server
        self.spec = spec
        self.remote_name = remote.name
        self.name = tool_name(server, remote.name)
        self.description = remote.description or f"{remote.name} (MCP server {server})"
        self.input_schema: dict[str, Any] = dict(remote.input_schema)
        self._hosts = (agent_hosts, caller_hosts)

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        guard = None if self.spec.is_stdio else self.source.guard(*self._hosts)
        endpoint, credentials = await self.source.endpoint(ctx.tenant_id, ctx.run_id, self.server, self.spec, guard)
        result = await self.source.connections.call(endpoint, self.remote_name, args)
        return ToolResult(mask(render(result), credentials), is_error=result.is_error)


def stored_tools(tools: list[types.Tool]) -> list[dict[str, Any]]:
    """What an MCPServerDef keeps of a discovery: name, description, input schema."""
    return [{"name": t.name, "description": t.description or "", "input_schema": dict(t.input_schema)}
            for t in sorted(tools, key=lambda t: t.name)]

