"""What goes over treadle's HTTP API: request bodies, answers and the error body, as pydantic
models. The server (treadle.api) declares them on its routes, so the OpenAPI spec at
/openapi.json is generated from them; a client (treadle.client) builds requests and reads answers
with the same classes.

Request models refuse unknown fields (a field is honoured or refused, never ignored); response
models keep fields they do not declare (a newer server may add some). Errors: `ErrorBody`
`{code, error, details?}` on every route but the OpenAI-compatible ones (`OpenAIErrorBody`).
This package imports only the layers below it (config, specs, domain, errors): never the
runtime or a store."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from treadle.wire._base import Request, Response
    from treadle.wire.admin import (
        AdminRun,
        AdminRuns,
        CancelTenantRequest,
        Capabilities,
        Concurrency,
        ConcurrencyCaps,
        Health,
        TenantCancelled,
        TenantErased,
        Whoami,
    )
    from treadle.wire.channels import (
        Acked,
        AckRequest,
        AwaitRequest,
        AwaitResult,
        Channel,
        ChannelDeleted,
        ChannelList,
        ChannelRequest,
        Message,
        Peeked,
        Published,
        PublishRequest,
        Subscribed,
        SubscribeRequest,
    )
    from treadle.wire.defs import (
        DefList,
        DefOp,
        DefView,
        EvaluationOp,
        Names,
        OpResult,
        ScheduleDetail,
        ScheduleFired,
        ScheduleList,
        ScheduleState,
        WebhookAccepted,
        WebhookDeliveries,
        WebhookDryRun,
    )
    from treadle.wire.errors import ErrorBody, ErrorDetail
    from treadle.wire.governance import LimitList, LimitRequest, LimitRow
    from treadle.wire.hooks import Hook, HookList, HookRequest
    from treadle.wire.interrupts import (
        Interrupt,
        InterruptResolved,
        ResolveRequest,
        RunInterrupts,
        TenantInterrupts,
        UserInterrupts,
    )
    from treadle.wire.memory import (
        MemoryDeleted,
        MemoryEntries,
        MemoryEntry,
        MemoryItem,
        MemoryPut,
        MemoryScopeKind,
        MemoryScopes,
        MemorySearch,
        MemorySearchResult,
        MemoryWritten,
    )
    from treadle.wire.openai import (
        ChatCompletion,
        Embedding,
        EmbeddingList,
        GatewayResponse,
        Model,
        ModelList,
        OpenAIError,
        OpenAIErrorBody,
    )
    from treadle.wire.runs import (
        AgentCancelled,
        AgentCancelRequest,
        AgentList,
        AgentState,
        BatchRequest,
        BatchResult,
        CancelRequest,
        ClientToolSpec,
        Event,
        InputAccepted,
        InputRequest,
        LoomcycleRunFields,
        ParentContext,
        Run,
        RunCancelled,
        RunCreated,
        RunEvents,
        RunList,
        RunRequest,
        SessionInfo,
        SpawnResult,
        ToolResultAccepted,
        ToolResultRequest,
        Transcript,
        TranscriptEvent,
        TurnCancelled,
        Usage,
        Wait,
    )

# A model is imported with its module when first named (PEP 562): the API function's first request
# imports the runs models, not every route's (the wire modules cost ~25 ms of CPU together).
_MODULE_OF: dict[str, str] = {
    "Request": "_base", "Response": "_base",
    "AdminRun": "admin", "AdminRuns": "admin", "CancelTenantRequest": "admin", "Capabilities": "admin",
    "Concurrency": "admin", "ConcurrencyCaps": "admin", "Health": "admin", "TenantCancelled": "admin",
    "TenantErased": "admin", "Whoami": "admin",
    "LimitList": "governance", "LimitRequest": "governance", "LimitRow": "governance",
    "Acked": "channels", "AckRequest": "channels", "AwaitRequest": "channels", "AwaitResult": "channels",
    "Channel": "channels", "ChannelDeleted": "channels", "ChannelList": "channels", "ChannelRequest": "channels",
    "Message": "channels", "Peeked": "channels", "Published": "channels", "PublishRequest": "channels",
    "Subscribed": "channels", "SubscribeRequest": "channels",
    "DefList": "defs", "DefOp": "defs", "DefView": "defs", "EvaluationOp": "defs", "Names": "defs",
    "OpResult": "defs", "ScheduleDetail": "defs", "ScheduleFired": "defs", "ScheduleList": "defs",
    "ScheduleState": "defs", "WebhookAccepted": "defs", "WebhookDeliveries": "defs", "WebhookDryRun": "defs",
    "ErrorBody": "errors", "ErrorDetail": "errors",
    "Hook": "hooks", "HookList": "hooks", "HookRequest": "hooks",
    "Interrupt": "interrupts", "InterruptResolved": "interrupts", "ResolveRequest": "interrupts",
    "RunInterrupts": "interrupts", "TenantInterrupts": "interrupts", "UserInterrupts": "interrupts",
    "MemoryDeleted": "memory", "MemoryEntries": "memory", "MemoryEntry": "memory", "MemoryItem": "memory",
    "MemoryPut": "memory", "MemoryScopeKind": "memory", "MemoryScopes": "memory", "MemorySearch": "memory",
    "MemorySearchResult": "memory", "MemoryWritten": "memory",
    "ChatCompletion": "openai", "Embedding": "openai", "EmbeddingList": "openai", "GatewayResponse": "openai",
    "Model": "openai", "ModelList": "openai", "OpenAIError": "openai", "OpenAIErrorBody": "openai",
    "AgentCancelled": "runs", "AgentCancelRequest": "runs", "AgentList": "runs", "AgentState": "runs",
    "BatchRequest": "runs", "BatchResult": "runs", "CancelRequest": "runs", "ClientToolSpec": "runs",
    "Event": "runs", "InputAccepted": "runs", "InputRequest": "runs", "LoomcycleRunFields": "runs",
    "ParentContext": "runs", "Run": "runs", "RunCancelled": "runs", "RunCreated": "runs", "RunEvents": "runs",
    "RunList": "runs", "RunRequest": "runs", "SessionInfo": "runs", "SpawnResult": "runs",
    "ToolResultAccepted": "runs", "ToolResultRequest": "runs", "Transcript": "runs", "TranscriptEvent": "runs",
    "TurnCancelled": "runs", "Usage": "runs", "Wait": "runs",
}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'treadle.wire' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f"treadle.wire.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "AckRequest",
    "Acked",
    "AdminRun",
    "AdminRuns",
    "AgentCancelRequest",
    "AgentCancelled",
    "AgentList",
    "AgentState",
    "AwaitRequest",
    "AwaitResult",
    "BatchRequest",
    "BatchResult",
    "CancelRequest",
    "CancelTenantRequest",
    "Capabilities",
    "Channel",
    "ChannelDeleted",
    "ChannelList",
    "ChannelRequest",
    "ChatCompletion",
    "ClientToolSpec",
    "Concurrency",
    "ConcurrencyCaps",
    "DefList",
    "DefOp",
    "DefView",
    "Embedding",
    "EmbeddingList",
    "ErrorBody",
    "ErrorDetail",
    "EvaluationOp",
    "Event",
    "GatewayResponse",
    "Health",
    "Hook",
    "HookList",
    "HookRequest",
    "InputAccepted",
    "InputRequest",
    "Interrupt",
    "InterruptResolved",
    "LimitList",
    "LimitRequest",
    "LimitRow",
    "LoomcycleRunFields",
    "MemoryDeleted",
    "MemoryEntries",
    "MemoryEntry",
    "MemoryItem",
    "MemoryPut",
    "MemoryScopeKind",
    "MemoryScopes",
    "MemorySearch",
    "MemorySearchResult",
    "MemoryWritten",
    "Message",
    "Model",
    "ModelList",
    "Names",
    "OpResult",
    "OpenAIError",
    "OpenAIErrorBody",
    "ParentContext",
    "Peeked",
    "PublishRequest",
    "Published",
    "Request",
    "ResolveRequest",
    "Response",
    "Run",
    "RunCancelled",
    "RunCreated",
    "RunEvents",
    "RunInterrupts",
    "RunList",
    "RunRequest",
    "ScheduleDetail",
    "ScheduleFired",
    "ScheduleList",
    "ScheduleState",
    "SessionInfo",
    "SpawnResult",
    "SubscribeRequest",
    "Subscribed",
    "TenantCancelled",
    "TenantErased",
    "TenantInterrupts",
    "ToolResultAccepted",
    "ToolResultRequest",
    "Transcript",
    "TranscriptEvent",
    "TurnCancelled",
    "Usage",
    "UserInterrupts",
    "Wait",
    "WebhookAccepted",
    "WebhookDeliveries",
    "WebhookDryRun",
    "Whoami",
]
