"""`treadle mcp` as a real subprocess, driven by the official SDK's stdio client, forwarding to a
sidecar on a loopback port; and `treadle mcp install`."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from mcp import Client, StdioServerParameters

from tests.support.mcp import TOKEN, payload

ROOT = Path(__file__).resolve().parents[2]


@asynccontextmanager
async def stdio(base_url: str, token: str = TOKEN) -> AsyncIterator[Client]:
    env = {**os.environ, "TREADLE_MCP_TOKEN": token}
    env.pop("TREADLE_AUTH_TOKEN", None)
    params = StdioServerParameters(command=sys.executable, args=["-m", "treadle.cli.main", "mcp", "--url", base_url],
                                   env=env, cwd=str(ROOT))
    async with Client(params) as client:
        yield client


async def test_stdio_forwards_tools_and_errors(base_url: str) -> None:
    async with stdio(base_url) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"spawn_runs", "get_transcript", "whoami"} <= names
        run = payload(await client.call_tool("spawn_run", {"agent": "echo", "prompt": "via stdio"}))
        assert run["status"] == "completed" and "via stdio" in run["final_text"]
        missing = await client.call_tool("get_run", {"run_id": "r_nope"})
        assert missing.is_error and payload(missing)["code"] == "run_not_found"


async def test_a_slow_call_does_not_block_a_cheap_one(base_url: str) -> None:
    async with stdio(base_url) as client:
        # spawn_run on an agent that never ends: this call cannot return until the run is cancelled
        slow = asyncio.create_task(client.call_tool(
            "spawn_run", {"agent": "forever", "prompt": "spin", "metadata": {"t": "stdio-concurrency"},
                          "timeout_ms": 120_000}))
        running: list[dict[str, object]] = []
        while not running:  # cheap calls go through while the slow one is still open
            listed = payload(await client.call_tool("list_runs", {"agent": "forever"}))
            running = [r for r in listed["runs"] if r["metadata"] == {"t": "stdio-concurrency"}]
            assert not slow.done()
        who = payload(await client.call_tool("whoami", {}))
        assert who["tenant_id"] == "default" and not slow.done()
        payload(await client.call_tool("cancel_run", {"run_id": running[0]["run_id"]}))
        settled = payload(await slow)
        assert settled["run_id"] == running[0]["run_id"] and settled["status"] == "cancelled"


def test_install_prints_and_writes_the_claude_code_entry(tmp_path: Path) -> None:
    def treadle(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "treadle.cli.main", "mcp", "install", *args],
                              capture_output=True, text=True, cwd=ROOT, timeout=60)

    printed = treadle("--url", "http://127.0.0.1:9999")
    assert printed.returncode == 0, printed.stderr
    entry = json.loads(printed.stdout)["mcpServers"]["treadle"]
    assert entry == {"command": "treadle", "args": ["mcp", "--url", "http://127.0.0.1:9999"],
                     "env": {"TREADLE_MCP_TOKEN": "${TREADLE_MCP_TOKEN}"}}
    target = tmp_path / ".mcp.json"
    target.write_text(json.dumps({"mcpServers": {"other": {"command": "x"}}}))
    wrote = treadle("--write", "--path", str(target), "--transport", "http", "--url", "https://t.example")
    assert wrote.returncode == 0, wrote.stderr
    servers = json.loads(target.read_text())["mcpServers"]
    assert servers["other"] == {"command": "x"}  # merged, not replaced
    assert servers["treadle"] == {"type": "http", "url": "https://t.example/v1/_mcp",
                                  "headers": {"Authorization": "Bearer ${TREADLE_MCP_TOKEN}"}}
