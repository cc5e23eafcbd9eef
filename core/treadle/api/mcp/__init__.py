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

import json
from typing import Any

from fastapi import APIRouter
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from treadle.api.auth import TENANT_HEADER, Authenticator, authorize
from treadle.api.defroutes import add_def_routes
from treadle.api.errors import _STATUS_CODES, error_body
from treadle.api.lazyroute import LazyAPIRoute
from treadle.api.tenantscope import bind_request
from treadle.errors import StoreError

PATH = "/v1/_mcp"
SHORT_PATH = "/mcp"
#: the codes of the HTTP errors the SDK's transport answers itself (a wrong Accept, a refused Host)
TRANSPORT_CODES = {**_STATUS_CODES, 406: "not_acceptable", 421: "misdirected_request"}


class McpEndpoint:
    """The ASGI endpoint of /v1/_mcp (a Starlette route endpoint: it gets the raw request)."""

    def __init__(self, path: str) -> None:
        self.path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # a plain Starlette route puts no `route` in the scope: the request's span and access log
        # read its template there (api/tracing.py), so name it (issue 43 item 9: spans were "POST")
        scope["route"] = self
        if scope.get("method") != "POST":
            # stateless: no server-initiated stream to GET, no session to DELETE
            raise StarletteHTTPException(405, "the MCP endpoint is stateless: POST JSON-RPC messages",
                                         headers={"Allow": "POST"})
        app = scope["app"]
        auth: Authenticator = app.state.authenticator
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        rt = getattr(app.state, "runtime", None)
        if rt is None:
            raise StoreError("treadle is starting; the runtime is not ready yet")
        # 401/403 through the API's error handlers; each meta-tool checks its own scope (auth.TOOL_SCOPES)
        who = await auth.authenticate(headers.get("authorization"), rt)
        who = authorize(who, "POST", PATH, headers.get(TENANT_HEADER))
        bind_request(who, PATH)  # the meta-tools' queries see only the caller's tenant
        from treadle.api.mcp.server import serve

        await serve(rt, who, scope, receive, TreadleErrorShape(send), loopback_only=who.open_mode)


class TreadleErrorShape:
    """Wraps `send`: an HTTP error the SDK's transport answers itself (a body that is not JSON-RPC,
    a refused Host header, a wrong Accept) is re-shaped into treadle's `{"code", "error"}` with the
    JSON-RPC error, if any, under `details.jsonrpc`. Successful responses and the JSON-RPC error
    answering a request (it has an id; 2026-07-28 answers it with a mapped HTTP status) pass through
    untouched."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._start: Message | None = None
        self._body: list[bytes] = []

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start" and message["status"] >= 400:
            self._start = message
            return
        if self._start is None or message["type"] != "http.response.body":
            await self._send(message)
            return
        self._body.append(message.get("body", b""))
        if message.get("more_body"):
            return
        status = int(self._start["status"])
        raw = b"".join(self._body)
        extra: dict[str, Any] = {}
        try:
            doc = json.loads(raw)
            if isinstance(doc, dict) and doc.get("jsonrpc") and doc.get("id") is not None:
                # the answer to a request (2026-07-28 maps JSON-RPC error codes to HTTP statuses):
                # the client reads the JSON-RPC error, so it passes through as the SDK wrote it
                await self._send(self._start)
                await self._send({"type": "http.response.body", "body": raw})
                return
            rpc = doc.get("error") if isinstance(doc, dict) else None
            text = str(rpc.get("message")) if isinstance(rpc, dict) else raw.decode("utf-8", "replace")
            if isinstance(rpc, dict):
                extra["details"] = {"jsonrpc": rpc}
        except ValueError:
            text = raw.decode("utf-8", "replace")
        body = json.dumps(error_body(TRANSPORT_CODES.get(status, "mcp_transport_error"), text[:1000] or "refused",
                                     **extra)).encode()
        headers = [(k, v) for k, v in self._start.get("headers", [])
                   if k.lower() not in (b"content-type", b"content-length")]
        headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await self._send({"type": "http.response.start", "status": status, "headers": headers})
        await self._send({"type": "http.response.body", "body": body})


router = APIRouter(tags=["mcp"], route_class=LazyAPIRoute)
METHODS = ["GET", "POST", "DELETE"]
router.routes.append(Route(PATH, McpEndpoint(PATH), methods=METHODS, include_in_schema=False))
#: the same endpoint at `/mcp`: the MCP Inspector rewrites an HTTP URL whose path does not end in /mcp
router.routes.append(Route(SHORT_PATH, McpEndpoint(SHORT_PATH), methods=METHODS, include_in_schema=False))
#: MCPServerDef ops over HTTP (as /v1/_agentdef): POST /v1/_mcpserverdef, GET /v1/_mcpserverdef/names
add_def_routes(router, "/v1/_mcpserverdef", lambda rt: rt.mcp_defs)

__all__ = ["PATH", "SHORT_PATH", "router"]
