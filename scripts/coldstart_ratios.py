"""Cold-start import ratios, measured in one run (a script, not a test: it prints a table).

    .venv/bin/python scripts/coldstart_ratios.py [--repeat 7] [--layer-python /path/to/python3.12]

Absolute import times move by 2x with this machine's state (two cores, other work), so each
handler is compared with the third-party packages it cannot run without, imported alone — the
two imports alternate in fresh interpreters, run after run, and the ratio of the fastest of
each is the figure (noise only adds time; the ratio of the medians is printed beside it): goal
≤ 1.15 (what treadle's own modules add on top of their dependencies).

It also states SnapStart's effect as what it removes: with SnapStart the handler's import and
the snapshot's preloaded imports (boto3 with botocore.config, httpx: treadle_cloud/snapstart.py)
happen once, at publish; a cold start restores the snapshot instead. What remains is the restore
and the first invocation's work (secrets, the database pool, the first SQS client call).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from coldstart import LAYER, STAGED, import_ms, table  # noqa: E402

GOAL = 1.15
HTTP = ("asyncio", "pydantic", "psycopg", "psycopg_pool", "fastapi", "mangum")
#: each handler → the third-party packages it cannot run without (its floor)
FLOORS: dict[str, tuple[str, ...]] = {
    "api": HTTP,
    "webhook": HTTP,
    "mcp": HTTP,
    "worker": ("asyncio", "pydantic", "psycopg", "psycopg_pool", "aws_lambda_powertools.utilities.batch"),
    "scheduler": ("asyncio", "pydantic", "psycopg", "psycopg_pool"),
    "maintenance": ("asyncio", "pydantic", "psycopg", "psycopg_pool"),
    "migrate": ("asyncio", "pydantic", "psycopg"),
}
SNAPSHOT_IMPORTS = "boto3, httpx"  # botocore.config comes with boto3


def measure(python: str, repeat: int, env: dict[str, str] | None, cwd: Path) -> list[list[str]]:
    rows = []
    preload = []
    for name, floor in FLOORS.items():
        module, deps = f"functions.{name}.handler", ", ".join(floor)
        import_ms(python, module, env=env, cwd=cwd)  # bytecode written, caches warm
        import_ms(python, deps, env=env, cwd=cwd)
        handler_ms, deps_ms = [], []
        for _ in range(repeat):  # alternating: a drift of the machine's state hits both alike
            handler_ms.append(import_ms(python, module, env=env, cwd=cwd))
            deps_ms.append(import_ms(python, deps, env=env, cwd=cwd))
        # the fastest of each: noise (other processes on the cores) only ever adds time
        h, d = min(handler_ms), min(deps_ms)
        ratio = h / d
        median_ratio = statistics.median(handler_ms) / statistics.median(deps_ms)
        rows.append([name, f"{h:.0f}", f"{d:.0f}", f"{ratio:.2f}", f"{median_ratio:.2f}",
                     "yes" if ratio <= GOAL else "no"])
        preload.append(import_ms(python, SNAPSHOT_IMPORTS, env=env, cwd=cwd))
    pre = min(preload)
    for row in rows:
        row.append(f"{float(row[1]) + pre:.0f}")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--layer-python", help="an interpreter of the Lambda runtime's version, with the staged code"
                                           " (cdk synth) and the built layer on its path")
    args = ap.parse_args()
    python, env, cwd, where = sys.executable, None, ROOT, f"venv, Python {sys.version.split()[0]}"
    if args.layer_python:
        if not (LAYER / "python").is_dir() or not STAGED.is_dir():
            sys.exit("--layer-python needs layers/build/layer (layers/build.py) and build/lambda-app (cdk synth)")
        python, cwd, where = args.layer_python, STAGED, "staged code + layer"
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{STAGED}:{LAYER / 'python'}", "LANG": "C.UTF-8",
               "PYTHONPYCACHEPREFIX": str(ROOT / ".treadle" / "coldstart" / "pycache"),
               "PYDANTIC_DISABLE_PLUGINS": "__all__"}
    rows = measure(python, args.repeat, env, cwd)
    table(f"Handler import vs its dependencies alone ({where}; fastest of {args.repeat}, alternating, one run)",
          ["handler", "handler ms", "dependencies ms", "ratio", "ratio of medians", f"≤ {GOAL}",
           "SnapStart removes ms"], rows)
    print(f"\n  SnapStart removes = the handler's import + the snapshot's preloaded imports ({SNAPSHOT_IMPORTS});")
    print("  a restored cold start pays the restore and the first invocation (secrets, pool) instead.")
    for name, floor in FLOORS.items():
        print(f"  {name}: dependencies = {' + '.join(floor)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
