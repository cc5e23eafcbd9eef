"""Is the served API's memory growth under a schemathesis fuzz a cache (it levels off) or a leak
(it grows with every round)? Serves treadle in this process (tests/support/contract.py), runs the
same bounded schemathesis round N times against it (loopback, fixed seed), and prints after each
round the process RSS, the RSS after glibc's malloc_trim (memory the C allocator keeps free is not
a leak), pymalloc's blocks in use, and (unless --no-trace) the top tracemalloc growth since the end
of round 1. tracemalloc's own bookkeeping sits in RSS and grows with it: judge RSS with --no-trace,
find what grows with tracing (docs/benchmarks.md has a run's figures).

    .venv/bin/python scripts/fuzz_rss.py --no-trace --rounds 6 --max-examples 3
    .venv/bin/python scripts/fuzz_rss.py --rounds 3 --max-examples 3
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
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


def python_heap_mb() -> float:
    """The bytes in pymalloc's blocks in use (objects up to 512 bytes; sys._debugmallocstats,
    which writes to the C stderr), without tracing."""
    import os
    import tempfile

    with tempfile.TemporaryFile(mode="w+") as tmp:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        for line in tmp:
            if line.startswith("# bytes in allocated blocks"):
                return int(line.split("=")[1].replace(",", "").strip()) / 2**20
    return 0.0


def malloc_trim() -> float:
    """glibc's malloc_trim(0) — free memory of every arena returned to the OS — then the RSS."""
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    return rss_mb()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--max-examples", default="4")
    p.add_argument("--seed", default="20")
    p.add_argument("--frames", type=int, default=8, help="tracemalloc frames per allocation")
    p.add_argument("--no-trace", action="store_true",
                   help="RSS only: tracemalloc keeps a traceback per live block, in RSS itself, and slows the server")
    args = p.parse_args()
    server = db.server_url()
    import asyncio

    template = asyncio.run(db.create_template(server, "rsstmpl"))
    url = db.clone_database(server, template, "rss")
    if not args.no_trace:
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
                rss, heap, overhead = rss_mb(), python_heap_mb(), tracemalloc.get_tracemalloc_memory() / 2**20
                trimmed = malloc_trim()  # what the C allocator holds free (not a leak) goes back to the OS
                print(f"round {n}: {time.monotonic() - t0:.0f} s, rss {rss:.1f} MB (after malloc_trim {trimmed:.1f}),"
                      f" pymalloc blocks in use {heap:.1f} MB, tracemalloc's own {overhead:.1f} MB ({calls})",
                      flush=True)
                if args.no_trace:
                    continue
                snap = tracemalloc.take_snapshot().filter_traces(
                    [tracemalloc.Filter(False, tracemalloc.__file__)])
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
