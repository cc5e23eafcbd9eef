"""Model routes: which candidates (a provider instance + the vendor's model name) may answer a
model call, in order. The one place treadle decides a route; config only checks its references
(a provider, alias or tier that exists), and engine/routing.py walks a route at call time
(retries, fallback to the next candidate, pinning).

- An agent names a model (a `models:` alias, or provider + model) or a tier.
- A tier agent's candidates follow loomcycle's user tier (the run's, else `default`): the user
  tier's own list for that tier if it has one, else the tier's; ordered and filtered by the user
  tier's `provider_priority`, else the global one; `fallback_on_error: false` keeps the first,
  `max_fallback_attempts` bounds the rest. Without `user_tiers:`, a run's user_tier names the
  `tiers:` entry to use (treadle's reading).
- A gateway call (OpenAI-shaped chat, loomcycle's model routes) names an alias, a tier, a pin
  (provider + model) or part of one: `gateway` applies loomcycle's precedence.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from treadle.config import ModelRef, TreadleConfig
from treadle.errors import BadRequest, ConfigError, NotFound
from treadle.providers.base import Provider


@dataclass(frozen=True, slots=True)
class Candidate:
    """One model the agent may be served by: a provider instance and the vendor's model name."""

    provider_id: str
    provider: Provider
    model: str
    options: dict[str, Any] = field(default_factory=dict)
    retries: int | None = None  # None: the engine's provider_retries

    @property
    def reasoning_format(self) -> str | None:
        fmt = getattr(self.provider, "reasoning_format", None)
        return fmt if isinstance(fmt, str) else None


@dataclass(frozen=True, slots=True)
class ModelRoute:
    """Ordered candidates (one unless the agent names a tier) and the tier's pinning rule."""

    candidates: tuple[Candidate, ...]
    pin_after_success: bool = False
    tier: str | None = None


def agent_refs(config: TreadleConfig, name: str, user_tier: str | None = None) -> list[tuple[str, ModelRef]]:
    """The agent's ordered (key path, provider + model) candidates for a run of `user_tier`;
    the config's references must be valid (parse_config checked them)."""
    agent = config.agents[name]
    tier = agent.tier
    if user_tier is not None and not config.user_tiers and user_tier in config.tiers:
        tier = user_tier
    if tier is None:
        if "provider" not in agent.model_fields_set and agent.model in config.models:
            return [(f"agents.{name}.model", config.models[agent.model])]
        return [(f"agents.{name}.provider", ModelRef(provider=config.agent_provider(agent), model=agent.model))]
    return tier_refs(config, tier, user_tier)


def tier_refs(config: TreadleConfig, tier: str, user_tier: str | None = None) -> list[tuple[str, ModelRef]]:
    """A tier's ordered (key path, provider + model) cascade for a run of `user_tier` (see the
    module docstring); `tier` must be configured."""
    ut_name = user_tier or "default"
    ut = config.user_tiers.get(ut_name) if config.user_tiers else None
    if ut is not None and tier in ut.tiers:
        listed = [(f"user_tiers.{ut_name}.tiers.{tier}.{i}", c) for i, c in enumerate(ut.tiers[tier])]
    else:
        listed = [(f"tiers.{tier}.candidates.{i}", c) for i, c in enumerate(config.tiers[tier].candidates)]
    refs = [(path, config.models[c] if isinstance(c, str) else c) for path, c in listed]
    order = (ut.provider_priority if ut is not None and ut.provider_priority else None) or config.provider_priority
    if order:
        refs = sorted((r for r in refs if r[1].provider in order), key=lambda r: order.index(r[1].provider))
    if ut is not None and not ut.fallback_on_error:
        return refs[:1]
    if ut is not None and ut.max_fallback_attempts is not None:
        return refs[:1 + ut.max_fallback_attempts]
    return refs


def route_errors(config: TreadleConfig) -> list[tuple[str, str]]:
    """What a config with valid references can still get wrong about routes: a user tier that
    leaves a tier agent no candidate, a route to the mock's `script` model without a script."""
    errs: list[tuple[str, str]] = []
    for name, agent in config.agents.items():
        if agent.tier is not None:
            user_tiers: list[str | None] = [*config.user_tiers] or [None]
            for ut in user_tiers:
                if not agent_refs(config, name, ut):
                    where = f"user tier {ut!r}" if ut else "provider_priority"
                    errs.append((f"agents.{name}.tier", f"no candidate of tier {agent.tier!r} is allowed by {where}"))
        for path, ref in agent_refs(config, name):
            if config.driver(ref.provider) == "mock" and ref.model == "script" and agent.mock.script is None:
                errs.append((f"agents.{name}.mock.script", f"model 'script' (from {path}) needs mock.script"))
    return errs


def check_routes(config: TreadleConfig, source: str) -> None:
    """route_errors as a ConfigError, worded as parse_config words reference errors."""
    if errs := route_errors(config):
        raise ConfigError("invalid configuration\n  " + "\n  ".join(f"{source}: {p}: {m}" for p, m in errs))


class Routes:
    """Routes built against the runtime's provider instances."""

    def __init__(self, config: TreadleConfig, providers: dict[str, Provider]) -> None:
        self.config = config
        self.providers = providers

    def candidate(self, path: str, ref: ModelRef) -> Candidate | None:
        """None: no provider of that id runs here."""
        provider = self.providers.get(ref.provider)
        if provider is None:
            return None
        pcfg = self.config.providers.get(ref.provider)
        options = {**(pcfg.options if pcfg else {}), **ref.options}
        return Candidate(ref.provider, provider, ref.model, options, pcfg.retries if pcfg else None)

    def agent(self, name: str, *, user_tier: str | None = None, source: str) -> ModelRoute:
        agent = self.config.agents[name]
        candidates: list[Candidate] = []
        for path, ref in agent_refs(self.config, name, user_tier):
            if (cand := self.candidate(path, ref)) is None:
                key = path if path.endswith(".provider") else f"{path}.provider"
                raise ConfigError(f"{source}: {key}: unknown provider {ref.provider!r}")
            candidates.append(cand)
        if not candidates:
            raise ConfigError(f"{source}: agents.{name}: no model candidate of tier {agent.tier!r} is allowed"
                              + (f" for user tier {user_tier!r}" if user_tier else ""))
        ut = self.config.user_tiers.get(user_tier or "default") if self.config.user_tiers else None
        if ut is not None and ut.retry_attempts is not None:  # loomcycle's per-user-tier retry budget
            candidates = [dataclasses.replace(c, retries=ut.retry_attempts) for c in candidates]
        tier = self.config.tiers.get(agent.tier) if agent.tier else None
        return ModelRoute(tuple(candidates), bool(tier and tier.pin_after_success), agent.tier)

    # -- the gateway: a caller names the model -----------------------------------------------------

    def _called(self, path: str, ref: ModelRef) -> Candidate:
        if (cand := self.candidate(path, ref)) is None:
            raise BadRequest(f"{path}: unknown provider {ref.provider!r}; providers: "
                             f"{', '.join(sorted(self.providers))}", code="unknown_provider")
        return cand

    def alias(self, alias: str) -> ModelRoute:
        return ModelRoute((self._called(f"models.{alias}", self.config.models[alias]),))

    def tier(self, tier: str) -> ModelRoute:
        spec = self.config.tiers.get(tier)
        if spec is None:
            known = ", ".join(sorted(self.config.tiers)) or "(none configured)"
            raise NotFound(f"unknown tier {tier!r}; tiers: {known}", code="unknown_tier")
        cands = tuple(self._called(f"tiers.{tier}.candidates.{i}", self.config.models[c] if isinstance(c, str) else c)
                      for i, c in enumerate(spec.candidates))
        return ModelRoute(cands, spec.pin_after_success, tier)

    def pinned(self, provider: str, model: str) -> ModelRoute:
        return ModelRoute((self._called("provider", ModelRef(provider=provider, model=model)),))

    def gateway(self, *, provider: str | None, model: str | None, tier: str | None) -> ModelRoute:
        """loomcycle's precedence: provider + model → that pin; provider only → the tier's
        candidates on that provider; model only → the alias of that name, else the tier's
        candidates serving that model (the tier given, else every tier and alias); neither → the
        tier (default `default`)."""
        if provider and model:
            return self.pinned(provider, model)
        if model and not tier and model in self.config.models:
            return self.alias(model)
        if model and not tier:
            refs = [c for a in self.config.models for c in self.alias(a).candidates if c.model == model]
            refs += [c for t in self.config.tiers for c in self.tier(t).candidates if c.model == model]
            refs = [c for c in refs if provider is None or c.provider_id == provider]
            if not refs:
                raise NotFound(f"no alias or tier candidate serves model {model!r}; name the provider too "
                               "(provider + model), or a models: alias", code="model_not_found")
            return ModelRoute((refs[0],))
        route = self.tier(tier or "default")
        keep = tuple(c for c in route.candidates
                     if (provider is None or c.provider_id == provider) and (model is None or c.model == model))
        if not keep:
            raise NotFound(f"tier {route.tier!r} has no candidate with provider={provider!r} model={model!r}",
                           code="model_not_found")
        return ModelRoute(keep, route.pin_after_success, route.tier)


__all__ = ["Candidate", "ModelRoute", "Routes", "agent_refs", "check_routes", "route_errors", "tier_refs"]
