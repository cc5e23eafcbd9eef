"""Default-deny tool policy: an agent gets exactly the tools its `tools:` list names."""

from __future__ import annotations

from typing import Any

import pytest

from treadle.builtins.context import ContextTool
from treadle.builtins.memory import MemoryTool
from treadle.builtins.registry import default_registry
from treadle.config import parse_config
from treadle.engine.agents import resolve_agents
from treadle.errors import ConfigError
from treadle.providers.mock import MockProvider
from treadle.tools.base import Park, ToolContext, ToolEffects, ToolResult
from treadle.tools.registry import ToolRegistry


class Echo:
    name = "Echo"
    description = "echoes"
    input_schema: dict[str, Any] = {"type": "object"}
    effects: ToolEffects = "external"  # what a tool without `effects` gets

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        return ToolResult.json(args)


def test_default_registry_has_the_builtins() -> None:
    names = default_registry().names()
    assert {"Context", "Memory", "Channel"} <= set(names)
    assert names == sorted(names) and len(names) == len(set(names))


def test_only_the_named_tools_in_the_given_order() -> None:
    reg = default_registry()
    assert reg.for_agent("a", []) == []
    only = reg.for_agent("a", ["Memory"])
    assert [t.name for t in only] == ["Memory"] and isinstance(only[0], MemoryTool)
    both = reg.for_agent("a", ["Context", "Memory"])
    assert [type(t) for t in both] == [ContextTool, MemoryTool]


def test_unknown_tool_is_a_config_error_naming_the_key_path() -> None:
    reg = default_registry()
    with pytest.raises(ConfigError) as info:
        reg.for_agent("helper", ["Memory", "Shell"], source="ops/treadle.yaml")
    msg = str(info.value)
    assert msg.startswith("ops/treadle.yaml: agents.helper.tools.1: unknown tool 'Shell'")
    assert "(known: " in msg and "Context" in msg and "Memory" in msg


def test_unknown_tool_at_index_zero() -> None:
    with pytest.raises(ConfigError, match=r"^treadle\.yaml: agents\.x\.tools\.0: unknown tool 'memory'"):
        default_registry().for_agent("x", ["memory"])  # names are case-sensitive


def test_registering_a_name_twice_is_refused() -> None:
    reg = ToolRegistry([Echo()])
    with pytest.raises(ConfigError, match="'Echo' registered twice"):
        reg.register(Echo())
    assert reg.get("Echo") is not None and reg.get("Nope") is None


def test_resolved_agents_see_only_their_tools() -> None:
    cfg = parse_config(
        {"agents": {"bare": {}, "mem": {"tools": ["Memory"]}, "all": {"tools": ["Echo", "Context", "Memory"]}}}
    )
    reg = default_registry()
    reg.register(Echo())
    agents = resolve_agents(cfg, reg, {"mock": MockProvider()})
    assert agents["bare"].tools == [] and agents["bare"].tool_specs == [] and agents["bare"].tools_by_name == {}
    assert list(agents["mem"].tools_by_name) == ["Memory"]
    assert [s.name for s in agents["all"].tool_specs] == ["Echo", "Context", "Memory"]
    spec = agents["mem"].tool_specs[0]
    assert spec.input_schema == MemoryTool.input_schema and spec.description == MemoryTool.description


def test_resolve_agents_reports_an_unknown_tool_with_the_source() -> None:
    cfg = parse_config({"agents": {"a": {"tools": ["Context", "Browser"]}}})
    with pytest.raises(ConfigError, match=r"^conf\.yaml: agents\.a\.tools\.1: unknown tool 'Browser'"):
        resolve_agents(cfg, default_registry(), {"mock": MockProvider()}, source="conf.yaml")


def test_resolve_agents_reports_a_missing_provider() -> None:
    cfg = parse_config({"agents": {"a": {}}})
    with pytest.raises(ConfigError, match=r"agents\.a\.provider: unknown provider 'mock'"):
        resolve_agents(cfg, default_registry(), {})
