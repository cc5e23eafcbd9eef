"""Memory's costs as data grows (issues 32 and 41): `Memory.set` p50/p95 in a scope already holding
1 k and 100 k keys (the quota check reads a running per-scope byte count, migration 0041, instead
of summing the scope). Rows are bulk-loaded with SQL (the trigger keeps the count), then timed sets
overwrite and add keys through MemoryStore.set, as the Memory tool does. Then SQL memory's
statement overhead (store/sqlmem.py): `SELECT 1` and a one-row INSERT through the host (a fresh
connection as the scope's role, the timeout, the quota measure) beside the same statement on a
plain connection.

    .venv/bin/python scripts/bench_memory.py [--sizes 1000,100000] [--sets 400]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "core"))

from bench_support import code_version, ms, pct, scratch_database
from treadle.store.db import open_pool
from treadle.store.memory import MemoryStore
from treadle.store.migrate import migrate
from treadle.store.sqlmem import ScopeKey, SqlMemory


async def bench_set(url: str, sizes: list[int], sets: int) -> dict[int, list[float]]:
    await migrate(url)
    pool = await open_pool(url, 2)
    out: dict[int, list[float]] = {}
    try:
        mem = MemoryStore(pool, max_scope_bytes=1 << 30)
        for n in sizes:
            async with pool.connection() as conn:
                await conn.execute(
                    "INSERT INTO memory (tenant_id, scope, scope_id, key, value)"
                    " SELECT 'bench', 'agent', %s, 'k' || g, to_jsonb(repeat('v', 100) || g)"
                    " FROM generate_series(1, %s) g", (f"s{n}", n))
        async with pool.connection() as conn:
            await conn.execute("ANALYZE memory")
        times: dict[int, list[float]] = {n: [] for n in sizes}
        for i in range(sets):  # the sizes take turns, so a busy machine slows them alike
            for n in sizes:
                key = f"k{(i * 7919) % n + 1}" if i % 2 else f"new{i}"  # overwrite / add, alternating
                t0 = time.perf_counter()
                await mem.set("bench", "agent", f"s{n}", key, {"i": i, "text": "w" * 120}, None)
                times[n].append(time.perf_counter() - t0)
        out = {n: v[sets // 10:] for n, v in times.items()}  # the first tenth warms the caches
    finally:
        await pool.close()
    return out


async def bench_sql(url: str, n: int) -> dict[str, list[float]]:
    import psycopg

    host = SqlMemory(url)
    key = ScopeKey("bench", "agent", "bench")
    out: dict[str, list[float]] = {"plain connection, SELECT 1": [], "sql_query SELECT 1": [],
                                   "sql_exec INSERT one row": []}
    try:
        await host.exec(key, "CREATE TABLE t (id serial, v text)", [])
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            for _ in range(n):
                t0 = time.perf_counter()
                await conn.execute("SELECT 1")
                out["plain connection, SELECT 1"].append(time.perf_counter() - t0)
        for _ in range(n):
            t0 = time.perf_counter()
            await host.query(key, "SELECT 1", [])
            out["sql_query SELECT 1"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            await host.exec(key, "INSERT INTO t (v) VALUES (%(p1)s)", ["x"])
            out["sql_exec INSERT one row"].append(time.perf_counter() - t0)
    finally:
        await host.drop_all()
    return out


async def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,100000")
    ap.add_argument("--sets", type=int, default=400)
    ap.add_argument("--sql", type=int, default=200, help="SQL memory statements per kind (0: skip)")
    opts = ap.parse_args()
    sizes = [int(s) for s in opts.sizes.split(",")]
    with scratch_database("treadle_bench_memory") as url:
        times = await bench_set(url, sizes, opts.sets)
        sql_times = await bench_sql(url, opts.sql) if opts.sql else {}
    print(f"treadle: {code_version()}")
    base = pct(times[sizes[0]], 50)
    print(f"{'Memory.set, keys in scope':<26} {'n':>6} {'p50 ms':>8} {'p95 ms':>8} {'x p50':>6}")
    for n, v in times.items():
        print(f"{n:<26} {len(v):>6} {ms(pct(v, 50)):>8} {ms(pct(v, 95)):>8} {pct(v, 50) / base:>6.2f}")
    if sql_times:
        print(f"\n{'SQL memory statement':<32} {'n':>6} {'p50 ms':>8} {'p95 ms':>8}")
        for label, v in sql_times.items():
            print(f"{label:<32} {len(v):>6} {ms(pct(v, 50)):>8} {ms(pct(v, 95)):>8}")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
