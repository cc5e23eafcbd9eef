"""A SERVER span per HTTP request (`{method} {route}`, HTTP semantic conventions), continuing the
caller's trace when it sends a W3C `traceparent`: a run started by the request — and the run's
first step message — belong to it. Only the method, the route template and the status are
recorded: never the path's values, the query string, a header's value or the body. Health
checks and metric scrapes get no span."""

from __future__ import annotations

from typing import Any

from opentelemetry.trace import SpanKind, Status, StatusCode
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from treadle.telemetry import tracing

_PROPAGATED = (b"traceparent", b"tracestate")
#: probes and scrapes: no span (they would drown the traces)
_UNTRACED = frozenset({"/healthz", "/readyz", "/metrics"})


class RequestSpans:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in _UNTRACED:
            await self.app(scope, receive, send)
            return
        carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"] if k in _PROPAGATED}
        method = str(scope.get("method", "GET"))
        status = 0

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        attrs: dict[str, Any] = {"http.request.method": method}
        with tracing.span(method, attrs, kind=SpanKind.SERVER, parent=tracing.context_from(carrier)) as span:
            try:
                await self.app(scope, receive, send_status)
            finally:
                route = getattr(scope.get("route"), "path", None)
                if isinstance(route, str):
                    span.update_name(f"{method} {route}")
                    span.set_attribute("http.route", route)
                if status:
                    span.set_attribute("http.response.status_code", status)
                    if status >= 500:
                        span.set_status(Status(StatusCode.ERROR))
