"""store/groupcommit.py: concurrent lone commit statements go as one transaction, and each member's
outcome is the one it would have had alone."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from treadle.store.groupcommit import GroupCommit, lock_order

Conn = psycopg.AsyncConnection[Any]

TABLE = f"gc_probe_{secrets.token_hex(4)}"
INSERT = (f"WITH i AS (INSERT INTO {TABLE} (k) VALUES (%(k)s) RETURNING k)"
          " SELECT i.k, txid_current() AS xid FROM i")
FAILING = (f"WITH i AS (INSERT INTO {TABLE} (k) VALUES (%(k)s)),"
           " g AS (SELECT 1 WHERE false) SELECT 1 / count(*) AS fenced FROM g")


@pytest.fixture
async def conns(db_url: str) -> AsyncIterator[list[Conn]]:
    opened = [await psycopg.AsyncConnection.connect(db_url, autocommit=True, row_factory=dict_row)
              for _ in range(5)]
    await opened[0].execute(f"CREATE TABLE {TABLE} (k text PRIMARY KEY, at timestamptz DEFAULT clock_timestamp())")
    try:
        yield opened
    finally:
        await opened[0].execute(f"DROP TABLE {TABLE}")
        for conn in opened:
            await conn.close()


async def stored(conn: Conn) -> list[str]:
    cur = await conn.execute(f"SELECT k FROM {TABLE} ORDER BY at")
    return [r["k"] for r in await cur.fetchall()]


async def test_concurrent_members_commit_as_one_transaction(conns: list[Conn]) -> None:
    gc = GroupCommit()
    rows = await asyncio.gather(*(gc.run(conns[i], INSERT, {"k": f"k{i}"}) for i in range(4)))
    assert [r["k"] for r in rows if r] == ["k0", "k1", "k2", "k3"]
    # the first went alone at once (nobody waits for company); the three that came while it was in
    # flight went together
    assert (gc.batches, gc.members) == (2, 4)
    xids = [r["xid"] for r in rows if r]
    assert xids[1] == xids[2] == xids[3] != xids[0]
    assert sorted(await stored(conns[4])) == ["k0", "k1", "k2", "k3"]


async def test_a_failing_member_fails_alone_and_the_others_commit(conns: list[Conn]) -> None:
    gc = GroupCommit()
    results = await asyncio.gather(
        gc.run(conns[0], INSERT, {"k": "first"}),
        gc.run(conns[1], INSERT, {"k": "a"}),
        gc.run(conns[2], FAILING, {"k": "fenced"}),
        gc.run(conns[3], INSERT, {"k": "b"}),
        return_exceptions=True,
    )
    assert isinstance(results[2], psycopg.errors.DivisionByZero)
    assert [r["k"] for r in results if isinstance(r, dict)] == ["first", "a", "b"]
    # the batch of three failed whole, then each went alone: no shared transaction, and nothing of
    # the failing member (its insert) was kept
    xids = [r["xid"] for r in results if isinstance(r, dict)]
    assert len(set(xids)) == 3
    assert sorted(await stored(conns[4])) == ["a", "b", "first"]


async def test_a_member_that_cannot_be_sent_does_not_commit_the_others_twice(conns: list[Conn]) -> None:
    """An error while the batch is queued (a parameter psycopg cannot adapt) comes before the
    COMMIT: the statements already sent roll back, then each member goes alone, once."""
    gc = GroupCommit()
    results = await asyncio.gather(
        gc.run(conns[0], INSERT, {"k": "first"}),
        gc.run(conns[1], INSERT, {"k": "a"}),
        gc.run(conns[2], INSERT, {"k": object()}),
        gc.run(conns[3], INSERT, {"k": "b"}),
        return_exceptions=True,
    )
    assert isinstance(results[2], psycopg.ProgrammingError)
    assert [r["k"] for r in results if isinstance(r, dict)] == ["first", "a", "b"]
    assert sorted(await stored(conns[4])) == ["a", "b", "first"]


async def test_members_are_sent_in_lock_order(conns: list[Conn]) -> None:
    gc = GroupCommit()
    keys = ["m3", "m1", "m2"]
    await asyncio.gather(
        gc.run(conns[0], INSERT, {"k": "first"}),
        *(gc.run(conns[i + 1], INSERT, {"k": k}, lock_order("UPDATE memory ...", {"tool_key": k}))
          for i, k in enumerate(keys)),
    )
    assert await stored(conns[4]) == ["first", "m1", "m2", "m3"]


async def test_a_member_cancelled_while_queued_never_runs(conns: list[Conn]) -> None:
    gc = GroupCommit()
    first = asyncio.create_task(gc.run(conns[0], INSERT, {"k": "first"}))
    await asyncio.sleep(0)  # it leads: its statement is in flight
    queued = asyncio.create_task(gc.run(conns[1], INSERT, {"k": "cancelled"}))
    other = asyncio.create_task(gc.run(conns[2], INSERT, {"k": "other"}))
    await asyncio.sleep(0)  # both queued behind the batch in flight
    queued.cancel()
    assert (await first)["k"] == "first"  # type: ignore[index]
    assert (await other)["k"] == "other"  # type: ignore[index]
    with pytest.raises(asyncio.CancelledError):
        await queued
    assert sorted(await stored(conns[4])) == ["first", "other"]


async def test_a_leader_cancelled_mid_batch_finishes_the_batch_first(conns: list[Conn]) -> None:
    """A worker stopping while it sends a batch: the others' commits are not left unknown."""
    gc = GroupCommit()
    first = asyncio.create_task(gc.run(conns[0], INSERT, {"k": "first"}))
    await asyncio.sleep(0)
    leader = asyncio.create_task(gc.run(conns[1], INSERT, {"k": "leader"}))
    behind = asyncio.create_task(gc.run(conns[2], INSERT, {"k": "behind"}))
    await asyncio.sleep(0)
    await first  # it handed the lead on: `leader` sends itself and `behind`
    await asyncio.sleep(0)  # the batch is in flight
    assert gc.batches == 2
    leader.cancel()
    assert (await asyncio.wait_for(behind, timeout=10))["k"] == "behind"  # type: ignore[index]
    with pytest.raises(asyncio.CancelledError):
        await leader
    assert sorted(await stored(conns[4])) == ["behind", "first", "leader"]


async def test_the_next_leader_cancelled_before_it_leads_hands_the_lead_on(conns: list[Conn]) -> None:
    gc = GroupCommit()
    gc._leading = True  # as while a batch is in flight
    chosen = asyncio.create_task(gc.run(conns[0], INSERT, {"k": "chosen"}))
    behind = asyncio.create_task(gc.run(conns[1], INSERT, {"k": "behind"}))
    await asyncio.sleep(0)  # both queued
    gc._pass_lead()  # the batch ended: `chosen` is to lead...
    chosen.cancel()  # ...and is cancelled before it runs again
    assert (await asyncio.wait_for(behind, timeout=10))["k"] == "behind"  # type: ignore[index]
    with pytest.raises(asyncio.CancelledError):
        await chosen
    assert await stored(conns[4]) == ["behind"]
