"""Agents resolved against the tool registry and providers: what a step needs to run one."""

from __future__ import annotations

from dataclasses import dataclass, field

from treadle.config import AgentConfig, TreadleConfig
from treadle.errors import ConfigError
from treadle.providers.base import Provider, ToolSpec
from treadle.tools.base import Tool
from treadle.tools.registry import ToolRegistry


@dataclass(slots=True)
class ResolvedAgent:
    name: str
    config: AgentConfig
    provider: Provider
    tools: list[Tool]
    tool_specs: list[ToolSpec] = field(default_factory=list)
    tools_by_name: dict[str, Tool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.tool_specs = [ToolSpec(t.name, t.description, t.input_schema) for t in self.tools]
        self.tools_by_name = {t.name: t for t in self.tools}


def resolve_agents(
    config: TreadleConfig,
    registry: ToolRegistry,
    providers: dict[str, Provider],
    *,
    source: str = "treadle.yaml",
) -> dict[str, ResolvedAgent]:
    out: dict[str, ResolvedAgent] = {}
    for name, agent in config.agents.items():
        provider = providers.get(agent.provider)
        if provider is None:
            raise ConfigError(f"{source}: agents.{name}.provider: unknown provider {agent.provider!r}")
        tools = registry.for_agent(name, agent.tools, source=source)
        out[name] = ResolvedAgent(name, agent, provider, tools)
    return out
