"""The running per-scope byte count behind Memory's quota (migration 0041): every writer keeps it
exact (set, overwrite, incr, delete, tenant erase), expired rows count until a set that would be
refused sweeps them, and the quota answers as before."""

from __future__ import annotations

import pytest

from tests.support.e2e import query
from treadle.errors import MemoryQuotaExceeded
from treadle.store.db import open_pool
from treadle.store.memory import INCR, MemoryStore, incr_params
from treadle.store.tenants import TenantData

COUNT = ("SELECT bytes FROM memory_scope_bytes WHERE tenant_id = %s AND scope = %s AND scope_id = %s")
EXACT = ("SELECT coalesce(sum(octet_length(value::text)), 0)::bigint AS bytes FROM memory"
         " WHERE tenant_id = %s AND scope = %s AND scope_id = %s")


async def _count(url: str, scope_id: str, tenant: str = "t") -> tuple[int, int]:
    counted = await query(url, COUNT, (tenant, "agent", scope_id))
    exact = await query(url, EXACT, (tenant, "agent", scope_id))
    return (int(counted[0]["bytes"]) if counted else 0), int(exact[0]["bytes"])


async def test_every_writer_keeps_the_count_exact(migrated_db_url: str) -> None:
    url = migrated_db_url
    pool = await open_pool(url, 2)
    try:
        mem = MemoryStore(pool, max_value_bytes=64, max_scope_bytes=1000)
        await mem.set("t", "agent", "a", "k1", "x" * 10, None)
        await mem.set("t", "agent", "a", "k2", {"n": [1, 2, 3]}, None)
        await mem.set("t", "agent", "b", "k1", "other scope", None)
        counted, exact = await _count(url, "a")
        assert counted == exact > 0
        await mem.set("t", "agent", "a", "k1", "y" * 30, None)  # an overwrite counts the new size only
        assert (await _count(url, "a"))[0] == (await _count(url, "a"))[1]
        async with pool.connection() as conn:  # incr, as a step commit folds it
            for delta in (5, 5, 100):
                await conn.execute(INCR.format(returning="value"), incr_params("t", "agent", "a", "n", delta, None))
        counted, exact = await _count(url, "a")
        assert counted == exact
        assert await mem.delete("t", "agent", "a", "k2")
        counted, exact = await _count(url, "a")
        assert counted == exact
        assert (await _count(url, "b"))[0] == (await _count(url, "b"))[1] > 0
        await TenantData(pool).erase("t")
        assert await query(url, "SELECT * FROM memory_scope_bytes WHERE tenant_id = 't'") == []
    finally:
        await pool.close()


async def test_expired_rows_are_swept_when_the_count_says_full(migrated_db_url: str) -> None:
    url = migrated_db_url
    pool = await open_pool(url, 2)
    try:
        mem = MemoryStore(pool, max_value_bytes=64, max_scope_bytes=100)
        await mem.set("t", "agent", "a", "old", "o" * 40, 3600)
        await mem.set("t", "agent", "a", "keep", "k" * 40, None)
        with pytest.raises(MemoryQuotaExceeded):  # both live: 42 + 42 + 42 > 100
            await mem.set("t", "agent", "a", "new", "n" * 40, None)
        await query(url, "UPDATE memory SET expires_at = now() - interval '1 second' WHERE key = 'old'")
        assert (await _count(url, "a"))[0] == 84  # the expired row still counts …
        out = await mem.set("t", "agent", "a", "new", "n" * 40, None)  # … until a set needs its room
        assert out["scope_bytes"] == 84
        assert [r["key"] for r in await query(url, "SELECT key FROM memory ORDER BY key")] == ["keep", "new"]
        counted, exact = await _count(url, "a")
        assert counted == exact == 84
        with pytest.raises(MemoryQuotaExceeded) as refused:
            await mem.set("t", "agent", "a", "third", "z" * 40, None)
        assert "would hold 126 bytes" in str(refused.value)
        assert (await _count(url, "a"))[0] == 84  # a refused set leaves the count unchanged
    finally:
        await pool.close()


async def test_the_migration_backfills_existing_rows(fresh_db_url: str) -> None:
    from treadle.store.migrate import migrate

    url = fresh_db_url
    await _migrate_until(url, 40)
    await query(url, "INSERT INTO memory (tenant_id, scope, scope_id, key, value) VALUES"
                     " ('t', 'agent', 'a', 'k1', '\"abc\"'), ('t', 'agent', 'a', 'k2', '{\"a\": 1}'),"
                     " ('u', 'agent', 'a', 'k1', '12')")
    await migrate(url)
    assert (await _count(url, "a"))[0] == (await _count(url, "a"))[1] == 5 + 8
    assert (await _count(url, "a", tenant="u"))[0] == 2


async def _migrate_until(url: str, last: int) -> None:
    from treadle.store import migrate as m

    real = m.available_migrations
    try:
        m.available_migrations = lambda: [mig for mig in real() if mig.version <= last]
        await m.migrate(url)
    finally:
        m.available_migrations = real
