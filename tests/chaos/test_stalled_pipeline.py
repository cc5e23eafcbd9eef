"""A process frozen between a pipelined statement and its Sync keeps its locks for ever — unless
the sweeper ends its session (store/stalled.py). Found by test_exactly_once_chaos.py (seed
733405): a replica SIGSTOPped inside a pipelined step transaction blocked 9 sessions for 33 s,
while Postgres showed it `active`, waiting on ClientRead, so the idle-in-transaction limit
`open_pool` sets never ended it.

A real process puts its session in that state: in psycopg's pipeline mode it sends BEGIN and an
UPDATE (psycopg writes a pipelined statement as soon as it is queued) and stops itself with
SIGSTOP before the Sync. Its session has the same idle-in-transaction limit a treadle pool sets.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.support.e2e import query
from treadle.engine.workers import Sweeper
from treadle.store.db import open_pool
from treadle.store.stalled import end_stalled_sessions
from treadle.testing import until

pytestmark = pytest.mark.e2e

TABLE = f"stalled_probe_{secrets.token_hex(4)}"
FROZEN_CLIENT = """
import os, signal, sys, psycopg
conn = psycopg.connect(sys.argv[1], autocommit=True, application_name="frozen-pipeline",
                       options="-c idle_in_transaction_session_timeout=200")
with conn.pipeline():
    conn.execute("BEGIN")
    conn.execute(f"UPDATE {sys.argv[2]} SET n = n + 100 WHERE k = 'a'")  # sent, not synced
    print(conn.info.backend_pid, flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)
"""


@pytest.fixture
def frozen_client(db_url: str) -> Iterator[tuple[subprocess.Popen[str], int]]:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {TABLE} (k text PRIMARY KEY, n int NOT NULL)")
        conn.execute(f"INSERT INTO {TABLE} VALUES ('a', 0)")
    proc = subprocess.Popen([sys.executable, "-c", FROZEN_CLIENT, db_url, TABLE], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        backend_pid = int(proc.stdout.readline())
        yield proc, backend_pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute(f"DROP TABLE {TABLE}")


def stopped(pid: int) -> bool:
    """Whether the process is stopped (state T in /proc/<pid>/stat)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


async def session(db_url: str, pid: int) -> dict[str, object] | None:
    rows = await query(db_url, "SELECT state, wait_event, xact_start IS NOT NULL AS in_xact FROM pg_stat_activity"
                               " WHERE pid = %s", (pid,))
    return rows[0] if rows else None


async def test_the_sweeper_ends_a_session_frozen_mid_pipeline(
    db_url: str, frozen_client: tuple[subprocess.Popen[str], int], open_runtime: object
) -> None:
    proc, backend_pid = frozen_client

    async def is_frozen() -> bool:
        return stopped(proc.pid) and await session(db_url, backend_pid) == {
            "state": "active", "wait_event": "ClientRead", "in_xact": True}

    # the state the idle-in-transaction limit does not see: active, waiting on the client
    await until(is_frozen, timeout=10, interval=0.1, what="the client to freeze between its statement and the Sync")

    pool = await open_pool(db_url, 2)
    try:
        # it blocks no one yet: left alone, whatever its age
        assert await end_stalled_sessions(pool, 0.0) == []

        async def waiter() -> int:
            async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
                cur = await conn.execute(f"UPDATE {TABLE} SET n = n + 1 WHERE k = 'a' RETURNING n")
                row = await cur.fetchone()
                assert row is not None
                return int(row[0])

        waiting = asyncio.create_task(waiter())

        async def blocked() -> bool:
            rows = await query(db_url, "SELECT 1 FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                               (backend_pid,))
            return bool(rows)

        await until(blocked, timeout=10, interval=0.1, what="the second session to wait on the frozen one's row lock")
        # younger than the bound: left alone
        assert await end_stalled_sessions(pool, 3600.0) == []
        assert await session(db_url, backend_pid) is not None
        assert not waiting.done()
    finally:
        await pool.close()

    # the sweeper of a runtime whose lease is short ends it; the waiting session goes on, and the
    # frozen transaction's write is gone
    rt, dispatcher = await open_runtime({}, lease_seconds=0.5)  # type: ignore[operator]
    sweeper = Sweeper(rt.engine, dispatcher, interval_s=60)

    async def swept_free() -> bool:
        await sweeper.sweep_once()
        return waiting.done()

    await until(swept_free, timeout=20, interval=0.1, what="a sweep to end the frozen session")
    assert await asyncio.wait_for(waiting, timeout=10) == 1
    assert await session(db_url, backend_pid) is None
    assert await query(db_url, f"SELECT n FROM {TABLE}") == [{"n": 1}]
