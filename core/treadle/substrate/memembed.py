"""Embedding maintenance as loomcycle 1.57-1.58 does it (its api/http memory_admin.go and
memory_backfill.go): stats per model, re-embedding the entries another model embedded (after a
change of embedder: a search compares only vectors of the configured model), and a backfill of
the entries that have no embedding. Both sweeps preview by default (`dry_run`), call the
embedder in batches of 64 (falling back to one text at a time when a batch fails, so one bad
entry costs only itself), and write one row at a time (store/memembed.py): resumable by calling
again, kill -9 safe, nothing double-written.

What is embedded: re-embed uses the text each entry was embedded from (treadle keeps it;
loomcycle re-embeds the raw value); backfill embeds what `set` with `embed: true` would — the
value when it is a string, else its canonical JSON — and a Document-chunk-style `{"body": …}`
envelope's body. An entry with no text to embed is counted (`skipped_empty`) and stays a
candidate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from treadle.embeddings.base import Embedder
from treadle.errors import EmbedderError
from treadle.store.memembed import MemoryEmbeddings
from treadle.store.memory import Embedding
from treadle.substrate.memory import MAX_EMBED_TEXT_CHARS, text_of

BATCH = 64  # loomcycle's reembedEmbedBatch
KEY_CAP = 20  # loomcycle's sample / failed-key cap


@dataclass(slots=True)
class Target:
    tenant: str
    scope: str
    scope_id: str


def embedder_view(embedder: Embedder, dimension: int = 0) -> dict[str, Any]:
    """loomcycle's `current_embedder` ({provider, model, dimension}); treadle's drivers learn their
    dimension from the first answer, so it is 0 until one is known."""
    return {"provider": embedder.name, "model": embedder.model, "dimension": dimension}


async def reembed(store: MemoryEmbeddings, embedder: Embedder, t: Target, *, dry_run: bool,
                  limit: int) -> dict[str, Any]:
    rows = await store.other_model(t.tenant, t.scope, t.scope_id, embedder.name, embedder.model, limit)
    head = {"scope": t.scope, "scope_id": t.scope_id, "dry_run": dry_run}
    if dry_run:
        return {**head, "rows_total": len(rows), "rows_to_reembed": len(rows),
                "current_embedder": embedder_view(embedder), "sample_keys": [r["key"] for r in rows[:KEY_CAP]],
                "sample_keys_capped": len(rows) > KEY_CAP}
    texts = [r["embed_text"] or text_of(r["value"]) for r in rows]
    done, failed, dim = await _embed_all(store, embedder, t, rows, texts)
    return {**head, "rows_reembedded": done, "rows_failed": len(failed),
            "current_embedder": embedder_view(embedder, dim), **({"failed_keys": failed} if failed else {})}


async def backfill(store: MemoryEmbeddings, embedder: Embedder, t: Target, *, prefix: str, dry_run: bool,
                   limit: int) -> dict[str, Any]:
    rows = await store.missing(t.tenant, t.scope, t.scope_id, prefix, "", limit)
    out: dict[str, Any] = {"scope": t.scope, "scope_id": t.scope_id, **({"prefix": prefix} if prefix else {}),
                           "dry_run": dry_run, "candidates": len(rows)}
    notes = ["candidates is bounded by limit; every embedded row leaves the candidate set, so calling again "
             "resumes rather than restarts. Call again while `more` is true."]
    if dry_run:
        out.update(sample_keys=[r["key"] for r in rows[:KEY_CAP]], current_embedder=embedder_view(embedder),
                   notes=[*notes, "DRY RUN — nothing was embedded. Re-send with dry_run=false."])
        return out
    embedded, skipped, more, dim = 0, 0, False, 0
    failed: list[str] = []
    page = rows
    while page:
        todo: list[dict[str, Any]] = []
        texts: list[str] = []
        for r in page:  # page past what cannot be embedded: `limit` bounds the embedded, not the seen
            text = _backfill_text(r["value"])
            if not text:
                skipped += 1
            elif embedded + len(failed) + len(todo) < limit:
                todo.append(r)
                texts.append(text)
            else:
                more = True
                break
        n, bad, d = await _embed_all(store, embedder, t, todo, texts)
        embedded, dim = embedded + n, d or dim
        failed.extend(bad)
        if more or embedded + len(failed) >= limit:
            more = True  # the budget is spent: there may be more (loomcycle's `more`)
            break
        if len(page) < limit:
            break
        page = await store.missing(t.tenant, t.scope, t.scope_id, prefix, page[-1]["key"], limit)
    out.update(embedded=embedded, failed=len(failed), skipped_empty=skipped, more=more,
               current_embedder=embedder_view(embedder, dim))
    if failed:
        out["failed_keys"] = failed[:KEY_CAP]
        notes.append("some rows failed (see failed_keys, capped); they remain candidates, so calling again "
                     "retries exactly those.")
    if skipped:
        notes.append("skipped_empty rows have no text to embed; they stay candidates — expected, not a failure.")
    out["notes"] = notes
    return out


async def _embed_all(store: MemoryEmbeddings, embedder: Embedder, t: Target, rows: list[dict[str, Any]],
                     texts: list[str]) -> tuple[int, list[str], int]:
    """Embed `texts` (one per row) in batches and store each; (stored, failed keys, dimension)."""
    done, failed, dim = 0, [], 0
    for start in range(0, len(rows), BATCH):
        batch, chunk = rows[start:start + BATCH], texts[start:start + BATCH]
        try:
            vectors: list[list[float] | None] = list(await embedder.embed(chunk, "document"))
        except EmbedderError:
            vectors = []
            for text in chunk:  # one bad row must not cost its batch-mates
                try:
                    [v] = await embedder.embed([text], "document")
                    vectors.append(v)
                except EmbedderError:
                    vectors.append(None)
        for row, text, vector in zip(batch, chunk, vectors, strict=True):
            if vector is None or not await store.put(t.tenant, t.scope, t.scope_id, row["key"], row["updated_at"],
                                                     Embedding(embedder.name, embedder.model, vector, text)):
                failed.append(row["key"])
                continue
            done, dim = done + 1, len(vector)
    return done, failed, dim


def _backfill_text(value: Any) -> str:
    body = value.get("body") if isinstance(value, dict) else None
    text = (body if isinstance(body, str) else text_of(value)).strip()
    return text[:MAX_EMBED_TEXT_CHARS] if text not in ("", '""', "null", "{}", "[]") else ""


__all__ = ["Target", "backfill", "embedder_view", "reembed"]
