"""The SDK wiring of /v1/_mcp: one low-level `mcp` Server (tools/list, tools/call) and, per HTTP
request, a fresh stateless session manager (≈ a few ms). A manager can run only once, and in the
cloud shape there is no app lifespan to run a long-lived one in; a fresh one per request also means
no session state is ever held between requests.

The caller (runtime, principal) reaches the tool handlers through a context variable set before the
request is handed to the SDK: the SDK's tasks are started from this request's task, so they see it.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import Receive, Scope, Send

from treadle import __version__
from treadle.api.mcp.tools import call_tool, list_tools
from treadle.runtime import Runtime
from treadle.security.principal import Principal

log = logging.getLogger("treadle.mcp")

@dataclass(frozen=True, slots=True)
class Caller:
    rt: Runtime
    who: Principal


_caller: ContextVar[Caller] = ContextVar("treadle_mcp_caller")


async def _on_list_tools(
    _ctx: ServerRequestContext[Any, Any], _params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    caller = _caller.get()
    return types.ListToolsResult(tools=list_tools(caller.rt, caller.who))


async def _on_call_tool(
    _ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
) -> types.CallToolResult:
    caller = _caller.get()
    return await call_tool(caller.rt, caller.who, params.name, params.arguments or {})


SERVER: Server[Any] = Server(
    "treadle",
    version=__version__,
    instructions="treadle: a durable agent runtime. spawn_run / spawn_runs start runs; get_run, "
    "get_transcript, cancel_run, steer_run follow them.",
    on_list_tools=_on_list_tools,
    on_call_tool=_on_call_tool,
)

#: open mode (no token) is for a sidecar on a developer's machine: refuse Host/Origin headers that
#: are not loopback so a web page cannot drive it through DNS rebinding. With a token the bearer
#: is the protection, and API Gateway / a load balancer bring their own Host.
_LOOPBACK_ONLY = TransportSecuritySettings(
    enable_dns_rebinding_protection=True,
    allowed_hosts=["127.0.0.1", "127.0.0.1:*", "localhost", "localhost:*", "[::1]:*"],
    allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
)


async def serve(
    rt: Runtime, who: Principal, scope: Scope, receive: Receive, send: Send, *, loopback_only: bool
) -> None:
    """Serve one HTTP request of an authenticated caller with a fresh stateless SDK transport."""
    token = _caller.set(Caller(rt, who))
    try:
        manager = StreamableHTTPSessionManager(
            app=SERVER, json_response=True, stateless=True, security_settings=_LOOPBACK_ONLY if loopback_only else None,
        )
        async with manager.run():
            await manager.handle_request(scope, receive, send)
    finally:
        _caller.reset(token)
