"""The served Agent Card through a third-party A2A conformance linter from PyPI (`a2a-lint`, in
the dev extra): no error-level finding. Its live probe speaks A2A 0.3 (`message/send`) without a
bearer, so only the card is linted here; tests/a2a/test_server.py drives the 1.0 bindings with
the official SDK."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path

import pytest


def _lint_cli() -> str | None:
    beside = Path(sys.executable).with_name("a2a-lint")
    return str(beside) if beside.exists() else shutil.which("a2a-lint")


async def test_a2a_lint_finds_no_error_in_the_card(base_url: str) -> None:
    cli = _lint_cli()
    if cli is None:
        pytest.skip("a2a-lint is not installed (pip install a2a-lint; it is in the dev extra)")
    # a subprocess the loop awaits: the server answers from this same loop
    proc = await asyncio.create_subprocess_exec(cli, base_url, "--json", stdout=asyncio.subprocess.PIPE)
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    report = json.loads(out)
    errors = [f for f in report.get("findings", []) if f.get("level") == "error"]
    assert proc.returncode == 0 and errors == [], out.decode()
