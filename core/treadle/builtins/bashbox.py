"""`Bashbox` — loomcycle's in-process shell sandbox (gbash), which treadle does not have: the tool
exists so that loomcycle configs naming it (its agent-teams bundle's `team/orchestrator`) load,
and every call is refused, as loomcycle's own Bashbox refuses each call until the operator
enables it (LOOMCYCLE_BASHBOX_ENABLED). treadle's shell is `Bash` (workspace.bash.enabled)."""

from __future__ import annotations

from typing import Any

from treadle.errors import ToolError
from treadle.tools.base import Park, ToolContext, ToolEffects, ToolResult


class BashboxUnavailable(ToolError):
    code = "bashbox_unavailable"


class BashboxTool:
    name = "Bashbox"
    effects: ToolEffects = "transactional"  # it does nothing: every call is refused
    description = ("loomcycle's Bashbox sandbox. Not available in treadle: every call is refused. Use the "
                   "Bash tool where the operator enabled it.")
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "Shell command (refused: treadle has no Bashbox)."},
            "volume": {"type": "string", "description": "Volume name."},
        },
        "required": ["command"],
    }

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park:
        raise BashboxUnavailable("Bashbox: treadle has no Bashbox sandbox (loomcycle's gbash); every call is "
                                 "refused — use Bash (workspace.bash.enabled in treadle.yaml)")
