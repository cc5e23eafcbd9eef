"""The Tool port and what a tool receives and returns."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from treadle.config import AgentConfig, TreadleConfig
from treadle.ports import AgentDirectory, OpService, RunStarter, VectorMemory, Waker
from treadle.store.channels import ChannelStore
from treadle.store.defs import DefStore
from treadle.store.interrupts import InterruptStore
from treadle.store.memory import MemoryStore
from treadle.store.runs import RunStore
from treadle.store.subruns import SubRunStore
from treadle.store.waits import WaitStore


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a tool call acts for: the run's tenant and user."""

    tenant_id: str
    user_id: str | None = None


@dataclass(frozen=True, slots=True)
class ToolServices:
    """What the built-in tools may use, built once by the runtime. Stores are the database's
    aggregates; the rest are ports (treadle/ports.py), never the runtime itself."""

    config: TreadleConfig
    runs: RunStore
    memory: MemoryStore
    waits: WaitStore
    channels: ChannelStore
    interrupts: InterruptStore
    subruns: SubRunStore
    defs: DefStore
    waker: Waker
    starter: RunStarter
    agents: AgentDirectory
    vector_memory: VectorMemory
    #: op services by tool name: "AgentDef", "SkillDef", "ScheduleDef", "WebhookDef", "Evaluation"
    ops: Mapping[str, OpService]
    #: every registered tool's name → (description, input schema), for the Context tool
    catalogue: Mapping[str, tuple[str, dict[str, Any]]]


@dataclass(slots=True)
class ToolContext:
    """One tool call: the run's facts, its resolved agent (the AgentDef it was pinned to, or the
    treadle.yaml agent — never looked up again by name), the principal, and the collaborators."""

    principal: Principal
    run_id: str
    tool_use_id: str
    iteration: int
    #: the run's resolved agent: its name and configuration (scopes, quotas, tools, skills)
    agent: str
    agent_config: AgentConfig
    services: ToolServices
    model: str = ""
    provider: str = ""
    now: datetime | None = None
    #: when this call was parked before and is now re-invoked: the first `tool_parked` record
    #: ({"kind", "keys", "deadline" (epoch s or None), "extra"}); None on the first invocation
    resume: dict[str, Any] | None = None
    #: the AgentDef the run was pinned to at start (None: the agent comes from treadle.yaml)
    def_id: str | None = None

    @property
    def tenant_id(self) -> str:
        return self.principal.tenant_id

    @property
    def user_id(self) -> str | None:
        return self.principal.user_id

    @property
    def memory(self) -> MemoryStore:
        return self.services.memory

    @property
    def waits(self) -> WaitStore:
        return self.services.waits

    @property
    def memory_scopes(self) -> tuple[str, ...]:
        return tuple(self.agent_config.memory_scopes)

    @property
    def tools(self) -> tuple[str, ...]:
        return tuple(self.agent_config.tools)

    def deadline_passed(self) -> bool:
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
