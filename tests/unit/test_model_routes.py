"""engine/model_routes.py: the one place a route is decided (config checks references only)."""

from __future__ import annotations

from typing import Any

import pytest

from treadle.builtins.registry import default_registry
from treadle.config import parse_config
from treadle.engine.agents import resolve_agents
from treadle.engine.model_routes import Routes, agent_refs, route_errors
from treadle.errors import ConfigError, NotFound
from treadle.providers.registry import build_providers

TIERS: dict[str, Any] = {
    "providers": {"alt": {"driver": "mock"}},
    "models": {"fast": {"provider": "mock", "model": "echo"}, "scripted": {"provider": "alt", "model": "script"}},
    "tiers": {"t": {"candidates": ["fast", {"provider": "alt", "model": "echo"}], "pin_after_success": True}},
}


def test_route_errors_are_the_engines_and_parse_config_leaves_them() -> None:
    config = parse_config({**TIERS, "agents": {"a": {"model": "scripted"}}})  # references are fine
    assert route_errors(config) == [("agents.a.mock.script", "model 'script' (from agents.a.model) needs mock.script")]
    with pytest.raises(ConfigError, match=r"agents\.a\.mock\.script"):
        resolve_agents(config, default_registry(), build_providers(config))


def test_priority_orders_and_filters_a_tiers_candidates() -> None:
    config = parse_config({**TIERS, "provider_priority": ["alt", "mock"], "agents": {"a": {"tier": "t"}}})
    assert [(r.provider, r.model) for _, r in agent_refs(config, "a")] == [("alt", "echo"), ("mock", "echo")]
    only = parse_config({**TIERS, "provider_priority": ["alt"], "agents": {"a": {"tier": "t"}}})
    assert [p for p, _ in agent_refs(only, "a")] == ["tiers.t.candidates.1"]
    route = resolve_agents(config, default_registry(), build_providers(config))["a"].route
    assert route is not None and route.pin_after_success and route.tier == "t"
    assert [c.provider_id for c in route.candidates] == ["alt", "mock"]


def test_the_gateway_takes_loomcycles_precedence() -> None:
    config = parse_config({**TIERS, "tiers": {**TIERS["tiers"], "default": ["fast"]}})
    routes = Routes(config, build_providers(config))
    assert [c.provider_id for c in routes.gateway(provider="alt", model="x", tier=None).candidates] == ["alt"]
    assert routes.gateway(provider=None, model="fast", tier=None).candidates[0].model == "echo"  # the alias
    assert [c.provider_id for c in routes.gateway(provider="alt", model=None, tier="t").candidates] == ["alt"]
    assert routes.gateway(provider=None, model=None, tier=None).tier == "default"
    with pytest.raises(NotFound) as info:
        routes.gateway(provider=None, model="gpt-9", tier=None)
    assert info.value.code == "model_not_found"
