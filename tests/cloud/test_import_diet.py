"""What a cold start imports: each handler module, imported in a fresh interpreter, leaves out the
packages only some invocations need (they are imported where used). Guards the import-time work
in scripts/coldstart.py against a stray top-level import; it measures nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: never imported by any handler module at INIT (Powertools imports the `botocore` package itself,
#: ~0.5 ms; boto3 and its clients wait for the first AWS call)
EVERYWHERE = ("yaml", "jsonpath", "croniter", "pydantic_settings", "dotenv", "boto3", "httpx",
              "uvicorn", "treadle_sidecar", "regex")  # regex: Grep imports it when it runs
NOT_IMPORTED = {
    "worker": (*EVERYWHERE, "fastapi", "mangum", "treadle.triggers.static", "treadle.triggers.eventbridge",
               "treadle.triggers.webhooks", "treadle.api"),
    # the api function imports a router when a request first needs it (treadle_cloud/routes.py)
    "api": (*EVERYWHERE, "treadle.engine.step", "treadle.api.webhooks", "aws_lambda_powertools.utilities.batch",
            "treadle.api.admin",
            "treadle.api.channels", "treadle.api.memory", "treadle.api.openai_compat", "treadle.api.mcp",
            "treadle.api.substrate", "treadle.api.triggers"),
    "migrate": (*EVERYWHERE, "treadle.runtime", "treadle.engine", "fastapi"),
    # the engine is built on first use (Runtime.engine): only the worker and maintenance run it
    "scheduler": (*EVERYWHERE, "treadle.engine.step"),
    "maintenance": EVERYWHERE,
    # one router each: not the runs API the api function serves
    "webhook": (*EVERYWHERE, "treadle.engine.step", "treadle.api.runs", "treadle.api.loomcycle", "treadle.api.mcp"),
    "mcp": (*EVERYWHERE, "treadle.engine.step", "treadle.api.runs", "treadle.api.loomcycle", "treadle.api.webhooks"),
}


def imported_by(handler: str, names: tuple[str, ...]) -> list[str]:
    code = (f"import json, sys; import functions.{handler}.handler; "
            f"print(json.dumps([n for n in {list(names)!r} if n in sys.modules]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return list(json.loads(proc.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("handler", sorted(NOT_IMPORTED))
def test_a_handler_module_imports_only_what_every_invocation_needs(handler: str) -> None:
    assert imported_by(handler, NOT_IMPORTED[handler]) == []


def test_the_check_itself_sees_imports() -> None:
    assert imported_by("worker", ("psycopg", "aws_lambda_powertools.utilities.batch", "treadle.engine.step")) == [
        "psycopg", "aws_lambda_powertools.utilities.batch", "treadle.engine.step"]


@pytest.mark.parametrize("handler", ["worker", "migrate"])
def test_a_handler_imports_with_the_collector_paused_and_leaves_it_on(handler: str) -> None:
    """functions/__init__.py pauses the cyclic collector for the INIT's imports; the handler's
    `initialised` freezes what they made and turns it back on for the invocations."""
    code = ("import gc, json; import functions; paused = not gc.isenabled(); "
            f"import functions.{handler}.handler; "
            "print(json.dumps([paused, gc.isenabled(), gc.get_freeze_count()]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    paused, enabled, frozen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert paused and enabled and frozen > 10_000, (paused, enabled, frozen)
