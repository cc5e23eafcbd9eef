"""loomcycle's introspection routes (its `models_admin.go`, `routing.go`, `runnable_agents.go`):

- `GET /v1/_models`: the operator's model aliases, `{aliases: {name: {provider, model}}}`.
- `GET /v1/_routing`: per user tier and tier, the ordered provider/model cascade a run would walk
  (engine/model_routes.py decides it), with an active-providers header. treadle does not probe
  providers in the background, so `reachable`/`available` mean "configured and holding its key
  (or needing none)"; loomcycle's live-only fields (`stalled`, `rate_limited`, `last_error`) are
  left out rather than answered with a guess.
- `GET /v1/_runnable-agents`: the agents a caller can start, `bundled` (treadle.yaml) or
  `tenant` (the tenant's active AgentDefs), sorted by name.
- `GET /v1/_resolver`, `POST /v1/_resolve/probe` (its `resolver.go`): the availability matrix
  (providers/availability.py), the second after listing every provider's models now.
- `GET /v1/_providers/{id}/models` (its `providers_admin.go`): the vendor's model list, fetched now
  (10 s): 404 `provider_unknown`, 503 `provider_unavailable` (its key is not set), 502
  `provider_list_failed`.
- `GET /v1/config` (its `config_view.go`): what this instance is and can do — features, providers,
  models per tier, search — at the caller's disclosure level: `admin` (open mode, an operator or a
  `substrate:admin` token), `authenticated`, or `public` (no bearer presented, only when the
  operator sets TREADLE_PUBLIC_CONFIG=1: features reduced to booleans, no tiers or limits).
"""

from __future__ import annotations

import datetime as dt
import os
import time
import weakref
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials

from treadle import __version__
from treadle.api.deps import Rt, Who, bearer, get_principal
from treadle.api.errors import AUTHED, errors
from treadle.api.lazyroute import LazyAPIRoute
from treadle.config import TreadleConfig
from treadle.domain import scopes as sc
from treadle.engine.model_routes import agent_refs, tier_refs
from treadle.errors import NotFound, ProviderError, TreadleError
from treadle.providers.availability import Matrix
from treadle.providers.base import ModelLister
from treadle.providers.registry import key_report
from treadle.runtime import Runtime
from treadle.security.principal import Principal
from treadle.wire.admin import ConfigView, ModelAliases, ProviderModels, ResolverMatrix, RoutingView, RunnableAgents

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


class ProviderUnavailable(TreadleError):
    """A configured provider that cannot serve: its key variable is not set."""

    code = "provider_unavailable"
    status = 503


#: the resolver matrix of each runtime (seeded on first use from its config)
_MATRICES: weakref.WeakKeyDictionary[Runtime, Matrix] = weakref.WeakKeyDictionary()
LIST_MODELS_TIMEOUT_S = 10.0


def configured_models(config: TreadleConfig) -> dict[str, set[str]]:
    """provider id → the models the config routes to on it (aliases, tiers, agents)."""
    refs = [*config.models.values()]
    user_tiers: list[str | None] = [*config.user_tiers] or [None]
    for ut in user_tiers:
        for tier in config.tiers:
            refs += [ref for _, ref in tier_refs(config, tier, ut)]
    for name in config.agents:
        refs += [ref for _, ref in agent_refs(config, name)]
    out: dict[str, set[str]] = {}
    for ref in refs:
        out.setdefault(ref.provider, set()).add(ref.model)
    return out


def exclusions(config: TreadleConfig) -> dict[str, str | None]:
    """provider id → why it cannot serve (its key variable is not set), None when it can."""
    out: dict[str, str | None] = {"mock": None}
    for pid, _driver, env, is_set, required in key_report(config):
        out[pid] = f"{env} not set" if required and not is_set else None
    return out


def matrix_of(rt: Runtime) -> Matrix:
    m = _MATRICES.get(rt)
    if m is None:
        m = _MATRICES[rt] = Matrix(exclusions(rt.config), configured_models(rt.config))
    return m


@router.get("/_resolver", response_model=ResolverMatrix, response_model_exclude_none=True,
            responses=errors(*AUTHED))
async def resolver_matrix(rt: Rt, who: Who) -> dict[str, Any]:
    """The availability matrix as this process last saw it (no call made)."""
    return matrix_of(rt).snapshot()


@router.post("/_resolve/probe", response_model=ResolverMatrix, response_model_exclude_none=True,
             responses=errors(*AUTHED))
async def resolve_probe(rt: Rt, who: Who) -> dict[str, Any]:
    """List every provider's models now (5 s each, at once), then the matrix; a provider that does
    not answer comes back `reachable: false` with its `last_error`."""
    m = matrix_of(rt)
    await m.probe(rt.providers)
    return m.snapshot()


@router.get("/_providers/{provider_id}/models", response_model=ProviderModels,
            responses=errors(*AUTHED, 404, 502))
async def provider_models(provider_id: str, rt: Rt, who: Who) -> dict[str, Any]:
    """The vendor's model list, fetched now (not the matrix's)."""
    reason = exclusions(rt.config).get(provider_id, "unknown")
    provider = rt.providers.get(provider_id)
    if reason == "unknown" or provider is None:
        raise NotFound(f"unknown provider {provider_id!r}: not in providers:", code="provider_unknown")
    if reason is not None:
        raise ProviderUnavailable(f"provider {provider_id!r} is not configured to serve: {reason}")
    if not isinstance(provider, ModelLister):
        raise ProviderError(f"{provider_id}: its driver cannot list models", code="provider_list_failed")
    started = time.monotonic()
    models = await provider.list_models(LIST_MODELS_TIMEOUT_S)
    duration = time.monotonic() - started
    return {"provider": provider_id, "fetched_at": _stamp(), "duration_ms": int(duration * 1000), "models": models}


def _stamp() -> str:
    return dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")


async def principal_or_public(
    request: Request, _scheme: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)] = None
) -> Principal | None:
    """The caller, or None for a request with no bearer when the operator opted in to a public
    view (TREADLE_PUBLIC_CONFIG=1); a presented bearer is always checked (a bad one is a 401,
    never a downgrade to the public view)."""
    if not request.headers.get("authorization") and os.environ.get("TREADLE_PUBLIC_CONFIG") in ("1", "true"):
        return None
    return await get_principal(request)


async def _features(rt: Runtime, public: bool) -> dict[str, Any]:
    config = rt.config
    embedder = rt.substrate.memory.embedder
    vector: dict[str, Any] = {"available": embedder is not None and await rt.memory.vectors_available()}
    if embedder is not None:
        vector["embedder"] = {"provider": embedder.name, "model": embedder.model}
    from treadle.builtins.searchcircuit import enabled_providers

    search = [config.search.driver] if config.search is not None else sorted(enabled_providers(config, os.environ))
    feats: dict[str, Any] = {
        "vector_memory": vector,
        "full_text_memory": {"available": True},
        "sql_memory": {"available": config.memory.sql is not None},
        "documents": {"available": True},
        "scheduler": {"available": True},
        "webhooks": {"available": True},
        "retention": {"available": config.raw_retention is not None},
        "code_js": {"available": config.code_agents.enabled},
        "a2a": {"available": bool(config.a2a_server_cards)},
        "search": {"available": bool(search), "providers": search},
    }
    if public:  # each feature reduced to its `available`: nothing else can reach a public reader
        return {name: bool(v.get("available")) for name, v in feats.items()}
    return feats


@router.get("/config", response_model=ConfigView, response_model_exclude_none=True, responses=errors(*AUTHED))
async def config_view(rt: Rt, who: Annotated[Principal | None, Depends(principal_or_public)]) -> dict[str, Any]:
    """What this instance is and can do, and which models it would route to now."""
    public = who is None
    admin = who is not None and (who.open_mode or who.is_operator or sc.ADMIN in who.scopes)
    config = rt.config
    snap = matrix_of(rt).snapshot()["providers"]

    def available(provider: str, model: str) -> bool:
        return matrix_of(rt).available(provider, model)

    agg: dict[tuple[str, str], dict[str, Any]] = {}
    user_tiers: list[str | None] = [*sorted(config.user_tiers)] or [None]
    for ut in user_tiers:
        for tier in tier_names(config):
            selected = False
            for _, ref in tier_refs(config, tier, ut):
                av = available(ref.provider, ref.model)
                pick = av and not selected
                selected = selected or pick
                row = agg.setdefault((ref.provider, ref.model), {"provider": ref.provider, "model": ref.model,
                                                                 "tiers": set(), "active": False, "selected": False})
                row["tiers"].add(tier)
                row["active"] = row["active"] or av
                row["selected"] = row["selected"] or pick
    models = [{**row, "tiers": sorted(row["tiers"])} for _, row in sorted(agg.items())]
    providers = [{"provider": p, "active": a["reachable"] and not a["excluded"]} for p, a in sorted(snap.items())]
    search = ([{"provider": config.search.driver, "active": True, "primary": True}]
              if config.search is not None else [])
    out: dict[str, Any] = {
        "generated_at": _stamp(), "view": "public" if public else "admin" if admin else "authenticated",
        "instance": {"version": __version__}, "features": await _features(rt, public),
        "providers": providers, "models": models, "search": search,
    }
    if not public:
        out["user_tiers"] = sorted(config.user_tiers)
        out["limits"] = {"max_request_bytes": rt.settings.max_request_bytes}
    return out
