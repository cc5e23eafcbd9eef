"""Volume rows: ephemeral instances, sub-agent grants, and the file tools' effect journal."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from treadle.domain.events import EventType
from treadle.store.db import Pool

TERMINAL = ("completed", "failed", "cancelled")


@dataclass(frozen=True, slots=True)
class Instance:
    tenant_id: str
    root_run_id: str
    name: str
    location: str


@dataclass(frozen=True, slots=True)
class Effect:
    """What an earlier attempt of a file-tool call wrote: the file's hash before and after."""

    before_sha256: str | None
    after_sha256: str
    result: str


class VolumeStore:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    # -- ephemeral instances -------------------------------------------------------------------

    async def record_instance(self, inst: Instance) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                "INSERT INTO volume_instances (root_run_id, name, tenant_id, location) VALUES (%s, %s, %s, %s)"
                " ON CONFLICT DO NOTHING",
                (inst.root_run_id, inst.name, inst.tenant_id, inst.location),
            )

    async def instances(self, root_run_id: str) -> list[Instance]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT tenant_id, root_run_id, name, location FROM volume_instances WHERE root_run_id = %s",
                (root_run_id,),
            )
            return [Instance(**r) for r in await cur.fetchall()]

    async def ended_instances(self, limit: int = 100) -> list[Instance]:
        """Instances whose top-level run has ended (or no longer exists)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """SELECT i.tenant_id, i.root_run_id, i.name, i.location FROM volume_instances i
                   LEFT JOIN runs r ON r.id = i.root_run_id
                   WHERE r.id IS NULL OR r.status = ANY(%s) ORDER BY i.created_at LIMIT %s""",
                (list(TERMINAL), limit),
            )
            return [Instance(**r) for r in await cur.fetchall()]

    async def forget_instance(self, inst: Instance) -> None:
        async with self.pool.connection() as conn:
            await conn.execute("DELETE FROM volume_instances WHERE root_run_id = %s AND name = %s",
                               (inst.root_run_id, inst.name))

    async def run_ended(self, run_id: str) -> bool:
        async with self.pool.connection() as conn:
            cur = await conn.execute("SELECT status FROM runs WHERE id = %s", (run_id,))
            row = await cur.fetchone()
        return row is None or row["status"] in TERMINAL

    # -- sub-agent grants ------------------------------------------------------------------------

    async def grant(self, tenant_id: str, run_id: str, grants: dict[str, str]) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                "INSERT INTO run_volume_grants (run_id, tenant_id, grants) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                (run_id, tenant_id, Jsonb(grants)),
            )

    async def grants(self, tenant_id: str, run_id: str) -> dict[str, str] | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute("SELECT grants FROM run_volume_grants WHERE run_id = %s AND tenant_id = %s",
                                     (run_id, tenant_id))
            row = await cur.fetchone()
        if row is None:
            return None
        value: Any = row["grants"]
        return {str(k): str(v) for k, v in value.items()}

    # -- the effect journal ----------------------------------------------------------------------

    async def effect(self, run_id: str, tool_use_id: str, location: str, path: str) -> Effect | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT before_sha256, after_sha256, result FROM volume_effects"
                " WHERE run_id = %s AND tool_use_id = %s AND location = %s AND path = %s",
                (run_id, tool_use_id, location, path),
            )
            row = await cur.fetchone()
        return Effect(**row) if row is not None else None

    async def record_effect(
        self, tenant_id: str, run_id: str, tool_use_id: str, location: str, path: str, effect: Effect,
        user_id: str | None = None,
    ) -> None:
        """The call's effect, before its write; with the run's `user_id`, the file's author too
        (`volume_files`: a subject's erasure deletes the files its runs wrote) — one statement."""
        async with self.pool.connection() as conn:
            await conn.execute(
                """WITH author AS (
                       INSERT INTO volume_files (tenant_id, user_id, location, path)
                       SELECT %(t)s, %(u)s, %(loc)s, %(path)s WHERE coalesce(%(u)s, '') <> ''
                       ON CONFLICT (tenant_id, user_id, location, path) DO UPDATE SET written_at = now())
                   INSERT INTO volume_effects (run_id, tool_use_id, location, path, tenant_id, before_sha256,
                                               after_sha256, result)
                   VALUES (%(run)s, %(call)s, %(loc)s, %(path)s, %(t)s, %(before)s, %(after)s, %(result)s)
                   ON CONFLICT (run_id, tool_use_id, location, path) DO UPDATE
                   SET before_sha256 = EXCLUDED.before_sha256, after_sha256 = EXCLUDED.after_sha256,
                       result = EXCLUDED.result""",
                {"t": tenant_id, "u": user_id, "loc": location, "path": path, "run": run_id, "call": tool_use_id,
                 "before": effect.before_sha256, "after": effect.after_sha256, "result": effect.result},
            )

    async def answered(self, run_id: str, tool_use_id: str) -> bool:
        """Whether the transcript holds the call's result: another attempt of it committed, so
        this one is stale and must not write (builtins/files/common.py)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT EXISTS (SELECT 1 FROM events WHERE run_id = %s AND tool_use_id = %s"
                f" AND type = '{EventType.TOOL_RESULT}') AS done",
                (run_id, tool_use_id),
            )
            row = await cur.fetchone()
        return bool(row and row["done"])

    async def ended(self, run_id: str) -> list[Instance]:
        """After a run's last commit, in one statement: forget its effect journal (it never runs a
        step again) and return the instances it is the top-level run of (none for most runs)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "WITH forget AS (DELETE FROM volume_effects WHERE run_id = %(run)s)"
                " SELECT tenant_id, root_run_id, name, location FROM volume_instances WHERE root_run_id = %(run)s",
                {"run": run_id},
            )
            return [Instance(**r) for r in await cur.fetchall()]

    async def forget_ended_effects(self, limit: int = 1000) -> int:
        """The sweeper's pass over journals of ended runs (a crash skipped `ended`)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """DELETE FROM volume_effects WHERE ctid IN (
                       SELECT e.ctid FROM volume_effects e LEFT JOIN runs r ON r.id = e.run_id
                       WHERE r.id IS NULL OR r.status = ANY(%s) LIMIT %s)""",
                (list(TERMINAL), limit),
            )
            return cur.rowcount
