"""The Provider port: one model call over the normalized content-block model."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from treadle.domain.content import Block, Message


@dataclass(slots=True)
class ToolSpec:
    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    def to_json(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
        }


#: the provider keys of the step being run — provider id → a tenant credential's value (a
#: provider's `api_key: ${credential.NAME}`), set by the engine for the step (engine/step.py) and
#: read by the HTTP drivers at the call: a value lives in no request, event or span
RUN_PROVIDER_KEYS: ContextVar[Mapping[str, str] | None] = ContextVar("treadle_run_provider_keys", default=None)


@dataclass(slots=True)
class RunInfo:
    """Facts about the run a provider may use (deterministic mocks seed from them)."""

    run_id: str
    agent: str
    iteration: int
    attempt: int = 0


@dataclass(slots=True)
class ModelRequest:
    model: str
    system: str
    messages: list[Message]
    tools: list[ToolSpec]
    max_tokens: int = 4096
    run: RunInfo | None = None
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class ModelResponse:
    content: list[Block]
    stop_reason: str  # end_turn | tool_use | max_tokens | stop_sequence
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    provider: str = ""
    max_context_tokens: int | None = None  # the model's window, when the provider reports one


DeltaSink = Callable[[str, str], Awaitable[None]]  # (kind: "text"|"thinking", delta) -> None


class Provider(Protocol):
    """One model call. Drivers may also define `reasoning_format` (the kind of ThinkingBlock they can
    read back, e.g. "anthropic"; absent or None = none) and `async aclose()` (release connections)."""

    name: str

    async def call(self, req: ModelRequest, on_delta: DeltaSink | None = None) -> ModelResponse: ...


@runtime_checkable
class ModelLister(Protocol):
    """A provider that can say which models its vendor serves now (`GET /v1/_providers/{id}/models`,
    the resolver probe); ProviderError `provider_list_failed` when it cannot."""

    async def list_models(self, timeout_s: float = 10.0) -> list[str]: ...
