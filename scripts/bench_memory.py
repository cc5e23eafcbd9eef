"""Memory's costs as data grows (issues 32 and 41): `Memory.set` p50/p95 in a scope already holding
1 k and 100 k keys (the quota check reads a running per-scope byte count, migration 0041, instead
of summing the scope). Rows are bulk-loaded with SQL (the trigger keeps the count), then timed sets
overwrite and add keys through MemoryStore.set, as the Memory tool does.

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


async def bench_set(url: str, sizes: list[int], sets: int) -> dict[int, list[float]]:
    await migrate(url)
    pool = await open_pool(url, 2)
    out: dict[int, list[float]] = {}
    try:
        mem = MemoryStore(pool, max_scope_bytes=1 << 30)
        for n in sizes:
            scope_id = f"s{n}"
            async with pool.connection() as conn:
                await conn.execute(
                    "INSERT INTO memory (tenant_id, scope, scope_id, key, value)"
                    " SELECT 'bench', 'agent', %s, 'k' || g, to_jsonb(repeat('v', 100) || g)"
                    " FROM generate_series(1, %s) g", (scope_id, n))
                await conn.execute("ANALYZE memory")
            times: list[float] = []
            for i in range(sets):
                key = f"k{(i * 7919) % n + 1}" if i % 2 else f"new{i}"  # overwrite / add, alternating
                t0 = time.perf_counter()
                await mem.set("bench", "agent", scope_id, key, {"i": i, "text": "w" * 120}, None)
                times.append(time.perf_counter() - t0)
            out[n] = times[sets // 10:]  # the first tenth warms the caches
    finally:
        await pool.close()
    return out


async def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,100000")
    ap.add_argument("--sets", type=int, default=400)
    opts = ap.parse_args()
    sizes = [int(s) for s in opts.sizes.split(",")]
    with scratch_database("treadle_bench_memory") as url:
        times = await bench_set(url, sizes, opts.sets)
    print(f"treadle: {code_version()}")
    base = pct(times[sizes[0]], 50)
    print(f"{'Memory.set, keys in scope':<26} {'n':>6} {'p50 ms':>8} {'p95 ms':>8} {'x p50':>6}")
    for n, v in times.items():
        print(f"{n:<26} {len(v):>6} {ms(pct(v, 50)):>8} {ms(pct(v, 95)):>8} {pct(v, 50) / base:>6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
