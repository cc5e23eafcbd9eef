"""/v1/_mcp: treadle as an MCP server over Streamable HTTP (loomcycle's route), in stateless mode.

Every POST is one self-contained exchange: the bearer is checked like the rest of the API, a fresh
transport of the official `mcp` SDK serves the JSON-RPC message (JSON responses, no session id),
and nothing is kept between requests — so the same code runs in the sidecar and in the `mcp`
Lambda. The meta-tools (tools.py) act for the caller's tenant; a long `spawn_runs` waits on the
database (join.py), never on a worker.

    (here)     the route; the SDK is imported on the first MCP request, not at a cold start
    server     the SDK wiring: the low-level Server and the per-request transport
    tools      the meta-tools: names, input schemas, handlers
    join       waiting for runs to settle, bounded by a deadline
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from treadle.api.defroutes import add_def_routes
from treadle.errors import StoreError
from treadle.security.principal import BearerAuthenticator

PATH = "/v1/_mcp"


class McpEndpoint:
    """The ASGI endpoint of /v1/_mcp (a Starlette route endpoint: it gets the raw request)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        app = scope["app"]
        auth: BearerAuthenticator = app.state.authenticator
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        who = auth.authenticate(headers.get("authorization"))  # 401 through the API's error handlers
        rt = getattr(app.state, "runtime", None)
        if rt is None:
            raise StoreError("treadle is starting; the runtime is not ready yet")
        from treadle.api.mcp.server import serve

        await serve(rt, who, scope, receive, send, loopback_only=auth.open_mode)


router = APIRouter(tags=["mcp"])
router.routes.append(Route(PATH, McpEndpoint(), methods=["GET", "POST", "DELETE"], include_in_schema=False))
#: MCPServerDef ops over HTTP (as /v1/_agentdef): POST /v1/_mcpserverdef, GET /v1/_mcpserverdef/names
add_def_routes(router, "/v1/_mcpserverdef", lambda rt: rt.mcp_defs)

__all__ = ["PATH", "router"]
