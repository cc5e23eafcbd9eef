"""What the trigger tests share: the agents and channels of their treadle.yaml, and the API
in-process (ASGI) over a runtime."""

from __future__ import annotations

from typing import Any

import httpx

from treadle.api.app import create_app
from treadle.runtime import Runtime
from treadle.testing import ACCEPT_JSON

AGENTS: dict[str, Any] = {
    "echo": {"model": "echo"},
    "other": {"model": "echo"},
    "listener": {
        "model": "script",
        "tools": ["Channel"],
        "mock": {
            "script": [
                {"tool": "Channel", "input": {"op": "subscribe", "channel": "events", "wait_ms": 600_000}},
                {"text": "heard it"},
            ]
        },
    },
}
CHANNELS: dict[str, Any] = {"events": {"semantic": "broadcast"}, "inbox": {"semantic": "queue"}}


def client_for(rt: Runtime, *, token: str | None = None, max_request_bytes: int = 1 << 20) -> httpx.AsyncClient:
    app = create_app(auth_token=token, max_request_bytes=max_request_bytes)
    app.state.runtime = rt
    return httpx.AsyncClient(headers=ACCEPT_JSON, transport=httpx.ASGITransport(app=app), base_url="http://treadle.test")
