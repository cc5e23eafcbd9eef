"""Evaluations: scores submitted for runs, tenant-scoped, with mean/count per def."""

from __future__ import annotations

import builtins
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from treadle.store.db import Pool

_COLUMNS = (
    "eval_id, tenant_id, run_id, agent, def_id, def_content_sha256, score, dimensions, judgement, rationale,"
    " emitter_role, emitter_agent, emitter_run_id, created_at"
)


def new_eval_id() -> str:
    return "ev_" + secrets.token_hex(16)


@dataclass(slots=True)
class EvaluationRecord:
    eval_id: str
    tenant_id: str
    run_id: str
    agent: str
    def_id: str | None
    def_content_sha256: str | None
    score: float
    dimensions: dict[str, float]
    judgement: Any
    rationale: str
    emitter_role: str
    emitter_agent: str | None
    emitter_run_id: str | None
    created_at: datetime

    def to_api(self) -> dict[str, Any]:
        return {
            "eval_id": self.eval_id, "run_id": self.run_id, "agent": self.agent, "def_id": self.def_id,
            "def_content_sha256": self.def_content_sha256, "score": self.score, "dimensions": self.dimensions,
            "judgement": self.judgement, "rationale": self.rationale, "emitter_role": self.emitter_role,
            "emitter_agent": self.emitter_agent, "emitter_run_id": self.emitter_run_id,
            "created_at": self.created_at.isoformat(),
        }


class EvaluationStore:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def insert(self, rec: dict[str, Any]) -> EvaluationRecord:
        judgement = rec.get("judgement")
        params = {**rec, "eval_id": new_eval_id(), "dimensions": Jsonb(rec.get("dimensions") or {}),
                  "judgement": Jsonb(judgement) if judgement is not None else None}
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"""INSERT INTO evaluations (eval_id, tenant_id, run_id, agent, def_id, def_content_sha256, score,
                                             dimensions, judgement, rationale, emitter_role, emitter_agent,
                                             emitter_run_id)
                    VALUES (%(eval_id)s, %(tenant_id)s, %(run_id)s, %(agent)s, %(def_id)s, %(def_content_sha256)s,
                            %(score)s, %(dimensions)s, %(judgement)s, %(rationale)s, %(emitter_role)s,
                            %(emitter_agent)s, %(emitter_run_id)s)
                    RETURNING {_COLUMNS}""",
                params,
            )
            row = await cur.fetchone()
        assert row is not None
        return EvaluationRecord(**row)

    async def get(self, tenant_id: str, eval_id: str) -> EvaluationRecord | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(f"SELECT {_COLUMNS} FROM evaluations WHERE tenant_id = %s AND eval_id = %s",
                                     (tenant_id, eval_id))
            row = await cur.fetchone()
        return EvaluationRecord(**row) if row else None

    async def list(
        self, tenant_id: str, *, run_id: str | None = None, def_ids: list[str] | None = None,
        agent: str | None = None, limit: int = 100,
    ) -> list[EvaluationRecord]:
        """Newest first, filtered by run, by any of `def_ids`, or by agent name."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT {_COLUMNS} FROM evaluations WHERE tenant_id = %s"
                " AND (%s::text IS NULL OR run_id = %s) AND (%s::text[] IS NULL OR def_id = ANY(%s::text[]))"
                " AND (%s::text IS NULL OR agent = %s) ORDER BY created_at DESC, eval_id LIMIT %s",
                (tenant_id, run_id, run_id, def_ids, def_ids, agent, agent, limit),
            )
            rows = await cur.fetchall()
        return [EvaluationRecord(**r) for r in rows]

    async def aggregate(
        self, tenant_id: str, *, def_ids: builtins.list[str] | None = None, agent: str | None = None
    ) -> builtins.list[dict[str, Any]]:
        """Per def_id (None: runs of the treadle.yaml agent): count, mean, min, max of the score
        and the mean of every numeric dimension."""
        where = ("tenant_id = %s AND (%s::text[] IS NULL OR def_id = ANY(%s::text[]))"
                 " AND (%s::text IS NULL OR agent = %s)")
        params = (tenant_id, def_ids, def_ids, agent, agent)
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT def_id, count(*) AS count, avg(score) AS mean, min(score) AS min, max(score) AS max"
                f" FROM evaluations WHERE {where} GROUP BY def_id ORDER BY def_id NULLS FIRST",
                params,
            )
            rows = await cur.fetchall()
            cur = await conn.execute(
                f"SELECT def_id, d.key, avg(d.value::text::float8) AS mean FROM evaluations,"
                f" jsonb_each(dimensions) AS d WHERE {where} AND jsonb_typeof(d.value) = 'number'"
                f" GROUP BY def_id, d.key",
                params,
            )
            dims = await cur.fetchall()
        by_def: dict[str | None, dict[str, float]] = {}
        for d in dims:
            by_def.setdefault(d["def_id"], {})[d["key"]] = round(float(d["mean"]), 6)
        return [
            {"def_id": r["def_id"], "count": int(r["count"]), "mean": round(float(r["mean"]), 6),
             "min": float(r["min"]), "max": float(r["max"]), "dimensions": by_def.get(r["def_id"], {})}
            for r in rows
        ]
