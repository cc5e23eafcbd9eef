"""Cold-start numbers of the cloud shape's handlers (a script, not a test: numbers are printed).

    .venv/bin/python scripts/coldstart.py [--repeat 3] [--layer-python /path/to/python3.12]

1. Import time of each handler module in a fresh interpreter: `python -X importtime`'s cumulative
   time for `functions.<name>.handler` (the median of `--repeat` runs). Goal: api ≤ 300 ms,
   worker ≤ 200 ms.
   With `--layer-python` (an interpreter of the Lambda runtime's version) the same is measured
   the way Lambda imports: only the staged code (build/lambda-app, from `cdk synth`) and the built
   layer (layers/build/layer/python) on the path.
2. First invocation of api and worker in a fresh process, against moto's SQS and a real Postgres
   ($DATABASE_URL, else the embedded one): the first call opens the runtime (migrations check,
   pool) and creates the SQS client (boto3 is imported then), the second shows the warm path.
   api: POST /v1/runs; worker: one step of a mock tool-calling agent (model, tool, commit, send).
3. The dependency layer's size, unzipped and zipped (build it with layers/build.py).
4. With `--ric` (needs `pip install awslambdaric`): every function under AWS's own runtime
   interface client, `python -m awslambdaric functions.<name>.handler.handler`, against a local
   Runtime API stand-in (scripts/runtime_api.py), moto and a real Postgres. Per function:
   INIT (process start → the runtime's first `GET /invocation/next`), the first and the second
   invocation, peak memory (VmHWM); and SnapStart-style (`AWS_LAMBDA_INITIALIZATION_TYPE=snap-start`:
   INIT and the before-snapshot hooks done ahead, up to `GET /restore/next`), the memory at the
   snapshot (VmRSS there) and the first invocation after the restore (restore answered → the
   first answer, after-restore hooks included). Not measured: the time AWS takes to restore a
   snapshot into a microVM (its page-ins) — CRIU cannot snapshot on this kernel.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HANDLERS = ("api", "worker", "webhook", "mcp", "scheduler", "maintenance")
GOALS_MS = {"api": 300, "worker": 200}
#: the third-party packages each function cannot run without, imported alone in the same way: the
#: floor under the handler's own import time (the baseline measured in the same run)
DEPENDENCY_FLOORS = {
    "api": ("asyncio", "pydantic", "psycopg", "psycopg_pool", "fastapi", "mangum"),
    "worker": ("asyncio", "pydantic", "psycopg", "psycopg_pool", "aws_lambda_powertools.utilities.batch"),
}
LAYER = ROOT / "layers" / "build" / "layer"
STAGED = ROOT / "build" / "lambda-app"


def import_ms(python: str, module: str, env: dict[str, str] | None = None, cwd: Path = ROOT) -> float:
    """`python -X importtime`'s cumulative time of importing `module` (comma-separated modules:
    the sum of their top-level entries, each counted once, in one fresh interpreter)."""
    names = [m.strip() for m in module.split(",")]
    proc = subprocess.run(
        [python, "-X", "importtime", "-c", f"import {', '.join(names)}"],
        capture_output=True, text=True, env=env, cwd=cwd, check=True,
    )
    total, found = 0, set()
    for line in proc.stderr.splitlines():
        parts = line.split("|")
        if not line.startswith("import time:") or len(parts) != 3 or parts[2].startswith("  "):
            continue  # a header, or a nested import (already inside its importer's cumulative time)
        name = parts[2].strip()
        # top level: every module the statement imported first-hand, including the parents a
        # dotted name brings (aws_lambda_powertools before aws_lambda_powertools.utilities.batch)
        if any(name == n or n.startswith(name + ".") for n in names):
            total += int(parts[1])
            found.add(name)
    if not set(names) <= found:
        raise RuntimeError(f"no importtime line for {sorted(set(names) - found)}:\n{proc.stderr[-2000:]}")
    return total / 1000.0


def median_import(python: str, module: str, repeat: int, **kw: object) -> float:
    import_ms(python, module, **kw)  # the first run writes bytecode
    return statistics.median(import_ms(python, module, **kw) for _ in range(repeat))  # type: ignore[arg-type]


def table(title: str, header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print(f"\n{title}")
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |")


def imports(repeat: int, layer_python: str | None) -> None:
    rows = []
    lambda_env = None
    if layer_python:
        if not (LAYER / "python").is_dir() or not STAGED.is_dir():
            sys.exit("--layer-python needs layers/build/layer (layers/build.py) and build/lambda-app (cdk synth)")
        # bytecode goes to a cache of its own (Lambda's /var/task and /opt are read-only: ship the
        # code byte-compiled — layers/build.py and the app staging do when they find python3.12)
        lambda_env = {
            "PATH": "/usr/bin:/bin", "PYTHONPATH": f"{STAGED}:{LAYER / 'python'}", "LANG": "C.UTF-8",
            "PYTHONPYCACHEPREFIX": str(ROOT / ".treadle" / "coldstart" / "pycache"),
            "PYDANTIC_DISABLE_PLUGINS": "__all__",  # as the construct sets it
        }
    for name in HANDLERS:
        module = f"functions.{name}.handler"
        dev = median_import(sys.executable, module, repeat)
        row = [name, f"{dev:.0f}"]
        if layer_python:
            row.append(f"{median_import(layer_python, module, repeat, env=lambda_env, cwd=STAGED):.0f}")
        goal = GOALS_MS.get(name)
        row.append(f"≤ {goal}" if goal else "")
        rows.append(row)
        if name in DEPENDENCY_FLOORS:
            deps = ", ".join(DEPENDENCY_FLOORS[name])
            floor = [f"  {name}: dependencies alone", f"{median_import(sys.executable, deps, repeat):.0f}"]
            if layer_python:
                floor.append(f"{median_import(layer_python, deps, repeat, env=lambda_env, cwd=STAGED):.0f}")
            rows.append([*floor, ""])
    header = ["handler", f"import ms (venv, Python {sys.version_info[0]}.{sys.version_info[1]})"]
    if layer_python:
        header.append("import ms (staged code + layer)")
    table(f"Handler import time (python -X importtime, cumulative, median of {repeat})", [*header, "goal"], rows)
    for name, deps in DEPENDENCY_FLOORS.items():
        print(f"  {name} dependencies alone = {' + '.join(deps)}")


FIRST_INVOCATION = textwrap.dedent(
    """
    import json, sys, time
    sys.path.insert(0, {sim!r})
    t0 = time.perf_counter()
    from lambda_sim import FakeContext, http_event, load_handler_module, sqs_event
    api = load_handler_module("api") if {which!r} == "api" else None
    worker = load_handler_module("worker") if {which!r} == "worker" else None
    t1 = time.perf_counter()
    out = {{"import_ms": (t1 - t0) * 1000}}
    if api is not None:
        auth = {{"authorization": "Bearer coldstart"}}
        for key in ("first_ms", "second_ms"):
            t = time.perf_counter()
            resp = api.handler(http_event("POST", "/v1/runs", headers=auth, body={{"agent": "calc", "prompt": "hi"}}),
                               FakeContext("api", 30))
            out[key] = (time.perf_counter() - t) * 1000
            assert resp["statusCode"] == 202, resp
    else:
        batches = json.loads(sys.stdin.read())  # received by the parent: boto3 stays unimported here
        for key, msgs in zip(("first_ms", "second_ms"), batches):
            t = time.perf_counter()
            resp = worker.handler(sqs_event(msgs, {arn!r}), FakeContext("worker", 300))
            out[key] = (time.perf_counter() - t) * 1000
            assert resp == {{"batchItemFailures": []}}, resp
    print(json.dumps(out))
    """
)


def invocations(repeat: int) -> None:
    import boto3
    import psycopg
    from moto.server import ThreadedMotoServer
    from psycopg.conninfo import make_conninfo

    from treadle.store.db import resolve_database_url

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    aws = {
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://{host}:{port}", "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }
    os.environ.update(aws)
    admin = resolve_database_url(os.environ.get("DATABASE_URL"), ROOT / ".treadle" / "coldstart")
    dbname = f"treadle_coldstart_{os.getpid()}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{dbname}"')
        conn.execute(f'CREATE DATABASE "{dbname}"')
    # as the construct stages it: the configuration as JSON (the functions never import PyYAML);
    # one tool call, so a worker's first step continues the run (and so sends to SQS)
    config = ROOT / ".treadle" / "coldstart" / "treadle.json"
    config.write_text(json.dumps({"agents": {"calc": {
        "provider": "mock", "model": "tool-caller", "tools": ["Memory"], "mock": {"tool_calls": 1}}}}))
    try:
        sqs = boto3.client("sqs")
        queue = sqs.create_queue(QueueName="coldstart")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        env = {
            **os.environ, **aws,
            "DATABASE_URL": make_conninfo(admin, dbname=dbname), "TREADLE_QUEUE_URL": queue,
            "TREADLE_CONFIG": str(config), "TREADLE_AUTH_TOKEN": "coldstart",
        }
        # one process creates the database's tables first, so every measured cold start sees a
        # migrated database (as every cold start but the very first does in AWS)
        results: dict[str, list[dict[str, float]]] = {"api": [], "worker": []}
        for i in range(repeat + 1):
            while msgs := sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get("Messages"):
                for m in msgs:  # leftovers (the runs' later steps): every worker run starts at step 0
                    sqs.delete_message(QueueUrl=queue, ReceiptHandle=m["ReceiptHandle"])
            for which in ("api", "worker"):
                code = FIRST_INVOCATION.format(sim=str(ROOT / "tests" / "support"), which=which, arn=arn)
                batches = []
                if which == "worker":  # the two step-0 messages the api process just sent
                    for _ in range(2):
                        got = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=1, WaitTimeSeconds=5)
                        batches.append(got["Messages"])
                proc = subprocess.run([sys.executable, "-c", code], input=json.dumps(batches),
                                      capture_output=True, text=True, env=env, cwd=ROOT)
                if proc.returncode != 0:
                    raise RuntimeError(proc.stderr[-3000:])
                if i > 0:
                    results[which].append(json.loads(proc.stdout.strip().splitlines()[-1]))
        rows = []
        for which, runs in results.items():
            med = {k: statistics.median(r[k] for r in runs) for k in ("import_ms", "first_ms", "second_ms")}
            cold = statistics.median(r["import_ms"] + r["first_ms"] for r in runs)
            rows.append([which, f"{med['import_ms']:.0f}", f"{med['first_ms']:.0f}", f"{cold:.0f}",
                         f"{med['second_ms']:.0f}"])
        table(
            f"First invocation in a fresh process (median of {repeat}; api: POST /v1/runs, worker: one step)",
            ["function", "import ms", "1st invocation ms", "cold start ms (import + 1st)", "2nd invocation ms"],
            rows,
        )
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
        server.stop()


RIC_FUNCTIONS = ("api", "worker", "webhook", "mcp", "scheduler", "maintenance")
#: the webhook's signing secret in the benchmark's own configuration
WEBHOOK_KEY = "coldstart-webhook-key"


def _rss_mb(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (peak) of a process, MB."""
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) / 1024
    return out


def _ric_event(which: str, sqs: object, queue: str, arn: str) -> object:
    import hashlib
    import hmac
    import time
    import uuid

    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from lambda_sim import http_event, sqs_event

    auth = {"authorization": "Bearer coldstart"}
    if which == "api":
        return http_event("POST", "/v1/runs", headers=auth, body={"agent": "calc", "prompt": "hi"})
    if which == "worker":  # a step-0 message an api invocation sent
        got = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=1, WaitTimeSeconds=5)  # type: ignore[attr-defined]
        return sqs_event(got["Messages"], arn)
    if which == "webhook":
        body = json.dumps({"issue": {"title": "cold"}}).encode()
        sig = "sha256=" + hmac.new(WEBHOOK_KEY.encode(), body, hashlib.sha256).hexdigest()
        return http_event("POST", "/v1/_webhooks/gh", body=body, route_key="ANY /v1/_webhooks/{proxy+}", headers={
            "content-type": "application/json", "x-hub-signature-256": sig, "x-github-delivery": str(uuid.uuid4())})
    if which == "mcp":
        return http_event("POST", "/v1/_mcp", route_key="ANY /v1/_mcp",
                          headers={**auth, "accept": "application/json, text/event-stream"},
                          body={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    if which == "scheduler":
        return {"schedule_id": "sch_coldstart", "scheduled_time": time.strftime("%Y-%m-%dT%H:%M:00Z", time.gmtime())}
    return {"source": "aws.scheduler", "detail-type": "Scheduled Event"}  # maintenance


def _ric_once(which: str, env: dict[str, str], snap: bool, sqs: object, queue: str, arn: str) -> dict[str, float]:
    """One fresh environment of `which` under awslambdaric: its figures, ms and MB."""
    import time

    sys.path.insert(0, str(ROOT / "scripts"))
    from runtime_api import RuntimeApi

    api = RuntimeApi(f"treadle-{which}")
    run_env = {**env, "AWS_LAMBDA_RUNTIME_API": api.address, "AWS_LAMBDA_FUNCTION_NAME": f"treadle-{which}",
               "AWS_LAMBDA_FUNCTION_VERSION": "1", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "1024",
               "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/treadle-{which}", "AWS_LAMBDA_LOG_STREAM_NAME": "coldstart",
               "PYTHONPATH": str(ROOT)}
    if snap:
        run_env["AWS_LAMBDA_INITIALIZATION_TYPE"] = "snap-start"
    else:
        run_env.pop("AWS_LAMBDA_INITIALIZATION_TYPE", None)
    out: dict[str, float] = {}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "awslambdaric", f"functions.{which}.handler.handler"],
                            env=run_env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        if snap:
            out["init_ms"] = (api.wait_for("restore_next") - t0) * 1000
            out["snapshot_mb"] = _rss_mb(proc.pid)["VmRSS"]
            restored = api.restore()
            _, done, _ = api.invoke(_ric_event(which, sqs, queue, arn))
            out["restored_first_ms"] = (done - restored) * 1000
        else:
            out["init_ms"] = (api.wait_for("next") - t0) * 1000
            for key in ("first_ms", "second_ms"):
                sent, done, _ = api.invoke(_ric_event(which, sqs, queue, arn))
                out[key] = (done - sent) * 1000
            out["peak_mb"] = _rss_mb(proc.pid)["VmHWM"]
    except BaseException:
        proc.kill()
        sys.stderr.write(proc.communicate()[1].decode(errors="replace")[-3000:])
        raise
    finally:
        proc.kill()
        proc.wait()
        api.close()
    return out


def ric(repeat: int) -> None:
    try:
        import awslambdaric  # noqa: F401
    except ImportError:
        sys.exit("--ric needs AWS's runtime interface client: .venv/bin/pip install awslambdaric")
    import boto3
    import psycopg
    from moto.server import ThreadedMotoServer
    from psycopg.conninfo import make_conninfo

    from treadle.store.db import resolve_database_url

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    aws = {
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://{host}:{port}", "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }
    os.environ.update(aws)
    admin = resolve_database_url(os.environ.get("DATABASE_URL"), ROOT / ".treadle" / "coldstart")
    dbname = f"treadle_coldric_{os.getpid()}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{dbname}"')
    config = ROOT / ".treadle" / "coldstart" / "treadle-ric.json"
    config.write_text(json.dumps({
        "agents": {"calc": {"provider": "mock", "model": "tool-caller", "tools": ["Memory"],
                            "mock": {"tool_calls": 1}}},
        "webhooks": {"gh": {"agent": "calc", "auth": {"header": "X-Hub-Signature-256",
                                                      "signing_secret_env": "COLDSTART_GH_KEY"}}},
    }))
    try:
        sqs = boto3.client("sqs")
        queue = sqs.create_queue(QueueName="coldstart-ric")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        env = {**os.environ, **aws, "DATABASE_URL": make_conninfo(admin, dbname=dbname), "TREADLE_QUEUE_URL": queue,
               "TREADLE_CONFIG": str(config), "TREADLE_AUTH_TOKEN": "coldstart", "COLDSTART_GH_KEY": WEBHOOK_KEY,
               "PYDANTIC_DISABLE_PLUGINS": "__all__", "TREADLE_HOME": str(ROOT / ".treadle" / "coldstart")}
        results: dict[str, list[dict[str, float]]] = {f: [] for f in RIC_FUNCTIONS}
        for i in range(repeat + 1):  # the first pass migrates the database and writes bytecode
            for snap in (False, True):
                while msgs := sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get("Messages"):
                    for m in msgs:
                        sqs.delete_message(QueueUrl=queue, ReceiptHandle=m["ReceiptHandle"])
                for which in RIC_FUNCTIONS:  # the worker takes the step-0 messages the api just sent
                    figures = _ric_once(which, env, snap, sqs, queue, arn)
                    if i > 0:
                        results[which].append(figures)
        rows = []
        for which, runs in results.items():
            def med(key: str, runs: list[dict[str, float]] = runs) -> float:
                return statistics.median(r[key] for r in runs if key in r)
            rows.append([which, f"{med('init_ms'):.0f}", f"{med('first_ms'):.0f}", f"{med('second_ms'):.0f}",
                         f"{med('peak_mb'):.0f}", f"{med('snapshot_mb'):.0f}", f"{med('restored_first_ms'):.0f}"])
        table(f"Under awslambdaric with a local Runtime API (median of {repeat}; INIT is on-demand's)",
              ["function", "INIT ms", "1st invocation ms", "2nd invocation ms", "peak MB",
               "MB at snapshot", "1st invocation after restore ms"], rows)
        print("  INIT: process start to the first GET /invocation/next (interpreter, awslambdaric, the handler's"
              " imports); after restore: restore answered to the first answer (after-restore hooks, the runtime"
              " opened, the call); peak: VmHWM after two invocations")
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
        server.stop()


def layer_size() -> None:
    if not (LAYER / "python").is_dir():
        print("\nLayer: not built (run .venv/bin/python layers/build.py)")
        return
    sys.path.insert(0, str(ROOT / "layers"))
    from build import dir_size, zip_size

    mb = 1024 * 1024
    table("Dependency layer (layers/build/layer)", ["unzipped MB", "zipped MB"],
          [[f"{dir_size(LAYER) / mb:.1f}", f"{zip_size(LAYER) / mb:.1f}"]])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--layer-python", help="an interpreter of the Lambda runtime's version (e.g. python3.12)")
    ap.add_argument("--skip-invocations", action="store_true")
    ap.add_argument("--ric", action="store_true", help="only the awslambdaric table (section 4)")
    args = ap.parse_args()
    (ROOT / ".treadle" / "coldstart").mkdir(parents=True, exist_ok=True)
    print(f"machine: {os.cpu_count()} cores; {sys.platform}; Python {sys.version.split()[0]}")
    if args.ric:
        ric(args.repeat)
        return 0
    imports(args.repeat, args.layer_python)
    if not args.skip_invocations:
        invocations(args.repeat)
    layer_size()
    return 0


if __name__ == "__main__":
    sys.exit(main())
