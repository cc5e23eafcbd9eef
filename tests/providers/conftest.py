"""Fixtures for the provider tests: fake vendor servers on loopback, and treadle runtimes (real
Postgres, inline dispatcher) whose config points at them. Nothing here reaches the internet."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from vendor_anthropic import FakeAnthropic
from vendor_base import VendorFake
from vendor_gemini import FakeGemini
from vendor_openai import FakeDeepSeek, FakeOllama, FakeOpenAI

from treadle.config import Settings, parse_config
from treadle.dispatch.inline import InlineDispatcher
from treadle.runtime import Runtime
from treadle.store.runs import NewRun, RunRecord, StoredEvent

TEST_HOME = __import__("pathlib").Path(__file__).resolve().parents[2] / ".treadle" / "test"

# kind → (fake, driver, model, base_url suffix)
VENDORS: dict[str, tuple[type[VendorFake], str, str, str]] = {
    "anthropic": (FakeAnthropic, "anthropic", "claude-sonnet-4-5", ""),
    "openai": (FakeOpenAI, "openai", "gpt-4o-mini", "/v1"),
    "gemini": (FakeGemini, "gemini", "gemini-2.5-flash", ""),
    "deepseek": (FakeDeepSeek, "deepseek", "deepseek-chat", ""),
    "ollama": (FakeOllama, "ollama", "qwen3:8b", ""),
}
WIRE_FORMATS = ["anthropic", "openai", "gemini"]


@dataclass
class Vendor:
    kind: str
    fake: Any  # the VendorFake subclass instance (typed loosely: tests use its inspectors)
    driver: str
    model: str
    env: str
    suffix: str

    def provider(self, **extra: Any) -> dict[str, Any]:
        return {"driver": self.driver, "base_url": self.fake.url + self.suffix, "api_key_env": self.env, **extra}


StartVendor = Callable[..., Awaitable[Vendor]]


@pytest.fixture
async def vendor(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[StartVendor]:
    """`await vendor(kind)` → a started fake vendor whose key is in a fresh environment variable."""
    started: list[Vendor] = []

    async def start(kind: str, **fake_kw: Any) -> Vendor:
        cls, driver, model, suffix = VENDORS[kind]
        fake = cls(**fake_kw)
        await fake.server.start()
        env = f"TREADLE_TEST_{kind.upper()}_KEY_{secrets.token_hex(3).upper()}"
        if fake.key:
            monkeypatch.setenv(env, fake.key)
        v = Vendor(kind, fake, driver, model, env, suffix)
        started.append(v)
        return v

    yield start
    for v in started:
        await v.fake.server.close()


@dataclass
class Harness:
    rt: Runtime
    disp: InlineDispatcher
    tenant: str

    async def run(self, agent: str, prompt: str = "hello") -> tuple[RunRecord, list[StoredEvent]]:
        segs = [{"role": "user", "content": [{"type": "trusted-text", "text": prompt}]}]
        run, _ = await self.rt.start_run(NewRun(tenant_id=self.tenant, agent=agent, segments=segs))
        await self.disp.drain()
        record = await self.rt.runs.get(self.tenant, run.id)
        assert record is not None
        return record, await self.rt.runs.events(self.tenant, run.id)


MakeHarness = Callable[..., Awaitable[Harness]]


@pytest.fixture
async def treadle(db_url: str) -> AsyncIterator[MakeHarness]:
    """`await treadle(config_dict, **settings)` → a Harness over a runtime with that config."""
    opened: list[Runtime] = []

    async def factory(config: dict[str, Any], providers: dict[str, Any] | None = None, **settings: Any) -> Harness:
        s = Settings(database_url=db_url, home=TEST_HOME, **{"workers": 4, **settings})
        disp = InlineDispatcher()
        rt = await Runtime.open(
            s, parse_config(config), dispatcher_factory=lambda _p, _u: disp, providers=providers
        )
        disp.handler = rt.engine.handle
        opened.append(rt)
        return Harness(rt, disp, "t_" + secrets.token_hex(6))

    yield factory
    for rt in opened:
        await rt.close()


def types(events: list[StoredEvent]) -> list[str]:
    return [e.type for e in events]


def of(events: list[StoredEvent], etype: str) -> list[dict[str, Any]]:
    return [e.payload for e in events if e.type == etype]
