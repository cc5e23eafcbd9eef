"""SDK client sessions to MCP servers, pooled per process.

A session is keyed by what makes it distinct: the server, its spec, the headers as sent (with the
run's credentials substituted: runs with different credentials never share a session) and the host
policy it was opened under. Each session is owned by a task of its own (an SDK client must be
entered and left in one task) and used from any step. A session that fails is dropped and the next
call opens a new one (lazy reconnect); every call is bounded by the server's `timeout_seconds`.
`pooled=False` (the cloud shape: nothing survives an invocation) opens a session per operation.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.stdio import get_default_environment
from mcp.client.streamable_http import streamable_http_client
from opentelemetry.trace import SpanKind

from treadle.errors import ToolError
from treadle.mcp.transport import guarded_client
from treadle.security.network import NetworkGuard
from treadle.specs.mcp import McpServerSpec
from treadle.telemetry import tracing

log = logging.getLogger("treadle.mcp")

#: sessions kept open per process (the least recently used is closed beyond it)
MAX_SESSIONS = 64


class McpUnavailable(ToolError):
    code = "mcp_unavailable"


class McpTimeout(ToolError):
    code = "mcp_timeout"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One MCP server as a call reaches it: the headers are final (credentials substituted)."""

    server: str
    spec: McpServerSpec
    headers: dict[str, str] = field(default_factory=dict)
    guard: NetworkGuard | None = None  # None only for stdio

    def key(self) -> str:
        doc = [self.server, self.spec.model_dump(), sorted(self.headers.items()),
               repr(self.guard.hosts) if self.guard is not None else None]
        return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


@asynccontextmanager
async def open_client(endpoint: Endpoint) -> AsyncIterator[Client]:
    spec = endpoint.spec
    if spec.is_stdio:
        assert spec.command is not None
        params = StdioServerParameters(command=spec.command, args=list(spec.args),
                                       env={**get_default_environment(), **spec.env})
        async with Client(params, cache=None) as client:
            yield client
        return
    assert spec.url is not None and endpoint.guard is not None
    async with guarded_client(endpoint.guard, endpoint.headers, spec.timeout_seconds) as http:
        transport = streamable_http_client(spec.url, http_client=http, terminate_on_close=False)
        async with Client(transport, cache=None) as client:
            yield client


class _Session:
    """An open client, owned by its own task until `close()`."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.client: Client | None = None
        self.error: BaseException | None = None
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self.loop = asyncio.get_running_loop()
        self._task = asyncio.create_task(self._own(), name=f"mcp-session-{endpoint.server}")

    async def _own(self) -> None:
        try:
            async with open_client(self.endpoint) as client:
                self.client = client
                self._ready.set()
                await self._stop.wait()
        except BaseException as exc:
            self.error = exc
        finally:
            self.client = None
            self._ready.set()

    async def ready(self, timeout_s: float) -> Client:
        try:
            async with asyncio.timeout(timeout_s):
                await self._ready.wait()
        except TimeoutError:
            await self.close()
            raise McpTimeout(f"MCP server {self.endpoint.server!r}: no connection within {timeout_s:g}s") from None
        if self.client is None:
            raise unavailable(self.endpoint.server, self.error)
        return self.client

    async def close(self) -> None:
        self._stop.set()
        if not self._task.done():
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(self._task, 10)


def unavailable(server: str, exc: BaseException | None) -> ToolError:
    """The error a call reports when the server cannot be reached: the guard's own refusal as it is,
    else a generic reason (an SDK exception group says little)."""
    leaf = exc
    while isinstance(leaf, BaseExceptionGroup) and leaf.exceptions:
        leaf = leaf.exceptions[0]
    if isinstance(leaf, ToolError):
        return leaf
    reason = f"{type(leaf).__name__}: {leaf}" if leaf is not None else "closed"
    return McpUnavailable(f"MCP server {server!r} is unavailable ({reason[:300]})")


class McpConnections:
    def __init__(self, *, pooled: bool = True, max_sessions: int = MAX_SESSIONS) -> None:
        self.pooled = pooled
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._lock = asyncio.Lock()

    @asynccontextmanager
    async def session(self, endpoint: Endpoint) -> AsyncIterator[Client]:
        """A connected client; a failure inside drops a pooled session (the next call reconnects)."""
        if not self.pooled:
            one = _Session(endpoint)
            try:
                yield await one.ready(endpoint.spec.timeout_seconds)
            finally:
                await one.close()
            return
        key = endpoint.key()
        sess = await self._get(key, endpoint)
        try:
            yield await sess.ready(endpoint.spec.timeout_seconds)
        except McpTimeout:
            raise
        except BaseException:
            await self._drop(key, sess)
            raise

    async def _get(self, key: str, endpoint: Endpoint) -> _Session:
        async with self._lock:
            sess = self._sessions.get(key)
            if sess is not None and (sess.loop is not asyncio.get_running_loop() or sess.error is not None
                                     or (sess._ready.is_set() and sess.client is None)):
                self._sessions.pop(key)
                if sess.loop is asyncio.get_running_loop():
                    await sess.close()
                sess = None
            if sess is None:
                sess = self._sessions[key] = _Session(endpoint)
                while len(self._sessions) > self.max_sessions:
                    _, old = self._sessions.popitem(last=False)
                    await old.close()
            self._sessions.move_to_end(key)
            return sess

    async def _drop(self, key: str, sess: _Session) -> None:
        async with self._lock:
            if self._sessions.get(key) is sess:
                self._sessions.pop(key)
        await sess.close()

    async def list_tools(self, endpoint: Endpoint) -> list[types.Tool]:
        timeout = endpoint.spec.timeout_seconds
        try:
            async with asyncio.timeout(timeout), self.session(endpoint) as client:
                tools: list[types.Tool] = []
                cursor: str | None = None
                while True:
                    page = await client.list_tools(cursor=cursor)
                    tools.extend(page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        return tools
        except TimeoutError:
            raise McpTimeout(f"MCP server {endpoint.server!r}: tools/list took longer than {timeout:g}s") from None
        except ToolError:
            raise
        except Exception as exc:
            raise unavailable(endpoint.server, exc) from None

    async def call(self, endpoint: Endpoint, tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
        timeout = endpoint.spec.timeout_seconds
        try:
            # one client span per MCP call: server, tool, transport, outcome — never the arguments,
            # the result or a header (they may carry credentials)
            with tracing.span("mcp.call", {"mcp.server": endpoint.server, "mcp.tool": tool,
                                           "mcp.transport": endpoint.spec.transport},
                              kind=SpanKind.CLIENT) as sp:
                async with asyncio.timeout(timeout), self.session(endpoint) as client:
                    result = await client.call_tool(tool, arguments)
                tracing.set_outcome(sp, "error" if result.is_error else "ok")
                return result
        except TimeoutError:
            raise McpTimeout(f"MCP server {endpoint.server!r}: {tool} took longer than {timeout:g}s") from None
        except ToolError:
            raise
        except Exception as exc:
            raise unavailable(endpoint.server, exc) from None

    async def close(self) -> None:
        async with self._lock:
            sessions = list(self._sessions.values())
            self._sessions.clear()
        for sess in sessions:
            if sess.loop is asyncio.get_running_loop():
                await sess.close()
