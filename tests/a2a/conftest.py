"""A sidecar (real uvicorn on a loopback port, bearer auth) per test module of tests/a2a, serving
an A2A card over its agents."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator

import pytest

from tests.support.sidecar import sidecar_settings, sidecar_url
from treadle.config import TreadleConfig, parse_config

TOKEN = "a2a-" + secrets.token_hex(8)

CONFIG: TreadleConfig = parse_config({
    "agents": {
        "echo": {"model": "echo"},
        "asker": {"model": "script", "tools": ["Interruption"], "mock": {"script": [
            {"tool": "Interruption", "input": {"op": "ask", "question": "which colour?"}},
            {"text": "painted it"}]}},
        "chat": {"model": "echo"},
        "forever": {"model": "tool-caller", "tools": ["Context"], "max_iterations": 10000,
                    "mock": {"tool_calls": 10000, "latency_ms": 30}},
        "hidden": {"model": "echo"},
    },
    "a2a_server_cards": {"main": {
        "name": "treadle test agents", "description": "agents for the A2A tests",
        "exposed_agents": [
            {"agent_name": "echo", "description": "says back what it reads"},
            {"agent_name": "asker", "description": "asks a question first"},
            {"agent_name": "chat", "skill_id": "chat", "interactive": True},
            {"agent_name": "forever"},
        ],
    }},
})


@pytest.fixture(scope="module")
async def base_url(db_url: str) -> AsyncIterator[str]:
    async with sidecar_url(sidecar_settings(db_url, token=TOKEN), CONFIG) as url:
        yield url
