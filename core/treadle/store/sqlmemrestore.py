"""SQL-memory scopes in snapshots and tenant exports (issue 41 item 5): capture each scope's schema
and rows (store/sqlmemdump.py), and restore them — all of them with the snapshot's rows, or none.

Restore, under the scope role's limits: each scope is recreated by a connection logged in as the
scope's own role (store/sqlmem.py: a member of nothing, CREATE on its schema only), every
statement of the document first passing SQL memory's statement floor, the rows written with
COPY into tables that role made, the scope's byte quota checked before it commits — so a
document, however written, reaches no further than an agent of that scope could. The scope is
named here from (this database, the entry's tenant, scope, scope_id): the source's schema names
are never used, and a tenant's restore can only hold its own tenant's scopes (portable/snapshots.py).

All or nothing across two databases: the scopes are first built in staging schemas of their own
(`treadle_sqlmem.staged` names them), then the snapshot's rows are written in treadle's database
in one transaction that also records the restore's id (`snapshot_sql_restores`, migration 0096)
— the commit point — and then one transaction of the SQL-memory database renames the staging
schemas into place. The restoring process holds an advisory lock named after the restore
throughout. Killed anywhere, the next sweeper pass (`recover`) finds the staged schemas of a
restore whose lock is free: committed (its id recorded) → moved into place; not → dropped."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from treadle.errors import SnapshotRefused, TreadleError
from treadle.store.sqlmem import SCOPES, ScopeKey, SqlMemory
from treadle.store.sqlmemdump import dump_scope

#: the statement floor (knowledge/sqlcheck.py): the statement to run, or a TreadleError
Floor = Callable[[str], str]
#: the restore ids of those given that committed in treadle's database
Journal = Callable[[list[str]], Awaitable[set[str]]]

_HOLDS = """SELECT (SELECT count(*) FROM pg_class WHERE relnamespace = n.oid)
                 + (SELECT count(*) FROM pg_proc WHERE pronamespace = n.oid)
                 + (SELECT count(*) FROM pg_type WHERE typnamespace = n.oid AND typtype IN ('e', 'd', 'r')) AS n
              FROM pg_namespace n WHERE n.nspname = %s"""


@dataclass(slots=True)
class Staged:
    restore_id: str
    #: scopes moved into place (set once the restore commits)
    restored: int = 0
    warnings: list[str] = field(default_factory=list)


def _lock_key(restore_id: str) -> str:
    return f"treadle_sqlrestore:{restore_id}"


def _label(key: ScopeKey) -> str:
    return f"{key.tenant}/{key.scope}/{key.scope_id or '-'}"


class SqlScopeSnapshots:
    def __init__(self, host: SqlMemory, floor: Floor) -> None:
        self.host = host
        self.floor = floor

    # -- capture ----------------------------------------------------------------------------------

    async def capture(self, tenant: str | None) -> list[dict[str, Any]]:
        """One entry per scope (of one tenant, or of every tenant for None):
        `{tenant_id, scope, scope_id, pre, data, sequences, post, not_carried}`."""
        entries: list[dict[str, Any]] = []
        for key in await self.host.scopes(tenant):
            schema, _ = self.host.names(key)
            async with await self.host._admin() as conn:
                dump = await dump_scope(conn, schema)
            entries.append({"tenant_id": key.tenant, "scope": key.scope, "scope_id": key.scope_id, **dump})
        return entries

    # -- restore ----------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def restoring(self, entries: list[dict[str, Any]]) -> AsyncIterator[Staged]:
        """Stage every entry's scope, then let the caller commit its rows (recording
        `restore_id` in that transaction); a clean exit moves the scopes into place, an error
        drops them. SnapshotRefused when a scope cannot be recreated (nothing staged stays)."""
        await self.host.open()
        staged = Staged(secrets.token_hex(8))
        lock = await self.host._admin()
        try:
            await lock.execute("SELECT pg_advisory_lock(hashtext(%s))", (_lock_key(staged.restore_id),))
            try:
                for entry in entries:
                    await self._stage(staged, entry)
                yield staged
            except BaseException:
                with contextlib.suppress(psycopg.Error, OSError):
                    await self._discard(staged.restore_id)
                raise
            # committed: from here a failure leaves the staged scopes for `recover` to move in
            staged.restored, kept = await self._finalize(staged.restore_id)
            staged.warnings += [f"SQL memory scope {k} exists here and holds objects: kept as it is" for k in kept]
        finally:
            with contextlib.suppress(psycopg.Error, OSError):
                await lock.close()

    async def _stage(self, staged: Staged, entry: dict[str, Any]) -> None:
        key = _key(entry)
        final, role = self.host.names(key)
        schema = f"r{staged.restore_id}_{final.removeprefix('s_')}"
        async with await self.host._admin() as conn:
            if await _holds(conn, final):
                staged.warnings.append(f"SQL memory scope {_label(key)} exists here and holds objects: kept as it is")
                return
            await self.host.ensure_role(conn, final, role)
            async with conn.transaction():
                await conn.execute(sql.SQL("CREATE SCHEMA {} AUTHORIZATION {}").format(
                    sql.Identifier(schema), sql.Identifier(role)))
                await conn.execute(sql.SQL("REVOKE ALL ON SCHEMA {} FROM PUBLIC").format(sql.Identifier(schema)))
                await conn.execute(
                    "INSERT INTO treadle_sqlmem.staged (staging_schema, restore_id, schema_name, role_name, tenant_id,"
                    " scope, scope_id) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                    (schema, staged.restore_id, final, role, key.tenant, key.scope, key.scope_id))
        try:
            await self._fill(key, schema, role, entry)
        except TreadleError as exc:
            raise SnapshotRefused(f"SQL memory scope {_label(key)}: {exc.message}",
                                  code=exc.code if exc.code.startswith("sql_") else "snapshot_invalid") from None
        except psycopg.Error as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise SnapshotRefused(f"SQL memory scope {_label(key)}: {first}", code="snapshot_invalid") from None
        for note in entry.get("not_carried") or []:
            staged.warnings.append(f"SQL memory scope {_label(key)}: not carried by the snapshot: {note}")

    async def _fill(self, key: ScopeKey, schema: str, role: str, entry: dict[str, Any]) -> None:
        """Recreate the entry in `schema`, logged in as the scope's role, in one transaction."""
        conn = await self.host._connect(role)
        try:
            async with conn.transaction():
                await conn.execute(sql.SQL("SET LOCAL search_path = {}").format(sql.Identifier(schema)))
                await conn.execute("SET LOCAL check_function_bodies = off")  # functions before their tables
                for statement in _strings(entry, "pre"):
                    await conn.execute(self.floor(statement).encode())
                for table in entry.get("data") or []:
                    await _copy_in(conn, schema, table)
                for seq in entry.get("sequences") or []:
                    await _set_sequence(conn, schema, seq)
                for statement in _strings(entry, "post"):
                    await conn.execute(self.floor(statement).encode())
                size = await self.host._size(conn, schema)
                quota = self.host.settings.quota_bytes
                if size > quota:
                    raise TreadleError(f"it would hold {size} bytes; the scope's quota is {quota}",
                                       code="sql_quota_exceeded")
        finally:
            await conn.close()

    async def _finalize(self, restore_id: str) -> tuple[int, list[str]]:
        """Move a committed restore's staged scopes into place (one transaction): (moved, kept)."""
        moved, kept = 0, []
        async with await self.host._admin() as conn, conn.transaction():
            cur = await conn.execute("SELECT * FROM treadle_sqlmem.staged WHERE restore_id = %s ORDER BY 1 FOR UPDATE",
                                     (restore_id,))
            for r in await cur.fetchall():
                staging, final = sql.Identifier(r["staging_schema"]), sql.Identifier(r["schema_name"])
                if await _holds(conn, r["schema_name"]):  # an agent wrote there meanwhile: its data stays
                    await conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(staging))
                    kept.append(_label(ScopeKey(r["tenant_id"], r["scope"], r["scope_id"])))
                    continue
                await conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(final))
                await conn.execute(sql.SQL("ALTER SCHEMA {} RENAME TO {}").format(staging, final))
                await conn.execute(
                    "INSERT INTO treadle_sqlmem.scopes (schema_name, role_name, tenant_id, scope, scope_id)"
                    " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (schema_name) DO UPDATE SET last_used_at = now()",
                    (r["schema_name"], r["role_name"], r["tenant_id"], r["scope"], r["scope_id"]))
                self.host._known.pop(r["schema_name"], None)
                moved += 1
            await conn.execute("DELETE FROM treadle_sqlmem.staged WHERE restore_id = %s", (restore_id,))
        return moved, kept

    async def _discard(self, restore_id: str) -> int:
        """Drop a restore's staged scopes (it never committed): how many."""
        async with await self.host._admin() as conn:
            cur = await conn.execute("SELECT * FROM treadle_sqlmem.staged WHERE restore_id = %s", (restore_id,))
            rows = await cur.fetchall()
            for r in rows:
                await conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                    sql.Identifier(r["staging_schema"])))
                await conn.execute("DELETE FROM treadle_sqlmem.staged WHERE staging_schema = %s",
                                   (r["staging_schema"],))
                cur = await conn.execute(
                    "SELECT to_regnamespace(%s) IS NULL AND NOT EXISTS (SELECT 1 FROM treadle_sqlmem.scopes"
                    " WHERE role_name = %s) AS orphan", (r["schema_name"], r["role_name"]))
                orphan = await cur.fetchone()
                if orphan and orphan["orphan"]:  # a role made for a scope that is not here
                    with contextlib.suppress(psycopg.Error):
                        await conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(r["role_name"])))
        return len(rows)

    async def recover(self, journal: Journal) -> dict[str, int]:
        """The restores a killed process left staged (see the module docstring): `{"moved",
        "dropped"}` scopes. A restore still held by a live process is left alone."""
        await self.host.open()
        out = {"moved": 0, "dropped": 0}
        async with await self.host._admin() as conn:
            cur = await conn.execute("SELECT DISTINCT restore_id FROM treadle_sqlmem.staged ORDER BY 1")
            ids = [r["restore_id"] for r in await cur.fetchall()]
            for restore_id in ids:
                cur = await conn.execute("SELECT pg_try_advisory_lock(hashtext(%s)) AS got", (_lock_key(restore_id),))
                got = await cur.fetchone()
                if not got or not got["got"]:
                    continue
                try:
                    if restore_id in await journal([restore_id]):
                        out["moved"] += (await self._finalize(restore_id))[0]
                    else:
                        out["dropped"] += await self._discard(restore_id)
                finally:
                    await conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (_lock_key(restore_id),))
        return out


def _key(entry: dict[str, Any]) -> ScopeKey:
    tenant, scope, scope_id = entry.get("tenant_id"), entry.get("scope"), entry.get("scope_id")
    if not isinstance(tenant, str) or not tenant or scope not in SCOPES or not isinstance(scope_id, str):
        raise SnapshotRefused("sql_memory: an entry needs tenant_id, scope (agent, user, run, tenant) and scope_id",
                              code="snapshot_invalid")
    for name in ("pre", "post", "data", "sequences"):
        if not isinstance(entry.get(name, []), list):
            raise SnapshotRefused(f"sql_memory: {name} must be a list", code="snapshot_invalid")
    return ScopeKey(tenant, str(scope), scope_id)


def _strings(entry: dict[str, Any], name: str) -> list[str]:
    values = entry.get(name) or []
    if not all(isinstance(v, str) for v in values):
        raise TreadleError(f"{name}: every statement must be a string", code="snapshot_invalid")
    return list(values)


async def _holds(conn: psycopg.AsyncConnection[Any], schema: str) -> bool:
    """Whether `schema` exists and holds any object."""
    row = await (await conn.execute(_HOLDS, (schema,))).fetchone()
    return bool(row and row["n"])


async def _copy_in(conn: psycopg.AsyncConnection[Any], schema: str, table: Any) -> None:
    if not isinstance(table, dict) or not isinstance(table.get("table"), str) or not isinstance(
            table.get("copy"), str) or not all(isinstance(c, str) for c in table.get("columns") or []):
        raise TreadleError("data: each entry needs table, columns and copy", code="snapshot_invalid")
    if not table["copy"] or not table.get("columns"):
        return
    query = sql.SQL("COPY {}.{} ({}) FROM STDIN").format(
        sql.Identifier(schema), sql.Identifier(table["table"]),
        sql.SQL(", ").join(sql.Identifier(c) for c in table["columns"]))
    async with conn.cursor() as cur, cur.copy(query) as copy:
        await copy.write(table["copy"].encode())


async def _set_sequence(conn: psycopg.AsyncConnection[Any], schema: str, seq: Any) -> None:
    if not isinstance(seq, dict) or isinstance(seq.get("value"), bool) or not isinstance(seq.get("value"), int):
        raise TreadleError("sequences: each entry needs an integer value", code="snapshot_invalid")
    called = bool(seq.get("is_called", True))
    ident = sql.Identifier
    if isinstance(seq.get("name"), str):
        name = sql.SQL("{}.{}").format(ident(schema), ident(seq["name"])).as_string(conn)
        await conn.execute("SELECT setval(%s::regclass, %s, %s)", (name, seq["value"], called))
        return
    owner = seq.get("identity")
    if not (isinstance(owner, list) and len(owner) == 2 and all(isinstance(x, str) for x in owner)):
        raise TreadleError("sequences: each entry needs a name or an identity [table, column]", code="snapshot_invalid")
    table = sql.SQL("{}.{}").format(ident(schema), ident(owner[0])).as_string(conn)
    await conn.execute("SELECT setval(pg_get_serial_sequence(%s, %s), %s, %s)", (table, owner[1], seq["value"], called))
