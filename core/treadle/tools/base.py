"""The Tool port and what a tool receives and returns."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from treadle.store.memory import MemoryStore
    from treadle.store.waits import WaitStore


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
    #: wait keys and pokes, for tools that park (see store/waits.py for the protocol)
    waits: WaitStore | None = None
    #: when this call was parked before and is now re-invoked: the first `tool_parked` record
    #: ({"kind", "keys", "deadline" (epoch s or None), "extra"}); None on the first invocation
    resume: dict[str, Any] | None = None
    #: runtime services tools may use by name (e.g. "channels", "runs")
    services: dict[str, Any] = field(default_factory=dict)
    #: the AgentDef the run was pinned to at start (None: the agent comes from treadle.yaml)
    def_id: str | None = None
    #: the calling agent's configuration (AgentConfig) — its scopes and quotas
    agent_config: Any = None

    def deadline_passed(self) -> bool:
        import time

        deadline = (self.resume or {}).get("deadline")
        return deadline is not None and time.time() >= float(deadline)


@dataclass(slots=True)
class ToolResult:
    content: str
    is_error: bool = False
    #: extra transcript events recorded just before this result, e.g. ("channel_publish", {...})
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    @classmethod
    def json(cls, value: Any) -> ToolResult:
        return cls(json.dumps(value, separators=(",", ":"), sort_keys=True, default=str))


@dataclass(slots=True)
class Park:
    """Park the run: re-invoke this tool call when one of `keys` is poked or the deadline passes.

    `keys` maps each wait key to the version the tool read (WaitStore.version) *before* checking
    its condition; the engine parks only if no poke landed since. `deadline_s` counts from the
    first park of this call (re-parks keep the original deadline, via ToolContext.resume)."""

    kind: str
    keys: dict[str, int]
    deadline_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: transcript events recorded just before the `tool_parked` record, e.g. ("interruption_pending", {...})
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


class Tool(Protocol):
    name: str
    description: str
    input_schema: dict[str, Any]

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park: ...
