"""A sidecar (real uvicorn on a loopback port, bearer auth) per test module of tests/a2a, serving
an A2A card over its agents."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from treadle_sidecar.server import BackgroundServer

from tests.support.db import TEST_HOME
from treadle.config import Settings, TreadleConfig, parse_config

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
    settings = Settings(database_url=db_url, home=TEST_HOME, config=Path("unused.yaml"), workers=2,
                        auth_token=TOKEN, sweep_interval_seconds=30.0)
    server = BackgroundServer(settings, CONFIG)
    yield await server.start()
    await server.stop()
