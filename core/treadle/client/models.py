"""Typed answers of treadle's HTTP API, as the client returns them. Every model keeps the fields
it does not name (`extra="allow"`: a newer server may add some; `model_extra` has them), so the
client never drops what the server sent. The op routes of the defs (`POST /v1/_agentdef`, …)
answer with the op's own JSON: `DefAnswer` (a dict)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

RunStatus = Literal["queued", "running", "waiting", "completed", "failed", "cancelled"]
DefAnswer = dict[str, Any]


class Model(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class Usage(Model):
    input_tokens: int = 0
    output_tokens: int = 0


class Health(Model):
    status: str = "ok"


class RunStarted(Model):
    """`POST /v1/runs` (202): the run, whether this call created it (False: the Idempotency-Key
    was seen before and this is the run it started)."""

    run_id: str
    status: RunStatus
    created: bool = True
    agent_id: str | None = None
    session_id: str | None = None


class Wait(Model):
    kind: str
    key: str | None = None
    deadline: str | None = None
    tool_use_id: str | None = None


class Run(Model):
    run_id: str
    agent: str
    status: RunStatus
    user_id: str | None = None
    stop_reason: str | None = None
    error: str | None = None
    error_detail: dict[str, Any] | None = None
    iterations: int = 0
    usage: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] | None = None
    interactive: bool = False
    parent_run_id: str | None = None
    root_run_id: str | None = None
    depth: int = 0
    last_seq: int = 0
    created_at: str | None = None
    updated_at: str | None = None
    completed_at: str | None = None
    waits: list[Wait] | None = None

    @property
    def terminal(self) -> bool:
        return self.status in ("completed", "failed", "cancelled")


class RunPage(Model):
    runs: list[Run]
    next_cursor: str | None = None


class RunEvent(Model):
    """A stored event: `seq`, `type`, `ts` and the event's own fields (in `model_extra`; `data()`
    returns them all as a dict)."""

    seq: int
    type: str
    ts: str | None = None

    def data(self) -> dict[str, Any]:
        return self.model_dump()


class EventPage(Model):
    run_id: str
    status: RunStatus
    events: list[RunEvent]


class CancelResult(Model):
    run_id: str
    status: str
    cancel_requested: bool | None = None
    scope: str | None = None


class InputResult(Model):
    run_id: str
    delivered: bool
    input_id: int | None = None
    woke: bool = False


class ToolResultAck(Model):
    run_id: str | None = None


class Interrupt(Model):
    interrupt_id: str
    run_id: str
    kind: str
    question: str
    options: list[Any] | None = None
    context: Any = None
    priority: str | None = None
    status: str
    answer: str | None = None
    resolved_by: str | None = None
    expires_at: str | None = None
    created_at: str | None = None
    resolved_at: str | None = None
    agent: str | None = None  # in a user's inbox


class RunInterrupts(Model):
    run_id: str
    interrupts: list[Interrupt]


class UserInterrupts(Model):
    user_id: str
    interrupts: list[Interrupt]


class Resolved(Model):
    interrupt_id: str
    status: str
    resolved_at: str | None = None


class MemoryEntries(Model):
    scope: str
    scope_id: str
    entries: list[dict[str, Any]]
    count: int


class MemoryEntry(Model):
    scope: str
    scope_id: str
    key: str
    value: Any = None


class MemoryScopes(Model):
    scopes: list[dict[str, Any]]


class MemoryWritten(Model):
    scope_id: str


class MemoryDeleted(Model):
    deleted: bool
    scope: str
    scope_id: str
    key: str


class MemoryHits(Model):
    scope_id: str
    entries: list[dict[str, Any]]
    truncated: bool = False
    query_embedding_dim: int = 0


class Channel(Model):
    name: str
    scope: str
    semantic: str
    default_ttl_seconds: int | None = None
    max_messages: int | None = None
    description: str = ""


class Channels(Model):
    channels: list[Channel]


class ChannelDeleted(Model):
    name: str
    deleted: bool


class Published(Model):
    message_id: int | str
    msg_id: str
    published_at: str | None = None
    created_at: str | None = None


class Messages(Model):
    channel: str
    messages: list[dict[str, Any]]
    cursor: int | str | None = None
    next_cursor: str | None = None


class Acked(Model):
    channel: str
    cursor: int | str | None = None
    acked: bool


class AwaitResult(Model):
    satisfied: bool
    mode: str
    fired: list[str]
    counts: dict[str, int]
    timed_out: bool = False


class Names(Model):
    names: list[str]


class Schedules(Model):
    schedules: list[dict[str, Any]]


class Deliveries(Model):
    deliveries: list[dict[str, Any]] = Field(default_factory=list)


class Hook(Model):
    hook_id: str | None = None


class Hooks(Model):
    hooks: list[dict[str, Any]]


class Principal(Model):
    tenant_id: str | None = None


class Agents(Model):
    agents: list[dict[str, Any]] = Field(default_factory=list)
