"""The `openai` npm SDK (Node) against a served treadle: chat, streaming, the Responses API
(create, stream, parse with zod, background responses retrieved, resumed with `starting_after`,
listed, deleted and cancelled, `conversation`), `chat.completions.parse` with zod, an agent's
function call round trip, errors and embeddings (npm/drive.mjs holds the checks).

The SDK comes from a folder where it is installed: TREADLE_OPENAI_NPM names one (`npm install
openai@6.30.1 zod@3.25.76` ran there); otherwise the test installs those pins with `npm` into a
temporary folder — the one place the tests reach a registry (issue 38 asks for the npm SDK) — and
is skipped, saying why, where there is no `node`, no `npm`, or the registry cannot be reached.
openai 6.x is the newest line that runs on Node 20 (7.x needs Node 22)."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.frontdoors import TOKEN, Served
from tests.support.vendors.base import text

DRIVER = Path(__file__).parent / "npm" / "drive.mjs"
PACKAGES = ("openai@6.30.1", "zod@3.25.76")
CHECKS = 12  # the check(...) calls in drive.mjs


@pytest.fixture(scope="module")
def npm_sdk(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder whose node_modules holds the SDK (and zod)."""
    if not shutil.which("node"):
        pytest.skip("no `node` on PATH: the npm SDK cannot run")
    given = os.environ.get("TREADLE_OPENAI_NPM")
    if given:
        folder = Path(given)
        if not (folder / "node_modules" / "openai").is_dir() or not (folder / "node_modules" / "zod").is_dir():
            pytest.fail(f"TREADLE_OPENAI_NPM={given} has no node_modules/openai and node_modules/zod")
        return folder
    if not shutil.which("npm"):
        pytest.skip("no `npm` on PATH to install the SDK (or set TREADLE_OPENAI_NPM)")
    folder = tmp_path_factory.mktemp("openai-npm")
    try:
        done = subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(folder), *PACKAGES],
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.skip(f"npm install {' '.join(PACKAGES)} took over 240 s (registry unreachable?)")
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines()[-3:]
        pytest.skip(f"npm could not install {' '.join(PACKAGES)} (registry unreachable?): {' / '.join(why)}")
    return folder


async def test_the_npm_sdk(served: Served, npm_sdk: Path) -> None:
    served.openai_fake.then(text("too late", first_byte_delay_s=3.0))  # the cancelled background response's
    proc = await asyncio.create_subprocess_exec(
        "node",
        str(DRIVER),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "BASE": served.url + "/v1", "TOKEN": TOKEN, "OPENAI_NPM": str(npm_sdk)},
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 180)
    lines = out.decode().splitlines()
    oks = [line for line in lines if line.startswith("ok ")]
    assert proc.returncode == 0 and len(oks) == CHECKS, "\n".join(lines)
