"""Memory's vector facet, shared by the Memory tool and /v1/_memory: embed on set, search.

What is embedded: `embed_text` when given, else the value itself when it is a string, else its
canonical JSON. The embedding model is recorded with each vector; a search compares only
vectors of the configured model (after a change of embedder, set the keys again to re-embed).
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from treadle.embeddings.base import Embedder
from treadle.errors import EmbedderNotConfigured, ValidationFailed
from treadle.specs.memory import MemoryConfig
from treadle.store.memory import Embedding, MemoryStore
from treadle.substrate import memfacts, memrank

#: one model call without tools: (system, prompt, purpose, model override) → the answer's text
Asker = Callable[[str, str, str, str | None], Awaitable[str]]
#: the key prefix of a Document chunk body in search results (loomcycle's doc.chunk:<id>)
DOC_PREFIX = "doc.chunk:"

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
        keep_expiry: bool = False, provenance: dict[str, Any] | None = None,
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
                                     quota_bytes=quota_bytes, keep_expiry=keep_expiry, provenance=provenance)
        out: dict[str, Any] = {"ok": True, "key": key, "scope": scope, **usage, "embedded": embedding is not None}
        if embedding is not None:
            out["embedding"] = {"model": embedding.model, "dimension": embedding.dimension}
        return out

    async def search(
        self, tenant: str, scope: str, scope_id: str, query: str, *, k: int | None = None,
        min_score: float | None = None, recency_weight: float = 0.0, half_life_hours: float | None = None,
        prefix: str = "", include_values: bool = True, rank: Any = None, dedup: Any = None, sources: Any = None,
        count_access: bool = True,
    ) -> dict[str, Any]:
        """The scope's entries (and, by `sources`, Document chunk bodies) nearest `query`. With
        loomcycle's `rank`, `dedup` and `sources` blocks (substrate/memrank.py) the pool is
        over-fetched, re-ranked, deduplicated, then trimmed to k. Each hit: key, value, score,
        similarity, rank_score, kind (fact | note | document), provenance, embedded_with."""
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
        ranking, dedupe, picked = memrank.parse_rank(rank), memrank.parse_dedup(dedup), memrank.parse_sources(sources)
        if ranking is not None and recency_weight:
            raise ValidationFailed("recency_weight and rank.recency_weight say the same thing: give one of them",
                                   code="invalid_input")
        await self.store.require_vectors()  # before paying for an embedding
        [vector] = await embedder.embed([query], "query")
        deduping = dedupe is not None and dedupe.enabled
        reranking = ranking is not None and not ranking.pure_semantic
        pool_k = min(max(k * 4, 50), 200) if (deduping or reranking) else k + 1
        want_docs = (picked is None or "documents" in picked) and DOC_PREFIX.startswith(prefix[:len(DOC_PREFIX)])
        want_memory = picked is None or bool(picked & {"facts", "notes"})
        pool: list[dict[str, Any]] = []
        if want_memory:
            pool = await self.store.search(
                tenant, scope, scope_id, vector=vector, model=embedder.model, k=pool_k, min_score=min_score,
                recency_weight=recency_weight, half_life_hours=half_life, prefix=prefix,
                exact_scan_limit=cfg.exact_scan_limit, provenance=memrank.provenance_filter(picked),
                with_vectors=deduping,
            )
        if want_docs:
            for c in await self.store.chunk_search(tenant, scope, scope_id, vector=vector, model=embedder.model,
                                                   k=pool_k, min_score=min_score, with_vectors=deduping):
                key = DOC_PREFIX + c["chunk_id"]
                if not key.startswith(prefix):
                    continue
                pool.append({
                    "key": key, "value": c["body"], "similarity": c["similarity"], "score": c["similarity"],
                    "updated_at": c["updated_at"], "embedder": c["embedder"], "model": c["model"],
                    "access_count": 0, "chunk_id": c["chunk_id"], "document_id": c["document_id"],
                    "document": c["document"], "title": c["title"], "vector": c.get("vector"),
                    "provenance": {"document_id": c["document_id"], "document": c["document"],
                                   "chunk_id": c["chunk_id"], "title": c["title"], "revision": c["revision"]},
                })
            if want_memory:  # two legs: one order, by the memory leg's score (the similarity for a chunk)
                pool.sort(key=lambda h: (-h["score"], h["key"]))
        truncated = len(pool) > k
        if ranking is not None:
            for h in pool:
                h["score"] = h["similarity"]  # loomcycle's `score`: the raw cosine, whatever the ranking
            pool = memrank.rank_pool(pool, ranking, datetime.now(UTC))
        else:
            for h in pool:
                h["rank_score"] = h["score"]
        kept, dropped = memrank.dedup_pool(pool, dedupe) if dedupe is not None else (pool, 0)
        hits = kept[:k]
        if count_access:
            await self.store.record_access(tenant, scope, scope_id,
                                           [h["key"] for h in hits if not h.get("chunk_id")])
        for h in hits:
            h["kind"] = memrank.kind_of(h)
            h["embedded_with"] = {"provider": h.pop("embedder", None), "model": h.pop("model", None)}
            h.pop("vector", None)
            if h.get("provenance") is None:
                h.pop("provenance", None)
            if not include_values:
                h.pop("value", None)
        out: dict[str, Any] = {"scope": scope, "query": query, "model": embedder.model, "results": hits,
                               "count": len(hits), "truncated": truncated, "query_embedding_dim": len(vector)}
        if deduping:
            out["dedup_dropped"] = dropped
        if ranking is not None and ranking.source_weight:
            out["rank_note"] = memrank.SOURCE_RESERVED_NOTE
        return out

    async def embed_body(self, text: str) -> tuple[str, str, list[float]] | None:
        """A Document chunk body's embedding (knowledge/documents.py BodyVectors): None where no
        embedder or no pgvector is configured."""
        if self.embedder is None or not await self.store.vectors_available():
            return None
        [vec] = await self.embedder.embed([text[:MAX_EMBED_TEXT_CHARS]], "document")
        return self.embedder.name, self.embedder.model, vec

    async def search_bodies(self, tenant: str, scope: str, scope_id: str, query: str, k: int,
                            document_id: str | None) -> list[dict[str, Any]]:
        """Document `search`: the scope's chunk bodies nearest `query`."""
        embedder = self.require_embedder()
        if len(query) > MAX_QUERY_CHARS:
            raise ValidationFailed(f"query is longer than {MAX_QUERY_CHARS} characters")
        await self.store.require_vectors()
        [vector] = await embedder.embed([query], "query")
        return await self.store.chunk_search(tenant, scope, scope_id, vector=vector, model=embedder.model, k=k,
                                             document_id=document_id)

    async def recall(self, tenant: str, scope: str, scope_id: str, query: str, *, top_k: int | None = None,
                     threshold: float = 0.0, sources: Any = None) -> dict[str, Any]:
        """loomcycle's `recall`: the remembered facts nearest `query` (`sources` default: facts),
        as {facts: [{id, memory, score}]}; `threshold` (0..1, 0 = none) drops less similar ones."""
        if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0 <= threshold <= 1:
            raise ValidationFailed("threshold must be a number in 0..1", code="invalid_input")
        found = await self.search(tenant, scope, scope_id, query, k=min(top_k or 10, self.config.search.max_k),
                                  sources=sources if sources else ["facts"])
        facts = []
        for h in found["results"]:
            if threshold and h["similarity"] < threshold:
                continue
            fact: dict[str, Any] = {"id": h["key"], "memory": text_of(h.get("value")), "score": h["similarity"]}
            if h.get("provenance"):
                fact["metadata"] = h["provenance"]
            facts.append(fact)
        return {"facts": facts}

    async def add(
        self, tenant: str, scope: str, scope_id: str, messages: Any, *, infer: bool, metadata: Any,
        ask: Asker | None, run_id: str, tool_use_id: str, quota_bytes: int | None = None,
    ) -> dict[str, Any]:
        """loomcycle's `add`: with `infer` (default) one model call extracts the conversation's
        durable facts (substrate/memfacts.py), each stored as an entry with provenance (embedded
        when an embedder is configured); a fact already known (≥ merge_threshold similar) is not
        stored again; contradictions with known facts are reported, never acted on. Without
        `infer`, the turns are stored verbatim as one entry. Synchronous: status "done"."""
        msgs = _messages(messages, self.store.max_value_bytes)
        if metadata is not None and (not isinstance(metadata, dict)
                                     or not all(isinstance(v, str) for v in metadata.values())):
            raise ValidationFailed("metadata must be an object of strings", code="invalid_input")
        add_cfg = self.config.add
        eid = memfacts.event_id(run_id, tool_use_id)
        if not infer:
            key = memfacts.verbatim_key(run_id, tool_use_id)
            text = "\n".join(m["content"] for m in msgs)
            embedding = None
            if self.embedder is not None and await self.store.vectors_available():
                [vec] = await self.embedder.embed([text[:MAX_EMBED_TEXT_CHARS]], "document")
                embedding = Embedding(self.embedder.name, self.embedder.model, vec, text[:MAX_EMBED_TEXT_CHARS])
            await self.store.set(tenant, scope, scope_id, key, text, None, embedding=embedding,
                                 quota_bytes=quota_bytes)
            return {"status": "done", "event_id": key}
        if ask is None:
            raise ValidationFailed("add with infer needs a run whose agent has a model", code="infer_unavailable")
        answer = await ask(memfacts.extract_system(add_cfg.max_facts), memfacts.extract_prompt(msgs),
                           memfacts.EXTRACT_PURPOSE, add_cfg.model)
        facts = memfacts.parse_facts(answer, add_cfg.max_facts)
        if facts is None:
            raise ValidationFailed("add: the model's answer is not a fact list ({\"facts\": [...]})",
                                   code="infer_failed")
        vectors: list[list[float] | None] = [None] * len(facts)
        if facts and self.embedder is not None and await self.store.vectors_available():
            vectors = list(await self.embedder.embed([f["text"] for f in facts], "document"))
        written: list[dict[str, Any]] = []
        duplicates: list[dict[str, Any]] = []
        pairs: list[tuple[str, str]] = []
        pair_keys: list[tuple[str, str]] = []
        for fact, fvec in zip(facts, vectors, strict=True):
            key = memfacts.fact_key(fact["text"])
            if fvec is not None:
                near = await self.store.search(
                    tenant, scope, scope_id, vector=fvec, model=self.embedder.model if self.embedder else "", k=5,
                    min_score=add_cfg.related_threshold, exact_scan_limit=self.config.search.exact_scan_limit,
                    provenance="required")
                near = [h for h in near if h["key"] != key]
                if near and near[0]["similarity"] >= add_cfg.merge_threshold:
                    duplicates.append({"memory": fact["text"], "duplicate_of": near[0]["key"],
                                       "similarity": near[0]["similarity"]})
                    continue
                for h in near:
                    pairs.append((fact["text"], text_of(h["value"])))
                    pair_keys.append((key, h["key"]))
            provenance: dict[str, Any] = {"origin": "add", "class": fact["class"], "source_run_id": run_id,
                                          "event_id": eid}
            if metadata:
                provenance["metadata"] = metadata
            embedding = None if fvec is None or self.embedder is None else Embedding(
                self.embedder.name, self.embedder.model, fvec, fact["text"])
            await self.store.set(tenant, scope, scope_id, key, fact["text"], None, embedding=embedding,
                                 quota_bytes=quota_bytes, provenance=provenance)
            written.append({"key": key, "memory": fact["text"], "class": fact["class"]})
        out: dict[str, Any] = {"status": "done", "event_id": eid, "facts": written}
        if duplicates:
            out["duplicates"] = duplicates
        if add_cfg.detect_conflicts and pairs:
            answer = await ask(memfacts.judge_system(), memfacts.judge_prompt(pairs), memfacts.JUDGE_PURPOSE,
                               add_cfg.model)
            verdicts = memfacts.parse_verdicts(answer, len(pairs))
            out["conflicts"] = {
                "checked": len(pairs),
                "contradicts": [{"fact": a, "existing": b} for (a, b), v in zip(pair_keys, verdicts, strict=True)
                                if v == "contradicts"],
                "unclear": sum(1 for v in verdicts if v == "unclear"),
                "enforced": False,  # report-only, as loomcycle HEAD: nothing is retired
            }
        return out


def _messages(value: Any, max_bytes: int) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise ValidationFailed("add: missing required field: messages (a non-empty array of {role, content})",
                               code="invalid_input")
    out, total = [], 0
    for i, m in enumerate(value):
        if not isinstance(m, dict) or set(m) - {"role", "content"}:
            raise ValidationFailed(f"add: messages[{i}] must be {{role, content}}", code="invalid_input")
        role, content = m.get("role"), m.get("content")
        if role not in memfacts.ROLES:
            raise ValidationFailed(f"add: messages[{i}].role must be one of {', '.join(memfacts.ROLES)}",
                                   code="invalid_input")
        if not isinstance(content, str) or not content:
            raise ValidationFailed(f"add: messages[{i}] has empty content", code="invalid_input")
        total += len(content.encode())
        out.append({"role": role, "content": content})
    if total > max_bytes:
        raise ValidationFailed(f"add: messages content ({total} bytes) exceeds max {max_bytes} bytes",
                               code="value_too_large")
    return out


def text_of(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
