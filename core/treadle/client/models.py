"""The client's typed answers and bodies: treadle.wire's models, the very classes the server
declares on its routes (so the OpenAPI spec, the server and the client agree). Response models
keep fields they do not name (`model_extra`); request models refuse unknown ones, so a bad body
fails in the client (pydantic.ValidationError) before any request is sent."""

from __future__ import annotations

from typing import Literal

from treadle.wire import (
    Acked,
    AdminRuns,
    AgentCancelled,
    AgentList,
    AgentState,
    AwaitResult,
    BatchResult,
    Channel,
    ChannelDeleted,
    ChannelList,
    ErrorBody,
    Event,
    Health,
    Hook,
    HookList,
    InputAccepted,
    Interrupt,
    InterruptResolved,
    MemoryDeleted,
    MemoryEntries,
    MemoryEntry,
    MemoryScopes,
    MemorySearchResult,
    MemoryWritten,
    Message,
    Names,
    OpResult,
    Peeked,
    Published,
    Run,
    RunCancelled,
    RunCreated,
    RunEvents,
    RunInterrupts,
    RunList,
    ScheduleDetail,
    ScheduleFired,
    ScheduleList,
    ScheduleState,
    SessionList,
    SessionView,
    Subscribed,
    TenantCancelled,
    TenantErased,
    TenantInterrupts,
    ToolResultAccepted,
    Transcript,
    TurnCancelled,
    UserInterrupts,
    WebhookAccepted,
    WebhookDeliveries,
    WebhookDryRun,
    Whoami,
)

RunStatus = Literal["queued", "running", "waiting", "completed", "failed", "cancelled"]
TERMINAL = frozenset({"completed", "failed", "cancelled"})

__all__ = [
    "TERMINAL", "Acked", "AdminRuns", "AgentCancelled", "AgentList", "AgentState", "AwaitResult", "BatchResult",
    "Channel", "ChannelDeleted", "ChannelList", "ErrorBody", "Event", "Health", "Hook", "HookList", "InputAccepted",
    "Interrupt", "InterruptResolved", "MemoryDeleted", "MemoryEntries", "MemoryEntry", "MemoryScopes",
    "MemorySearchResult", "MemoryWritten", "Message", "Names", "OpResult", "Peeked", "Published", "Run",
    "RunCancelled", "RunCreated", "RunEvents", "RunInterrupts", "RunList", "RunStatus", "ScheduleDetail",
    "ScheduleFired", "ScheduleList", "ScheduleState", "SessionList", "SessionView", "Subscribed", "TenantCancelled",
    "TenantErased",
    "TenantInterrupts", "ToolResultAccepted", "Transcript", "TurnCancelled", "UserInterrupts", "WebhookAccepted",
    "WebhookDeliveries", "WebhookDryRun", "Whoami",
]
