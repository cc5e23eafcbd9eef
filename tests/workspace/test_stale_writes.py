"""A stale attempt of a file-tool call never lands over what came after it, on both adapters.

Worker A journals a Write and stops before its rename (as under SIGSTOP past its lease); worker B
re-runs the same call, commits its result, and a later Edit changes the file; A resumes: its
write is refused (the file is no longer the version A read, and the call's result is committed)
and the file holds the Edit. The pause is a gate in the adapter's `write`, so the interleaving is
the same every time."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from psycopg.types.json import Jsonb

from tests.support.workspace import Caller
from treadle.runtime import Runtime
from treadle.volumes.base import FileChanged, VolumeStorage

START = "alpha\n"
EDITED = "alpha omega\n"


class Gated:
    """The adapter under test, with A's next write held at the gate until released."""

    def __init__(self, inner: VolumeStorage) -> None:
        self.inner = inner
        self.reached = asyncio.Event()
        self.release = asyncio.Event()
        self.armed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def write(self, location: str, path: str, data: bytes, **cond: Any) -> None:
        if self.armed:
            self.armed = False
            self.reached.set()
            await self.release.wait()  # stopped between journaling and the rename
        await self.inner.write(location, path, data, **cond)


async def commit_result(rt: Runtime, call: Caller, tool_use_id: str, seq: int) -> None:
    """What B's step commit leaves in the transcript: the call's result."""
    async with rt.pool.connection() as conn:
        await conn.execute(
            "INSERT INTO events (run_id, seq, tenant_id, type, payload, tool_use_id)"
            " VALUES (%s, %s, %s, 'tool_result', %s, %s)",
            (call.run_id, seq, call.tenant, Jsonb({"tool_use_id": tool_use_id, "text": "ok"}), tool_use_id),
        )


async def read(call: Caller, path: str) -> str:
    return (await call("Read", {"path": path})).content.split("\t", 1)[1]


@pytest.mark.parametrize("existing", [False, True], ids=["new-file", "existing-file"])
async def test_a_stalled_write_does_not_undo_a_later_edit(ws: Runtime, existing: bool) -> None:
    assert ws.volumes.storage is not None
    gated = Gated(ws.volumes.storage)
    ws.volumes.storage = gated
    call = Caller(ws)
    if existing:
        await call("Write", {"path": "doc.md", "content": "old draft\n"})
    write = {"path": "doc.md", "content": START}

    gated.armed = True
    a = asyncio.create_task(call("Write", write, tool_use_id="toolu_write"))  # worker A
    await asyncio.wait_for(gated.reached.wait(), 10)  # A journaled the Write and stopped before renaming

    # worker B re-runs the step: the same Write call, its result committed, then the next call
    a_locks, ws.volumes._locks = ws.volumes._locks, {}  # B is another process: A's in-process lock is not B's
    b = await call("Write", write, tool_use_id="toolu_write")
    assert not b.is_error
    await commit_result(ws, call, "toolu_write", 1)
    await call("Edit", {"path": "doc.md", "old_string": "alpha", "new_string": "alpha omega"},
               tool_use_id="toolu_edit")
    assert await read(call, "doc.md") == EDITED.rstrip("\n")

    ws.volumes._locks = a_locks
    gated.release.set()  # A resumes
    with pytest.raises(FileChanged):
        await asyncio.wait_for(a, 10)
    assert await read(call, "doc.md") == EDITED.rstrip("\n")  # the Edit stands


async def test_a_conditional_write_is_refused_once_the_file_changed(storage: VolumeStorage) -> None:
    """The port itself: `if_match` / `if_absent` against another writer, on both adapters."""
    await storage.write("loc", "f.txt", b"one")
    first = await storage.stat("loc", "f.txt")
    assert first is not None and first.tag
    await storage.write("loc", "f.txt", b"two", if_match=first.tag)
    with pytest.raises(FileChanged):
        await storage.write("loc", "f.txt", b"three", if_match=first.tag)  # a stale version
    with pytest.raises(FileChanged):
        await storage.write("loc", "f.txt", b"three", if_absent=True)
    await storage.write("loc", "g.txt", b"new", if_absent=True)
    assert (await storage.read("loc", "f.txt", 100))[0] == b"two"
    assert (await storage.read("loc", "g.txt", 100))[0] == b"new"
