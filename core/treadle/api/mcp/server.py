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
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.types import Receive, Scope, Send

from treadle import __version__
from treadle.api.mcp import taskmethods
from treadle.api.mcp.tasks import TASKS_EXT
from treadle.api.mcp.tools import list_tools
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
    ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
) -> types.CallToolResult | types.InputRequiredResult | dict[str, Any]:
    caller = _caller.get()
    return await taskmethods.answer_call(caller.rt, caller.who, ctx, params)


async def _legacy_task_call(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    if ctx.method != "tools/call":
        return await call_next(ctx)
    caller = _caller.get()
    return await taskmethods.legacy_task_call(caller.rt, caller.who, ctx, call_next)


class _TreadleServer(Server[Any]):
    """The low-level server, whose 2025-11-25 capabilities also say `tasks` (the SDK types tasks
    but leaves them out of its capability derivation)."""

    def get_capabilities(
        self, notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None, *, protocol_version: str | None = None,
    ) -> types.ServerCapabilities:
        caps = super().get_capabilities(notification_options, experimental_capabilities, extensions,
                                        protocol_version=protocol_version)
        if protocol_version not in MODERN_PROTOCOL_VERSIONS:
            caps.tasks = types.ServerTasksCapability(
                list=types.TasksListCapability(), cancel=types.TasksCancelCapability(),
                requests=types.ServerTasksRequestsCapability(tools=types.TasksToolsCapability(
                    call=types.TasksCallCapability())))
        return caps


def _who() -> tuple[Runtime, Principal]:
    caller = _caller.get()
    return caller.rt, caller.who


SERVER: Server[Any] = _TreadleServer(
    "treadle",
    version=__version__,
    instructions="treadle: a durable agent runtime. spawn_run / spawn_runs start runs; get_run, "
    "get_transcript, cancel_run, steer_run follow them.",
    on_list_tools=_on_list_tools,
)
# tools/call answers a CallToolResult, an InputRequiredResult, or (2026-07-28 tasks) a task handle
SERVER.add_request_handler("tools/call", types.CallToolRequestParams, _on_call_tool)
SERVER.extensions = {TASKS_EXT: {}}  # 2026-07-28: advertised by server/discover
SERVER.middleware.append(_legacy_task_call)
for _method, (_params, _handler) in taskmethods.handlers(_who).items():
    SERVER.add_request_handler(_method, _params, _handler)

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
