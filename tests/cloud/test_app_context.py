"""infra/app.py: every knob docs/deploy-aws.md mentions is a `-c` option, and each one is honoured
(or refused with a clear message) — never accepted and ignored."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def app_module() -> ModuleType:
    sys.path.insert(0, str(ROOT / "infra"))
    import importlib.util

    spec = importlib.util.spec_from_file_location("treadle_cdk_app", ROOT / "infra" / "app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def documented_keys(text: str) -> set[str]:
    return set(re.findall(r"-c (\w+)=", text))


def test_every_knob_the_guide_mentions_is_a_context_option() -> None:
    app = app_module()
    guide = documented_keys((ROOT / "docs" / "deploy-aws.md").read_text())
    options = set(re.findall(r"^  (\w+)\s", app.__doc__ or "", re.M))
    options |= {"api_concurrency", "stream_concurrency", "ws_concurrency"}  # listed on the worker_concurrency line
    assert guide and guide <= options, guide - options


def test_context_values_reach_the_props() -> None:
    app = app_module()
    ctx = {"rds_proxy": "true", "stream": "false", "worker_concurrency": "7", "api_concurrency": "3",
           "db_max_acu": "8", "worker_timeout_s": "600", "reserved_concurrency": "false", "architecture": "arm64",
           "require_pgvector": "false", "db_pool_size": "3", "lwa_layer_version": "26", "nat_gateways": "2",
           "sse_budget_s": "20", "byte_compile": "false", "snap_start": "false", "websocket": "false",
           "ws_concurrency": "4"}
    p = app.props_from_context(ctx.get)
    assert (p.rds_proxy, p.stream, p.worker_max_concurrency, p.concurrency["api"], p.db_max_capacity) == (
        True, False, 7, 3, 8.0)
    assert (p.worker_timeout.to_seconds(), p.reserved_concurrency, p.architecture.name, p.require_pgvector) == (
        600, False, "arm64", False)
    assert (p.db_pool_size, p.lwa_layer_version, p.nat_gateways, p.sse_budget_seconds, p.byte_compile,
            p.snap_start) == (3, 26, 2, 20, False, False)
    assert (p.websocket, p.concurrency["ws"]) == (False, 4)
    defaults = app.props_from_context({}.get)
    assert (defaults.rds_proxy, defaults.stream, defaults.worker_batch_size) == (False, True, 1)
    assert (defaults.websocket, defaults.concurrency["ws"]) == (True, 10)
    with pytest.raises(SystemExit, match="true or false"):
        app.props_from_context({"rds_proxy": "yes"}.get)
    with pytest.raises(SystemExit, match="expected a number"):
        app.props_from_context({"db_max_acu": "lots"}.get)
