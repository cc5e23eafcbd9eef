"""Cold-start import ratios, measured in one run (a script, not a test: it prints a table).

    .venv/bin/python scripts/coldstart_ratios.py [--repeat 7] [--baseline REV] [--layer-python /path/to/python3.12]

Absolute import times move by 2x with this machine's state (two cores, other work), so each
handler is compared with the third-party packages it cannot run without, imported alone — the
two imports alternate in fresh interpreters, run after run. What is measured is each process's
CPU time (user + system, from wait4) minus that of an interpreter that imports nothing: unlike
wall time it does not count the time other processes hold the cores. The ratio of the least of
each is the figure (the ratio of the medians is printed beside it): goal ≤ 1.15 — what treadle's
own modules add on top of their dependencies. The floor is each dependency *in use* (see FLOORS).
`--baseline REV` measures that git revision's handlers in the same run, alternating with this
tree's: before and after from one run. Handlers that pause the garbage collector while they import
(functions/__init__.py) are compared with the floor imported the same way (`paused`).

The handler's import is what an on-demand INIT does. The API function imports a router when a
request first needs it (treadle_cloud/routes.py): its first request imports the routers of its
path, nothing more — the modules every request needs (the runtime, the runs API) are imported at
INIT. It also states SnapStart's effect as what it removes: a SnapStart INIT — the handler's
import, the snapshot's preloaded imports (boto3 with botocore.config, httpx:
treadle_cloud/snapstart.py) and the API function's every router — runs once, at publish,
measured here with a stand-in for the runtime's hook registry; a cold start restores the snapshot
instead. What remains is the restore and the first invocation's work (secrets, the database pool,
the first SQS client call).
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

# The floor is what a handler cannot run without, *in use*. Importing a package is not the same as
# using it: `import pydantic` loads almost nothing (the package is lazy) — the first `BaseModel`
# loads pydantic.main and its schema generator (~40 ms CPU); FastAPI builds its first route's
# dependency analysis and field adapters on first use, importing pydantic.v1 for a compatibility
# check (~30 ms). Neither is treadle's cost, so each floor defines one model and, for the HTTP
# functions, one route with a body — the fixed cost of using the package at all. What treadle adds
# on top (its own modules, its ~200 models and dataclasses, its routes) is what the ratio shows.
#
# The floor also holds the third-party packages every invocation uses besides the obvious ones:
# Powertools' metrics (each function's EMF record, treadle_cloud/metrics.py) and the OpenTelemetry
# API (the spans of treadle/telemetry/tracing.py — the API only; no SDK unless OTEL_* is set).
PYDANTIC = "from pydantic import BaseModel\nclass M(BaseModel):\n    x: int = 0\n"
OBSERVED = ("import aws_lambda_powertools.metrics\nfrom opentelemetry import context, trace\n"
            "from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator\n")
DB = "import asyncio, psycopg, psycopg_pool\n" + OBSERVED
ROUTE = ("import fastapi, mangum\nr = fastapi.APIRouter()\n"
         "@r.post('/x')\nasync def f(m: M) -> M:\n    return m\n")
HTTP = DB + PYDANTIC + ROUTE
#: each handler → the code of its floor: the third-party packages it cannot run without, in use
FLOORS: dict[str, str] = {
    "api": HTTP,
    "webhook": HTTP,
    "mcp": HTTP,
    "worker": DB + PYDANTIC + "import aws_lambda_powertools.utilities.batch\n",
    "scheduler": DB + PYDANTIC,
    "maintenance": DB + PYDANTIC,
    "migrate": "import asyncio, psycopg, psycopg_pool\n" + PYDANTIC,  # no metrics, no spans
}
SNAPSHOT_IMPORTS = "import boto3, httpx"  # what treadle_cloud/snapstart.py preloads (+ botocore.config)


def cpu_ms(python: str, code: str, env: dict[str, str] | None, cwd: Path) -> float:
    """CPU time (user + system) of a fresh interpreter that runs `code` and exits. CPU time
    moves far less than wall time when other processes share the cores."""
    proc = subprocess.Popen([python, "-c", code or "pass"], env=env, cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise RuntimeError(f"{code!r} failed:\n{err[-2000:]}")
    return 1000.0 * (usage.ru_utime + usage.ru_stime)


def describe(floor: str) -> str:
    """A floor's code in a line: its packages, and the model / route it declares."""
    parts = ["asyncio, psycopg, psycopg_pool"]
    if "powertools.metrics" in floor:
        parts.append("Powertools metrics, the OpenTelemetry API")
    parts.append("pydantic with one model")
    if "fastapi" in floor:
        parts.append("FastAPI + mangum with one route")
    if "utilities.batch" in floor:
        parts.append("Powertools batch")
    return " + ".join(parts)


def tree_env(tree: Path) -> dict[str, str]:
    """The environment that imports treadle from `tree` (a checkout: core/, sidecar/, cloud/), with
    bytecode written and read, as Lambda runs it (infra and the layer ship it compiled) — an
    inherited PYTHONDONTWRITEBYTECODE would time treadle compiled from source in every process."""
    paths = [tree / "core", tree / "sidecar", tree / "cloud", tree]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPATH": os.pathsep.join(map(str, paths))}


def export_tree(rev: str, into: Path) -> Path:
    """`rev`'s files (git archive) under `into`: the baseline a run compares with."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


STAND_IN = ROOT / ".treadle" / "coldstart" / "snapstart-stand-in"


def snapstart_env(env: dict[str, str] | None) -> dict[str, str]:
    """`env` as a SnapStart INIT sees it: AWS_LAMBDA_INITIALIZATION_TYPE=snap-start, and a stand-in
    for the Lambda runtime's `snapshot_restore_py` (its hook registry) on the path."""
    STAND_IN.mkdir(parents=True, exist_ok=True)
    (STAND_IN / "snapshot_restore_py.py").write_text(
        "def register_after_restore(fn, *a, **kw):\n    return fn\n"
        "def register_before_snapshot(fn, *a, **kw):\n    return fn\n")
    base = dict(os.environ if env is None else env)
    path = os.pathsep.join(p for p in (str(STAND_IN), base.get("PYTHONPATH", "")) if p)
    return {**base, "PYTHONPATH": path, "AWS_LAMBDA_INITIALIZATION_TYPE": "snap-start"}


def least(samples: list[float]) -> float:
    return min(samples)  # noise (other processes, cache misses) only ever adds time


def pauses_gc(tree: Path) -> bool:
    """Whether `tree`'s handlers pause the garbage collector while they import (functions/__init__.py)."""
    init = tree / "functions" / "__init__.py"
    return init.is_file() and "gc.disable()" in init.read_text()


def paused(code: str) -> str:
    """`code` as a handler that pauses the collector runs it: collector off, then frozen and on."""
    return "import gc\ngc.disable()\n" + code + "\ngc.freeze()\ngc.enable()\n"


def measure(python: str, repeat: int, trees: list[tuple[dict[str, str] | None, Path]]) -> list[list[str]]:
    """Per handler: its import in each tree and its floor, alternating run after run (a drift of
    the machine's state hits all alike). A tree whose handlers pause the garbage collector during
    their import (functions/__init__.py) is compared with the floor imported the same way — the
    pause speeds third-party imports too, and the ratio is about treadle's own share. Columns: ms
    per tree, floor ms (plain, paused), ratio per tree, the ratio of medians (last tree), goal met
    (last tree), SnapStart removes ms (last tree)."""
    rows = []
    env0, cwd0 = trees[-1]
    startup = least([cpu_ms(python, "", env0, cwd0) for _ in range(repeat)])  # the interpreter alone
    snap_env = snapstart_env(env0)
    like = [pauses_gc(cwd) for _, cwd in trees]
    for name, deps in FLOORS.items():
        module = f"import functions.{name}.handler"
        floors = (deps, paused(deps))
        for env, cwd in trees:
            cpu_ms(python, module, env, cwd)  # bytecode written, caches warm
        for code in floors:
            cpu_ms(python, code, env0, cwd0)
        handler_ms: list[list[float]] = [[] for _ in trees]
        deps_ms: tuple[list[float], list[float]] = ([], [])
        for _ in range(repeat):
            for i, (env, cwd) in enumerate(trees):
                handler_ms[i].append(cpu_ms(python, module, env, cwd) - startup)
            for samples, code in zip(deps_ms, floors, strict=True):
                samples.append(cpu_ms(python, code, env0, cwd0) - startup)
        hs, ds = [least(h) for h in handler_ms], [least(d) for d in deps_ms]
        ratios = [h / ds[p] for h, p in zip(hs, like, strict=True)]
        median_ratio = statistics.median(handler_ms[-1]) / statistics.median(deps_ms[like[-1]])
        # a SnapStart INIT: the handler's import plus what it preloads into the snapshot (boto3,
        # httpx; the API function's every router) — made once at publish, not at a cold start
        snap = least([cpu_ms(python, module, snap_env, cwd0) - startup for _ in range(repeat)])
        rows.append([name, *(f"{h:.0f}" for h in hs), f"{ds[0]:.0f}", f"{ds[1]:.0f}", *(f"{r:.2f}" for r in ratios),
                     f"{median_ratio:.2f}", "yes" if ratios[-1] <= GOAL else "no", f"{snap:.0f}"])
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--baseline", metavar="REV", help="also measure git revision REV's handlers in the same run"
                                                      " (before/after columns; venv only)")
    ap.add_argument("--layer-python", help="an interpreter of the Lambda runtime's version, with the staged code"
                                           " (cdk synth) and the built layer on its path")
    args = ap.parse_args()
    python, where = sys.executable, f"venv, Python {sys.version.split()[0]}"
    trees: list[tuple[dict[str, str] | None, Path]] = [(tree_env(ROOT), ROOT)]
    labels = ["handler ms"]
    if args.layer_python:
        if args.baseline:
            sys.exit("--baseline measures the venv only")
        if not (LAYER / "python").is_dir() or not STAGED.is_dir():
            sys.exit("--layer-python needs layers/build/layer (layers/build.py) and build/lambda-app (cdk synth)")
        python, where = args.layer_python, "staged code + layer"
        trees = [({"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{STAGED}:{LAYER / 'python'}", "LANG": "C.UTF-8",
                   "PYTHONPYCACHEPREFIX": str(ROOT / ".treadle" / "coldstart" / "pycache"),
                   "PYDANTIC_DISABLE_PLUGINS": "__all__"}, STAGED)]
    if args.baseline:
        base = export_tree(args.baseline, ROOT / ".treadle" / "coldstart" / f"baseline-{args.baseline}")
        trees.insert(0, (tree_env(base), base))
        labels = [f"{args.baseline} ms", "this tree ms"]
    rows = measure(python, args.repeat, trees)
    ratios = [label.replace(" ms", " ratio") for label in labels]
    table(f"Handler import CPU ms vs its dependencies alone ({where}; least of {args.repeat}, alternating, one run)",
          ["handler", *labels, "dependencies ms", "dependencies, GC paused, ms", *ratios, "ratio of medians",
           f"≤ {GOAL}", "SnapStart removes ms"], rows)
    print("\n  SnapStart removes = the CPU of a SnapStart INIT, measured: the handler's import plus what it")
    print(f"  preloads into the snapshot ({SNAPSHOT_IMPORTS[7:]}; the API function's every router). A restored cold")
    print("  start pays the restore and the first invocation (secrets, pool) instead.")
    print("  A tree whose handlers pause the garbage collector while importing (functions/__init__.py) is compared")
    print("  with its dependencies imported the same way (GC paused, then frozen): the pause speeds them up too.")
    print("  dependencies (the floor, in use: see FLOORS):")
    for name, floor in FLOORS.items():
        print(f"  {name}: {describe(floor)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
