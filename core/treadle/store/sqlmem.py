"""SQL memory's host (loomcycle's RFC AA, Postgres tier): one schema per scope in a database of
its own, reached through a login role per scope that can reach nothing else.

Why a separate database: the agent's SQL never runs where treadle's tables are, so even a missed
escape cannot see runs, tokens or memory. Why a login role per scope, and a connection logged in
as it: the statement's `session_user` is the scope role, a member of nothing, so no role switch
(`SET ROLE`, `set_config('role', …)`, a function's `SET role`) reaches another scope. The role
has USAGE and CREATE on its own schema only; `public` and the bookkeeping schema are closed to
PUBLIC, and so is TEMP (temporary tables would dodge the quota).

Bounds per statement: the role's and the transaction's `statement_timeout`, and a client-side
cancel shortly after in case a statement dodges it (`sql_timeout`); a row cap and a byte cap on
what `sql_query` returns (a server-side cursor, so `generate_series(1, 1e12)` costs what is
fetched); a byte quota per scope measured on the scope's relations after a write, in the write's
transaction (over: rolled back, `sql_quota_exceeded`). Each call gets a fresh connection, so
nothing an agent sets in one session outlives its call.

Names: roles are per cluster, so a scope's role and schema are named by a hash of (this
database's name, tenant, scope, scope_id) — parallel databases on one server do not collide.
The statement floor (knowledge/sqlcheck.py) runs before anything here."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import decimal
import hashlib
import hmac
import json
import secrets
import time
import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import errors as pgerrors
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from treadle.errors import TreadleError

META = "treadle_sqlmem"
#: a process marks a scope used (its `last_used_at`) at most this often
TOUCH_EVERY_S = 3600.0
SCOPES = ("agent", "user", "run", "tenant")


class SqlMemoryError(TreadleError):
    """A statement of SQL memory failed; `code` says how (sql_timeout, sql_quota_exceeded,
    sql_permission_denied, sql_error, sql_not_enabled, sql_busy)."""

    code = "sql_error"
    status = 422


@dataclass(slots=True, frozen=True)
class SqlMemorySettings:
    database_url: str | None = None  # None: a database beside treadle's, named <its name>_sqlmem
    statement_timeout_ms: int = 30_000
    max_rows: int = 10_000
    max_result_bytes: int = 4 << 20
    quota_bytes: int = 64 << 20  # per scope; an agent's sql_quota_bytes overrides
    connect_timeout_s: float = 10.0


@dataclass(slots=True, frozen=True)
class ScopeKey:
    tenant: str
    scope: str
    scope_id: str


def _jsonable(v: Any) -> Any:
    if v is None or isinstance(v, bool | int | str):
        return v
    if isinstance(v, float):
        return v if v == v and v not in (float("inf"), float("-inf")) else str(v)
    if isinstance(v, decimal.Decimal):
        return int(v) if v == v.to_integral_value() and abs(v) < 1 << 53 else str(v)
    if isinstance(v, dt.datetime | dt.date | dt.time):
        return v.isoformat()
    if isinstance(v, dt.timedelta):
        return v.total_seconds()
    if isinstance(v, bytes | bytearray | memoryview):
        return {"base64": base64.b64encode(bytes(v)).decode()}
    if isinstance(v, uuid.UUID):
        return str(v)
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return str(v)


def _param(v: Any) -> Any:
    return Jsonb(v) if isinstance(v, dict | list) else v


def _failure(exc: BaseException, op: str) -> SqlMemoryError:
    if isinstance(exc, pgerrors.QueryCanceled):
        return SqlMemoryError(f"{op}: the statement ran past its timeout and was cancelled", code="sql_timeout")
    if isinstance(exc, pgerrors.InsufficientPrivilege):
        return SqlMemoryError(f"{op}: {str(exc).strip()}", code="sql_permission_denied")
    if isinstance(exc, pgerrors.ConfigurationLimitExceeded):  # temp_file_limit
        return SqlMemoryError(f"{op}: {str(exc).strip()}", code="sql_resource_limit")
    if isinstance(exc, pgerrors.ReadOnlySqlTransaction):
        return SqlMemoryError(f"{op}: sql_query is read-only; use sql_exec to write", code="sql_permission_denied")
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return SqlMemoryError(f"{op}: {msg}", code="sql_error")


class SqlMemory:
    """The per-scope SQL databases of one treadle database (see the module docstring)."""

    def __init__(self, main_url: str, settings: SqlMemorySettings | None = None) -> None:
        self.settings = settings or SqlMemorySettings()
        main = conninfo_to_dict(main_url)
        if self.settings.database_url:
            self.url = self.settings.database_url
        else:
            self.url = make_conninfo(main_url, dbname=f"{main.get('dbname') or 'treadle'}_sqlmem")
        self._main_url = main_url
        self.dbname = str(conninfo_to_dict(self.url).get("dbname") or "")
        self._ready = False
        self._ready_lock = asyncio.Lock()
        self._secret = b""
        #: scopes known to exist here → when this process last marked them used (time.monotonic)
        self._known: dict[str, float] = {}

    # ---- names ---------------------------------------------------------------------------

    def names(self, key: ScopeKey) -> tuple[str, str]:
        """(schema, role) of a scope."""
        digest = hashlib.sha256(
            "\x1f".join((self.dbname, key.tenant, key.scope, key.scope_id)).encode()).hexdigest()[:24]
        return f"s_{digest}", f"tsqm_{digest}"

    def _password(self, role: str) -> str:
        return hmac.new(self._secret, role.encode(), hashlib.sha256).hexdigest()

    # ---- provisioning --------------------------------------------------------------------

    async def _admin(self) -> psycopg.AsyncConnection[dict[str, Any]]:
        return await psycopg.AsyncConnection.connect(self.url, autocommit=True, row_factory=dict_row,
                                                     connect_timeout=int(self.settings.connect_timeout_s))

    async def open(self) -> None:
        """Create the database and its bookkeeping once (idempotent, safe with concurrent starts)."""
        if self._ready:
            return
        async with self._ready_lock:
            if self._ready:
                return
            if not self.settings.database_url:
                async with await psycopg.AsyncConnection.connect(self._main_url, autocommit=True) as main:
                    found = await main.execute("SELECT 1 FROM pg_database WHERE datname = %s", (self.dbname,))
                    if await found.fetchone() is None:
                        with contextlib.suppress(pgerrors.DuplicateDatabase):
                            await main.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.dbname)))
            async with await self._admin() as conn:
                await conn.execute("SELECT pg_advisory_lock(hashtext('treadle_sqlmem_setup'))")
                try:
                    await conn.execute(sql.SQL(
                        "REVOKE ALL ON SCHEMA public FROM PUBLIC;"
                        " REVOKE TEMPORARY ON DATABASE {} FROM PUBLIC;"
                        " CREATE SCHEMA IF NOT EXISTS treadle_sqlmem;"
                        " REVOKE ALL ON SCHEMA treadle_sqlmem FROM PUBLIC;"
                        " CREATE TABLE IF NOT EXISTS treadle_sqlmem.secret (id int PRIMARY KEY, value text NOT NULL);"
                        " CREATE TABLE IF NOT EXISTS treadle_sqlmem.scopes ("
                        "   schema_name text PRIMARY KEY, role_name text NOT NULL, tenant_id text NOT NULL,"
                        "   scope text NOT NULL, scope_id text NOT NULL,"
                        "   created_at timestamptz NOT NULL DEFAULT now(),"
                        "   last_used_at timestamptz NOT NULL DEFAULT now());"
                        # a snapshot restore's scopes, staged in schemas of their own until the
                        # restore commits (store/sqlmemrestore.py)
                        " CREATE TABLE IF NOT EXISTS treadle_sqlmem.staged ("
                        "   staging_schema text PRIMARY KEY, restore_id text NOT NULL, schema_name text NOT NULL,"
                        "   role_name text NOT NULL, tenant_id text NOT NULL, scope text NOT NULL,"
                        "   scope_id text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())"
                    ).format(sql.Identifier(self.dbname)))
                    await conn.execute("INSERT INTO treadle_sqlmem.secret VALUES (1, %s) ON CONFLICT DO NOTHING",
                                       (secrets.token_hex(32),))
                    cur = await conn.execute("SELECT value FROM treadle_sqlmem.secret WHERE id = 1")
                    row = await cur.fetchone()
                    assert row is not None
                    self._secret = str(row["value"]).encode()
                finally:
                    await conn.execute("SELECT pg_advisory_unlock(hashtext('treadle_sqlmem_setup'))")
            self._ready = True

    async def _ensure_scope(self, key: ScopeKey) -> tuple[str, str]:
        await self.open()
        schema, role = self.names(key)
        now = time.monotonic()
        seen = self._known.get(schema)
        if seen is not None and now - seen < TOUCH_EVERY_S:
            return schema, role
        async with await self._admin() as conn:
            cur = await conn.execute(  # marked used (retention drops scopes unused for memory_days)
                "UPDATE treadle_sqlmem.scopes SET last_used_at = now() WHERE schema_name = %s RETURNING 1", (schema,))
            if await cur.fetchone() is None:
                await conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (schema,))
                try:
                    await self._provision(conn, key, schema, role)
                finally:
                    await conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (schema,))
        self._known[schema] = now
        return schema, role

    async def _provision(self, conn: psycopg.AsyncConnection[Any], key: ScopeKey, schema: str, role: str) -> None:
        await self.ensure_role(conn, schema, role)
        ident_r, ident_s = sql.Identifier(role), sql.Identifier(schema)
        async with conn.transaction():
            await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {} AUTHORIZATION {}").format(ident_s, ident_r))
            await conn.execute(sql.SQL("REVOKE ALL ON SCHEMA {} FROM PUBLIC").format(ident_s))
            await conn.execute(
                "INSERT INTO treadle_sqlmem.scopes (schema_name, role_name, tenant_id, scope, scope_id)"
                " VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (schema, role, key.tenant, key.scope, key.scope_id))

    async def ensure_role(self, conn: psycopg.AsyncConnection[Any], schema: str, role: str) -> None:
        """The scope's login role with its settings (idempotent; `conn`: an admin connection)."""
        cur = await conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,))
        ident_r, ident_s = sql.Identifier(role), sql.Identifier(schema)
        if await cur.fetchone() is None:
            with contextlib.suppress(pgerrors.DuplicateObject):
                await conn.execute(sql.SQL(
                    "CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOREPLICATION"
                    " NOBYPASSRLS CONNECTION LIMIT 8 PASSWORD {}").format(ident_r, sql.Literal(self._password(role))))
        await conn.execute(sql.SQL("ALTER ROLE {} SET search_path = {}").format(ident_r, ident_s))
        await conn.execute(sql.SQL("ALTER ROLE {} SET statement_timeout = {}").format(
            ident_r, sql.Literal(int(self.settings.statement_timeout_ms))))
        with contextlib.suppress(psycopg.Error):  # superuser-only: where the admin may, temp files are bounded
            await conn.execute(sql.SQL("ALTER ROLE {} SET temp_file_limit = {}").format(
                ident_r, sql.Literal(f"{max(1, self.settings.quota_bytes >> 10)}kB")))

    async def drop_scope(self, key: ScopeKey) -> bool:
        """Drop a scope's schema (its data) and role; False when it did not exist."""
        await self.open()
        schema, role = self.names(key)
        self._known.pop(schema, None)
        async with await self._admin() as conn:
            cur = await conn.execute("DELETE FROM treadle_sqlmem.scopes WHERE schema_name = %s RETURNING 1", (schema,))
            existed = await cur.fetchone() is not None
            await conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
            await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
            await conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
        return existed

    async def scopes(self, tenant: str | None = None) -> list[ScopeKey]:
        await self.open()
        async with await self._admin() as conn:
            cur = await conn.execute(
                "SELECT tenant_id, scope, scope_id FROM treadle_sqlmem.scopes"
                " WHERE %(t)s::text IS NULL OR tenant_id = %(t)s ORDER BY 1, 2, 3", {"t": tenant})
            return [ScopeKey(r["tenant_id"], r["scope"], r["scope_id"]) for r in await cur.fetchall()]

    async def drop_ended_runs(self, main: Any) -> int:
        """Drop the `run` scopes whose run has finished (or is gone): the sweeper's pass, so a run's
        scratch database outlives it by at most one tick. `main`: treadle's pool."""
        await self.open()
        async with await self._admin() as conn:
            cur = await conn.execute(
                "SELECT tenant_id, scope_id FROM treadle_sqlmem.scopes WHERE scope = 'run' LIMIT 500")
            runs = [(r["tenant_id"], r["scope_id"]) for r in await cur.fetchall()]
        if not runs:
            return 0
        async with main.connection() as conn:
            cur = await conn.execute(
                "SELECT id FROM runs WHERE id = ANY(%s) AND status NOT IN ('completed', 'failed', 'cancelled')",
                ([run_id for _, run_id in runs],))
            live = {r["id"] for r in await cur.fetchall()}
        dropped = 0
        for tenant, run_id in runs:
            if run_id not in live:
                dropped += await self.drop_scope(ScopeKey(tenant, "run", run_id))
        return dropped

    async def drop_unused(self, days: int, *, tenant: str | None = None, exclude: list[str] | None = None,
                          limit: int = 50) -> int:
        """Retention (config `retention.memory_days`): drop up to `limit` scopes (agent, user,
        tenant; `run` scopes go with their run) not used for `days` — of one tenant, or of every
        tenant but `exclude`. How many went."""
        await self.open()
        async with await self._admin() as conn:
            cur = await conn.execute(
                "SELECT tenant_id, scope, scope_id FROM treadle_sqlmem.scopes WHERE scope <> 'run'"
                " AND last_used_at < now() - make_interval(days => %(days)s)"
                " AND (%(t)s::text IS NULL OR tenant_id = %(t)s) AND NOT (tenant_id = ANY(%(x)s))"
                " ORDER BY last_used_at LIMIT %(limit)s",
                {"days": days, "t": tenant, "x": exclude or [], "limit": limit})
            found = [ScopeKey(r["tenant_id"], r["scope"], r["scope_id"]) for r in await cur.fetchall()]
        return sum([await self.drop_scope(key) for key in found])

    async def drop_all(self) -> int:
        """Drop every scope of this database (tests; a tenant erase uses drop_scope per scope)."""
        found = await self.scopes()
        for key in found:
            await self.drop_scope(key)
        return len(found)

    # ---- statements ----------------------------------------------------------------------

    async def _connect(self, role: str) -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(
            make_conninfo(self.url, user=role, password=self._password(role), application_name="treadle-sqlmem"),
            connect_timeout=int(self.settings.connect_timeout_s))

    async def _bounded(self, conn: psycopg.AsyncConnection[Any], work: Any, op: str) -> Any:
        """Run `work` with the client-side backstop: past the timeout (plus a grace), cancel the
        statement on the server and close the connection."""
        limit = self.settings.statement_timeout_ms / 1000 + 2.0  # a per-call timeout is only shorter
        task = asyncio.ensure_future(work)
        try:
            return await asyncio.wait_for(asyncio.shield(task), limit)
        except TimeoutError:
            with contextlib.suppress(psycopg.Error, OSError):
                await conn.cancel_safe(timeout=5.0)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            raise SqlMemoryError(f"{op}: the statement ran past its timeout and was cancelled",
                                 code="sql_timeout") from None

    async def _vacuum(self, schema: str) -> None:
        async with await self._admin() as conn:
            cur = await conn.execute(
                "SELECT c.relname FROM pg_class c WHERE c.relnamespace = %s::regnamespace AND c.relkind = 'r'",
                (schema,))
            for r in await cur.fetchall():
                with contextlib.suppress(psycopg.Error):
                    await conn.execute(sql.SQL("VACUUM {}.{}").format(sql.Identifier(schema),
                                                                      sql.Identifier(r["relname"])))

    async def _size(self, conn: psycopg.AsyncConnection[Any], schema: str) -> int:
        cur = await conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint AS n FROM pg_class c"
            " WHERE c.relnamespace = %s::regnamespace AND c.relkind IN ('r', 'm', 'p')", (schema,))
        row = await cur.fetchone()
        return int(row[0]) if row else 0

    def _timeout_ms(self, asked: int | None) -> int:
        limit = int(self.settings.statement_timeout_ms)
        return min(limit, asked) if asked else limit

    async def query(self, key: ScopeKey, statement: str, args: list[Any], *,
                    timeout_ms: int | None = None) -> dict[str, Any]:
        """`{columns, rows, truncated}` of one read-only statement (already checked, in the
        driver's placeholder style) in a read-only transaction."""
        _, role = await self._ensure_scope(key)
        params = {f"p{i + 1}": _param(v) for i, v in enumerate(args)}
        try:
            conn = await self._connect(role)
        except psycopg.Error as exc:
            raise _failure(exc, "sql_query") from None
        try:
            async def work() -> dict[str, Any]:
                async with conn.transaction():
                    await conn.execute("SET TRANSACTION READ ONLY")
                    await conn.execute(sql.SQL("SET LOCAL statement_timeout = {}").format(
                        sql.Literal(self._timeout_ms(timeout_ms))))
                    async with conn.cursor(name="q") as cur:
                        await cur.execute(statement.encode(), params or None)
                        columns = [c.name for c in cur.description or []]
                        rows: list[list[Any]] = []
                        used, truncated = 0, False
                        for raw in await cur.fetchmany(self.settings.max_rows + 1):
                            if len(rows) >= self.settings.max_rows:
                                truncated = True
                                break
                            row = [_jsonable(v) for v in raw]
                            used += len(json.dumps(row, ensure_ascii=False, default=str))
                            if used > self.settings.max_result_bytes:
                                truncated = True
                                break
                            rows.append(row)
                return {"columns": columns, "rows": rows, "truncated": truncated}

            result: dict[str, Any] = await self._bounded(conn, work(), "sql_query")
            return result
        except psycopg.Error as exc:
            raise _failure(exc, "sql_query") from None
        finally:
            await conn.close()

    async def exec(self, key: ScopeKey, statement: str, args: list[Any], *, quota_bytes: int | None = None,
                   leading: str = "", timeout_ms: int | None = None) -> dict[str, Any]:
        """`{rows_affected}` of one DDL/DML statement; over the scope's quota after it, the write
        is rolled back (`sql_quota_exceeded`). `leading`: the statement's first keyword (a scope
        already over its quota may still DROP, DELETE and TRUNCATE)."""
        schema, role = await self._ensure_scope(key)
        quota = quota_bytes or self.settings.quota_bytes
        params = {f"p{i + 1}": _param(v) for i, v in enumerate(args)}
        try:
            conn = await self._connect(role)
        except psycopg.Error as exc:
            raise _failure(exc, "sql_exec") from None
        try:
            async def work() -> dict[str, Any]:
                async with conn.transaction():
                    await conn.execute(sql.SQL("SET LOCAL statement_timeout = {}").format(
                        sql.Literal(self._timeout_ms(timeout_ms))))
                    before = await self._size(conn, schema)
                    shrinking = leading in ("drop", "delete", "truncate")
                    if before > quota and not shrinking:
                        raise SqlMemoryError(
                            f"sql_exec: the scope holds {before} bytes, over its quota of {quota}; DROP, DELETE or"
                            f" TRUNCATE to make room", code="sql_quota_exceeded")
                    cur = await conn.execute(statement.encode(), params or None)
                    affected = max(cur.rowcount, 0)
                    returned: dict[str, Any] = {}
                    if cur.description:  # RETURNING
                        got = await cur.fetchmany(self.settings.max_rows + 1)
                        returned = {"columns": [c.name for c in cur.description],
                                    "rows": [[_jsonable(v) for v in r] for r in got[:self.settings.max_rows]],
                                    "truncated": len(got) > self.settings.max_rows}
                    after = await self._size(conn, schema)
                    if after > quota and after > before:
                        raise SqlMemoryError(
                            f"sql_exec: the scope would hold {after} bytes; its quota is {quota} (rolled back)",
                            code="sql_quota_exceeded")
                return {"rows_affected": affected, "scope_bytes": after, **returned}

            result: dict[str, Any] = await self._bounded(conn, work(), "sql_exec")
            return result
        except psycopg.Error as exc:
            raise _failure(exc, "sql_exec") from None
        except SqlMemoryError as exc:
            if exc.code == "sql_quota_exceeded":  # the rolled-back rows still hold pages: give them back
                await self._vacuum(schema)
            raise
        finally:
            await conn.close()



class SqlAudit:
    """The audit trail of SQL memory, in treadle's own database (`sql_memory_audit`, tenant-keyed:
    a tenant's export and erase include it): one row per op, with the statement (scrubbed of
    secrets by the caller), rows, duration and error code."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    async def record(self, *, tenant: str, run_id: str, agent: str, op: str, scope: str, scope_id: str,
                     statement: str, rows: int, duration_ms: int, error: str | None) -> None:
        # a connection of its own, as the owner: the statement already ran in the other database,
        # so its trail must stay whatever becomes of the step's transaction (a failed call's too)
        async with self.pool._owner_connection() as conn:
            await conn.execute(
                "INSERT INTO sql_memory_audit (tenant_id, run_id, agent, op, scope, scope_id, statement, rows,"
                " duration_ms, error) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (tenant, run_id, agent, op, scope, scope_id, statement[:8192], rows, duration_ms, error))


def elapsed_ms(t0: float) -> int:
    return int((time.perf_counter() - t0) * 1000)
