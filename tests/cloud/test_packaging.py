"""What ships: the sidecar image's Dockerfile and compose example (no Docker engine here, so the
entrypoint and the configuration it reads are exercised directly), the layer's requirements, and
the thinness of the Lambda handlers."""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from treadle.cli.main import cli
from treadle.config import load_config

ROOT = Path(__file__).resolve().parents[2]
TREADLE = str(Path(sys.executable).with_name("treadle"))


def dockerfile() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n\s*", " ", (ROOT / "Dockerfile").read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            instr, _, rest = line.partition(" ")
            out.append((instr.upper(), rest.strip()))
    return out


def image_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for instr, rest in dockerfile():
        if instr == "ENV":
            env.update(dict(part.split("=", 1) for part in shlex.split(rest)))
    return env


def test_image_runs_treadle_serve_as_a_non_root_user_with_a_healthcheck() -> None:
    steps = dockerfile()
    instrs = [i for i, _ in steps]
    base = dict(steps)["FROM"]
    if base == "${BASE}":  # ARG BASE=<default> (scripts/image_smoke.sh builds it FROM a local base)
        base = next(rest for i, rest in steps if i == "ARG" and rest.startswith("BASE=")).removeprefix("BASE=")
    assert re.fullmatch(r"python:3\.1[2-9]-slim", base)
    user = [rest for i, rest in steps if i == "USER"]
    assert user == ["treadle"] and instrs.index("USER") > max(k for k, i in enumerate(instrs) if i == "RUN")
    run = " ".join(rest for i, rest in steps if i == "RUN")
    assert "useradd" in run and "--uid 10001" in run
    entry = json.loads(dict(steps)["ENTRYPOINT"]) + json.loads(dict(steps)["CMD"])
    assert entry == ["treadle", "serve"]
    assert entry[1] in cli.commands and cli.commands[entry[1]].name == "serve"
    health = dict(steps)["HEALTHCHECK"]
    port = image_env()["TREADLE_LISTEN"].rsplit(":", 1)[1]
    assert f"http://127.0.0.1:{port}/healthz" in health and dict(steps)["EXPOSE"] == port


def test_the_config_the_image_reads(tmp_path: Path) -> None:
    env = image_env()
    assert env["TREADLE_LISTEN"].startswith("0.0.0.0:") and env["TREADLE_HOME"] == "/data"
    # the build's `treadle --config $TREADLE_CONFIG init` writes a configuration serve accepts
    [init] = [r for i, r in dockerfile() if i == "RUN"]
    assert f"treadle --config {env['TREADLE_CONFIG']} init" in init
    config = tmp_path / "treadle.yaml"
    subprocess.run([TREADLE, "--config", str(config), "init"], check=True, capture_output=True)
    assert set(load_config(config).agents) == {"demo", "echo", "scripted"}
    # listening on every interface without a token is refused before anything starts
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("TREADLE_")}
    run_env.update(env, TREADLE_CONFIG=str(config), TREADLE_HOME=str(tmp_path / "data"))
    proc = subprocess.run([TREADLE, "serve"], env=run_env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "refusing to listen on a non-loopback address without TREADLE_AUTH_TOKEN" in proc.stderr
    assert not (tmp_path / "data").exists()


def test_compose_example_pairs_treadle_with_pgvector() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.example.yaml").read_text())
    db, app = compose["services"]["db"], compose["services"]["treadle"]
    assert db["image"].startswith("pgvector/pgvector:")
    assert app["build"] == "." and app["depends_on"]["db"]["condition"] == "service_healthy"
    env = app["environment"]
    assert env["DATABASE_URL"].startswith("postgresql://") and "@db:5432/" in env["DATABASE_URL"]
    assert "TREADLE_AUTH_TOKEN" in env and all(p.startswith("127.0.0.1:") for p in app["ports"])


def _names(lines: list[str]) -> set[str]:
    out = set()
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line:
            out.add(re.split(r"[\[<>=!~ ;]", line, maxsplit=1)[0].lower().replace("_", "-"))
    return out


def test_layer_requirements_cover_the_core_dependencies() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = _names(project["dependencies"]) - {"pgserver", "uvicorn", "click", "rich"}  # sidecar- and CLI-only
    layer = _names((ROOT / "layers" / "requirements.txt").read_text().splitlines())
    assert core <= layer, core - layer
    assert {"mangum", "aws-lambda-powertools"} <= layer


def test_handlers_are_thin() -> None:
    for handler in sorted((ROOT / "functions").glob("*/handler.py")):
        body = ast.parse(handler.read_text()).body
        code = body[1:] if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) else body
        assert len(code) <= 4, (handler, [ast.unparse(c) for c in code])
        # the INIT ends with the collector back on (functions/__init__.py pauses it for the imports)
        assert re.search(r"^handler = initialised\(\w+\(", handler.read_text(), re.M), handler
