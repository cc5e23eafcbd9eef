"""The Tool port and what a tool receives and returns."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from treadle.store.memory import MemoryStore


@dataclass(slots=True)
class ToolContext:
    tenant_id: str
    run_id: str
    agent: str
    user_id: str | None
    tool_use_id: str
    iteration: int
    memory: MemoryStore
    memory_scopes: tuple[str, ...] = ("agent", "user")
    tools: tuple[str, ...] = ()
    model: str = ""
    provider: str = ""
    now: datetime | None = None


@dataclass(slots=True)
class ToolResult:
    content: str
    is_error: bool = False

    @classmethod
    def json(cls, value: Any) -> ToolResult:
        return cls(json.dumps(value, separators=(",", ":"), sort_keys=True, default=str))


@dataclass(slots=True)
class Park:
    """Park the run until `kind`/`key` is satisfied or `deadline_s` passes (waiting primitives)."""

    kind: str
    key: str
    deadline_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Tool(Protocol):
    name: str
    description: str
    input_schema: dict[str, Any]

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park: ...
