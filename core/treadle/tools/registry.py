"""The tool registry and the default-deny policy: an agent gets exactly the tools it names."""

from __future__ import annotations

from collections.abc import Iterable

from treadle.errors import ConfigError
from treadle.specs.mcp import is_mcp_tool_name
from treadle.tools.base import Tool


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools:
            self.register(t)

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ConfigError(f"tool {tool.name!r} registered twice")
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def for_agent(self, agent: str, names: list[str], *, source: str = "treadle.yaml") -> list[Tool]:
        """The agent's tools, in the order its `tools:` list gives; unknown names are a config error."""
        out: list[Tool] = []
        for i, name in enumerate(names):
            if is_mcp_tool_name(name):  # an MCP server's tool: offered per step (treadle/mcp)
                continue
            tool = self._tools.get(name)
            if tool is None:
                raise ConfigError(
                    f"{source}: agents.{agent}.tools.{i}: unknown tool {name!r}"
                    f" (known: {', '.join(self.names())})"
                )
            out.append(tool)
        return out

