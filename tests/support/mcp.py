"""Shared by tests/mcp: the treadle.yaml of the served sidecar and its bearer token, and calling
its meta-tools with the official `mcp` SDK client."""

from __future__ import annotations

import json
import secrets
from typing import Any

import httpx
from mcp import Client
from mcp_types import CallToolResult

from treadle.config import TreadleConfig, parse_config

TOKEN = "mcp-" + secrets.token_hex(8)
#: the per-run credential the tests' MCP servers check (and that must be stored nowhere)
CREDENTIAL = "cred-" + secrets.token_hex(12)

CONFIG: TreadleConfig = parse_config(
    {
        "agents": {
            "echo": {"model": "echo"},
            # a conversation that compacts with two messages kept (tests/mcp/test_session_tools.py)
            "chatty": {"model": "echo", "compaction": {"keep_last_n": 2}},
            # asks a question, then answers (MCP tasks and elicitation: tests/mcp/test_tasks.py)
            "asker": {"model": "script", "tools": ["Interruption"], "mock": {"script": [
                {"tool": "Interruption", "input": {"op": "ask", "question": "proceed?", "options": ["yes", "no"]}},
                {"text": "answered"}]}},
            "forever": {
                "model": "tool-caller", "tools": ["Context"], "max_iterations": 10000,
                "mock": {"tool_calls": 10000, "latency_ms": 30},
            },
        }
    }
)


def payload(result: CallToolResult) -> dict[str, Any]:
    """A meta-tool's JSON answer (its text content, which the structured content repeats)."""
    assert result.content and result.content[0].type == "text"
    doc: dict[str, Any] = json.loads(result.content[0].text)
    assert result.structured_content == doc
    return doc


async def call(client: Client, name: str, args: dict[str, Any]) -> dict[str, Any]:
    """Call meta-tool `name`; its JSON answer (the call must succeed)."""
    result = await client.call_tool(name, args)
    assert not result.is_error, (name, result.content)
    return payload(result)


async def refused(client: Client, name: str, args: dict[str, Any]) -> str:
    """Call meta-tool `name`; the error code it refuses with (the call must fail)."""
    result = await client.call_tool(name, args)
    assert result.is_error, (name, result.content)
    code: str = payload(result)["code"]
    return code


async def finished(client: httpx.AsyncClient, run_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    resp = await client.get(f"/v1/runs/{run_id}/stream")  # ends once the run is terminal
    assert resp.status_code == 200
    run = (await client.get(f"/v1/runs/{run_id}")).json()
    events = (await client.get(f"/v1/runs/{run_id}/events")).json()["events"]
    return run, events


def tool_results(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == "tool_result"]
