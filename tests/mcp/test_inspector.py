"""The MCP Inspector CLI (npm `@modelcontextprotocol/inspector --cli`) against treadle at
`http://…/mcp` — the only HTTP path it reaches: it lists the tools and runs a loomcycle-shaped
`spawn_runs`. Skipped where Node or the package is missing (scripts/test.sh installs it into
tests/mcp/inspector where npm is present)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.support.mcp import TOKEN

CLI = Path(__file__).parent / "inspector" / "node_modules" / ".bin" / "mcp-inspector"


async def inspector(base_url: str, *args: str) -> dict[str, object]:
    if not CLI.exists():
        pytest.skip("the MCP Inspector is not installed (npm ci --prefix tests/mcp/inspector)")
    proc = await asyncio.create_subprocess_exec(  # awaited: the server answers from this loop
        str(CLI), "--cli", f"{base_url}/mcp", "--transport", "http",
        "--header", f"Authorization: Bearer {TOKEN}", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()[-2000:]
    doc: dict[str, object] = json.loads(out)
    return doc


async def test_inspector_lists_tools_and_runs_spawn_runs(base_url: str) -> None:
    listed = await inspector(base_url, "--method", "tools/list")
    names = {t["name"] for t in listed["tools"]}  # type: ignore[attr-defined]
    assert {"spawn_run", "spawn_runs"} <= names
    spawns = json.dumps([{"agent": "echo", "prompt": "from the inspector"}])
    called = await inspector(base_url, "--method", "tools/call", "--tool-name", "spawn_runs",
                             "--tool-arg", f"spawns={spawns}", "--tool-arg", "timeout_ms=60000")
    text = called["content"][0]["text"]  # type: ignore[index]
    assert "from the inspector" in text and '"completed"' in text
