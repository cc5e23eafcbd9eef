"""The FastAPI app factory. Shapes pass a lifespan that puts a Runtime on `app.state.runtime`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse

from treadle import __version__
from treadle.api.auth import Authenticator
from treadle.api.errors import install_error_handlers
from treadle.api.limits import BodySizeLimit
from treadle.api.openapi import install_docs
from treadle.api.readiness import readiness
from treadle.wire import Health
from treadle.wire.admin import Readiness

Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[None]]


def api_routers(*, webhooks: bool = True) -> list[APIRouter]:
    """The routers of the authenticated API (/v1/...), in mount order. `webhooks=False` leaves
    out /v1/_webhooks/* (the cloud shape routes it to the webhook function)."""
    from treadle.api import (  # here, not at the top: a function serving other routes never imports them
        admin,
        channels,
        clienttools,
        hooks,
        interrupts,
        memory,
        memory_admin,
        runs,
        steering,
        substrate,
        tokens,
        triggers,
    )

    routers = [runs.router, clienttools.router, steering.router, interrupts.router, channels.router,
               triggers.router, hooks.router, tokens.router, admin.router,
               admin.tenant_router]
    if webhooks:
        from treadle.api import webhooks as webhook_routes

        routers.append(webhook_routes.router)
    from treadle.api import llm_gateway, loomcycle, mcp, openai_compat  # loomcycle: its /v1/agents routes

    routers.append(loomcycle.router)
    from treadle.api import sessions

    routers.append(sessions.router)
    routers.append(channels.user_router)  # loomcycle's /v1/users/{user_id}/channels/…
    from treadle.api import (
        a2a,
        budgets,
        credentialdefs,
        erasure,
        introspection,
        knowledge,
        pause,
        residents,
        retention,
        snapshots,
        teams,
        usage,
    )

    return [*routers, substrate.router, memory.router, memory_admin.router, llm_gateway.router,
            *openai_compat.routers(), mcp.router, teams.router, a2a.router, usage.router, introspection.router,
            budgets.router, credentialdefs.router, retention.router, erasure.router, pause.router, knowledge.router,
            snapshots.router, residents.router]


def mount(app: FastAPI, routers: Sequence[APIRouter]) -> None:
    """Add `routers`' routes to `app` as they are: what `include_router` does for a router without
    a prefix, tags or dependencies of its own, minus building each route again per app (FastAPI
    builds an included route's fields once more for the app that includes it). treadle's routes are
    built on first use (treadle.api.lazyroute), whichever app serves them."""
    for router in routers:
        if router.on_startup or router.on_shutdown:
            raise ValueError("a router with startup/shutdown handlers must be included, not mounted")
        app.router.routes.extend(router.routes)


def create_app(
    *,
    auth_token: str | None,
    max_request_bytes: int,
    lifespan: Lifespan | None = None,
    routers: Sequence[APIRouter] | None = None,
    watch_page: bool = True,
    public_docs: bool = False,
) -> FastAPI:
    """The app with `/healthz` and `routers` (default: the whole API, `api_routers()`). Each cloud
    function mounts only the routers it serves."""
    app = FastAPI(
        title="treadle",
        version=__version__,
        description="A durable agent runtime: runs survive crashes because the transcript is the state.",
        lifespan=lifespan,
        # api/openapi.py serves the spec and the docs pages (from local assets); unless
        # TREADLE_PUBLIC_DOCS, they need a token
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )
    app.state.authenticator = Authenticator(auth_token)
    app.state.runtime = None
    install_error_handlers(app)

    @app.get("/healthz", tags=["ops"], response_model=Health)
    async def healthz() -> dict[str, Any]:
        """Liveness: the process answers (no database call)."""
        return {"ok": True, "version": __version__}

    @app.get("/readyz", tags=["ops"], response_model=Readiness,
             responses={503: {"model": Readiness, "description": "not ready: the database, or its migrations"}})
    async def readyz(request: Request) -> JSONResponse:
        """Readiness: the runtime is open, its database answers and every migration this
        version ships is applied (503 otherwise, saying which)."""
        body = await readiness(request.app.state.runtime)
        return JSONResponse(body, status_code=200 if body["ok"] else 503)

    from treadle.api import metrics as metrics_route

    mount(app, [metrics_route.router])  # GET /metrics (Prometheus text), bearer-authed
    mount(app, api_routers() if routers is None else routers)
    install_docs(app, behind_auth=not public_docs)
    if watch_page:
        from treadle.api import watchpage

        mount(app, [watchpage.router])
    from treadle.api.tenantscope import TenantBindingMiddleware

    app.add_middleware(TenantBindingMiddleware)  # a request's queries see only its tenant's rows
    app.add_middleware(BodySizeLimit, max_bytes=max_request_bytes)
    from treadle.api.tracing import RequestSpans

    app.add_middleware(RequestSpans)  # the outermost: a span per request (telemetry/tracing.py)
    return app
