"""A/B loop benchmark: this checkout's engine against another revision's, alternating, same machine.

    .venv/bin/python scripts/bench_ab.py --base b7e1e62 --rounds 6 --runs 300

This machine's speed drifts within minutes (the 4-connection floor has moved from 1,500 to 2,900/s
between two passes of one run), so two revisions measured minutes apart measure the drift too.
Here each round runs both revisions back to back, in fresh processes, in alternating order (A B,
B A, ...), each pass between two floors measured in its own process: `bench_loop.py`'s bare
4-worker pass (`bench_rate`: 10 iterations per run, one Memory.incr per iteration, chain_steps 8,
mock provider), on a scratch database of the embedded Postgres (or $DATABASE_URL's server).

The base revision is checked out into a temporary git worktree and imported from there (its
`core/`), with this checkout's benchmark code; its migrations are the ones it runs. Printed: each
pass, then the medians per revision — iterations/s, client and server CPU per iteration, the
floor's rate and the rate ÷ floor ratio of `bench_loop.py`'s 4-worker target.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ONE_PASS = """
import asyncio, json, sys
root, runs = sys.argv[1], int(sys.argv[2])
sys.path.insert(0, str(__import__("pathlib").Path(sys.argv[3])))
import bench_loop as b, treadle
if sys.argv[4] == "cold":
    b.WARM.runs = b.WARM.floor = 0
assert treadle.__file__.startswith(root), (treadle.__file__, root)
from bench_support import scratch_database
async def main():
    with scratch_database("treadle_ab") as url:
        f1 = await b.bench_floor(url, 2000, 4)
        r = await b.bench_rate(url, runs, 10, 4, "ab", 8)
        f2 = await b.bench_floor(url, 2000, 4)
        floor = (f1["rate"] + f2["rate"]) / 2
        print(json.dumps({"rate": r["rate"], "client_ms": r["cpu"] * 1000, "server_ms": r["server_cpu"] * 1000,
                          "floor": floor, "ratio": r["rate"] / floor, "completed": r["completed"]}))
asyncio.run(main())
"""


def one_pass(root: Path, runs: int, cold: bool) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(root / "core"))
    out = subprocess.run([sys.executable, "-c", ONE_PASS, str(root), str(runs), str(ROOT / "scripts"),
                          "cold" if cold else "warm"],
                         env=env, capture_output=True, text=True, timeout=600)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"pass in {root} failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    result: dict[str, float] = json.loads(lines[-1])
    if result["completed"] != runs:
        raise SystemExit(f"pass in {root}: {result['completed']}/{runs} runs completed")
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the revision to compare with (a commit, tag or branch)")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--runs", type=int, default=300, help="runs of 10 iterations per pass")
    ap.add_argument("--cold", action="store_true", help="no warm-up before each pass and floor (bench_loop.py --cold)")
    args = ap.parse_args()
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="treadle-ab-") as tmp:
        base = Path(tmp) / "base"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base), args.base],
                       check=True, capture_output=True)
        try:
            sides = {f"base {args.base}": base, f"this checkout ({head}, with its changes)": ROOT}
            results: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
            print("| round | revision | iterations/s | client CPU ms | server CPU ms | floor /s | rate ÷ floor |")
            print("|---:|---|---:|---:|---:|---:|---:|")
            for rnd in range(args.rounds):
                order = list(sides.items()) if rnd % 2 == 0 else list(sides.items())[::-1]
                for name, root in order:
                    r = one_pass(root, args.runs, args.cold)
                    results[name].append(r)
                    print(f"| {rnd + 1} | {name} | {r['rate']:.0f} | {r['client_ms']:.3f} | {r['server_ms']:.3f}"
                          f" | {r['floor']:.0f} | {r['ratio']:.0%} |", flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], capture_output=True)
    print()
    print("| revision (medians) | iterations/s | client CPU ms | server CPU ms | floor /s | rate ÷ floor |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, rs in results.items():
        med = {k: statistics.median(r[k] for r in rs) for k in ("rate", "client_ms", "server_ms", "floor", "ratio")}
        print(f"| {name} | {med['rate']:.0f} | {med['client_ms']:.3f} | {med['server_ms']:.3f} | {med['floor']:.0f}"
              f" | {med['ratio']:.0%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
