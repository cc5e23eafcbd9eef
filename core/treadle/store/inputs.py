"""The steering queue: user input and turn cancels for a run, written by the API and drained by
the run's own step under its lease (engine/waiting.py), so only the lease holder ever writes the
transcript.

Queuing a row also raises `runs.input_seq` to its id in the same statement; the lease returns
that column, so a step knows without a query whether anything is queued for it. A row counts as
consumed once the transcript holds an event carrying its id (`input_id`); `consumed_at` is only
bookkeeping for the queue cap."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from treadle.store.db import Pool
from treadle.store.waits import POKE_SOON_SQL

QUEUE_CAP = 16


@dataclass(slots=True)
class QueuedInput:
    id: int
    kind: str  # input | turn_cancel | compact (engine/plan.py manual_compaction)
    text: str


@dataclass(slots=True)
class Queued:
    """Outcome of queuing: the run's status (None: no such run) and the new row's id (None: the
    run is finished or its queue is full)."""

    status: str | None
    input_id: int | None
    interactive: bool = False
    queue_full: bool = False


class InputStore:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def add(self, tenant_id: str, run_id: str, kind: str, text: str) -> Queued:
        sql = """
        WITH r AS (
            SELECT id, status, interactive,
                   (SELECT count(*) FROM run_inputs i WHERE i.run_id = runs.id AND i.consumed_at IS NULL) AS queued
            FROM runs WHERE id = %(run)s AND tenant_id = %(tenant)s FOR UPDATE
        ), ins AS (
            INSERT INTO run_inputs (tenant_id, run_id, kind, text)
            SELECT %(tenant)s, r.id, %(kind)s, %(text)s FROM r
            WHERE r.status NOT IN ('completed','failed','cancelled') AND r.queued < %(cap)s
            RETURNING id
        ), upd AS (
            UPDATE runs SET input_seq = greatest(runs.input_seq, ins.id), updated_at = now()
            FROM ins WHERE runs.id = %(run)s
        ), poke AS (  -- the wake is part of the commit (store/waits.py, durable pokes)
            {poke}
        )
        SELECT r.status, r.interactive, r.queued, ins.id AS input_id,
               CASE WHEN ins.id IS NOT NULL AND %(kind)s = 'turn_cancel'
                    THEN pg_notify('treadle_cancel', %(run)s) END AS _n  -- see store/cancels.py
        FROM r LEFT JOIN ins ON true
        """.format(poke=POKE_SOON_SQL.format(select="SELECT %(tenant)s, %(key)s, now() FROM ins"))
        params = {"run": run_id, "tenant": tenant_id, "kind": kind, "text": text, "cap": QUEUE_CAP,
                  "key": f"input:{run_id}"}  # engine/plan.py input_key
        async with self.pool.connection() as conn:
            cur = await conn.execute(sql, params)
            row = await cur.fetchone()
        if row is None:
            return Queued(None, None)
        full = row["input_id"] is None and int(row["queued"]) >= QUEUE_CAP
        return Queued(row["status"], row["input_id"], bool(row["interactive"]), full)

    async def after(self, run_id: str, after_id: int) -> list[QueuedInput]:
        """Queued rows not yet consumed by the transcript (id > after_id), oldest first."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT id, kind, text FROM run_inputs WHERE run_id = %s AND id > %s ORDER BY id LIMIT 100",
                (run_id, after_id),
            )
            rows = await cur.fetchall()
        return [QueuedInput(int(r["id"]), r["kind"], r["text"]) for r in rows]

    async def mark_consumed(self, run_id: str, upto_id: int) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                "UPDATE run_inputs SET consumed_at = now() WHERE run_id = %s AND id <= %s AND consumed_at IS NULL",
                (run_id, upto_id),
            )

    async def latest(self, run_id: str) -> int:
        async with self.pool.connection() as conn:
            cur = await conn.execute("SELECT input_seq FROM runs WHERE id = %s", (run_id,))
            row = await cur.fetchone()
        return int(row["input_seq"]) if row else 0

    async def wait_keys(self, run_id: str) -> list[str]:
        """The keys a parked run waits on (a turn cancel pokes them to wake it)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute("SELECT DISTINCT key FROM run_waits WHERE run_id = %s", (run_id,))
            rows = await cur.fetchall()
        return [r["key"] for r in rows]

    async def waits_of(self, tenant_id: str, run_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
        """What each parked run waits on: [{kind, key, deadline, tool_use_id}] per run id."""
        if not run_ids:
            return {}
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT run_id, tool_use_id, kind, key, deadline FROM run_waits"
                " WHERE tenant_id = %s AND run_id = ANY(%s) ORDER BY run_id, created_at, key",
                (tenant_id, run_ids),
            )
            rows = await cur.fetchall()
        out: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            out.setdefault(r["run_id"], []).append(
                {"kind": r["kind"], "key": r["key"], "tool_use_id": r["tool_use_id"] or None,
                 "deadline": r["deadline"].isoformat() if r["deadline"] else None}
            )
        return out
