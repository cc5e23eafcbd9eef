"""A long conversation's cost per turn (issue 34): one session of `--turns` turns (default 300),
each a run that continues it; in each turn the mock model (`chat-tool`, a 32 k window) calls
Memory once for a 2 KB value, then answers. Auto-compaction is on (at 80 % of the window).

Per turn it measures the worker's CPU (this process's, the engine stepping the run in-line;
the model's own CPU is subtracted), the bytes the turn stored (its run's events and run row),
and the largest request the model got. It prints the figures at turns 10, 100 and 300 (the median
of the ten turns ending there), and checks issue 34's targets: turn 300 costs at most 1.3x turn
10, bytes per turn stay flat, no request exceeds the window, compaction fired.

    .venv/bin/python scripts/bench_conversation.py [--turns 300] [--window 32000]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "core"))

from bench_support import ROOT, code_version, scratch_database, seam
from treadle.domain.events import EventType
from treadle.providers.mock import MockProvider
from treadle.store.runs import NewRun
from treadle.testing import open_test_runtime

TENANT = "bench"
BLOB = "x" * 2048  # the tool result of every turn: a 2 KB Memory value
MARKS = (10, 100, 300)


def agent(window: int) -> dict[str, Any]:
    return {
        "model": "chat-tool",
        "tools": ["Memory"],
        "memory_scopes": ["agent"],
        "mock": {"context_window": window, "tool_input": {"op": "get", "scope": "agent", "key": "blob"}},
        "compaction": {"enabled": True, "autocompact_at_pct": 80},
    }


class ModelClock:
    """The mock model's CPU, to subtract from the worker's (the target excludes the model)."""

    def __init__(self) -> None:
        self.cpu = 0.0
        original = seam(MockProvider, "call", "the mock model's entry point")

        async def timed(provider: MockProvider, req: Any, on_delta: Any = None) -> Any:
            t0 = time.process_time()
            try:
                return await original(provider, req, on_delta)
            finally:
                self.cpu += time.process_time() - t0

        MockProvider.call = timed  # type: ignore[method-assign]


async def turn_facts(rt: Any, run_id: str) -> dict[str, int]:
    async with rt.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT (SELECT coalesce(sum(pg_column_size(e.*)), 0) FROM events e WHERE e.run_id = r.id)"
            " + pg_column_size(r.*) AS bytes,"
            " (SELECT coalesce(max((e.payload->'usage'->>'input_tokens')::int), 0) FROM events e"
            f"  WHERE e.run_id = r.id AND e.type = '{EventType.USAGE}') AS max_input,"
            f" (SELECT count(*) FROM events e WHERE e.run_id = r.id AND e.type = '{EventType.CONTEXT_COMPACTION}')"
            " AS compactions,"
            " r.status FROM runs r WHERE r.id = %s",
            (run_id,),
        )
        row = await cur.fetchone()
    assert row is not None and row["status"] == "completed", row
    return {"bytes": int(row["bytes"]), "max_input": int(row["max_input"]), "compactions": int(row["compactions"])}


async def bench(url: str, turns: int, window: int) -> list[dict[str, float]]:
    clock = ModelClock()
    out: list[dict[str, float]] = []
    async with open_test_runtime(
        {"chat": agent(window)}, database_url=url, inline=True, home=ROOT / ".treadle" / "bench"
    ) as (rt, disp):
        await rt.memory.set(TENANT, "agent", "chat", "blob", BLOB, None)
        session_id: str | None = None
        gc.collect()
        gc.freeze()
        for k in range(1, turns + 1):
            segments = [{"role": "user", "content": [{"type": "trusted-text", "text": f"turn {k}: what next?"}]}]
            model0, cpu0 = clock.cpu, time.process_time()
            run, _ = await rt.start_run(
                NewRun(tenant_id=TENANT, agent="chat", segments=segments, user_id="ada", session_id=session_id)
            )
            await disp.drain()
            cpu = time.process_time() - cpu0 - (clock.cpu - model0)
            session_id = run.session
            out.append({"turn": k, "cpu": cpu, **await turn_facts(rt, run.id)})
        gc.unfreeze()
    return out


def window_median(rows: list[dict[str, float]], turn: int, key: str) -> float:
    return statistics.median(r[key] for r in rows[max(0, turn - 10) : turn])


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=300)
    ap.add_argument("--window", type=int, default=32_000)
    args = ap.parse_args()
    with scratch_database("bench_conversation") as url:
        rows = await bench(url, args.turns, args.window)
    marks = [m for m in MARKS if m <= args.turns]
    print(
        f"treadle {code_version()}: one session, {args.turns} turns, a 2 KB tool result per turn, "
        f"mock window {args.window}"
    )
    print("| turn | worker CPU per turn (ms, model excluded) | DB bytes per turn | largest request (tokens) |")
    print("|---:|---:|---:|---:|")
    for m in marks:
        print(
            f"| {m} | {window_median(rows, m, 'cpu') * 1000:.2f} | {window_median(rows, m, 'bytes'):.0f} | "
            f"{max(r['max_input'] for r in rows[:m]):.0f} |"
        )
    compactions = int(sum(r["compactions"] for r in rows))
    largest = max(r["max_input"] for r in rows)
    first, last = marks[0], marks[-1]
    cpu_ratio = window_median(rows, last, "cpu") / window_median(rows, first, "cpu")
    byte_ratio = window_median(rows, last, "bytes") / window_median(rows, first, "bytes")
    print(f"\ncompactions: {compactions}; largest request {largest} tokens of {args.window}")
    print(f"turn {last} / turn {first}: CPU {cpu_ratio:.2f}x (target <= 1.3x), bytes {byte_ratio:.2f}x (flat)")
    verdict = cpu_ratio <= 1.3 and 0.8 <= byte_ratio <= 1.25 and largest <= args.window and compactions > 0
    print("PASS" if verdict else "FAIL")


if __name__ == "__main__":
    asyncio.run(main())
