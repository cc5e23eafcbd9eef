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
import contextlib
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "core"))

import psycopg

from bench_support import code_version, ms, pct, scratch_database
from treadle.specs.memory import MemorySearchConfig
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


VEC_DIM = 384
VEC_CLUSTERS = 200


async def _load_vectors(pool: Any, scope_id: str, start: int, end: int) -> None:
    """Rows start+1..end of a scope: a memory row and its embedding, each vector a cluster centre
    (one of VEC_CLUSTERS, random) plus noise, built in SQL so no vector crosses the wire."""
    async with pool.connection() as conn:
        await conn.execute(
            "INSERT INTO memory (tenant_id, scope, scope_id, key, value)"
            " SELECT 'bench', 'agent', %s, 'v' || g, to_jsonb('fact ' || g) FROM generate_series(%s::int, %s::int) g",
            (scope_id, start + 1, end))
        step = 5000
        for lo in range(start + 1, end + 1, step):
            hi = min(end, lo + step - 1)
            await conn.execute(
                f"""INSERT INTO memory_embeddings (tenant_id, scope, scope_id, key, embedder, model, dimension,
                                                   embedding, embed_text)
                    SELECT 'bench', 'agent', %s, 'v' || g, 'bench', 'bench', {VEC_DIM},
                           (SELECT array_agg(c.x + (random() - 0.5) * 0.6 ORDER BY c.i)
                              FROM bench_centres b, unnest(b.v) WITH ORDINALITY AS c(x, i)
                             WHERE b.id = g %% {VEC_CLUSTERS})::vector,
                           'fact ' || g
                    FROM generate_series(%s::int, %s::int) g""",
                (scope_id, lo, hi))


async def bench_vector(urls: dict[int, str], queries: int, exact_scan_limit: int) -> dict[str, Any]:
    """Memory.search's store query (MemoryStore.search, as the Memory tool calls it after embedding
    the query) on a scope of each size, each in a database of its own (so its HNSW index holds
    that scope only); the sizes take turns query by query, so a busy machine slows them alike."""
    rng = random.Random(41)
    centres = [[rng.random() - 0.5 for _ in range(VEC_DIM)] for _ in range(VEC_CLUSTERS)]
    out: dict[str, Any] = {"times": {}, "recall": {}, "load_s": {}, "index_s": {}, "explain": ""}
    pools: dict[int, Any] = {}
    try:
        for n, url in urls.items():
            await migrate(url)
            pool = pools[n] = await open_pool(url, 2)
            t0 = time.perf_counter()
            async with pool.connection() as conn:  # a bulk build beats 100 k one-by-one inserts
                await conn.execute(f"DROP INDEX IF EXISTS memory_embeddings_hnsw_{VEC_DIM}")
                await conn.execute("CREATE TABLE bench_centres (id int, v float8[])")
                for i, c in enumerate(centres):
                    await conn.execute("INSERT INTO bench_centres VALUES (%s, %s)", (i, c))
            await _load_vectors(pool, "vec", 0, n)
            out["load_s"][n] = time.perf_counter() - t0
            t0 = time.perf_counter()
            async with pool.connection() as conn:
                await conn.execute("SET maintenance_work_mem = '1GB'")
                await conn.execute(
                    f"CREATE INDEX memory_embeddings_hnsw_{VEC_DIM} ON memory_embeddings USING hnsw"
                    f" ((embedding::vector({VEC_DIM})) vector_cosine_ops) WHERE dimension = {VEC_DIM}")
                await conn.execute("ANALYZE memory; ANALYZE memory_embeddings")
            out["index_s"][n] = time.perf_counter() - t0
        mems = {n: MemoryStore(p, max_scope_bytes=1 << 40) for n, p in pools.items()}
        qs = [[x + (rng.random() - 0.5) * 0.6 for x in centres[rng.randrange(VEC_CLUSTERS)]] for _ in range(queries)]
        times: dict[int, list[float]] = {n: [] for n in urls}
        found: dict[int, list[list[str]]] = {n: [] for n in urls}
        for q in qs:
            for n, mem in mems.items():
                t0 = time.perf_counter()
                hits = await mem.search("bench", "agent", "vec", vector=q, model="bench", k=10,
                                        exact_scan_limit=exact_scan_limit)
                times[n].append(time.perf_counter() - t0)
                found[n].append([h["key"] for h in hits])
        for n, mem in mems.items():
            out["times"][n] = times[n][queries // 10:]  # the first tenth warms the caches
            hit = total = 0
            for q, keys in list(zip(qs, found[n], strict=True))[:50]:  # recall@10 against the exact answer
                exact = await mem.search("bench", "agent", "vec", vector=q, model="bench", k=10,
                                         exact_scan_limit=1 << 40)
                want = {h["key"] for h in exact}
                hit += len(want & set(keys))
                total += len(want)
            out["recall"][n] = hit / total if total else float("nan")
        mem, pool = mems[max(urls)], pools[max(urls)]
        # the statement MemoryStore.search sent for one more query, explained with its parameters
        sent: list[tuple[str, Any]] = []
        real_execute = psycopg.AsyncCursor.execute

        async def spy(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
            if isinstance(query, str) and "WITH scored" in query:
                sent.append((query, params))
            return await real_execute(self, query, params, **kw)

        psycopg.AsyncCursor.execute = spy  # type: ignore[method-assign]
        try:
            await mem.search("bench", "agent", "vec", vector=qs[0], model="bench", k=10,
                             exact_scan_limit=exact_scan_limit)
        finally:
            psycopg.AsyncCursor.execute = real_execute  # type: ignore[method-assign]
        query, params = sent[-1]
        async with pool.connection() as conn, conn.transaction():
            await conn.execute("SET LOCAL hnsw.ef_search = 100")
            cur = await conn.execute("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) " + query, params)
            out["explain"] = "\n".join(re.sub(r"'\[[^']*\]'", "'[…]'", r["QUERY PLAN"]) for r in await cur.fetchall())
    finally:
        for p in pools.values():
            await p.close()
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
    ap.add_argument("--vec-sizes", default="1000,10000,100000", help="embedded keys in the searched scope ('': skip)")
    ap.add_argument("--queries", type=int, default=200, help="searches per size")
    ap.add_argument("--exact-scan-limit", type=int, default=MemorySearchConfig().exact_scan_limit,
                    help="memory.search.exact_scan_limit (default: the configuration's)")
    opts = ap.parse_args()
    sizes = [int(s) for s in opts.sizes.split(",")]
    vec_sizes = [int(s) for s in opts.vec_sizes.split(",") if s]
    vec: dict[str, Any] = {}
    with scratch_database("treadle_bench_memory") as url:
        times = await bench_set(url, sizes, opts.sets) if opts.sets else {}
        sql_times = await bench_sql(url, opts.sql) if opts.sql else {}
    if vec_sizes:
        with contextlib.ExitStack() as stack:
            urls = {n: stack.enter_context(scratch_database(f"treadle_bench_vectors_{n}")) for n in vec_sizes}
            vec = await bench_vector(urls, opts.queries, opts.exact_scan_limit)
    print(f"treadle: {code_version()}")
    if vec:
        base = pct(vec["times"][vec_sizes[0]], 50)
        print(f"Memory.search (store query, k=10, {VEC_DIM} dimensions, exact_scan_limit {opts.exact_scan_limit})")
        print(f"{'embedded keys':<14} {'load s':>7} {'index s':>7} {'n':>5} {'p50 ms':>8} {'p95 ms':>8}"
              f" {'x p50':>6} {'recall@10':>9}")
        for n, v in vec["times"].items():
            print(f"{n:<14} {vec['load_s'][n]:>7.1f} {vec['index_s'][n]:>7.1f} {len(v):>5} {ms(pct(v, 50)):>8}"
                  f" {ms(pct(v, 95)):>8} {pct(v, 50) / base:>6.2f} {vec['recall'][n]:>9.3f}")
        print(f"\nEXPLAIN ANALYZE of Memory.search's statement at {vec_sizes[-1]} keys:\n{vec['explain']}\n")
    if not times:
        sizes = []
    base = pct(times[sizes[0]], 50) if sizes else 1.0
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
