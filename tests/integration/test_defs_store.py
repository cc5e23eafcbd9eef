"""DefStore: versions, lineage, active pointer, retire/promote, tenant isolation."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from treadle.domain.defs import content_sha256
from treadle.errors import Conflict, NotFound
from treadle.store.db import open_pool
from treadle.store.defs import DefStore


@pytest.fixture
async def defs(db_url: str) -> Any:
    pool = await open_pool(db_url, 4)
    yield DefStore(pool)
    await pool.close()


def test_hash_is_canonical_and_ignores_empty_values() -> None:
    a = content_sha256({"system_prompt": "hi", "tools": ["Memory"], "skills": []})
    b = content_sha256({"tools": ["Memory"], "system_prompt": "hi"})
    assert a == b and a.startswith("sha256:") and len(a) == 7 + 64
    assert a != content_sha256({"tools": ["Memory", "Context"], "system_prompt": "hi"})


async def test_versions_lineage_and_active_pointer(defs: DefStore) -> None:
    t = "tenant-defs-1"
    v1 = await defs.create(t, "agent", "writer", {"system_prompt": "a"}, content_sha256({"p": "a"}))
    v2 = await defs.create(t, "agent", "writer", {"system_prompt": "b"}, content_sha256({"p": "b"}),
                           parent_def_id=v1.def_id, promote=False)
    v3 = await defs.create(t, "agent", "writer", {"system_prompt": "c"}, content_sha256({"p": "c"}),
                           parent_def_id=v2.def_id, promote=False)
    assert [v1.version, v2.version, v3.version] == [1, 2, 3]
    current = await defs.get(t, "agent", name="writer")
    assert current is not None and current.def_id == v1.def_id  # fork does not promote
    assert [d.def_id for d in await defs.lineage(t, "agent", v3.def_id)] == [v3.def_id, v2.def_id, v1.def_id]
    await defs.promote(t, "agent", v3.def_id)
    active = await defs.get(t, "agent", name="writer")
    assert active is not None and active.def_id == v3.def_id and active.active
    second = await defs.get(t, "agent", name="writer", version=2)
    assert second is not None and second.def_id == v2.def_id
    retired = await defs.retire(t, "agent", v3.def_id)
    assert retired.status == "retired" and not retired.active
    assert await defs.get(t, "agent", name="writer") is None
    with pytest.raises(Conflict):
        await defs.promote(t, "agent", v3.def_id)
    assert [d.version for d in await defs.list(t, "agent", name="writer")] == [2, 1]
    assert [d.version for d in await defs.list(t, "agent", name="writer", include_retired=True)] == [3, 2, 1]


async def test_tenants_and_kinds_are_isolated(defs: DefStore) -> None:
    a = await defs.create("tenant-a", "agent", "same", {}, content_sha256({"x": 1}))
    assert await defs.get("tenant-b", "agent", def_id=a.def_id) is None
    assert await defs.get("tenant-a", "skill", def_id=a.def_id) is None
    assert await defs.list("tenant-b", "agent", name="same") == []
    with pytest.raises(NotFound):
        await defs.retire("tenant-b", "agent", a.def_id)
    with pytest.raises(NotFound):
        await defs.create("tenant-b", "agent", "same", {}, "sha256:x", parent_def_id=a.def_id)


async def test_concurrent_creates_get_distinct_versions(defs: DefStore) -> None:
    made = await asyncio.gather(
        *(defs.create("tenant-race", "skill", "s", {"n": i}, content_sha256({"n": i})) for i in range(8))
    )
    assert sorted(d.version for d in made) == list(range(1, 9))
