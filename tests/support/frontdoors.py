"""A served treadle (the sidecar app on a loopback port) whose treadle.yaml routes models to the
mock provider and to fake vendors on loopback (OpenAI and Anthropic wire formats), with an
OpenAI-wire fake embedder — for the front-door tests (tests/frontdoors)."""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from treadle_sidecar.server import BackgroundServer

from tests.support.db import TEST_HOME
from tests.support.fake_embeddings import FakeOpenAIEmbeddings
from tests.support.vendors.anthropic import FakeAnthropic
from tests.support.vendors.openai import FakeOpenAI
from treadle.client.http import SseEvent, parse_sse
from treadle.config import Settings, parse_config
from treadle.testing import ACCEPT_JSON

E = TypeVar("E", bound=BaseException)

TOKEN = "frontdoor-" + secrets.token_hex(8)
#: the OpenAI-shaped function tool the front-door tests offer a model
WEATHER_TOOL: Any = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
WEATHER_SCRIPT = [{"tool": "get_weather", "input": {"city": "Paris"}}, {"text": "It is sunny in Paris."}]


@dataclass
class Served:
    url: str
    http: httpx.AsyncClient  # authenticated
    openai_fake: FakeOpenAI
    anthropic_fake: FakeAnthropic
    embed_fake: FakeOpenAIEmbeddings


def config(openai_url: str, anthropic_url: str, embed_url: str, env: dict[str, str]) -> dict[str, Any]:
    return {
        "providers": {
            "openai-fake": {"driver": "openai", "base_url": openai_url + "/v1", "api_key_env": env["openai"],
                            "retries": 1},
            "anthropic-fake": {"driver": "anthropic", "base_url": anthropic_url, "api_key_env": env["anthropic"],
                               "retries": 0},
        },
        "models": {
            "echo-alias": {"provider": "mock", "model": "echo"},
            "gpt": {"provider": "openai-fake", "model": "gpt-4o-mini"},
            "claude": {"provider": "anthropic-fake", "model": "claude-sonnet-4-5"},
        },
        "tiers": {"default": ["gpt", "claude"], "cheap": ["echo-alias"]},
        "agents": {
            "helper": {"model": "echo"},
            "weather": {"model": "script", "mock": {"script": WEATHER_SCRIPT}},
            "counter": {"model": "tool-caller", "tools": ["Memory"], "mock": {"tool_calls": 1}},
            "vendor-agent": {"model": "gpt"},
        },
        "memory": {"embedder": {"driver": "openai", "model": "fake-embed-384", "base_url": embed_url,
                                "api_key_env": env["embed"]}},
    }


@asynccontextmanager
async def served_treadle(db_url: str) -> AsyncIterator[Served]:
    oa, an = FakeOpenAI(), FakeAnthropic()
    await oa.server.start()
    await an.server.start()
    suffix = secrets.token_hex(3).upper()
    env = {k: f"TREADLE_TEST_FD_{k.upper()}_{suffix}" for k in ("openai", "anthropic", "embed")}
    async with FakeOpenAIEmbeddings("sk-embed-" + suffix) as emb:
        os.environ.update({env["openai"]: oa.key, env["anthropic"]: an.key, env["embed"]: emb.api_key})
        settings = Settings(database_url=db_url, home=TEST_HOME, config=Path("unused-treadle.yaml"), workers=2,
                            auth_token=TOKEN, max_request_bytes=1 << 20, sweep_interval_seconds=30.0)
        server = BackgroundServer(settings, parse_config(config(oa.url, an.url, emb.url, env)))
        url = await server.start()
        http = httpx.AsyncClient(base_url=url, timeout=30.0,
                                 headers={**ACCEPT_JSON, "Authorization": f"Bearer {TOKEN}"})
        try:
            yield Served(url, http, oa, an, emb)
        finally:
            await http.aclose()
            await server.stop()
            await oa.server.close()
            await an.server.close()
            for name in env.values():
                os.environ.pop(name, None)


async def sse_events(resp: httpx.Response) -> list[SseEvent]:
    return [ev async for ev in parse_sse(resp.aiter_lines())]


def user(content: str) -> list[Any]:
    """One user message, as Chat Completions' `messages` takes it."""
    return [{"role": "user", "content": content}]


async def raised(error: type[E], call: Awaitable[object]) -> E:
    """What awaiting an SDK call raises (it must raise `error`): for the refusals, one call each."""
    with pytest.raises(error) as info:
        await call
    return info.value
