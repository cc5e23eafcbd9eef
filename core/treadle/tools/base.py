"""The Tool port and what a tool receives and returns."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from treadle.config import AgentConfig, TreadleConfig
from treadle.ports import (
    AgentDirectory,
    ModelAsker,
    OpService,
    RunCanceller,
    RunStarter,
    SessionRecapper,
    VectorMemory,
    Waker,
)
from treadle.store.channels import ChannelStore
from treadle.store.clienttools import ClientToolStore
from treadle.store.defs import DefStore
from treadle.store.dirents import DirentStore
from treadle.store.folding import FoldedWrite
from treadle.store.interrupts import InterruptStore
from treadle.store.memory import MemoryStore
from treadle.store.residents import ResidentStore
from treadle.store.runs import RunStore
from treadle.store.sqlmem import SqlAudit, SqlMemory
from treadle.store.subruns import SubRunStore
from treadle.store.waits import WaitStore
from treadle.volumes.service import VolumeService


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
    client_results: ClientToolStore
    waker: Waker
    starter: RunStarter
    #: cancels children (Agent.parallel_spawn's `wait`)
    canceller: RunCanceller
    agents: AgentDirectory
    vector_memory: VectorMemory
    #: op services by tool name: "AgentDef", "SkillDef", "ScheduleDef", "WebhookDef", "Evaluation"
    ops: Mapping[str, OpService]
    #: every registered tool's name → (description, input schema), for the Context tool
    catalogue: Mapping[str, tuple[str, dict[str, Any]]]
    #: the agent's workspace (volumes/): None where the runtime has no volume storage wired
    volumes: VolumeService | None = None
    #: SQL memory (store/sqlmem.py) and its audit trail: None where `memory.sql` is not configured
    sql_memory: SqlMemory | None = None
    sql_audit: SqlAudit | None = None
    #: History op=recap's summarizer (None: recap is refused)
    recapper: SessionRecapper | None = None
    #: the Path tree's rows (knowledge/pathtree.py): None where the runtime has none wired
    dirents: DirentStore | None = None
    #: one model call without tools on the run's agent's route (Memory add with infer)
    asker: ModelAsker | None = None
    #: resident sub-agents' rows (Agent op=open, builtins/resident.py): None where none are wired
    residents: ResidentStore | None = None


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
    #: the token usage of the turn that made this call, when that turn commits with its results
    #: (it is not in the transcript yet); None: read the transcript's last `usage` event
    turn_usage: dict[str, Any] | None = None
    #: the caller's narrowing of the hosts this run's tools may reach (None: no narrowing)
    allowed_hosts: list[str] | None = None
    #: loomcycle's parent_context of the run (sub-agent runs inherit it)
    parent_context: dict[str, Any] | None = None

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


#: how a tool's effects are applied — see `Tool`
ToolEffects = Literal["transactional", "external"]


class Tool(Protocol):
    """A tool an agent may call. `invoke` returns a result, or `Park` to wait without holding
    anything (the call is re-invoked when a key is poked or its deadline passes).

    `effects` says how what the tool does is kept exactly-once:

    - "transactional": every effect is a write to treadle's own database through the stores in
      `ctx.services`. The engine runs the call inside the step's commit transaction — after
      checking the lease, before recording the result and advancing the step — so the effect
      commits exactly once together with its `tool_result`, or not at all (a crash, a lost lease
      or a cancel rolls it back, and the re-run step applies it afresh). A call that raises is
      rolled back to before it started. Such calls run one after another on that transaction.
    - "external": the tool reaches outside the database (HTTP, MCP, a webhook out). The engine
      records the assistant turn first, runs the call outside any transaction (concurrently with
      the turn's other external calls), then commits its result. A crash, a lost lease or a stall
      past the lease after the call started and before that commit re-runs the call in the next
      attempt of the step: the window is one step attempt. `ctx.tool_use_id` is stable across
      those attempts — send it as the idempotency key where the other side accepts one.
    A tool without the attribute is treated as "external".
    """

    name: str
    description: str
    input_schema: dict[str, Any]
    effects: ToolEffects

    async def invoke(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult | Park: ...


class Foldable(Protocol):
    """A transactional tool that can state some calls as one SQL statement which the step's
    commit statement carries (store/folding.py): the call, its `tool_result` and the step advance
    then take one round trip. The engine folds a call only when it is the turn's one transactional
    call, no post-call hook would read its result, and the step transaction is pipelined; else,
    or when `fold` returns None, it invokes the call. `fold` validates like `invoke` and raises
    what `invoke` would (the engine then invokes the call, which reports the error); the result
    text it builds must equal `invoke`'s for the same outcome."""

    def fold(self, ctx: ToolContext, args: dict[str, Any]) -> FoldedWrite | None: ...


def effects_of(tool: Tool, args: dict[str, Any] | None = None) -> ToolEffects:
    """The tool's `effects`; a tool whose calls differ (History: `recap` calls a model, its other
    ops are database writes) says it per call with `effects_for(args)`."""
    per_call = getattr(tool, "effects_for", None)
    value = per_call(args or {}) if per_call is not None else getattr(tool, "effects", "external")
    return "transactional" if value == "transactional" else "external"


@dataclass(frozen=True, slots=True)
class PreHookVerdict:
    """What the pre-call hooks decided: the input to call the tool with, or a result that stands
    in for the call (the call was denied)."""

    args: dict[str, Any]
    denied: ToolResult | None = None


class ToolHooks(Protocol):
    """Tool-use hooks around every call (core/treadle/hooks/ calls the operator's HTTP hooks)."""

    async def pre(self, ctx: ToolContext, tool: str, args: dict[str, Any]) -> PreHookVerdict: ...

    async def post(self, ctx: ToolContext, tool: str, args: dict[str, Any], result: ToolResult) -> ToolResult: ...

    async def has_post(self, ctx: ToolContext, tool: str) -> bool:
        """Whether a post-call hook would see this call's result (such a call is never folded)."""
        ...

