"""`treadle serve`: the sidecar app under uvicorn."""

from __future__ import annotations

import signal
import socket
from collections.abc import Callable
from types import FrameType

import uvicorn

from treadle.config import Settings, TreadleConfig
from treadle.errors import ConfigError
from treadle.telemetry.logs import log_format
from treadle_sidecar.app import check_listen, create_sidecar_app


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before treadle says it serves (a taken port is a one-line error)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # TCP: asyncio sets TCP_NODELAY
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"TREADLE_LISTEN={host}:{port}: cannot listen there: {exc.strerror or exc}") from None
    return sock


def serve(
    settings: Settings, config: TreadleConfig, *, log_level: str = "info", announce: Callable[[str], None] | None = None
) -> None:
    """Bind, then announce (`announce(url)`), then serve until SIGINT/SIGTERM."""
    host, port = check_listen(settings, config)
    sock = bind(host, port)
    app = create_sidecar_app(settings, config)
    if announce is not None:
        announce(f"http://{f'[{host}]' if ':' in host else host}:{port}")
    # JSON logs: uvicorn's own records go through the root handler too (one format)
    log_config = None if log_format() == "json" else uvicorn.config.LOGGING_CONFIG
    server = DrainingServer(uvicorn.Config(app, log_level=log_level, lifespan="on", access_log=False,
                                           log_config=log_config))
    # uvicorn shuts down gracefully, then re-raises the signal with the handler it found: for
    # SIGTERM (kill, systemd, Docker) make that an exit, so atexit stops the embedded Postgres
    # as Ctrl-C does (the default action would kill the process before it could)
    signal.signal(signal.SIGTERM, _exit_on_signal)
    server.run(sockets=[sock])


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


class DrainingServer(uvicorn.Server):
    """uvicorn, telling the runtime when a graceful shutdown begins (`Runtime.draining`): uvicorn
    waits for open responses to end before the app's shutdown runs, so the run streams end
    themselves (their clients resume after the restart), and no run is cancelled as if its
    client had left (api/runstream.py)."""

    def drain(self) -> None:
        rt = getattr(getattr(self.config.app, "state", None), "runtime", None)
        if rt is not None:
            rt.draining = True

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.drain()
        super().handle_exit(sig, frame)


class BackgroundServer:
    """The sidecar served on an ephemeral loopback port inside the current event loop
    (`treadle run` uses it when no server is running)."""

    def __init__(self, settings: Settings, config: TreadleConfig) -> None:
        import asyncio

        # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets whose proto says TCP
        # (proto 0 leaves Nagle on, and every response waits ~40 ms for a delayed ACK)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        app = create_sidecar_app(settings, config)
        self._server = DrainingServer(uvicorn.Config(app, log_level="warning", lifespan="on"))
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
        self._server.drain()
        self._server.should_exit = True
        if self._task is not None:
            await self._task
