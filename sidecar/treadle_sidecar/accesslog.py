"""The sidecar's access log: one INFO line per request on `treadle.access` — method, path, status,
milliseconds (the probes /healthz and /readyz left out). Never the query string or a header (a
token travels in either), never a body. (uvicorn's own access log is off: it prints the query
string.)"""

from __future__ import annotations

import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("treadle.access")
#: probes, not requests: a line each would drown the log
QUIET_PATHS = frozenset({"/healthz", "/readyz"})


class AccessLog:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in QUIET_PATHS or not log.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what an exception that escapes the app becomes

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            log.info("%s %s %d %.1fms", scope["method"], scope["path"], status, (time.perf_counter() - started) * 1000)
