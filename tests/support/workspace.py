"""Helpers for tests/workspace: the treadle.yaml they share, and calling a workspace tool the way
the engine does (a ToolContext of the runtime), outside any step."""

from __future__ import annotations

import secrets
from typing import Any

from treadle.runtime import Runtime
from treadle.tools.base import ToolResult

VOLUMES: dict[str, Any] = {
    "work": {"mode": "rw", "default": True},
    "refs": {"mode": "ro"},
    "scratch": {"mode": "rw", "ephemeral": True},
}
FILE_TOOLS = ["Read", "Write", "Edit", "Grep", "Glob", "NotebookEdit", "Bash", "Context", "VolumeDef"]
AGENTS: dict[str, Any] = {
    "coder": {"tools": FILE_TOOLS, "volumes": ["work", "refs", "scratch"], "volume_def_scopes": ["any"]},
    "reader": {"tools": FILE_TOOLS, "volumes": [{"name": "work", "mode": "ro"}]},
    "nobody": {"tools": FILE_TOOLS},
}
CONFIG: dict[str, Any] = {"volumes": VOLUMES}


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(6)}"


class Caller:
    """Calls tools as one agent of one tenant; every call gets a new tool_use_id unless given."""

    def __init__(self, rt: Runtime, agent: str = "coder", *, tenant: str | None = None,
                 run_id: str | None = None) -> None:
        self.rt = rt
        self.agent = agent
        self.tenant = tenant or new_id("tenant")
        self.run_id = run_id or new_id("run")

    async def __call__(self, tool: str, args: dict[str, Any], *, tool_use_id: str | None = None) -> ToolResult:
        impl = self.rt.registry.get(tool)
        assert impl is not None, tool
        ctx = self.rt.tool_context(self.tenant, self.run_id, self.agent, tool_use_id=tool_use_id or new_id("toolu"))
        result = await impl.invoke(ctx, args)
        assert isinstance(result, ToolResult)
        return result
