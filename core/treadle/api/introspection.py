"""loomcycle's introspection routes (its `models_admin.go`, `routing.go`, `runnable_agents.go`):

- `GET /v1/_models`: the operator's model aliases, `{aliases: {name: {provider, model}}}`.
- `GET /v1/_routing`: per user tier and tier, the ordered provider/model cascade a run would walk
  (engine/model_routes.py decides it), with an active-providers header. treadle does not probe
  providers in the background, so `reachable`/`available` mean "configured and holding its key
  (or needing none)"; loomcycle's live-only fields (`stalled`, `rate_limited`, `last_error`) are
  left out rather than answered with a guess.
- `GET /v1/_runnable-agents`: the agents a caller can start, `bundled` (treadle.yaml) or
  `tenant` (the tenant's active AgentDefs), sorted by name.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from fastapi import APIRouter

from treadle.api.deps import Rt, Who
from treadle.api.errors import AUTHED, errors
from treadle.api.lazyroute import LazyAPIRoute
from treadle.config import TreadleConfig
from treadle.engine.model_routes import tier_refs
from treadle.providers.registry import key_report
from treadle.wire.admin import ModelAliases, RoutingView, RunnableAgents

router = APIRouter(prefix="/v1", tags=["introspection"], route_class=LazyAPIRoute)

#: loomcycle's tier order for the routing view: these first, then the rest by name
TIER_ORDER = ("low", "middle", "high")


@router.get("/_models", response_model=ModelAliases, responses=errors(*AUTHED))
async def list_model_aliases(rt: Rt, who: Who) -> dict[str, Any]:
    """The `models:` aliases (global config, the same for every caller)."""
    aliases = {name: {"provider": ref.provider, "model": ref.model} for name, ref in sorted(rt.config.models.items())}
    return {"aliases": aliases}


def usable_providers(config: TreadleConfig) -> dict[str, bool]:
    """provider id → whether it can serve now: the mock always; another when its key is set or
    its driver needs none."""
    usable = {"mock": True}
    for pid, _driver, _env, is_set, required in key_report(config):
        usable[pid] = is_set or not required
    return usable


def tier_names(config: TreadleConfig) -> list[str]:
    first = [t for t in TIER_ORDER if t in config.tiers]
    return first + sorted(t for t in config.tiers if t not in TIER_ORDER)


@router.get("/_routing", response_model=RoutingView, responses=errors(*AUTHED))
async def routing_view(rt: Rt, who: Who) -> dict[str, Any]:
    """Each user tier's (`""` without `user_tiers:`) tiers and their cascades, top first."""
    config = rt.config
    usable = usable_providers(config)
    user_tiers: list[dict[str, Any]] = []
    for ut in sorted(config.user_tiers) or [""]:
        tiers = []
        for tier in tier_names(config):
            cascade: list[dict[str, Any]] = []
            selected = False
            for _, ref in tier_refs(config, tier, ut or None):
                available = usable.get(ref.provider, False)
                pick = available and not selected
                selected = selected or pick
                cascade.append({"provider": ref.provider, "model": ref.model, "primary": not cascade,
                                "available": available, "selected": pick, "reachable": available})
            tiers.append({"tier": tier, "cascade": cascade})
        user_tiers.append({"name": ut, "tiers": tiers})
    providers = [{"provider": p, "reachable": ok, "excluded": False} for p, ok in sorted(usable.items())]
    return {"generated_at": dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z"),
            "admin": who.open_mode or who.is_operator, "providers": providers, "user_tiers": user_tiers}


@router.get("/_runnable-agents", response_model=RunnableAgents, responses=errors(*AUTHED))
async def runnable_agents(rt: Rt, who: Who) -> dict[str, Any]:
    """treadle.yaml's agents (`bundled`) and the caller's tenant's active AgentDefs (`tenant`)."""
    bundled = set(rt.config.agents)
    tenant = set(await rt.substrate.agents.active_names(who.tenant_id)) - bundled
    agents = [{"name": n, "source": "bundled"} for n in bundled] + [{"name": n, "source": "tenant"} for n in tenant]
    return {"agents": sorted(agents, key=lambda a: a["name"])}
