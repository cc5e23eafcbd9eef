"""Interruptions: a run asks a question and parks until someone answers, declines, it expires or
the run cancels it. One row per (run, tool_use_id); its id is derived from both, so re-invoking
the asking tool call finds the same interruption instead of creating a second one.

Statuses: pending → resolved | declined | timed_out | cancelled (terminal, set once). Every
status change is followed by a poke of the interruption's wait key (the caller does it)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from treadle.store.db import Pool
from treadle.store.waits import POKE_SOON_SQL

MAX_PENDING_PER_RUN = 10
STATUSES = ("pending", "resolved", "declined", "timed_out", "cancelled")


def interrupt_id(run_id: str, tool_use_id: str) -> str:
    return "int_" + hashlib.blake2b(f"{run_id}\x1f{tool_use_id}".encode(), digest_size=12).hexdigest()


def interrupt_key(iid: str) -> str:
    return f"interrupt:{iid}"


@dataclass(slots=True)
class Interrupt:
    id: str
    tenant_id: str
    run_id: str
    tool_use_id: str
    kind: str
    question: str
    options: list[Any]
    context: str | None
    priority: str
    status: str
    answer: str | None
    resolved_by: str | None
    expires_at: datetime | None
    created_at: datetime
    resolved_at: datetime | None
    #: computed by the database when the row was read: pending and past expires_at
    expired: bool = False

    def to_api(self) -> dict[str, Any]:
        return {
            "interrupt_id": self.id,
            "run_id": self.run_id,
            "kind": self.kind,
            "question": self.question,
            "options": self.options,
            "context": self.context,
            "priority": self.priority,
            "status": self.status,
            "answer": self.answer,
            "resolved_by": self.resolved_by,
            "expires_at": _iso(self.expires_at),
            "created_at": _iso(self.created_at),
            "resolved_at": _iso(self.resolved_at),
        }

    def pending_event(self) -> dict[str, Any]:
        """Payload of the `interruption_pending` transcript event."""
        return {"interrupt_id": self.id, "kind": self.kind, "question": self.question, "options": self.options,
                "context": self.context, "priority": self.priority, "expires_at": _iso(self.expires_at)}

    def tool_result(self) -> dict[str, Any]:
        """What the asking tool call returns once the interruption is no longer pending."""
        return {"interrupt_id": self.id, "status": self.status, "answer": self.answer,
                "resolved_by": self.resolved_by, "resolved_at": _iso(self.resolved_at)}


def _iso(t: datetime | None) -> str | None:
    return t.isoformat() if t is not None else None


_FIELDS = ("id", "tenant_id", "run_id", "tool_use_id", "kind", "question", "options", "context", "priority", "status",
           "answer", "resolved_by", "expires_at", "created_at", "resolved_at")
_EXPIRED = "({p}status = 'pending' AND {p}expires_at IS NOT NULL AND {p}expires_at <= now()) AS expired"
_COLUMNS = ", ".join(_FIELDS) + ", " + _EXPIRED.format(p="")


def _row(row: dict[str, Any]) -> Interrupt:
    return Interrupt(**row)


class InterruptStore:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def open(
        self,
        tenant_id: str,
        run_id: str,
        tool_use_id: str,
        *,
        question: str,
        options: list[Any],
        context: str | None,
        priority: str,
        timeout_s: float,
        max_pending: int = MAX_PENDING_PER_RUN,
    ) -> Interrupt | None:
        """The interruption of this tool call, created on first use. None when the run already has
        `max_pending` pending interruptions (and this call has none)."""
        iid = interrupt_id(run_id, tool_use_id)
        sql = f"""
        WITH ins AS (
            INSERT INTO interrupts (id, tenant_id, run_id, tool_use_id, question, options, context, priority,
                                    expires_at)
            SELECT %(id)s, %(tenant)s, %(run)s, %(tu)s, %(q)s, %(opts)s, %(ctx)s, %(prio)s,
                   now() + make_interval(secs => %(timeout)s)
            WHERE (SELECT count(*) FROM interrupts WHERE run_id = %(run)s AND status = 'pending') < %(cap)s
            ON CONFLICT (id) DO NOTHING
            RETURNING {_COLUMNS}
        )
        SELECT * FROM ins
        UNION ALL
        SELECT {_COLUMNS} FROM interrupts WHERE id = %(id)s AND NOT EXISTS (SELECT 1 FROM ins)
        """
        params = {"id": iid, "tenant": tenant_id, "run": run_id, "tu": tool_use_id, "q": question,
                  "opts": Jsonb(options), "ctx": context, "prio": priority, "timeout": timeout_s,
                  "cap": max_pending}
        async with self.pool.connection() as conn:
            cur = await conn.execute(sql, params)
            row = await cur.fetchone()
        return _row(row) if row else None

    async def get(self, tenant_id: str, run_id: str, iid: str) -> Interrupt | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT {_COLUMNS} FROM interrupts WHERE id = %s AND run_id = %s AND tenant_id = %s",
                (iid, run_id, tenant_id),
            )
            row = await cur.fetchone()
        return _row(row) if row else None

    async def list_for_run(self, tenant_id: str, run_id: str, status: str | None = None) -> list[Interrupt]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT {_COLUMNS} FROM interrupts WHERE run_id = %s AND tenant_id = %s"
                " AND (%s::text IS NULL OR status = %s) ORDER BY created_at, id",
                (run_id, tenant_id, status, status),
            )
            rows = await cur.fetchall()
        return [_row(r) for r in rows]

    async def list_for_user(
        self, tenant_id: str, user_id: str | None, status: str | None = None, limit: int = 100
    ) -> list[tuple[Interrupt, dict[str, Any]]]:
        """The interruptions of the user's runs (None: of every run of the tenant), newest first,
        each with its run's `agent`, `user_id` and `parent_run_id`."""
        columns = ", ".join(f"i.{f}" for f in _FIELDS) + ", " + _EXPIRED.format(p="i.")
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT {columns}, r.agent AS run_agent, r.user_id AS run_user_id,"
                " r.parent_run_id AS run_parent_run_id FROM interrupts i JOIN runs r ON r.id = i.run_id"
                " WHERE i.tenant_id = %(t)s AND r.tenant_id = %(t)s AND (%(u)s::text IS NULL OR r.user_id = %(u)s)"
                " AND (%(s)s::text IS NULL OR i.status = %(s)s) ORDER BY i.created_at DESC, i.id LIMIT %(n)s",
                {"t": tenant_id, "u": user_id, "s": status, "n": limit},
            )
            rows = await cur.fetchall()
        of_run = ("run_agent", "run_user_id", "run_parent_run_id")
        return [(_row({k: v for k, v in r.items() if k not in of_run}), {k[4:]: r[k] for k in of_run}) for r in rows]

    async def resolve(
        self, tenant_id: str, run_id: str, iid: str, *, answer: str | None, status: str, resolved_by: str
    ) -> Interrupt | None:
        """Settle a pending, unexpired interruption of an unfinished run as `resolved` or `declined`.
        None when it is not pending any more, has expired or its run ended; the caller reads it to
        tell which."""
        return await self._settle(
            "status = 'pending' AND (expires_at IS NULL OR expires_at > now()) AND EXISTS (SELECT 1 FROM runs r"
            " WHERE r.id = interrupts.run_id AND r.status NOT IN ('completed','failed','cancelled'))",
            {"tenant": tenant_id, "run": run_id, "id": iid, "status": status, "answer": answer, "by": resolved_by},
        )

    async def time_out(self, tenant_id: str, run_id: str, iid: str, *, force: bool = False) -> Interrupt | None:
        """Mark a pending interruption `timed_out` if it has expired (or unconditionally with
        `force`, when the waiting call's own deadline passed). None if nothing changed."""
        return await self._settle(
            "status = 'pending' AND (%(force)s OR (expires_at IS NOT NULL AND expires_at <= now()))",
            {"tenant": tenant_id, "run": run_id, "id": iid, "status": "timed_out", "answer": None, "by": "timeout",
             "force": force},
        )

    async def cancel(self, tenant_id: str, run_id: str, iid: str | None, *, by: str) -> list[Interrupt]:
        """Cancel one pending interruption of the run (or all of them when `iid` is None)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"""UPDATE interrupts SET status = 'cancelled', resolved_by = %(by)s, resolved_at = now()
                    WHERE run_id = %(run)s AND tenant_id = %(tenant)s AND status = 'pending'
                      AND (%(id)s::text IS NULL OR id = %(id)s)
                    RETURNING {_COLUMNS}""",
                {"by": by, "run": run_id, "tenant": tenant_id, "id": iid},
            )
            rows = await cur.fetchall()
        return [_row(r) for r in rows]

    async def _settle(self, where: str, params: dict[str, Any]) -> Interrupt | None:
        # the wake is part of the commit (store/waits.py, durable pokes)
        poke = POKE_SOON_SQL.format(select="SELECT tenant_id, 'interrupt:' || id, now() FROM u")
        sql = f"""WITH u AS (
                  UPDATE interrupts SET status = %(status)s, answer = %(answer)s, resolved_by = %(by)s,
                         resolved_at = now()
                  WHERE id = %(id)s AND run_id = %(run)s AND tenant_id = %(tenant)s AND {where}
                  RETURNING {_COLUMNS}
                  ), poke AS ({poke})
                  SELECT * FROM u"""
        async with self.pool.connection() as conn:
            cur = await conn.execute(sql, params)
            row = await cur.fetchone()
        return _row(row) if row else None
