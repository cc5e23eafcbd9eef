"""Memory search's ranking, dedup and source selector — loomcycle's RFC I / RFC BW, as pure
functions over a candidate pool (substrate/memory.py fetches it, the Memory tool and
/v1/_memory/search pass the blocks through).

- `rank` {semantic_weight (default 1), recency_weight, recency_half_life_hours (default 24),
  source_weight, frequency_weight}: rank_score = semantic·cosine + recency·2^(-age/half_life)
  + frequency·ln(1 + access_count) (+ source·0: loomcycle reserves it, and so does treadle — a
  non-zero weight is answered with a `rank_note`, never silently ignored).
- `dedup` {enabled, threshold (cosine similarity, default 0.92), mode drop|merge|keep}: after
  ranking and before the top-k trim, a result at least `threshold` similar to a higher-ranked
  kept one is dropped, merged into it (`{"value", "merged_from": [{key, value}]}`), or kept and
  counted.
- `sources` ⊂ {facts, notes, documents}: facts = entries with provenance (an `add` with
  `infer`, a `set` naming its provenance), notes = entries without, documents = Document chunk
  bodies. Documents with only one of facts/notes is refused, as in loomcycle
  (`invalid_sources`).

Fields, defaults and refusals are loomcycle's; treadle refuses what loomcycle would drop
silently (an unknown key or source name, a mode outside drop|merge|keep), per its rule that a
field is honoured or refused."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from treadle.errors import ValidationFailed

SOURCES = ("facts", "notes", "documents")
DEFAULT_DEDUP_THRESHOLD = 0.92
DEFAULT_HALF_LIFE_HOURS = 24.0
DEDUP_MODES = ("drop", "merge", "keep")
SOURCE_RESERVED_NOTE = "source_weight is reserved and contributes 0 until source-score tracking ships"
_RANK_KEYS = ("semantic_weight", "recency_weight", "recency_half_life_hours", "source_weight", "frequency_weight")
_DEDUP_KEYS = ("enabled", "threshold", "mode")


@dataclass(frozen=True, slots=True)
class Rank:
    semantic_weight: float = 1.0
    recency_weight: float = 0.0
    recency_half_life_hours: float = DEFAULT_HALF_LIFE_HOURS
    source_weight: float = 0.0
    frequency_weight: float = 0.0

    @property
    def pure_semantic(self) -> bool:
        """Ordering by cosine alone (no over-fetch, no re-rank needed)."""
        return (self.semantic_weight > 0 and self.recency_weight == 0 and self.source_weight == 0
                and self.frequency_weight == 0)


@dataclass(frozen=True, slots=True)
class Dedup:
    enabled: bool = False
    threshold: float = DEFAULT_DEDUP_THRESHOLD
    mode: str = "drop"


def _number(block: dict[str, Any], name: str, where: str) -> float | None:
    v = block.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(float(v)):
        raise ValidationFailed(f"{where}.{name} must be a number", code="invalid_input")
    return float(v)


def _unknown(block: dict[str, Any], known: tuple[str, ...], where: str) -> None:
    extra = sorted(set(block) - set(known))
    if extra:
        raise ValidationFailed(f"{where}: unknown field(s) {', '.join(extra)} (known: {', '.join(known)})",
                               code="unknown_field")


def parse_rank(block: Any) -> Rank | None:
    """The `rank` block (None: absent)."""
    if block is None:
        return None
    if not isinstance(block, dict):
        raise ValidationFailed("rank must be an object", code="invalid_input")
    _unknown(block, _RANK_KEYS, "rank")
    values = {k: _number(block, k, "rank") for k in _RANK_KEYS}
    hl = values["recency_half_life_hours"]
    return Rank(
        semantic_weight=1.0 if values["semantic_weight"] is None else values["semantic_weight"],
        recency_weight=values["recency_weight"] or 0.0,
        recency_half_life_hours=DEFAULT_HALF_LIFE_HOURS if hl is None else hl,
        source_weight=values["source_weight"] or 0.0,
        frequency_weight=values["frequency_weight"] or 0.0,
    )


def parse_dedup(block: Any) -> Dedup | None:
    """The `dedup` block (None: absent)."""
    if block is None:
        return None
    if not isinstance(block, dict):
        raise ValidationFailed("dedup must be an object", code="invalid_input")
    _unknown(block, _DEDUP_KEYS, "dedup")
    enabled = block.get("enabled", False)
    if not isinstance(enabled, bool):
        raise ValidationFailed("dedup.enabled must be a boolean", code="invalid_input")
    mode = block.get("mode") or "drop"
    if mode not in DEDUP_MODES:
        raise ValidationFailed(f"dedup.mode must be one of {', '.join(DEDUP_MODES)}", code="invalid_input")
    threshold = _number(block, "threshold", "dedup")
    if threshold is None or threshold <= 0:  # loomcycle: <= 0 falls back to the default
        threshold = DEFAULT_DEDUP_THRESHOLD
    return Dedup(enabled=enabled, threshold=threshold, mode=mode)


def parse_sources(value: Any) -> frozenset[str] | None:
    """The `sources` selector (None: absent or empty — every kind)."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise ValidationFailed("sources must be an array of strings", code="invalid_sources")
    picked = frozenset(s.strip().lower() for s in value)
    unknown = sorted(picked - set(SOURCES))
    if unknown:
        raise ValidationFailed(f"sources: unknown source(s) {', '.join(unknown)} (one of {', '.join(SOURCES)})",
                               code="invalid_sources")
    if not picked:
        return None
    memory = picked & {"facts", "notes"}
    if "documents" in picked and len(memory) == 1:
        raise ValidationFailed(
            "this combination of sources cannot be filtered in one query: mixing documents with only ONE of "
            "facts/notes is refused. Use [facts], [notes], [facts,notes], [documents], or all three",
            code="invalid_sources")
    return picked


def provenance_filter(sources: frozenset[str] | None) -> str | None:
    """The entries' provenance predicate for `sources`: "required", "absent" or None (either)."""
    if sources is None:
        return None
    facts, notes = "facts" in sources, "notes" in sources
    if facts and not notes:
        return "required"
    if notes and not facts:
        return "absent"
    return None


def kind_of(hit: dict[str, Any]) -> str:
    """loomcycle's row class: document (a chunk body), fact (has provenance) or note."""
    if hit.get("chunk_id"):
        return "document"
    return "fact" if hit.get("provenance") else "note"


def recency(updated_at: str, now: datetime, half_life_hours: float) -> float:
    """2^(-age/half_life): 1 now, 0.5 at one half-life; a non-positive half-life disables it."""
    if half_life_hours <= 0:
        return 0.0
    age_h = max(0.0, (now - datetime.fromisoformat(updated_at)).total_seconds() / 3600.0)
    return math.exp(-age_h * math.log(2) / half_life_hours)


def score(hit: dict[str, Any], rank: Rank, now: datetime) -> float:
    s = rank.semantic_weight * float(hit["similarity"])
    if rank.recency_weight:
        s += rank.recency_weight * recency(hit["updated_at"], now, rank.recency_half_life_hours)
    if rank.frequency_weight:
        s += rank.frequency_weight * math.log1p(int(hit.get("access_count") or 0))
    return s


def rank_pool(pool: list[dict[str, Any]], rank: Rank, now: datetime) -> list[dict[str, Any]]:
    """The pool ordered by rank_score (stable: ties keep the cosine order), each hit with its
    `rank_score`."""
    for hit in pool:
        hit["rank_score"] = round(score(hit, rank, now), 6)
    if rank.pure_semantic:
        return pool
    return sorted(pool, key=lambda h: -h["rank_score"])


def cosine(a: list[float], b: list[float]) -> float:
    if len(a) != len(b) or not a:
        return 0.0
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


def dedup_pool(ranked: list[dict[str, Any]], dedup: Dedup) -> tuple[list[dict[str, Any]], int]:
    """loomcycle's DedupResults: (kept, collapsed count). Only a cluster's first (highest-ranked)
    member is an anchor; a hit without a vector is never a duplicate nor an anchor."""
    if not dedup.enabled or len(ranked) < 2:
        return ranked, 0
    kept: list[dict[str, Any]] = []
    anchors: list[tuple[dict[str, Any], int]] = []
    dropped = 0
    for cand in ranked:
        vec = cand.get("vector") or []
        dup_of = None
        if vec:
            for anchor, kept_at in anchors:
                if anchor.get("vector") and cosine(vec, anchor["vector"]) >= dedup.threshold:
                    dup_of = kept_at
                    break
        if dup_of is None:
            kept.append(cand)
            anchors.append((cand, len(kept) - 1))
            continue
        dropped += 1
        if dedup.mode == "keep":
            cand["duplicate_of"] = kept[dup_of]["key"]
            kept.append(cand)
        elif dedup.mode == "merge":
            survivor = kept[dup_of]
            merged = survivor.get("value")
            if not (isinstance(merged, dict) and isinstance(merged.get("merged_from"), list) and "value" in merged
                    and survivor.get("_merged")):
                merged = {"value": merged, "merged_from": []}
                survivor["_merged"] = True
            merged["merged_from"].append({"key": cand["key"], "value": cand.get("value")})
            survivor["value"] = merged
    for hit in kept:
        hit.pop("_merged", None)
    return kept, dropped
