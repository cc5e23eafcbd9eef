"""The step transaction in libpq's pipeline mode (store/db.py): BEGIN travels with the first
statement, the commit statement with the COMMIT; statements inside behave as without a pipeline
(rowcount, errors where they are executed, savepoints), and a commit statement that fails makes
the server skip the COMMIT — every write of the transaction is rolled back."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator

import psycopg
import pytest

from treadle.store.db import Pool, after_commit, current_step_transaction, open_pool


@pytest.fixture
async def pool_and_table(db_url: str) -> AsyncIterator[tuple[Pool, str]]:
    pool = await open_pool(db_url, 2, idle_in_transaction_s=30.0)
    table = f"pipe_{secrets.token_hex(4)}"
    async with pool.connection() as conn:
        await conn.execute(f"CREATE TABLE {table} (k text PRIMARY KEY, n int NOT NULL)")
    try:
        yield pool, table
    finally:
        async with pool.connection() as conn:
            await conn.execute(f"DROP TABLE {table}")
        await pool.close()


async def rows(pool: Pool, table: str) -> dict[str, int]:
    async with pool.connection() as conn:
        cur = await conn.execute(f"SELECT k, n FROM {table}")
        return {r["k"]: r["n"] for r in await cur.fetchall()}


async def test_statements_inside_behave_as_without_a_pipeline(pool_and_table: tuple[Pool, str]) -> None:
    pool, table = pool_and_table
    assert pool.pipelined
    async with pool.step_transaction() as tx:
        assert tx.pending and tx.pipeline is None  # the first statement begins it
        async with pool.connection() as conn:
            assert tx.pipeline is not None and not tx.pending
            await conn.execute(f"INSERT INTO {table} VALUES ('a', 1), ('b', 1)")
            cur = await conn.execute(f"UPDATE {table} SET n = n + 1")
            assert cur.rowcount == 2  # known when execute returns
            with pytest.raises(psycopg.errors.UniqueViolation):  # raised by its own statement
                async with conn.transaction():  # a savepoint
                    await conn.execute(f"INSERT INTO {table} VALUES ('c', 1)")
                    await conn.execute(f"INSERT INTO {table} VALUES ('a', 9)")
            cur = await conn.execute(f"SELECT count(*) AS c FROM {table}")
            assert (await cur.fetchone() or {})["c"] == 2  # 'c' went with the savepoint
    assert await rows(pool, table) == {"a": 2, "b": 2}


async def insert_a_then_hook(pool: Pool, table: str, ran: list[str]) -> None:
    """In the open step transaction: insert ('a', 1), and an after-commit hook noting that it ran."""
    async with pool.connection() as conn:
        await conn.execute(f"INSERT INTO {table} VALUES ('a', 1)")

    async def done() -> None:
        ran.append("after commit")

    await after_commit(done)


async def test_the_commit_statement_travels_with_the_commit(pool_and_table: tuple[Pool, str]) -> None:
    pool, table = pool_and_table
    ran: list[str] = []
    async with pool.step_transaction() as tx:
        await insert_a_then_hook(pool, table, ran)
        assert current_step_transaction(pool) is tx and tx.can_finish
        row = await tx.finish_with(f"UPDATE {table} SET n = n + 1 RETURNING n", {})
        assert row == {"n": 2} and tx.committed and tx.pipeline is None
        assert ran == []  # after the block
        async with pool.connection() as conn:  # still lent to the task, autocommit now
            await conn.execute(f"INSERT INTO {table} VALUES ('late', 1)")
    assert ran == ["after commit"]
    assert await rows(pool, table) == {"a": 2, "late": 1}


async def test_a_failing_commit_statement_rolls_everything_back(pool_and_table: tuple[Pool, str]) -> None:
    pool, table = pool_and_table
    ran: list[str] = []
    with pytest.raises(psycopg.errors.DivisionByZero):
        async with pool.step_transaction() as tx:
            await insert_a_then_hook(pool, table, ran)
            # the fence of the engine's commit statement: 1 / (rows its UPDATE matched)
            await tx.finish_with(
                f"WITH g AS (UPDATE {table} SET n = n + 1 WHERE k = 'nobody' RETURNING n)"
                " SELECT 1 / count(*) AS fenced FROM g", {})
    assert not tx.committed and ran == []
    assert await rows(pool, table) == {}  # the insert before it rolled back with it
    async with pool.step_transaction(), pool.connection() as conn:  # the connection is clean for the next step
        await conn.execute(f"INSERT INTO {table} VALUES ('b', 1)")
    assert await rows(pool, table) == {"b": 1}


async def test_a_lone_commit_statement_runs_alone_in_autocommit(pool_and_table: tuple[Pool, str]) -> None:
    """Nothing sent before `finish_with` (a step whose only write is its commit statement): the
    statement is its own transaction — no BEGIN, no COMMIT, no pipeline; its transaction started
    with it (now(), its start, is after a clock read on another connection just before it)."""
    pool, table = pool_and_table
    ran: list[str] = []
    async with pool.step_transaction() as tx:

        async def done() -> None:
            ran.append("after commit")

        await after_commit(done)
        assert tx.pending and tx.can_finish
        async with pool.inner.connection() as other:
            cur = await other.execute("SELECT clock_timestamp() AS t")
            before = (await cur.fetchone() or {})["t"]
        row = await tx.finish_with(
            f"WITH i AS (INSERT INTO {table} VALUES ('a', 1) RETURNING n)"
            " SELECT i.n, now() > %(before)s AS own_transaction FROM i", {"before": before})
        assert row == {"n": 1, "own_transaction": True}
        assert tx.committed and tx.finished and tx.pipeline is None and tx.block is None
        assert ran == []
    assert ran == ["after commit"]
    assert await rows(pool, table) == {"a": 1}


async def test_a_lone_failing_commit_statement_rolls_back_whole(pool_and_table: tuple[Pool, str]) -> None:
    pool, table = pool_and_table
    ran: list[str] = []
    with pytest.raises(psycopg.errors.DivisionByZero):
        async with pool.step_transaction() as tx:

            async def done() -> None:
                ran.append("after commit")

            await after_commit(done)
            # a folded write (the insert) and the fence failing in the same statement
            await tx.finish_with(
                f"WITH i AS (INSERT INTO {table} VALUES ('a', 1)),"
                f" g AS (UPDATE {table} SET n = n + 1 WHERE k = 'nobody' RETURNING n)"
                " SELECT 1 / count(*) AS fenced FROM g", {})
    assert tx.finished and not tx.committed and ran == []
    assert await rows(pool, table) == {}  # the insert went with the failed statement
    async with pool.step_transaction(), pool.connection() as conn:  # the connection is clean
        await conn.execute(f"INSERT INTO {table} VALUES ('b', 1)")
    assert await rows(pool, table) == {"b": 1}


async def test_a_savepoint_open_forbids_finishing(pool_and_table: tuple[Pool, str]) -> None:
    pool, table = pool_and_table
    async with pool.step_transaction() as tx:
        async with pool.connection() as conn, conn.transaction():
            assert not tx.can_finish
            with pytest.raises(RuntimeError):
                await tx.finish_with(f"SELECT 1 FROM {table}", {})
        assert tx.can_finish


async def test_behind_a_pooler_no_pipeline(db_url: str) -> None:
    pool = await open_pool(db_url, 1, behind_pooler=True)
    try:
        async with pool.step_transaction() as tx:
            assert tx.pipeline is None and not tx.can_finish
            async with pool.connection() as conn:
                cur = await conn.execute("SELECT 1 AS one")
                assert await cur.fetchone() == {"one": 1}
    finally:
        await pool.close()


async def test_the_first_statement_may_open_a_savepoint(pool_and_table: tuple[Pool, str]) -> None:
    """BEGIN is still queued when a store opens its own transaction first: it becomes a savepoint
    of the step transaction, never a transaction of its own."""
    pool, table = pool_and_table
    with pytest.raises(RuntimeError):
        async with pool.step_transaction(), pool.connection() as conn:
            async with conn.transaction():
                await conn.execute(f"INSERT INTO {table} VALUES ('a', 1)")
            raise RuntimeError("the step fails after the store's block ended")
    assert await rows(pool, table) == {}  # rolled back with the step transaction


async def test_a_commit_statement_that_cannot_be_sent_leaves_the_connection_clean(db_url: str) -> None:
    """`finish_with` raising before anything was sent (a parameter that cannot be adapted): the
    block's exit rolls back as for any error, and the pool's only connection serves the next step."""
    pool = await open_pool(db_url, 1)
    table = f"pipe_{secrets.token_hex(4)}"
    try:
        async with pool.connection() as conn:
            await conn.execute(f"CREATE TABLE {table} (k text PRIMARY KEY, n int NOT NULL)")
        with pytest.raises(psycopg.ProgrammingError):
            async with pool.step_transaction() as tx:
                async with pool.connection() as conn:
                    await conn.execute(f"INSERT INTO {table} VALUES ('a', 1)")
                await tx.finish_with(f"SELECT %(x)s FROM {table}", {"x": object()})
        assert not tx.finished and not tx.committed
        async with pool.step_transaction() as tx2, pool.connection() as conn:
            async with conn.transaction():
                await conn.execute(f"INSERT INTO {table} VALUES ('b', 1)")
            assert tx2.can_finish
            assert await tx2.finish_with(f"SELECT count(*) AS c FROM {table}", {}) == {"c": 1}
        assert await rows(pool, table) == {"b": 1}
    finally:
        async with pool.connection() as conn:
            await conn.execute(f"DROP TABLE IF EXISTS {table}")
        await pool.close()
