"""Tenant isolation enforced by the database (store/scope.py, migration 0021): while a tenant is
bound, Postgres hides and refuses every other tenant's rows — even to a query that asks for them
by tenant — and nothing of the binding outlives the checkout."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from treadle.store import scope
from treadle.store.runs import NewRun
from treadle.testing import user_text

AGENTS = {"echo": {"provider": "mock", "model": "echo"}}


async def start(rt: Any, tenant: str, prompt: str) -> str:
    run, _ = await rt.start_run(NewRun(tenant_id=tenant, agent="echo", segments=user_text(prompt)))
    return str(run.id)


async def test_a_bound_tenant_sees_only_its_own_rows_whatever_the_query_asks(
        open_runtime: Any, migrated_db_url: str) -> None:
    rt, _ = await open_runtime(AGENTS, url=migrated_db_url, inline=False)
    a_run = await start(rt, "tenant-a", "secret of a")
    b_run = await start(rt, "tenant-b", "hello from b")

    with scope.bound_tenant("tenant-b"):
        assert await rt.runs.get("tenant-a", a_run) is None          # the query names A; the database says no
        assert await rt.runs.events("tenant-a", a_run) == []
        assert (await rt.runs.get("tenant-b", b_run)) is not None
        async with rt.pool.connection() as conn:
            rows = await (await conn.execute("SELECT DISTINCT tenant_id FROM runs")).fetchall()
            assert [r["tenant_id"] for r in rows] == ["tenant-b"]
            events = await (await conn.execute(
                "SELECT count(*) AS n FROM events WHERE run_id = %s", (a_run,))).fetchone()
            assert events is not None and events["n"] == 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege):     # moving a row into A is refused
            async with rt.pool.connection() as conn:
                await conn.execute("UPDATE runs SET tenant_id = 'tenant-a' WHERE id = %s", (b_run,))
        async with rt.pool.connection() as conn:                     # and an update of A's row finds nothing
            cur = await conn.execute("UPDATE runs SET stop_reason = 'x' WHERE id = %s", (a_run,))
            assert cur.rowcount == 0

    # unbound (workers, sweepers): every tenant, and no trace of the binding on pooled connections
    assert (await rt.runs.get("tenant-a", a_run)) is not None
    for _ in range(8):
        async with rt.pool.connection() as conn:
            row = await (await conn.execute(
                "SELECT current_user = session_user AS own, coalesce(current_setting('treadle.tenant', true), '') AS t,"
                " (SELECT count(DISTINCT tenant_id) FROM runs WHERE id IN (%s, %s)) AS tenants",
                (a_run, b_run))).fetchone()
            assert row == {"own": True, "t": "", "tenants": 2}


async def test_a_failed_statement_inside_a_binding_leaves_the_connection_clean(
        open_runtime: Any, migrated_db_url: str) -> None:
    rt, _ = await open_runtime(AGENTS, url=migrated_db_url, inline=False)
    with scope.bound_tenant("tenant-b"), pytest.raises(psycopg.errors.UndefinedTable):
        async with rt.pool.connection() as conn:
            await conn.execute("SELECT * FROM no_such_table")
    async with rt.pool.connection() as conn:
        row = await (await conn.execute("SELECT current_user = session_user AS own")).fetchone()
        assert row == {"own": True}
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


async def test_every_table_with_a_tenant_column_is_isolated(migrated_db_url: str) -> None:
    """A new migration that adds a tenant table without the policy fails here."""
    async with await psycopg.AsyncConnection.connect(migrated_db_url) as conn:
        rows = await (await conn.execute(
            "SELECT c.relname, c.relrowsecurity,"
            " EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid AND p.polname = 'tenant_isolation') AS policy"
            " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped"
            " WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') ORDER BY 1")).fetchall()
    tables = {name: (rls, policy) for name, rls, policy in rows}
    assert "runs" in tables and "memory" in tables and "events" in tables
    assert tables.pop("auth_tokens") == (False, False)   # read before a tenant is known; minted across tenants
    assert {name for name, v in tables.items() if v != (True, True)} == set()


async def test_a_route_whose_store_forgets_the_tenant_is_still_isolated(
        open_runtime: Any, migrated_db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store bug that drops the tenant predicate, reached through the HTTP API with tenant B's
    token: the database still answers nothing of A's (404), and A's own token still sees it."""
    from tests.support.tenancy import api, bearer, mint
    from treadle.store import runs as run_store

    rt, _ = await open_runtime(AGENTS, url=migrated_db_url, inline=False)
    a_run = await start(rt, "tenant-a", "secret of a")

    async def forgetful_get(tenant_id: str, run_id: str) -> Any:
        async with rt.pool.connection() as conn:
            row = await (await conn.execute(f"SELECT {run_store._RUN_COLUMNS} FROM runs WHERE id = %s",
                                            (run_id,))).fetchone()
        return run_store._record(row) if row else None

    monkeypatch.setattr(rt.runs, "get", forgetful_get)
    async with api(rt) as c:
        admin = bearer(await mint(c, {}, "root"))
        a = bearer(await mint(c, admin, "a-app", tenant="tenant-a", scopes=["substrate:tenant"]))
        b = bearer(await mint(c, admin, "b-app", tenant="tenant-b", scopes=["substrate:tenant"]))
        assert (await c.get(f"/v1/runs/{a_run}", headers=b)).status_code == 404
        mine = await c.get(f"/v1/runs/{a_run}", headers=a)
        assert mine.status_code == 200 and mine.json()["run_id"] == a_run
        # the operator's cross-tenant view is not bound: it lists A's run
        listed = (await c.get("/v1/_admin/runs", headers=admin)).json()
        assert a_run in str(listed)
