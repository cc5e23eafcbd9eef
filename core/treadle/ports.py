"""Ports: the small Protocols services and tools need from the rest of the runtime.

Services (def families, triggers, the substrate) and built-in tools receive these in their
constructors or through `ToolContext.services`, never the composition root (`treadle.runtime`).
The runtime implements them; tests may pass small fakes. This module sits below `tools/` and above
`store/` and `embeddings/`: it names only domain, store and embedder types.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from treadle.domain.defs import DefRecord
from treadle.embeddings.base import Embedder
from treadle.store.runs import NewRun, RunRecord


class RunStarter(Protocol):
    """Start a run: pin its agent (promoted AgentDef, else treadle.yaml) and send its first step."""

    async def start_run(self, new: NewRun) -> tuple[RunRecord, bool]: ...


class RunCanceller(Protocol):
    """Cancel a run and its unfinished sub-agent runs (each gets a step message that finishes it)."""

    async def cancel_run(self, tenant_id: str, run_id: str, reason: str) -> object: ...


class Waker(Protocol):
    """Wake every run parked on any of `keys` (poke → send the step → notify live readers)."""

    async def poke(self, tenant_id: str, keys: list[str]) -> int: ...


class ChannelPublisher(Protocol):
    """Publish one message to a channel stream and wake the runs parked on it."""

    async def publish(
        self, tenant_id: str, channel: str, value: Any, *, scope_id: str = "", ttl_s: float | None = None
    ) -> dict[str, Any]: ...


class SessionRecapper(Protocol):
    """A fresh summary of a whole session (every run's turns), written by the session's agent's
    model without tools (History op=recap); the caller stores it."""

    async def recap_session(self, tenant_id: str, session_id: str) -> str: ...


class AgentDirectory(Protocol):
    """Which agents a tenant can run: treadle.yaml agents and promoted AgentDefs."""

    def static_names(self) -> list[str]: ...

    async def current(self, tenant: str, name: str) -> DefRecord | None:
        """What a new run of `name` gets: the promoted AgentDef, else the yaml agent, else None."""
        ...


class OpService(Protocol):
    """An op-input service (a def family, Evaluation): `{"op": ..., ...}` → a JSON answer."""

    label: str

    async def dispatch(
        self, tenant_id: str, args: Any, *, gate: Any = None, run_id: str | None = None
    ) -> dict[str, Any]: ...


class VectorMemory(Protocol):
    """Memory's vector facet (embed on set, search), shared by the Memory tool and /v1/_memory."""

    @property
    def embedder(self) -> Embedder | None: ...

    async def set(
        self, tenant: str, scope: str, scope_id: str, key: str, value: Any, ttl_s: float | None, *,
        embed: bool = False, embed_text: str | None = None, quota_bytes: int | None = None,
        keep_expiry: bool = False, provenance: dict[str, Any] | None = None,
    ) -> dict[str, Any]: ...

    async def search(
        self, tenant: str, scope: str, scope_id: str, query: str, *, k: int | None = None,
        min_score: float | None = None, recency_weight: float = 0.0, half_life_hours: float | None = None,
        prefix: str = "", include_values: bool = True, rank: Any = None, dedup: Any = None, sources: Any = None,
        count_access: bool = True,
    ) -> dict[str, Any]: ...

    async def embed_body(self, text: str) -> tuple[str, str, list[float]] | None: ...

    async def search_bodies(self, tenant: str, scope: str, scope_id: str, query: str, k: int,
                            document_id: str | None) -> list[dict[str, Any]]: ...

    async def recall(self, tenant: str, scope: str, scope_id: str, query: str, *, top_k: int | None = None,
                     threshold: float = 0.0, sources: Any = None) -> dict[str, Any]: ...

    async def add(
        self, tenant: str, scope: str, scope_id: str, messages: Any, *, infer: bool, metadata: Any,
        ask: Callable[[str, str, str, str | None], Awaitable[str]] | None, run_id: str, tool_use_id: str,
        quota_bytes: int | None = None,
    ) -> dict[str, Any]: ...


class ModelAsker(Protocol):
    """One model call without tools on a run's agent's route, for a tool of that run (Memory
    `add` with `infer`): the answer's text. ProviderError / AgentGone as a model turn would."""

    async def ask_model(self, tenant_id: str, run_id: str, agent: str, def_id: str | None, system: str,
                        prompt: str, purpose: str, model: str | None = None) -> str: ...
