"""The API function's routers, imported when a request first needs them.

A cold API function serves one request first; importing and building all of the API's ~65 routes
for it costs more CPU than the dependencies themselves (scripts/coldstart_ratios.py). So the
function knows, without importing them, which path prefixes each router serves: a request imports
the routers whose prefixes match its path, in the API's mount order, and a path no prefix matches
(or the API docs, which describe every route) imports them all. `tests/cloud/test_lazy_routes.py`
keeps this table equal to `treadle.api.app.api_routers(webhooks=False)`: the same routers, in the
same order, each route under one of its router's prefixes.

Under SnapStart every router is imported before the snapshot (`LazyRouter.module` names are
passed to `prepare_snapshot`), so a restored environment has them all.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fastapi import APIRouter

#: paths that describe or may reach every route: they import every router
EVERY_ROUTER_PATHS = ("/openapi.json", "/docs", "/redoc")


@dataclass
class LazyRouter:
    """`module:attr` names an APIRouter (or a list of them) serving only paths under `prefixes`."""

    module: str
    prefixes: tuple[str, ...]
    attr: str = "router"
    _routers: list[APIRouter] | None = field(default=None, repr=False)

    @property
    def loaded(self) -> bool:
        return self._routers is not None

    def routers(self) -> list[APIRouter]:
        if self._routers is None:
            from fastapi import APIRouter

            value = getattr(importlib.import_module(self.module), self.attr)
            self._routers = [value] if isinstance(value, APIRouter) else list(value())
        return self._routers

    def serves(self, path: str) -> bool:
        return path.startswith(self.prefixes)


#: `api_routers(webhooks=False)` of treadle.api.app, in its order, with the prefixes each serves
API_ROUTERS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("treadle.api.runs", "router", ("/v1/runs",)),
    ("treadle.api.clienttools", "router", ("/v1/runs/",)),
    ("treadle.api.steering", "router", ("/v1/runs/",)),
    ("treadle.api.interrupts", "router", ("/v1/runs/", "/v1/users/", "/v1/interrupts")),
    ("treadle.api.channels", "router", ("/v1/_channels",)),
    ("treadle.api.triggers", "router", ("/v1/_scheduledef", "/v1/_schedules/", "/v1/_webhookdef")),
    ("treadle.api.hooks", "router", ("/v1/hooks",)),
    ("treadle.api.tokens", "router", ("/v1/_operatortokendef", "/v1/_whoami")),
    ("treadle.api.admin", "router", ("/v1/_admin/",)),
    ("treadle.api.admin", "tenant_router", ("/v1/_concurrency",)),
    ("treadle.api.loomcycle", "router", ("/v1/_me", "/v1/agents/", "/v1/users/")),
    ("treadle.api.sessions", "router", ("/v1/sessions", "/v1/users/", "/v1/_history")),
    ("treadle.api.channels", "user_router", ("/v1/users/",)),
    ("treadle.api.substrate", "router", ("/v1/_agentdef", "/v1/_evaluation", "/v1/_skilldef", "/v1/_volumedef")),
    ("treadle.api.memory", "router", ("/v1/_memory/",)),
    ("treadle.api.memory_admin", "router", ("/v1/_memory/",)),
    ("treadle.api.llm_gateway", "router", ("/v1/_llm/",)),
    ("treadle.api.openai_compat", "routers", ("/v1/chat/", "/v1/embeddings", "/v1/models", "/v1/responses")),
    ("treadle.api.mcp", "router", ("/v1/_mcp", "/mcp")),
    ("treadle.api.teams", "router", ("/v1/_teamdef",)),
    ("treadle.api.a2a", "router", ("/.well-known/agent-card.json", "/a2a/")),
    ("treadle.api.usage", "router", ("/v1/_usage",)),
    ("treadle.api.introspection", "router", ("/v1/_models", "/v1/_routing", "/v1/_runnable-agents",
                                             "/v1/_resolve", "/v1/_providers/", "/v1/config")),
    ("treadle.api.budgets", "router", ("/v1/_limits",)),
    ("treadle.api.credentialdefs", "router", ("/v1/_credentialdef",)),
    ("treadle.api.retention", "router", ("/v1/_retention",)),
    ("treadle.api.erasure", "router", ("/v1/_erasure",)),
    ("treadle.api.pause", "router", ("/v1/_pause", "/v1/_resume", "/v1/_state")),
    ("treadle.api.knowledge", "router", ("/v1/_path", "/v1/_document")),
    ("treadle.api.snapshots", "router", ("/v1/_snapshots",)),
    ("treadle.api.residents", "router", ("/v1/_resident",)),
)


#: imported at INIT all the same: the runs API, which most of the API function's requests use (its
#: routes are built on first use: treadle.api.lazyroute)
INIT_IMPORTS = ("treadle.api.runs",)


def api_lazy_routers() -> list[LazyRouter]:
    for module in INIT_IMPORTS:
        importlib.import_module(module)
    return [LazyRouter(module, prefixes, attr) for module, attr, prefixes in API_ROUTERS]


def needed(lazy: Sequence[LazyRouter], path: str) -> list[LazyRouter]:
    """The routers a request for `path` needs that are not imported yet (all of them for a path
    none serves: its 404 — or 405 — must be the one the whole API would answer)."""
    if path in EVERY_ROUTER_PATHS or not any(lr.serves(path) for lr in lazy):
        return [lr for lr in lazy if not lr.loaded]
    return [lr for lr in lazy if not lr.loaded and lr.serves(path)]


def modules(lazy: Iterable[LazyRouter]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(lr.module for lr in lazy))
