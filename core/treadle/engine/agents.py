"""Agents resolved against the tool registry and providers: what a step needs to run one."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from treadle.config import AgentConfig, TreadleConfig
from treadle.domain.skillmatch import SKILL_TOOL, uses_skill_tool
from treadle.errors import ConfigError
from treadle.providers.base import Provider, ToolSpec
from treadle.tools.base import Tool
from treadle.tools.registry import ToolRegistry


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


@dataclass(slots=True)
class ResolvedAgent:
    name: str
    config: AgentConfig
    provider: Provider  # the first candidate's provider
    tools: list[Tool]
    tool_specs: list[ToolSpec] = field(default_factory=list)
    tools_by_name: dict[str, Tool] = field(default_factory=dict)
    route: ModelRoute | None = None

    def __post_init__(self) -> None:
        self.tool_specs = [ToolSpec(t.name, t.description, t.input_schema) for t in self.tools]
        self.tools_by_name = {t.name: t for t in self.tools}
        if self.route is None:
            self.route = ModelRoute((Candidate(self.config.provider, self.provider, self.config.model),))

    @property
    def candidates(self) -> tuple[Candidate, ...]:
        assert self.route is not None
        return self.route.candidates

    @property
    def provider_id(self) -> str:
        return self.candidates[0].provider_id

    @property
    def model(self) -> str:
        return self.candidates[0].model


def resolve_agents(
    config: TreadleConfig,
    registry: ToolRegistry,
    providers: dict[str, Provider],
    *,
    source: str = "treadle.yaml",
    user_tier: str | None = None,
) -> dict[str, ResolvedAgent]:
    out: dict[str, ResolvedAgent] = {}
    for name, agent in config.agents.items():
        candidates: list[Candidate] = []
        for path, ref in config.agent_candidates(name, user_tier):
            provider = providers.get(ref.provider)
            if provider is None:
                key = path if path.endswith(".provider") else f"{path}.provider"
                raise ConfigError(f"{source}: {key}: unknown provider {ref.provider!r}")
            pcfg = config.providers.get(ref.provider)
            options = {**(pcfg.options if pcfg else {}), **ref.options}
            candidates.append(
                Candidate(ref.provider, provider, ref.model, options, pcfg.retries if pcfg else None)
            )
        if not candidates:  # loomcycle's provider_priority / user_tiers left nothing to try
            raise ConfigError(f"{source}: agents.{name}: no model candidate of tier {agent.tier!r} is allowed"
                              + (f" for user tier {user_tier!r}" if user_tier else ""))
        tier = config.tiers.get(agent.tier) if agent.tier else None
        route = ModelRoute(tuple(candidates), bool(tier and tier.pin_after_success), agent.tier)
        tools = registry.for_agent(name, agent.tools, source=source)
        if SKILL_TOOL not in agent.tools and uses_skill_tool(agent.tools, agent.skills):
            skill_tool = registry.get(SKILL_TOOL)  # skills on demand: `skills:` with a pattern adds the Skill tool
            if skill_tool is not None:
                tools.append(skill_tool)
        out[name] = ResolvedAgent(name, agent, candidates[0].provider, tools, route=route)
    return out


class AgentCatalogue:
    """The agents treadle.yaml declares, resolved once, and how to resolve a definition that is not
    there (an AgentDef body) against the same tools and providers."""

    def __init__(
        self, config: TreadleConfig, registry: ToolRegistry, providers: dict[str, Provider], *,
        source: str = "treadle.yaml",
    ) -> None:
        self.config = config
        self.registry = registry
        self.providers = providers
        self.static: dict[str, ResolvedAgent] = resolve_agents(config, registry, providers, source=source)

    def get(self, name: str) -> ResolvedAgent | None:
        return self.static.get(name)

    def retier(self, agent: ResolvedAgent, user_tier: str) -> ResolvedAgent:
        """`agent` routed for a run's loomcycle `user_tier` (config.agent_candidates)."""
        probe = self.config.model_copy(update={"agents": {agent.name: agent.config}})
        built = resolve_agents(probe, self.registry, self.providers, source=f"user_tier {user_tier}",
                               user_tier=user_tier)[agent.name]
        return dataclasses.replace(agent, provider=built.provider, route=built.route)

    def build(self, name: str, cfg: AgentConfig) -> ResolvedAgent:
        """A ResolvedAgent for a definition that is not in treadle.yaml (tools and model route)."""
        probe = self.config.model_copy(update={"agents": {name: cfg}})
        return resolve_agents(probe, self.registry, self.providers, source=f"AgentDef {name}")[name]
