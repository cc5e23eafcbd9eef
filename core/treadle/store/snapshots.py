"""Snapshots' SQL (migration 0066; treadle/portable/snapshots.py builds and reads the document).

Capture reads each table of `TABLES` as JSON rows (`to_jsonb`), of one tenant or of every tenant,
the runs limited to `select_runs`. Restore writes the rows back with `jsonb_populate_recordset`
into the columns the rows and this database share, `ON CONFLICT DO NOTHING` (a row whose key
exists here is kept as it is and not counted: loomcycle's `rows_actually_written`), then moves the
serial sequences past the restored ids and hands back the restored runs that were mid-way (queued
or running) so that their next step is sent — parked runs stay parked on their wait keys.

Secrets never leave: `auth_tokens`, `run_credentials` and the sealed values of `credential_defs`
are not read at all; credentials travel as names (the `credentials` section, never restored).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from treadle.store.db import Pool


@dataclass(frozen=True, slots=True)
class Table:
    """One section of a snapshot: a table, the rows of it that belong to the snapshot."""

    section: str
    table: str
    #: which rows: "tenant" (every row of the tenant), "runs" (rows of the selected runs),
    #: "names" (credential names: captured, never restored)
    rows: str = "tenant"
    order: str = ""
    #: columns never captured
    omit: tuple[str, ...] = ()
    #: serial id column whose sequence a restore moves past the restored ids
    serial: str | None = None
    #: a table that exists only where pgvector does (made by `treadle_ensure_vector_memory()`):
    #: captured where it exists; a restore makes it where it can, else leaves its rows out (named)
    vectors: bool = False


#: every section, in restore order (a row's references before the row)
TABLES: tuple[Table, ...] = (
    Table("defs", "defs", order="def_id"),
    Table("def_active", "def_active"),
    Table("memory", "memory", order="scope, scope_id, key"),
    # how often search returned each entry (issue 41: the frequency signal of Memory search's rank)
    Table("memory_access", "memory_access", order="scope, scope_id, key"),
    # the entries' vectors as they are (embedder, model, dimension with each): carried, not re-embedded
    Table("memory_embeddings", "memory_embeddings", order="scope, scope_id, key", vectors=True),
    Table("channels", "channels", order="name"),
    Table("channel_messages", "channel_messages", order="id", serial="id"),
    Table("channel_cursors", "channel_cursors"),
    Table("schedules", "schedules", order="schedule_id", omit=("synced_state", "sync_error")),
    Table("schedule_fires", "schedule_fires", order="schedule_id, scheduled_for"),
    Table("tool_hooks", "tool_hooks", order="id"),
    Table("token_limits", "token_limits"),
    Table("evaluations", "evaluations"),
    # the Path tree and Documents (issue 41): parents before the rows that reference them
    Table("dirents", "dirents", order="scope, scope_id, parent_path, name"),
    Table("documents", "documents", order="scope, scope_id, id"),
    Table("chunks", "chunks", order="scope, scope_id, document_id, id"),
    Table("chunk_edges", "chunk_edges", order="scope, scope_id, from_id, to_id, kind"),
    Table("chunk_types", "chunk_types", order="scope, scope_id, document_id, name"),
    Table("chunk_embeddings", "chunk_embeddings", order="scope, scope_id, chunk_id", vectors=True),
    Table("chunk_revisions", "chunk_revisions", order="scope, scope_id, chunk_id, revision"),
    Table("chunk_tags", "chunk_tags", order="scope, scope_id, chunk_id, tag"),
    Table("document_tags", "document_tags", order="scope, scope_id, document_id, tag"),
    Table("sessions", "sessions", order="created_at, id"),
    Table("session_embeddings", "session_embeddings", order="session_id"),
    Table("runs", "runs", rows="runs", order="created_at, id"),
    Table("events", "events", rows="runs", order="run_id, seq"),
    Table("run_waits", "run_waits", rows="runs", order="run_id, tool_use_id, key"),
    Table("wait_keys", "wait_keys", order="key"),
    Table("wait_timers", "wait_timers", order="key, due_at"),
    Table("interrupts", "interrupts", rows="runs", order="run_id, id"),
    Table("run_inputs", "run_inputs", rows="runs", order="id", serial="id"),
    Table("client_tool_results", "client_tool_results", rows="runs", order="run_id, tool_use_id"),
    # resident sub-agents (issue 36 item 1): a child opened by Agent op=open, its TTL and close state
    Table("resident_children", "resident_children", rows="runs", order="run_id"),
    Table("credentials", "credential_defs", rows="names", order="scope, scope_id, name", omit=("sealed", "key_id")),
)
SECTIONS = {t.section: t for t in TABLES}
#: statuses of a run that has not ended
LIVE = ("queued", "running", "waiting")

_TENANT = "(%(tenant)s::text IS NULL OR tenant_id = %(tenant)s)"


@dataclass(frozen=True, slots=True)
class SnapshotRow:
    id: str
    tenant_id: str | None
    label: str | None
    schema_version: int
    byte_size: int
    created_at: datetime
    json_content: dict[str, Any] | None = None


@dataclass(slots=True)
class Restored:
    #: rows written per section (rows whose key existed here are not counted)
    written: dict[str, int]
    #: runs written, by their status
    runs_by_status: dict[str, int]
    #: restored runs that were mid-way, leased here for a fresh step: (run_id, step_no)
    to_send: list[tuple[str, int]]
    #: sections whose rows this database cannot hold (vector tables without pgvector)
    skipped: list[str] = field(default_factory=list)


class SnapshotStore:
    def __init__(self, pool: Pool, *, jobs_in_db: bool) -> None:
        self.pool = pool
        self.jobs_in_db = jobs_in_db

    # -- capture ----------------------------------------------------------------------------------

    async def select_runs(self, tenant: str | None, *, history: bool, since: datetime | None) -> list[str]:
        """The runs a snapshot holds: every run not ended, every ended one too with `history`
        (created at `since` or later), and with each of them the runs of its session (a
        continuation reads them in place) and of its tree (its root, parents and children)."""
        sql = f"""
        WITH base AS (
            SELECT id, session_id, coalesce(root_run_id, id) AS root FROM runs
            WHERE {_TENANT} AND (status = ANY(%(live)s)
                  OR (%(history)s AND created_at >= coalesce(%(since)s, '-infinity'::timestamptz)))
        )
        SELECT id FROM runs WHERE {_TENANT} AND (
            id IN (SELECT id FROM base)
            OR session_id IN (SELECT session_id FROM base WHERE session_id IS NOT NULL)
            OR coalesce(root_run_id, id) IN (SELECT root FROM base))
        ORDER BY created_at, id"""
        async with self.pool.connection() as conn:
            cur = await conn.execute(sql, {"tenant": tenant, "live": list(LIVE), "history": history, "since": since})
            return [r["id"] for r in await cur.fetchall()]

    async def capture(self, table: Table, tenant: str | None, run_ids: list[str]) -> list[dict[str, Any]]:
        """The section's rows as JSON objects (the column names as keys)."""
        where = _TENANT + (
            " AND run_id = ANY(%(runs)s)"
            if table.rows == "runs" and table.table != "runs"
            else " AND id = ANY(%(runs)s)"
            if table.table == "runs"
            else ""
        )
        omit = "".join(f" - '{c}'" for c in table.omit)
        order = f" ORDER BY {table.order}" if table.order else ""
        sql = f"SELECT to_jsonb(t.*){omit} AS row FROM {table.table} t WHERE {where}{order}"
        async with self.pool.connection() as conn:
            if table.vectors and not await _exists(conn, table.table):
                return []
            cur = await conn.execute(sql, {"tenant": tenant, "runs": run_ids})
            return [r["row"] for r in await cur.fetchall()]

    async def runs_with_credentials(self, run_ids: list[str]) -> list[str]:
        """The runs that hold per-run credentials (their ids only: the sealed values stay)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT run_id FROM run_credentials WHERE run_id = ANY(%s) ORDER BY run_id", (run_ids,)
            )
            return [r["run_id"] for r in await cur.fetchall()]

    # -- restore ----------------------------------------------------------------------------------

    async def restore(self, sections: dict[str, list[dict[str, Any]]], *, marker: str | None = None) -> Restored:
        """Write every section's rows in one transaction (see the module docstring); `marker`:
        a restore id recorded in the same transaction (SQL-memory scopes staged for it,
        store/sqlmemrestore.py)."""
        written: dict[str, int] = {}
        by_status: dict[str, int] = {}
        skipped: list[str] = []
        midway: list[str] = []  # restored runs that were queued or running (not those already here)
        async with self.pool.connection() as conn, conn.transaction():
            if marker is not None:
                await conn.execute("INSERT INTO snapshot_sql_restores (restore_id) VALUES (%s)", (marker,))
            for table in TABLES:
                rows = sections.get(table.section) or []
                if table.rows == "names" or not rows:
                    written[table.section] = 0
                    continue
                if table.vectors and not await _vectors_here(conn, table.table):
                    skipped.append(table.section)
                    written[table.section] = 0
                    continue
                cols = sorted(set().union(*(r.keys() for r in rows)) & await self._columns(conn, table.table))
                names = ", ".join(f'"{c}"' for c in cols)
                cur = await conn.execute(
                    f"""INSERT INTO {table.table} ({names})
                        SELECT {names} FROM jsonb_populate_recordset(NULL::{table.table}, %s)
                        ON CONFLICT DO NOTHING RETURNING {"id, status" if table.table == "runs" else "1 AS n"}""",
                    (Jsonb(_restored_rows(table, rows)),),
                )
                got = await cur.fetchall()
                written[table.section] = len(got)
                if table.table == "runs":
                    for r in got:
                        by_status[r["status"]] = by_status.get(r["status"], 0) + 1
                    midway = [r["id"] for r in got if r["status"] in ("queued", "running")]
                if table.serial:
                    await conn.execute(
                        f"""SELECT setval(pg_get_serial_sequence(%s, %s),
                                          greatest((SELECT max({table.serial}) FROM {table.table}),
                                                   (SELECT last_value FROM {table.table}_{table.serial}_seq)))""",
                        (table.table, table.serial),
                    )
            to_send = await self._lease_for_restart(conn, midway)
        return Restored(written, by_status, to_send, skipped)

    async def committed_restores(self, restore_ids: list[str]) -> set[str]:
        """Those of `restore_ids` whose rows committed here (store/sqlmemrestore.py's journal)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute("SELECT restore_id FROM snapshot_sql_restores WHERE restore_id = ANY(%s)",
                                     (restore_ids,))
            return {r["restore_id"] for r in await cur.fetchall()}

    async def forget_restore(self, restore_id: str) -> None:
        """A restore's scopes are in place: its journal row is done with."""
        async with self.pool.connection() as conn:
            await conn.execute("DELETE FROM snapshot_sql_restores WHERE restore_id = %s", (restore_id,))

    async def _columns(self, conn: Any, table: str) -> set[str]:
        cur = await conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped",
            (table,),
        )
        return {r["attname"] for r in await cur.fetchall()}

    async def _lease_for_restart(self, conn: Any, run_ids: list[str]) -> list[tuple[str, int]]:
        """Runs this restore wrote that were queued or running: no lease (the source's worker is not here),
        a re-queue deadline, and their next step enqueued (the sidecar's job queue; the caller
        sends a message with any other dispatcher)."""
        if not run_ids:
            return []
        cur = await conn.execute(
            """WITH r AS (
                   UPDATE runs SET lease_owner = NULL, lease_until = now() + interval '60 seconds',
                          updated_at = now()
                   WHERE id = ANY(%(ids)s) AND status IN ('queued', 'running')
                   RETURNING id, tenant_id, step_no, created_at
               ), jb AS (
                   INSERT INTO jobs (tenant_id, run_id, step_no, run_created)
                   SELECT tenant_id, id, step_no, created_at FROM r WHERE %(jobs)s
               )
               SELECT id, step_no FROM r""",
            {"ids": run_ids, "jobs": self.jobs_in_db},
        )
        return [(r["id"], r["step_no"]) for r in await cur.fetchall()]

    # -- the snapshots table ----------------------------------------------------------------------

    async def save(self, row: SnapshotRow) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                """INSERT INTO snapshots (id, tenant_id, label, schema_version, byte_size, json_content, created_at)
                   VALUES (%s, %s, %s, %s, %s, %s, %s)""",
                (
                    row.id,
                    row.tenant_id,
                    row.label,
                    row.schema_version,
                    row.byte_size,
                    Jsonb(row.json_content),
                    row.created_at,
                ),
            )

    async def list(self, tenant: str | None, label_contains: str, limit: int) -> list[SnapshotRow]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"""SELECT id, tenant_id, label, schema_version, byte_size, created_at FROM snapshots
                    WHERE {_TENANT} AND (%(label)s = '' OR strpos(coalesce(label, ''), %(label)s) > 0)
                    ORDER BY created_at DESC, id LIMIT %(limit)s""",
                {"tenant": tenant, "label": label_contains, "limit": limit},
            )
            return [SnapshotRow(**r) for r in await cur.fetchall()]

    async def get(self, tenant: str | None, snapshot_id: str) -> SnapshotRow | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"""SELECT id, tenant_id, label, schema_version, byte_size, created_at, json_content
                    FROM snapshots WHERE id = %(id)s AND {_TENANT}""",
                {"id": snapshot_id, "tenant": tenant},
            )
            row = await cur.fetchone()
        return SnapshotRow(**row) if row else None

    async def delete(self, tenant: str | None, snapshot_id: str) -> bool:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"DELETE FROM snapshots WHERE id = %(id)s AND {_TENANT}", {"id": snapshot_id, "tenant": tenant}
            )
            return cur.rowcount > 0


async def _exists(conn: Any, table: str) -> bool:
    cur = await conn.execute("SELECT to_regclass(%s) IS NOT NULL AS present", (table,))
    row = await cur.fetchone()
    return bool(row and row["present"])


async def _vectors_here(conn: Any, table: str) -> bool:
    """Whether a vector table exists here, made now where pgvector is available."""
    if await _exists(conn, table):
        return True
    cur = await conn.execute("SELECT CASE WHEN to_regproc('treadle_ensure_vector_memory') IS NULL THEN false"
                             " ELSE treadle_ensure_vector_memory() END AS ok")
    row = await cur.fetchone()
    return bool(row and row["ok"]) and await _exists(conn, table)


def _restored_rows(table: Table, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows as this database takes them: a restored run holds no lease of the source's."""
    if table.table != "runs":
        return rows
    return [{**r, "lease_owner": None} for r in rows]


def canonical(value: Any) -> bytes:
    """The bytes a checksum covers: sorted keys, no spaces, UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
