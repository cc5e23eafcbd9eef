"""Composition root of the self-hosted shape: API + in-process workers + sweeper, one process.

The ASGI app is served by an adapter (`treadle_sidecar.server`, uvicorn); the core never
imports a server.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from treadle.api.app import create_app
from treadle.config import Settings, TreadleConfig, load_config, load_settings
from treadle.dispatch.postgres import PostgresQueue
from treadle.engine.workers import Sweeper, WorkerPool
from treadle.errors import ConfigError
from treadle.runtime import Runtime
from treadle.security.network import is_loopback_host
from treadle_sidecar.accesslog import AccessLog
from treadle_sidecar.observability import Tracing

log = logging.getLogger("treadle_sidecar.app")


def check_listen(settings: Settings, config: TreadleConfig | None = None) -> tuple[str, int]:
    """Without TREADLE_AUTH_TOKEN or yaml `principals:` treadle may run open, so it refuses a
    non-loopback address; a blank token is refused everywhere."""
    host, port = settings.listen_host_port()
    if settings.auth_token is not None and not settings.auth_token.strip():
        raise ConfigError("TREADLE_AUTH_TOKEN is blank: unset it, or set a real token")
    configured = bool(settings.auth_token) or bool(config is not None and config.principals)
    if not configured and not is_loopback_host(host):
        raise ConfigError(
            f"TREADLE_LISTEN={settings.listen}: refusing to listen on a non-loopback address without "
            "TREADLE_AUTH_TOKEN or yaml principals: (every /v1 route would be open to the network)"
        )
    return host, port


def create_sidecar_app(settings: Settings | None = None, config: TreadleConfig | None = None) -> FastAPI:
    settings = settings or load_settings()
    if config is None:
        config = load_config(settings.config)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        traces = Tracing()  # the OpenTelemetry SDK when OTEL_* asks for it
        rt = await Runtime.open(settings, config, config_source=str(settings.config))
        workers: WorkerPool | None = None
        if settings.workers > 0:
            assert isinstance(rt.dispatcher, PostgresQueue)
            workers = WorkerPool(rt.engine, rt.dispatcher, settings.workers,
                                 max_in_flight=settings.max_in_flight_steps)
            workers.start()
        sweeper = Sweeper(rt.engine, rt.dispatcher, settings.sweep_interval_seconds, wake_due=rt.wake_due)
        sweeper.start()
        schedules = await rt.triggers.start()
        app.state.runtime = rt
        app.state.workers = workers
        log.info("treadle ready: %d agent(s), %d worker(s)", len(rt.agents), settings.workers)
        # what start-up made (modules, config, the runtime) lives as long as the server: out of
        # the cyclic collector's sight (as the cloud's functions/__init__.py does), a full
        # collection walks only what came after — with it, each one walked ~60,000 objects, a
        # 30-40 ms stall of every run of the process, once in ~4,000 steps (docs/benchmarks.md)
        gc.freeze()
        try:
            yield
        finally:
            gc.unfreeze()
            app.state.runtime = None
            await sweeper.stop()
            if schedules is not None:
                await schedules.stop()
            if workers is not None:
                await workers.stop()
            await rt.close()
            await traces.close()

    app = create_app(
        auth_token=settings.auth_token, max_request_bytes=settings.max_request_bytes, lifespan=lifespan,
        public_docs=settings.public_docs,
    )
    app.add_middleware(AccessLog)
    return app
