"""Agents resolved against the tool registry and providers: what a step needs to run one."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from treadle.config import AgentConfig, TreadleConfig
from treadle.domain.skillmatch import SKILL_TOOL, uses_skill_tool
from treadle.engine.model_routes import Candidate, ModelRoute, Routes, check_routes
from treadle.providers.base import Provider, ToolSpec
from treadle.tools.base import Tool
from treadle.tools.registry import ToolRegistry


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
    """Every agent of `config`, its tools and its model route (config/routes checked: ConfigError)."""
    check_routes(config, source)
    routes = Routes(config, providers)
    out: dict[str, ResolvedAgent] = {}
    for name, agent in config.agents.items():
        route = routes.agent(name, user_tier=user_tier, source=source)
        tools = registry.for_agent(name, agent.tools, source=source)
        if SKILL_TOOL not in agent.tools and uses_skill_tool(agent.tools, agent.skills):
            skill_tool = registry.get(SKILL_TOOL)  # skills on demand: `skills:` with a pattern adds the Skill tool
            if skill_tool is not None:
                tools.append(skill_tool)
        out[name] = ResolvedAgent(name, agent, route.candidates[0].provider, tools, route=route)
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
        """`agent` routed for a run's loomcycle `user_tier` (engine/model_routes.py)."""
        probe = self.config.model_copy(update={"agents": {agent.name: agent.config}})
        built = resolve_agents(probe, self.registry, self.providers, source=f"user_tier {user_tier}",
                               user_tier=user_tier)[agent.name]
        return dataclasses.replace(agent, provider=built.provider, route=built.route)

    def build(self, name: str, cfg: AgentConfig) -> ResolvedAgent:
        """A ResolvedAgent for a definition that is not in treadle.yaml (tools and model route)."""
        probe = self.config.model_copy(update={"agents": {name: cfg}})
        return resolve_agents(probe, self.registry, self.providers, source=f"AgentDef {name}")[name]
