"""The provider tests' fake vendors by kind, and a harness that runs one agent to its end on a
runtime whose config points at them (see tests/providers/conftest.py for the fixtures)."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from tests.support.vendors.anthropic import FakeAnthropic
from tests.support.vendors.base import VendorFake
from tests.support.vendors.gemini import FakeGemini
from tests.support.vendors.openai import FakeDeepSeek, FakeOllama, FakeOpenAI
from treadle.dispatch.inline import InlineDispatcher
from treadle.runtime import Runtime
from treadle.store.runs import NewRun, RunRecord, StoredEvent

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


@dataclass
class Harness:
    rt: Runtime
    disp: InlineDispatcher
    tenant: str = field(default_factory=lambda: "t_" + secrets.token_hex(6))

    async def run(self, agent: str, prompt: str = "hello") -> tuple[RunRecord, list[StoredEvent]]:
        segs = [{"role": "user", "content": [{"type": "trusted-text", "text": prompt}]}]
        run, _ = await self.rt.start_run(NewRun(tenant_id=self.tenant, agent=agent, segments=segs))
        await self.disp.drain()
        record = await self.rt.runs.get(self.tenant, run.id)
        assert record is not None
        return record, await self.rt.runs.events(self.tenant, run.id)


MakeHarness = Callable[..., Awaitable[Harness]]


def types(events: list[StoredEvent]) -> list[str]:
    return [e.type for e in events]


def of(events: list[StoredEvent], etype: str) -> list[dict[str, Any]]:
    return [e.payload for e in events if e.type == etype]
