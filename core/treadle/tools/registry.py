"""The tool registry and the default-deny policy: an agent gets exactly the tools it names.

A tool is registered built (`register`) or by name with a loader (`register_lazy`): the loader runs
— and imports the tool's module — the first time something asks for that tool (`get`,
`for_agent`). A process only imports the tools its agents name (a worker's cold start).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from treadle.errors import ConfigError
from treadle.specs.a2a import split_tool_name as split_a2a_tool_name
from treadle.specs.mcp import is_mcp_tool_name
from treadle.tools.base import Tool


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._lazy: dict[str, Callable[[], Tool]] = {}
        self._loading = threading.Lock()
        for t in tools:
            self.register(t)

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools or tool.name in self._lazy:
            raise ConfigError(f"tool {tool.name!r} registered twice")
        self._tools[tool.name] = tool

    def register_lazy(self, name: str, load: Callable[[], Tool]) -> None:
        """Register the tool `name` that `load()` builds on first use (it must answer a tool so named)."""
        if name in self._tools or name in self._lazy:
            raise ConfigError(f"tool {name!r} registered twice")
        self._lazy[name] = load

    def get(self, name: str) -> Tool | None:
        tool = self._tools.get(name)
        if tool is not None:
            return tool
        with self._loading:  # a sync route runs in a thread pool: one build per tool
            tool = self._tools.get(name)
            if tool is None and name in self._lazy:
                tool = self._lazy[name]()
                if tool.name != name:
                    raise ConfigError(f"tool {name!r} was registered, but its loader built {tool.name!r}")
                self._tools[name] = tool
                del self._lazy[name]
        return tool

    def loaded(self) -> list[str]:
        """The names of the tools built so far (the others are imported on first use)."""
        with self._loading:
            return sorted(self._tools)

    def names(self) -> list[str]:
        with self._loading:
            return sorted({*self._tools, *self._lazy})

    def for_agent(self, agent: str, names: list[str], *, source: str = "treadle.yaml") -> list[Tool]:
        """The agent's tools, in the order its `tools:` list gives; unknown names are a config error."""
        out: list[Tool] = []
        for i, name in enumerate(names):
            if is_mcp_tool_name(name) or split_a2a_tool_name(name):  # an MCP/A2A tool: offered per step
                continue
            tool = self.get(name)
            if tool is None:
                raise ConfigError(
                    f"{source}: agents.{agent}.tools.{i}: unknown tool {name!r}"
                    f" (known: {', '.join(self.names())})"
                )
            out.append(tool)
        return out
