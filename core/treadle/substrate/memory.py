"""Memory's vector facet, shared by the Memory tool and /v1/_memory: embed on set, search.

What is embedded: `embed_text` when given, else the value itself when it is a string, else its
canonical JSON. The embedding model is recorded with each vector; a search compares only
vectors of the configured model (after a change of embedder, set the keys again to re-embed).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from treadle.embeddings.base import Embedder
from treadle.errors import EmbedderNotConfigured, ValidationFailed
from treadle.specs.memory import MemoryConfig
from treadle.store.memory import Embedding, MemoryStore

MAX_EMBED_TEXT_CHARS = 32 * 1024
MAX_QUERY_CHARS = 8 * 1024


@dataclass(slots=True)
class MemoryService:
    store: MemoryStore
    config: MemoryConfig
    embedder: Embedder | None

    def require_embedder(self) -> Embedder:
        if self.embedder is None:
            raise EmbedderNotConfigured(
                "embedder_not_configured: no embedder is configured (treadle.yaml memory.embedder: driver "
                "openai | ollama | gemini | voyage | local), so Memory cannot embed or search"
            )
        return self.embedder

    async def set(
        self, tenant: str, scope: str, scope_id: str, key: str, value: Any, ttl_s: float | None, *,
        embed: bool = False, embed_text: str | None = None, quota_bytes: int | None = None,
        keep_expiry: bool = False,
    ) -> dict[str, Any]:
        embedding = None
        if embed or embed_text is not None:
            embedder = self.require_embedder()
            text = embed_text if embed_text is not None else text_of(value)
            if not text.strip():
                raise ValidationFailed("nothing to embed: the text is empty")
            if len(text) > MAX_EMBED_TEXT_CHARS:
                raise ValidationFailed(f"embed text is {len(text)} characters; the limit is {MAX_EMBED_TEXT_CHARS}")
            self.store.check_value(value)
            await self.store.require_vectors()  # before paying for an embedding
            [vector] = await embedder.embed([text], "document")
            embedding = Embedding(embedder.name, embedder.model, vector, text)
        usage = await self.store.set(tenant, scope, scope_id, key, value, ttl_s, embedding=embedding,
                                     quota_bytes=quota_bytes, keep_expiry=keep_expiry)
        out: dict[str, Any] = {"ok": True, "key": key, "scope": scope, **usage, "embedded": embedding is not None}
        if embedding is not None:
            out["embedding"] = {"model": embedding.model, "dimension": embedding.dimension}
        return out

    async def search(
        self, tenant: str, scope: str, scope_id: str, query: str, *, k: int | None = None,
        min_score: float | None = None, recency_weight: float = 0.0, half_life_hours: float | None = None,
        prefix: str = "", include_values: bool = True,
    ) -> dict[str, Any]:
        embedder = self.require_embedder()
        cfg = self.config.search
        if not isinstance(query, str) or not query.strip():
            raise ValidationFailed("query (non-empty text) is required")
        if len(query) > MAX_QUERY_CHARS:
            raise ValidationFailed(f"query is longer than {MAX_QUERY_CHARS} characters")
        k = cfg.default_k if k is None else k
        if not 1 <= k <= cfg.max_k:
            raise ValidationFailed(f"k must be an integer in 1..{cfg.max_k}")
        if min_score is not None and not (math.isfinite(min_score) and -1.0 <= min_score <= 1.0):
            raise ValidationFailed("min_score must be a number in -1..1 (cosine similarity)")
        if not (math.isfinite(recency_weight) and 0.0 <= recency_weight <= 1.0):
            raise ValidationFailed("recency_weight must be a number in 0..1")
        half_life = cfg.recency_half_life_hours if half_life_hours is None else half_life_hours
        if not (math.isfinite(half_life) and half_life > 0):
            raise ValidationFailed("recency_half_life_hours must be a positive number")
        await self.store.require_vectors()  # before paying for an embedding
        [vector] = await embedder.embed([query], "query")
        hits = await self.store.search(
            tenant, scope, scope_id, vector=vector, model=embedder.model, k=k, min_score=min_score,
            recency_weight=recency_weight, half_life_hours=half_life, prefix=prefix,
            exact_scan_limit=cfg.exact_scan_limit,
        )
        if not include_values:
            for h in hits:
                h.pop("value", None)
        return {"scope": scope, "query": query, "model": embedder.model, "results": hits, "count": len(hits)}


def text_of(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
