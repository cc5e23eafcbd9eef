"""How long the workspace tools take, per adapter: Write, Edit, Read, Grep and Glob through the
real tool code (ToolContext, VolumeService, the effect journal in Postgres), on the host-directory
adapter and on the S3 adapter against moto's server on loopback (moto is not S3: its numbers say
what the adapter's own work costs, not what AWS adds).

    python scripts/bench_workspace.py [--calls 200] [--files 200]

Uses $DATABASE_URL's server if set, else the embedded Postgres under .treadle/bench.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

from bench_support import ms, pct, scratch_database  # noqa: E402
from treadle.testing import open_test_runtime  # noqa: E402
from treadle.tools.base import ToolResult  # noqa: E402
from treadle.volumes.base import VolumeStorage  # noqa: E402
from treadle.volumes.host import HostDirStorage  # noqa: E402

AGENTS = {"coder": {"tools": ["Read", "Write", "Edit", "Grep", "Glob"], "volumes": ["work"]}}
CONFIG = {"volumes": {"work": {"mode": "rw", "default": True}}}


async def bench(url: str, storage: VolumeStorage, calls: int, files: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {k: [] for k in ("Write", "Edit", "Read", "Grep", "Glob")}
    async with open_test_runtime(AGENTS, database_url=url, config=CONFIG) as (rt, _d):
        rt.volumes.storage = storage
        seq = iter(range(10**9))

        async def call(tool: str, args: dict[str, Any]) -> ToolResult:
            impl = rt.registry.get(tool)
            assert impl is not None
            ctx = rt.tool_context("bench", "run_bench", "coder", tool_use_id=f"toolu_{next(seq)}")
            t0 = time.perf_counter()
            out = await impl.invoke(ctx, args)
            times[tool].append(time.perf_counter() - t0)
            assert isinstance(out, ToolResult) and not out.is_error, out
            return out

        for i in range(files):
            await call("Write", {"path": f"src/m{i % 20}/f{i}.py", "content": f"# file {i}\nvalue = {i}\n" * 20})
        times["Write"].clear()
        for i in range(calls):
            path = f"src/m{i % 20}/f{i % files}.py"
            await call("Write", {"path": f"out/w{i}.txt", "content": "x" * 2048})
            await call("Edit", {"path": path, "old_string": f"value = {i % files}\n",
                                "new_string": f"value = {i % files}  \n", "replace_all": True})
            await call("Read", {"path": path})
        for _ in range(max(5, calls // 20)):
            await call("Grep", {"pattern": r"value = 1\d\b", "output_mode": "count"})
            await call("Glob", {"pattern": "src/**/*.py"})
    return times


def s3_storage() -> tuple[Any, VolumeStorage] | None:
    try:
        import boto3
        from moto.server import ThreadedMotoServer
    except ImportError:
        return None
    sys.path.insert(0, str(ROOT / "cloud"))
    from treadle_cloud.s3volumes import S3VolumeStorage

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    client = boto3.client("s3", endpoint_url=f"http://{host}:{port}", region_name="us-east-1",
                          aws_access_key_id="bench", aws_secret_access_key="bench")
    client.create_bucket(Bucket="bench")
    return server, S3VolumeStorage(client, "bench")


async def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--files", type=int, default=200)
    opts = ap.parse_args()
    rows: list[tuple[str, str, list[float]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        adapters: list[tuple[str, VolumeStorage]] = [("host", HostDirStorage(Path(tmp)))]
        s3 = s3_storage()
        if s3 is not None:
            adapters.append(("s3 (moto)", s3[1]))
        for name, storage in adapters:
            with scratch_database("treadle_ws") as url:
                for tool, values in (await bench(url, storage, opts.calls, opts.files)).items():
                    rows.append((name, tool, values))
        if s3 is not None:
            s3[0].stop()
    print(f"{'adapter':<10} {'tool':<6} {'calls':>6} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}")
    for name, tool, v in rows:
        print(f"{name:<10} {tool:<6} {len(v):>6} {ms(pct(v, 50)):>8} {ms(pct(v, 95)):>8} {ms(max(v)):>8}")
    print(f"({opts.files} files of ~0.4 KB in 20 directories; Grep and Glob walk all of them)")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
