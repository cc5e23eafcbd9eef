"""What the benchmark scripts share: percentiles, a scratch database, and driving a tenant's runs
to the end with a worker pool while timing it."""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

ROOT = Path(__file__).resolve().parent.parent


def pct(values: list[float], p: float) -> float:
    """The p-th percentile (nearest rank); NaN without values."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))] if s else float("nan")


@contextmanager
def scratch_database(prefix: str) -> Iterator[str]:
    """A fresh database on $DATABASE_URL's server (else the embedded one), dropped afterwards."""
    from treadle.store.db import resolve_database_url

    home = ROOT / ".treadle" / "bench"
    home.mkdir(parents=True, exist_ok=True)
    server = resolve_database_url(os.environ.get("DATABASE_URL"), home)
    dbname = f"{prefix}_{secrets.token_hex(4)}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{dbname}"')
    try:
        yield make_conninfo(server, dbname=dbname)
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


async def drive_to_completion(rt: Any, pool: Any, tenant: str, poll_s: float = 0.05) -> dict[str, Any]:
    """Start `pool`, wait until none of the tenant's runs is queued or running, stop it; the
    elapsed seconds, completed runs and iterations done."""
    t0 = time.perf_counter()
    pool.start()
    while True:
        async with rt.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT count(*) AS n FROM runs WHERE tenant_id = %s AND status IN ('queued','running')", (tenant,)
            )
            row = await cur.fetchone()
        if row and row["n"] == 0:
            break
        await asyncio.sleep(poll_s)
    elapsed = time.perf_counter() - t0
    await pool.stop()
    async with rt.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) FILTER (WHERE status = 'completed') AS ok, sum(iterations) AS iters"
            " FROM runs WHERE tenant_id = %s",
            (tenant,),
        )
        row = await cur.fetchone()
    iterations = int(row["iters"] or 0) if row else 0
    return {"elapsed": elapsed, "completed": int(row["ok"]) if row else 0, "iterations": iterations,
            "rate": iterations / elapsed if elapsed else 0.0, "polls": int(elapsed / poll_s) + 1}
