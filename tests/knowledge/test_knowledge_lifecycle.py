"""The stores issue 41 added (memory provenance and access counts, Document tags, chunk body
embeddings) in the lifecycle of a tenant's data (item 5): a snapshot captures them, erasing a
user takes theirs (receipt per table), retention's memory purge takes an entry's access count
with it, and erasing the tenant leaves none of its rows in any of them."""

from __future__ import annotations

from typing import Any

from tests.support.substrate import TENANT
from treadle.builtins.document import document_op
from treadle.store.dirents import DirentStore, Tree
from treadle.store.erasure import SubjectErasure
from treadle.store.retention import RetentionStore
from treadle.store.snapshots import SECTIONS, SnapshotStore
from treadle.store.tenants import TenantData

TABLES = ("memory_access", "chunk_tags", "document_tags", "chunk_embeddings")


async def _counts(rt: Any) -> dict[str, int]:
    out = {}
    async with rt.pool.connection() as conn:
        for table in TABLES:
            cur = await conn.execute(f"SELECT count(*) AS n FROM {table} WHERE tenant_id = %s", (TENANT,))
            row = await cur.fetchone()
            out[table] = int(row["n"]) if row else 0
    return out


async def test_snapshots_erasure_retention_and_tenant_erase_include_the_new_stores(open_rt: Any) -> None:
    rt, _ = await open_rt({"agents": {"a": {"model": "echo"}}, "memory": {"embedder": {"driver": "local"}}})
    mem, dirents = rt.substrate.memory, DirentStore(rt.pool)
    for user in ("alice", "bob"):
        tree = Tree(TENANT, "user", user)
        doc = await document_op(dirents, tree, {"op": "create_document", "title": "Notes", "tags": ["area/ops"]},
                                user, mem)
        await document_op(dirents, tree, {"op": "create_chunk", "document_id": doc["document_id"], "title": "db",
                                          "body": "Postgres backups run nightly.", "tags": ["db"]}, user, mem)
        await mem.set(TENANT, "user", user, "fact", "Backups run at 02:00.", None, embed=True,
                      provenance={"origin": "set", "class": "fact"})
        found = await mem.search(TENANT, "user", user, "when do backups run?", sources=["facts"])
        assert found["results"][0]["provenance"]["class"] == "fact"
    assert await _counts(rt) == {"memory_access": 2, "chunk_tags": 2, "document_tags": 2, "chunk_embeddings": 2}

    snaps = SnapshotStore(rt.pool, jobs_in_db=True)
    for section in ("memory_access", "chunk_tags", "document_tags"):
        rows = await snaps.capture(SECTIONS[section], TENANT, [])
        assert len(rows) == 2, section
    [fact] = [r for r in await snaps.capture(SECTIONS["memory"], TENANT, []) if r["scope_id"] == "alice"]
    assert fact["provenance"] == {"origin": "set", "class": "fact"}

    receipt = (await SubjectErasure(rt.pool).erase(TENANT, "alice", dry_run=False))["deleted"]
    assert receipt["memory_access"] == 1 and receipt["chunk_tags"] == 1 and receipt["document_tags"] == 1
    assert await _counts(rt) == {"memory_access": 1, "chunk_tags": 1, "document_tags": 1, "chunk_embeddings": 1}

    async with rt.pool.connection() as conn:  # bob's fact not written for 40 days: retention's to take
        await conn.execute("UPDATE memory SET updated_at = now() - interval '40 days' WHERE tenant_id = %s",
                           (TENANT,))
    assert await RetentionStore(rt.pool).purge("memory", 30, tenant_id=TENANT) == 1
    assert (await _counts(rt))["memory_access"] == 0  # the access count went with its entry

    erased = await TenantData(rt.pool).erase(TENANT)
    assert erased["chunk_tags"] == 1 and erased["document_tags"] == 1
    assert await _counts(rt) == dict.fromkeys(TABLES, 0)
