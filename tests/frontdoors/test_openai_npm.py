"""The `openai` npm SDK (Node) against a served treadle: chat, streaming, the Responses API, an
agent's function call round trip, errors and embeddings (npm/drive.mjs holds the checks).

Tests never reach a registry, so the SDK must be installed beforehand: set TREADLE_OPENAI_NPM to a
folder where `npm install openai` ran (`mkdir /tmp/oa-npm && cd /tmp/oa-npm && npm install openai`);
without it (or without `node`) the test is skipped."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest

from tests.support.frontdoors import TOKEN, Served

DRIVER = Path(__file__).parent / "npm" / "drive.mjs"


async def test_the_npm_sdk(served: Served) -> None:
    npm = os.environ.get("TREADLE_OPENAI_NPM")
    if not shutil.which("node") or not npm or not (Path(npm) / "node_modules" / "openai").is_dir():
        pytest.skip("needs node and TREADLE_OPENAI_NPM (a folder with node_modules/openai)")
    proc = await asyncio.create_subprocess_exec(
        "node", str(DRIVER), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "BASE": served.url + "/v1", "TOKEN": TOKEN, "OPENAI_NPM": npm})
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    lines = out.decode().splitlines()
    assert proc.returncode == 0 and len([line for line in lines if line.startswith("ok ")]) == 7, "\n".join(lines)
