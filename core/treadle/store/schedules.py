"""Schedule state and fires. A fire is one row keyed (schedule_id, scheduled_for): inserting it is
the claim, so whatever races (two sweepers, a redelivered EventBridge invocation, a restart) at
most one claimant starts the run.

A fire's status as read (a schedule's `last_status`, `recent_fires`) is its run's ending once the
run has ended — `completed`, `failed` or `cancelled` (with the run's error as `last_error`) — and
`started` while it runs; `claimed`, `skipped` and `failed` (the run could not start) are the fire's
own. It is read through a join with the run, so it is never stale and no writer has to update
it."""

from __future__ import annotations

import builtins
import secrets
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from treadle.domain.events import EventType
from treadle.store.db import Pool

TERMINAL = ("completed", "failed", "cancelled")
#: a hook claim older than this is taken again (the process running it died)
HOOK_RECLAIM_S = 300.0


def new_schedule_id() -> str:
    return "sch_" + secrets.token_hex(8)


def _iso(t: datetime | None) -> str | None:
    return t.isoformat() if t else None


@dataclass(slots=True)
class ScheduleState:
    schedule_id: str
    tenant_id: str
    name: str
    def_id: str
    version: int
    status: str
    paused: bool
    next_fire_at: datetime | None
    fire_count: int
    total_fires: int
    skipped_fires: int
    last_fire_at: datetime | None
    last_run_id: str | None
    last_status: str | None
    last_error: str | None
    retired_reason: str | None
    synced_state: str | None
    sync_error: str | None
    created_at: datetime
    updated_at: datetime

    def to_api(self) -> dict[str, Any]:
        return {
            "schedule_id": self.schedule_id,
            "name": self.name,
            "def_id": self.def_id,
            "version": self.version,
            "status": self.status,
            "paused": self.paused,
            "next_fire_at": _iso(self.next_fire_at),
            "fire_count": self.fire_count,
            "total_fires": self.total_fires,
            "skipped_fires": self.skipped_fires,
            "last_fire_at": _iso(self.last_fire_at),
            "last_run_id": self.last_run_id,
            "last_status": self.last_status,
            "last_error": self.last_error,
            "retired_reason": self.retired_reason,
            "synced_state": self.synced_state,
            "sync_error": self.sync_error,
            "updated_at": self.updated_at.isoformat(),
        }


_OWN = (
    "schedule_id, tenant_id, name, def_id, version, status, paused, next_fire_at, fire_count, total_fires,"
    " skipped_fires, last_fire_at, retired_reason, synced_state, sync_error, created_at, updated_at"
)
_S_OWN = ", ".join(f"s.{c.strip()}" for c in _OWN.split(","))
#: the schedule row plus its latest fire's outcome (kept on the fire rows, so a run start never
#: has to lock the schedule row a firing transaction may hold)
#: a fire's status and error as read (see the module docstring), over `schedule_fires f LEFT JOIN runs r`
_FIRE_ENDED = "f.status = 'started' AND r.status IN ('completed', 'failed', 'cancelled')"
_FIRE_STATUS = f"CASE WHEN {_FIRE_ENDED} THEN r.status ELSE f.status END"
_FIRE_ERROR = f"""coalesce(f.error, CASE WHEN {_FIRE_ENDED} AND r.status = 'failed'
                                   THEN nullif(concat_ws(': ', r.error->>'code', r.error->>'error'), '')
                                   WHEN {_FIRE_ENDED} AND r.status = 'cancelled'
                                   THEN concat_ws(': ', 'cancelled', r.cancel_reason) END)"""
_FIRE_RUN = "schedule_fires f LEFT JOIN runs r ON r.id = f.run_id AND r.tenant_id = f.tenant_id"
_SELECT = f"""SELECT {_S_OWN}, lf.run_id AS last_run_id, lf.status AS last_status, lf.error AS last_error
    FROM schedules s LEFT JOIN LATERAL (
        SELECT f.run_id, {_FIRE_STATUS} AS status, {_FIRE_ERROR} AS error FROM {_FIRE_RUN}
        WHERE f.schedule_id = s.schedule_id ORDER BY f.scheduled_for DESC LIMIT 1) lf ON true"""
_NO_LAST = "NULL::text AS last_run_id, NULL::text AS last_status, NULL::text AS last_error"


def _state(row: dict[str, Any]) -> ScheduleState:
    return ScheduleState(**{f.name: row[f.name] for f in fields(ScheduleState)})


@dataclass(slots=True)
class DueSchedule:
    state: ScheduleState
    body: dict[str, Any]


@dataclass(slots=True)
class FireRow:
    schedule_id: str
    scheduled_for: datetime
    tenant_id: str
    def_id: str
    version: int
    source: str


class ScheduleStore:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    # -- state -----------------------------------------------------------------------------------

    async def get(
        self, tenant_id: str | None, *, schedule_id: str | None = None, name: str | None = None
    ) -> ScheduleState | None:
        """By id (tenant None: any tenant — the EventBridge target knows only the id) or name."""
        if schedule_id is not None:
            where = "s.schedule_id = %s AND (%s::text IS NULL OR s.tenant_id = %s)"
            params = [schedule_id, tenant_id, tenant_id]
        elif name is not None and tenant_id is not None:
            where, params = "s.tenant_id = %s AND s.name = %s", [tenant_id, name]
        else:
            raise ValueError("get needs schedule_id, or tenant and name")
        async with self.pool.connection() as conn:
            cur = await conn.execute(f"{_SELECT} WHERE {where}", params)
            row = await cur.fetchone()
        return _state(row) if row else None

    async def list(
        self, tenant_id: str, *, include_retired: bool = False, limit: int = 500
    ) -> builtins.list[ScheduleState]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"{_SELECT} WHERE s.tenant_id = %s AND (%s OR s.status = 'active') ORDER BY s.name LIMIT %s",
                (tenant_id, include_retired, limit),
            )
            return [_state(r) for r in await cur.fetchall()]

    async def activate(
        self, tenant_id: str, name: str, def_id: str, version: int, next_fire_at: datetime | None
    ) -> ScheduleState:
        """Point the schedule `name` at a newly active version (creating the row the first time).
        A new version starts its own fire count (max_fires counts the fires of a version)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """INSERT INTO schedules AS s (schedule_id, tenant_id, name, def_id, version, next_fire_at)
                    VALUES (%s, %s, %s, %s, %s, %s)
                    ON CONFLICT (tenant_id, name) DO UPDATE SET
                      def_id = excluded.def_id, version = excluded.version, status = 'active',
                      next_fire_at = CASE WHEN s.paused THEN NULL ELSE excluded.next_fire_at END,
                      fire_count = CASE WHEN s.def_id = excluded.def_id THEN s.fire_count ELSE 0 END,
                      retired_reason = NULL, updated_at = now()
                    RETURNING schedule_id""",
                (new_schedule_id(), tenant_id, name, def_id, version, next_fire_at),
            )
            row = await cur.fetchone()
        assert row is not None
        state = await self.get(tenant_id, schedule_id=row["schedule_id"])
        assert state is not None
        return state

    async def retire(self, tenant_id: str, schedule_id: str, reason: str) -> ScheduleState | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """UPDATE schedules SET status = 'retired', next_fire_at = NULL, retired_reason = %s,
                           updated_at = now()
                    WHERE schedule_id = %s AND tenant_id = %s RETURNING schedule_id""",
                (reason, schedule_id, tenant_id),
            )
            row = await cur.fetchone()
        return await self.get(tenant_id, schedule_id=schedule_id) if row else None

    async def set_paused(
        self, tenant_id: str, schedule_id: str, paused: bool, next_fire_at: datetime | None
    ) -> ScheduleState | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """UPDATE schedules SET paused = %s,
                           next_fire_at = CASE WHEN status = 'active' THEN %s::timestamptz END, updated_at = now()
                    WHERE schedule_id = %s AND tenant_id = %s RETURNING schedule_id""",
                (paused, next_fire_at, schedule_id, tenant_id),
            )
            row = await cur.fetchone()
        return await self.get(tenant_id, schedule_id=schedule_id) if row else None

    async def mark_synced(self, schedule_id: str, synced_state: str | None, error: str | None) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                "UPDATE schedules SET synced_state = CASE WHEN %s::text IS NULL THEN %s ELSE synced_state END,"
                " sync_error = %s WHERE schedule_id = %s",
                (error, synced_state, error, schedule_id),
            )

    async def all_states(self, limit: int = 10_000) -> builtins.list[ScheduleState]:
        """Every schedule of every tenant (reconciling an external scheduler)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(f"{_SELECT} ORDER BY s.created_at LIMIT %s", (limit,))
            return [_state(r) for r in await cur.fetchall()]

    @staticmethod
    async def def_body(conn: Any, def_id: str) -> dict[str, Any] | None:
        cur = await conn.execute("SELECT body FROM defs WHERE def_id = %s", (def_id,))
        row = await cur.fetchone()
        return row["body"] if row else None

    async def body_of(self, def_id: str) -> dict[str, Any] | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute("SELECT body FROM defs WHERE def_id = %s", (def_id,))
            row = await cur.fetchone()
        return row["body"] if row else None

    async def final_text(self, tenant_id: str, run_id: str) -> str:
        """The last assistant text of a run ("" if it said nothing)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT payload->>'text' AS text FROM events WHERE run_id = %s AND tenant_id = %s"
                f" AND type = '{EventType.TEXT}'"
                " ORDER BY seq DESC LIMIT 1",
                (run_id, tenant_id),
            )
            row = await cur.fetchone()
        return str(row["text"] or "") if row else ""

    async def recent_fires(self, tenant_id: str, schedule_id: str, limit: int = 20) -> builtins.list[dict[str, Any]]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"""SELECT f.scheduled_for, f.version, f.source, {_FIRE_STATUS} AS status, f.run_id,
                           {_FIRE_ERROR} AS error, f.hooks_status, f.hooks_result, f.fired_at
                    FROM {_FIRE_RUN} WHERE f.schedule_id = %s AND f.tenant_id = %s
                    ORDER BY f.scheduled_for DESC LIMIT %s""",
                (schedule_id, tenant_id, limit),
            )
            rows = await cur.fetchall()
        return [
            {**r, "scheduled_for": r["scheduled_for"].isoformat(), "fired_at": r["fired_at"].isoformat()} for r in rows
        ]

    # -- firing (inside the caller's transaction) --------------------------------------------------

    @staticmethod
    async def lock_due(conn: Any, now: datetime, limit: int) -> builtins.list[DueSchedule]:
        """Due active schedules, locked for this transaction; rows another sweeper holds are skipped."""
        cur = await conn.execute(
            f"""SELECT {_S_OWN}, {_NO_LAST}, d.body FROM schedules s JOIN defs d ON d.def_id = s.def_id
                WHERE s.next_fire_at <= %s AND s.status = 'active' AND NOT s.paused
                ORDER BY s.next_fire_at LIMIT %s FOR UPDATE OF s SKIP LOCKED""",
            (now, limit),
        )
        return [DueSchedule(_state(r), r["body"]) for r in await cur.fetchall()]

    @staticmethod
    async def lock_one(conn: Any, schedule_id: str) -> DueSchedule | None:
        cur = await conn.execute(
            f"""SELECT {_S_OWN}, {_NO_LAST}, d.body FROM schedules s JOIN defs d ON d.def_id = s.def_id
                WHERE s.schedule_id = %s FOR UPDATE OF s""",
            (schedule_id,),
        )
        row = await cur.fetchone()
        return DueSchedule(_state(row), row["body"]) if row else None

    @staticmethod
    async def insert_fires(
        conn: Any, fires: builtins.list[FireRow], status: str = "claimed"
    ) -> set[tuple[str, datetime]]:
        """Claim fires in one statement; returns the (schedule_id, scheduled_for) this call inserted."""
        if not fires:
            return set()
        cur = await conn.execute(
            """INSERT INTO schedule_fires (schedule_id, scheduled_for, tenant_id, def_id, version, source, status)
               SELECT * , %s FROM unnest(%s::text[], %s::timestamptz[], %s::text[], %s::text[], %s::int[], %s::text[])
               ON CONFLICT (schedule_id, scheduled_for) DO NOTHING
               RETURNING schedule_id, scheduled_for""",
            (
                status,
                [f.schedule_id for f in fires],
                [f.scheduled_for for f in fires],
                [f.tenant_id for f in fires],
                [f.def_id for f in fires],
                [f.version for f in fires],
                [f.source for f in fires],
            ),
        )
        return {(r["schedule_id"], r["scheduled_for"]) for r in await cur.fetchall()}

    @staticmethod
    async def advance(
        conn: Any,
        updates: builtins.list[tuple[str, datetime | None, int, int, datetime | None, str | None]],
    ) -> None:
        """Per schedule: (id, next_fire_at, fired, skipped, last_fire_at, retire_reason)."""
        if not updates:
            return
        cols = list(zip(*updates, strict=True))
        await conn.execute(
            """UPDATE schedules s SET
                 next_fire_at = CASE WHEN u.retire IS NOT NULL THEN NULL
                                     ELSE greatest(s.next_fire_at, u.nxt) END,
                 fire_count = s.fire_count + u.fired, total_fires = s.total_fires + u.fired,
                 skipped_fires = s.skipped_fires + u.skipped,
                 last_fire_at = CASE WHEN u.last IS NULL THEN s.last_fire_at
                                     ELSE greatest(coalesce(s.last_fire_at, u.last), u.last) END,
                 status = CASE WHEN u.retire IS NOT NULL THEN 'retired' ELSE s.status END,
                 retired_reason = coalesce(u.retire, s.retired_reason), updated_at = now()
               FROM unnest(%s::text[], %s::timestamptz[], %s::int[], %s::int[], %s::timestamptz[], %s::text[])
                    AS u(id, nxt, fired, skipped, last, retire)
               WHERE s.schedule_id = u.id""",
            [list(c) for c in cols],
        )

    @staticmethod
    async def clear_next(conn: Any, schedule_ids: builtins.list[str]) -> None:
        await conn.execute("UPDATE schedules SET next_fire_at = NULL WHERE schedule_id = ANY(%s)", (schedule_ids,))

    @staticmethod
    async def fire(conn: Any, schedule_id: str, at: datetime) -> dict[str, Any]:
        cur = await conn.execute(
            "SELECT run_id, status, def_id, version FROM schedule_fires WHERE schedule_id = %s AND scheduled_for = %s",
            (schedule_id, at),
        )
        row = await cur.fetchone()
        return dict(row) if row else {}

    async def record_starts(
        self, results: builtins.list[tuple[str, datetime, str | None, str, str | None, bool]]
    ) -> None:
        """Per fire: (schedule_id, scheduled_for, run_id, status, error, hooks_pending)."""
        if not results:
            return
        cols = [list(c) for c in zip(*results, strict=True)]
        async with self.pool.connection() as conn:
            await conn.execute(
                """UPDATE schedule_fires f SET run_id = u.run_id, status = u.status, error = u.error,
                          hooks_status = CASE WHEN u.hooks THEN 'pending' ELSE f.hooks_status END
                   FROM unnest(%s::text[], %s::timestamptz[], %s::text[], %s::text[], %s::text[], %s::bool[])
                        AS u(id, at, run_id, status, error, hooks)
                   WHERE f.schedule_id = u.id AND f.scheduled_for = u.at""",
                cols,
            )

    @staticmethod
    async def lock_unstarted(conn: Any, older_than_s: float, limit: int) -> builtins.list[dict[str, Any]]:
        """Fires claimed but never given a run (the claimant died in between), locked."""
        cur = await conn.execute(
            """SELECT f.schedule_id, f.scheduled_for, f.tenant_id, f.def_id, f.version, f.source, s.name, d.body
               FROM schedule_fires f JOIN schedules s ON s.schedule_id = f.schedule_id
               JOIN defs d ON d.def_id = f.def_id
               WHERE f.status = 'claimed' AND f.fired_at < now() - make_interval(secs => %s)
               ORDER BY f.fired_at LIMIT %s FOR UPDATE OF f SKIP LOCKED""",
            (older_than_s, limit),
        )
        return list(await cur.fetchall())

    # -- on_complete hooks -----------------------------------------------------------------------

    async def claim_hooks(self, limit: int = 100) -> builtins.list[dict[str, Any]]:
        """Fires whose run has ended and whose hooks have not run: claimed for running now."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """WITH c AS (
                     SELECT f.schedule_id, f.scheduled_for FROM schedule_fires f JOIN runs r ON r.id = f.run_id
                     WHERE f.hooks_status IN ('pending', 'running') AND r.status IN ('completed', 'failed', 'cancelled')
                       AND (f.hooks_status = 'pending' OR f.hooks_claimed_at < now() - make_interval(secs => %s))
                     ORDER BY f.fired_at LIMIT %s FOR UPDATE OF f SKIP LOCKED)
                   UPDATE schedule_fires f SET hooks_status = 'running', hooks_claimed_at = now()
                   FROM c, runs r, schedules s
                   WHERE f.schedule_id = c.schedule_id AND f.scheduled_for = c.scheduled_for AND r.id = f.run_id
                     AND s.schedule_id = f.schedule_id
                   RETURNING f.schedule_id, f.scheduled_for, f.tenant_id, f.def_id, f.run_id, r.status AS run_status,
                             r.agent, r.user_id, s.name""",
                (HOOK_RECLAIM_S, limit),
            )
            return list(await cur.fetchall())

    async def finish_hooks(self, schedule_id: str, scheduled_for: datetime, status: str, result: Any) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                "UPDATE schedule_fires SET hooks_status = %s, hooks_result = %s"
                " WHERE schedule_id = %s AND scheduled_for = %s",
                (status, Jsonb(result), schedule_id, scheduled_for),
            )
