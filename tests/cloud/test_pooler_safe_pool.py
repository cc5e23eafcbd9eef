"""A pool behind a transaction pooler (RDS Proxy) holds no session state that would pin its
connection: no server-side prepared statements, no session options sent at connect."""

from __future__ import annotations

from treadle.store.db import open_pool, run_statement


async def session_state(url: str, *, behind_pooler: bool) -> tuple[int, str]:
    pool = await open_pool(url, 1, idle_in_transaction_s=30.0, behind_pooler=behind_pooler)
    try:
        async with pool.connection() as conn:
            for _ in range(8):  # psycopg prepares a statement server-side from its 5th run
                await conn.execute("SELECT count(*) FROM runs WHERE id = %s", ("r_x",))
            await run_statement(conn, "SELECT %s::text AS v", ("x",))  # a step's: prepared at once
            cur = await conn.execute("SELECT count(*) AS n FROM pg_prepared_statements")
            prepared = (await cur.fetchone() or {"n": -1})["n"]
            cur = await conn.execute("SHOW idle_in_transaction_session_timeout")
            timeout = (await cur.fetchone() or {"idle_in_transaction_session_timeout": "?"})[
                "idle_in_transaction_session_timeout"]
        return int(prepared), str(timeout)
    finally:
        await pool.close()


async def test_behind_a_pooler_nothing_is_prepared_and_no_option_is_sent(db_url: str) -> None:
    assert await session_state(db_url, behind_pooler=False) == (2, "30s")  # the sidecar's pool: both
    assert await session_state(db_url, behind_pooler=True) == (0, "0")  # the server's default applies
