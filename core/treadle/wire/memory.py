"""Memory over HTTP: entries by scope and key, and vector search."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from treadle.wire._base import Request, Response

MemoryScope = Literal["agent", "user", "tenant"]


class MemoryPut(Request):
    """Body of PUT /v1/_memory/scopes/{scope}/{scope_id}/keys/{key}."""

    value: Any
    embed: bool = False
    embed_text: str | None = None
    ttl_seconds: float | None = Field(default=None, gt=0)


class MemorySearch(Request):
    """Body of POST /v1/_memory/search: loomcycle's MemorySearchRequest (`top_k`; scope_id may be
    omitted for the tenant scope) with treadle's knobs; `k` is treadle's earlier name of `top_k`.
    `rank`, `dedup` and `sources` are loomcycle's (substrate/memrank.py): a bad block is 422
    (`invalid_input`, `unknown_field`, `invalid_sources`)."""

    scope: MemoryScope
    scope_id: str = ""
    query: str = Field(min_length=1)
    top_k: int | None = Field(default=None, ge=1, le=50)
    k: int | None = Field(default=None, ge=1)
    rank: dict[str, Any] | None = None
    dedup: dict[str, Any] | None = None
    sources: list[str] | None = None
    min_score: float | None = None
    recency_weight: float = Field(default=0.0, ge=0, le=1)
    recency_half_life_hours: float | None = Field(default=None, gt=0)
    prefix: str = ""
    include_values: bool = True


# -- responses -------------------------------------------------------------------------------------


class MemoryScopeKind(Response):
    name: str
    description: str


class MemoryScopes(Response):
    scopes: list[MemoryScopeKind]


class MemoryItem(Response):
    key: str
    value: Any = None
    updated_at: str | None = None
    expires_at: str | None = None


class MemoryEntries(Response):
    scope: str
    scope_id: str
    entries: list[MemoryItem]
    count: int


class MemoryEntry(MemoryItem):
    scope: str
    scope_id: str
    created_at: str | None = None
    #: `{embedder, model, dimension, embedded_at}` when the entry has a vector
    embedding: dict[str, Any] | None = None


class MemoryWritten(Response):
    ok: bool
    key: str
    scope: str
    scope_id: str
    embedded: bool
    embedding: dict[str, Any] | None = None


class MemoryDeleted(Response):
    deleted: bool
    scope: str
    scope_id: str
    key: str


class MemorySearchResult(Response):
    scope: str
    scope_id: str
    query: str
    model: str | None = None
    results: list[dict[str, Any]]
    count: int
    #: loomcycle's names: `entries` (= results), the query's embedding size, `truncated`
    entries: list[dict[str, Any]]
    truncated: bool
    query_embedding_dim: int
    #: with `dedup` enabled: how many near-duplicates were collapsed
    dedup_dropped: int | None = None
    #: a non-zero `rank.source_weight` (reserved: it contributes 0)
    rank_note: str | None = None


class EmbedStats(Response):
    """GET /v1/_memory/embed_stats: loomcycle's per-model counts of one (tenant, scope)."""

    scope: str
    tenant: str
    #: [{provider, model, dimension, row_count}]
    models: list[dict[str, Any]]
    total_embedding_bytes: int
    notes: list[str] = []


class EmbedSweep(Response):
    """POST /v1/_memory/reembed and /v1/_memory/backfill_embeddings: loomcycle's answers (reembed:
    rows_total, rows_to_reembed, sample_keys, sample_keys_capped | rows_reembedded, rows_failed,
    failed_keys; backfill: candidates, embedded, failed, skipped_empty, more, failed_keys,
    sample_keys, notes)."""

    scope: str
    scope_id: str
    dry_run: bool
    #: {provider, model, dimension}
    current_embedder: dict[str, Any]
