"""The pool's connections wait for the server with their socket kept registered with the loop
between statements (store/socketwait.py): registered once, unregistered when the connection
closes or the server drops it, and every case but a plain read handed to psycopg's own wait (a
cancel, a timeout, a write that has to wait)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from treadle.store.db import Pool, open_pool
from treadle.testing import until


@pytest.fixture
async def pool(db_url: str) -> AsyncIterator[Pool]:
    p = await open_pool(db_url, 2, name="test-socket-wait")
    try:
        yield p
    finally:
        await p.close()


class Registrations:
    """Counts the loop's add_reader/remove_reader calls for one file descriptor."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fd: int) -> None:
        self.added = self.removed = 0
        loop = asyncio.get_running_loop()
        add, remove = loop.add_reader, loop.remove_reader

        def counting_add(fileno: int, *args: Any) -> None:
            self.added += fileno == fd
            add(fileno, *args)

        def counting_remove(fileno: int) -> bool:
            self.removed += fileno == fd
            return remove(fileno)

        monkeypatch.setattr(loop, "add_reader", counting_add)
        monkeypatch.setattr(loop, "remove_reader", counting_remove)


async def test_the_socket_is_registered_once_for_many_statements(pool: Pool, monkeypatch: pytest.MonkeyPatch) -> None:
    async with pool.connection() as conn:
        await conn.execute("SELECT 1")
        conn._reader.drop()  # type: ignore[attr-defined]  # start from an unregistered socket
        seen = Registrations(monkeypatch, conn.pgconn.socket)
        for i in range(50):
            cur = await conn.execute("SELECT %s::int + 1 AS n", (i,))
            assert (await cur.fetchone())["n"] == i + 1  # type: ignore[index]
        assert (seen.added, seen.removed) == (1, 0)


async def test_a_cancelled_query_is_cancelled_on_the_server_and_the_connection_goes_on(pool: Pool) -> None:
    async with pool.connection() as conn:
        task = asyncio.create_task(conn.execute("SELECT pg_sleep(30)"))

        async def running() -> bool:
            async with pool.connection() as other:
                cur = await other.execute("SELECT count(*) AS n FROM pg_stat_activity"
                                          " WHERE query = 'SELECT pg_sleep(30)' AND state = 'active'")
                return bool((await cur.fetchone())["n"])  # type: ignore[index]

        await until(running, 10, what="the server to run the pg_sleep")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not await running()  # psycopg's wait sent the server a cancel
        cur = await conn.execute("SELECT 2 AS n")
        assert (await cur.fetchone())["n"] == 2  # type: ignore[index]


async def test_a_statement_larger_than_the_socket_buffer_goes_through(pool: Pool) -> None:
    big = "x" * (8 * 1024 * 1024)  # the send has to wait for the socket to drain: a write wait
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT length(%s) AS n", (big,))
        assert (await cur.fetchone())["n"] == len(big)  # type: ignore[index]
        cur = await conn.execute("SELECT 3 AS n")
        assert (await cur.fetchone())["n"] == 3  # type: ignore[index]


async def test_a_connection_the_server_dropped_leaves_no_registration_behind(db_url: str) -> None:
    """A socket closed while registered would shadow the next socket given its number: the
    connection that reuses it would never hear its answer. After the server ends an idle
    connection and it is closed, a new connection on the same descriptor number works."""
    first = await open_pool(db_url, 1, name="test-socket-wait-dropped")
    try:
        # a registration left behind makes the next connection on that number hang: cut short
        await asyncio.wait_for(_drop_and_reconnect(first, db_url), 20)
    finally:
        await first.close()


async def _drop_and_reconnect(first: Pool, db_url: str) -> None:
    async with first.connection() as conn:
        await conn.execute("SELECT 1")
        fd, pid = conn.pgconn.socket, conn.info.backend_pid
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as admin:
            await admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(psycopg.OperationalError):
            await conn.execute("SELECT 1")
    loop = asyncio.get_running_loop()
    assert fd not in {key.fd for key in loop._selector.get_map().values()}  # type: ignore[attr-defined]
    async with first.connection() as again:  # the pool reconnects, maybe on the same number
        cur = await again.execute("SELECT 4 AS n")
        assert (await cur.fetchone())["n"] == 4  # type: ignore[index]


async def test_a_closed_connection_unregisters_its_socket(pool: Pool, db_url: str) -> None:
    from treadle.store.db import _Connection

    conn = await _Connection.connect(db_url, autocommit=True)
    await conn.execute("SELECT 1")
    fd = conn.pgconn.socket
    loop = asyncio.get_running_loop()
    assert fd in {key.fd for key in loop._selector.get_map().values()}  # type: ignore[attr-defined]
    await conn.close()
    assert fd not in {key.fd for key in loop._selector.get_map().values()}  # type: ignore[attr-defined]


async def test_a_wait_with_a_timeout_is_psycopgs(pool: Pool) -> None:
    async with pool.connection() as conn:
        async with conn.transaction():
            await conn.execute("LISTEN test_socket_wait")
        gen = conn.notifies(timeout=0.05)
        assert [n async for n in gen] == []
        # psycopg's wait unregistered the socket: the next wait registers it again (else it never
        # hears the answer — a hang, cut short here)
        cur = await asyncio.wait_for(conn.execute("SELECT 5 AS n"), 10)
        assert (await cur.fetchone())["n"] == 5  # type: ignore[index]
        await conn.execute("UNLISTEN test_socket_wait")
