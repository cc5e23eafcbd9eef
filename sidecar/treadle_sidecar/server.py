"""`treadle serve`: the sidecar app under uvicorn."""

from __future__ import annotations

import uvicorn

from treadle.config import Settings, TreadleConfig
from treadle.telemetry.logs import log_format
from treadle_sidecar.app import check_listen, create_sidecar_app


def serve(settings: Settings, config: TreadleConfig, *, log_level: str = "info") -> None:
    host, port = check_listen(settings, config)
    app = create_sidecar_app(settings, config)
    # JSON logs: uvicorn's own records go through the root handler too (one format)
    log_config = None if log_format() == "json" else uvicorn.config.LOGGING_CONFIG
    uvicorn.run(app, host=host, port=port, log_level=log_level, lifespan="on", access_log=False,
                log_config=log_config)


class BackgroundServer:
    """The sidecar served on an ephemeral loopback port inside the current event loop
    (`treadle run` uses it when no server is running)."""

    def __init__(self, settings: Settings, config: TreadleConfig) -> None:
        import asyncio
        import socket

        # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets whose proto says TCP
        # (proto 0 leaves Nagle on, and every response waits ~40 ms for a delayed ACK)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        app = create_sidecar_app(settings, config)
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> str:
        import asyncio

        self._task = asyncio.create_task(self._server.serve(sockets=[self._sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises the startup error
                raise RuntimeError("treadle server exited during startup")
            await asyncio.sleep(0.02)
        return self.url

    async def stop(self) -> None:
        self._server.should_exit = True
        if self._task is not None:
            await self._task
