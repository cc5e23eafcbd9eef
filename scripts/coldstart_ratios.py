"""Cold-start import ratios, measured in one run (a script, not a test: it prints a table).

    .venv/bin/python scripts/coldstart_ratios.py [--repeat 7] [--layer-python /path/to/python3.12]

Absolute import times move by 2x with this machine's state (two cores, other work), so each
handler is compared with the third-party packages it cannot run without, imported alone — the
two imports alternate in fresh interpreters, run after run. What is measured is each process's
CPU time (user + system, from wait4) minus that of an interpreter that imports nothing: unlike
wall time it does not count the time other processes hold the cores. The ratio of the least of
each is the figure (the ratio of the medians is printed beside it): goal ≤ 1.15 — what treadle's
own modules add on top of their dependencies.

It also states SnapStart's effect as what it removes: with SnapStart the handler's import and
the snapshot's preloaded imports (boto3 with botocore.config, httpx: treadle_cloud/snapstart.py)
happen once, at publish; a cold start restores the snapshot instead. What remains is the restore
and the first invocation's work (secrets, the database pool, the first SQS client call).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from coldstart import LAYER, STAGED, table  # noqa: E402

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


def cpu_ms(python: str, modules: str, env: dict[str, str] | None, cwd: Path) -> float:
    """CPU time (user + system) of a fresh interpreter that imports `modules` and exits. CPU time
    moves far less than wall time when other processes share the cores."""
    proc = subprocess.Popen([python, "-c", f"import {modules}" if modules else "pass"], env=env, cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise RuntimeError(f"import {modules} failed:\n{err[-2000:]}")
    return 1000.0 * (usage.ru_utime + usage.ru_stime)


def measure(python: str, repeat: int, env: dict[str, str] | None, cwd: Path) -> list[list[str]]:
    rows = []
    startup = min(cpu_ms(python, "", env, cwd) for _ in range(repeat))  # the interpreter alone
    preload = min(cpu_ms(python, SNAPSHOT_IMPORTS, env, cwd) for _ in range(repeat)) - startup
    for name, floor in FLOORS.items():
        module, deps = f"functions.{name}.handler", ", ".join(floor)
        cpu_ms(python, module, env, cwd)  # bytecode written, caches warm
        cpu_ms(python, deps, env, cwd)
        handler_ms, deps_ms = [], []
        for _ in range(repeat):  # alternating: a drift of the machine's state hits both alike
            handler_ms.append(cpu_ms(python, module, env, cwd) - startup)
            deps_ms.append(cpu_ms(python, deps, env, cwd) - startup)
        # the least of each: noise (other processes, cache misses) only ever adds time
        h, d = min(handler_ms), min(deps_ms)
        median_ratio = statistics.median(handler_ms) / statistics.median(deps_ms)
        rows.append([name, f"{h:.0f}", f"{d:.0f}", f"{h / d:.2f}", f"{median_ratio:.2f}",
                     "yes" if h / d <= GOAL else "no", f"{h + preload:.0f}"])
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
    table(f"Handler import CPU ms vs its dependencies alone ({where}; least of {args.repeat}, alternating, one run)",
          ["handler", "handler ms", "dependencies ms", "ratio", "ratio of medians", f"≤ {GOAL}",
           "SnapStart removes ms"], rows)
    print(f"\n  SnapStart removes = the handler's import + the snapshot's preloaded imports ({SNAPSHOT_IMPORTS});")
    print("  a restored cold start pays the restore and the first invocation (secrets, pool) instead.")
    for name, floor in FLOORS.items():
        print(f"  {name}: dependencies = {' + '.join(floor)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
