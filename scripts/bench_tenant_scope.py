"""What database-enforced tenant isolation (store/scope.py, migration 0021) costs an API request:
the same store reads in blocks of 20, rotating in one run: unbound (the worker's path), bound to a
tenant on a direct connection (the session switches tenant when the connection last acted for
another one or for the owner), and bound behind a transaction pooler (every checkout is
BEGIN + set_config, the query, COMMIT).

    .venv/bin/python scripts/bench_tenant_scope.py [--reads 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "core"))

from bench_support import ms, pct, scratch_database
from treadle.store import scope
from treadle.store.runs import NewRun
from treadle.testing import open_test_runtime

AGENTS = {"echo": {"provider": "mock", "model": "echo"}}


async def bench(url: str, reads: int) -> dict[str, list[float]]:
    async with open_test_runtime(AGENTS, database_url=url, inline=False) as (rt, _d):
        segments = [{"role": "user", "content": [{"type": "trusted-text", "text": "hi"}]}]
        runs = [(await rt.start_run(NewRun(tenant_id=f"t{i % 4}", agent="echo", segments=segments)))[0]
                for i in range(200)]
        labels = ("unbound", "bound, direct", "bound, pooler")
        times: dict[str, list[float]] = {label: [] for label in labels}
        for block in range(reads // 20):
            label = labels[block % 3]
            rt.pool.behind_pooler = label == "bound, pooler"
            for i in range(20):  # a block: one request's reads, or a worker's
                run = runs[(block * 20 + i) % len(runs)] if label == "unbound" else runs[block % 4]
                t0 = time.perf_counter()
                if label == "unbound":
                    found = await rt.runs.get(run.tenant_id, run.id)
                else:
                    with scope.bound_tenant(run.tenant_id):
                        found = await rt.runs.get(run.tenant_id, run.id)
                times[label].append(time.perf_counter() - t0)
                assert found is not None
        return times


async def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reads", type=int, default=3000)
    opts = ap.parse_args()
    with scratch_database("treadle_scope") as url:
        times = await bench(url, opts.reads)
    base = pct(times["unbound"], 50)
    print(f"{'store read (runs.get)':<24} {'n':>6} {'p50 ms':>8} {'p95 ms':>8} {'x p50':>6}")
    for label, v in times.items():
        print(f"{label:<24} {len(v):>6} {ms(pct(v, 50)):>8} {ms(pct(v, 95)):>8} {pct(v, 50) / base:>6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
