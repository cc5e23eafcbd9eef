"""Is the served API's memory growth under a schemathesis fuzz a cache (it levels off) or a leak
(it grows with every round)? Serves treadle in this process (tests/support/contract.py), runs the
same bounded schemathesis round N times against it (loopback, fixed seed), and prints after each
round the process RSS and the top tracemalloc growth since the end of round 1.

    .venv/bin/python scripts/fuzz_rss.py --rounds 5 --max-examples 4
"""

from __future__ import annotations

import argparse
import gc
import resource
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support import db
from tests.support.contract import schemathesis_run, serve_in_thread

EXCLUDED = r"/_channels/_await$|/_operatortokendef$"


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--max-examples", default="4")
    p.add_argument("--seed", default="20")
    p.add_argument("--frames", type=int, default=8, help="tracemalloc frames per allocation")
    args = p.parse_args()
    server = db.server_url()
    import asyncio

    template = asyncio.run(db.create_template(server, "rsstmpl"))
    url = db.clone_database(server, template, "rss")
    tracemalloc.start(args.frames)
    try:
        with serve_in_thread(url) as served:
            print(f"start: rss {rss_mb():.1f} MB", flush=True)
            base = None
            for n in range(1, args.rounds + 1):
                t0 = time.monotonic()
                out = schemathesis_run(f"{served.url}/openapi.json", served.token, "--checks", "not_a_server_error",
                                       "--phases", "examples,fuzzing", "--max-examples", args.max_examples,
                                       "--seed", args.seed, "--exclude-path-regex", EXCLUDED,
                                       "--request-timeout", "20", "--workers", "1", timeout=900)
                calls = next((ln.strip() for ln in out.stdout.splitlines() if "Test cases:" in ln), "?")
                gc.collect()
                snap = tracemalloc.take_snapshot().filter_traces(
                    [tracemalloc.Filter(False, tracemalloc.__file__)])
                traced = sum(s.size for s in snap.statistics("filename")) / 2**20
                print(f"round {n}: {time.monotonic() - t0:.0f} s, rss {rss_mb():.1f} MB, python heap {traced:.1f} MB"
                      f" ({calls})", flush=True)
                if base is None:
                    base = snap
                    continue
                for stat in snap.compare_to(base, "traceback")[:5]:
                    if stat.size_diff < 64 * 1024:
                        break
                    print(f"   +{stat.size_diff / 1024:.0f} KiB ({stat.count_diff:+d} blocks)")
                    for line in stat.traceback.format()[-6:]:
                        print(f"      {line}")
    finally:
        db.drop_database(server, url)
        db.drop_template(server, template)


if __name__ == "__main__":
    main()
