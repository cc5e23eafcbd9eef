"""loomcycle's `model_pattern` (RFC BG, issue 39 item 4): an alias or tier candidate names a glob,
resolved when called to the newest model its provider lists (loomcycle's modelver ordering); a
glob nothing listed matches is a model the provider does not serve, so the tier's next candidate
answers (a provider_fallback event)."""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from tests.support.substrate import run_agent, substrate_runtime
from tests.support.vendors.base import text
from tests.support.vendors.openai import FakeOpenAI
from treadle.config import parse_config
from treadle.errors import ConfigError
from treadle.providers.modelpattern import compare, newest

KEY_ENV = "TREADLE_TEST_PATTERN_KEY_" + secrets.token_hex(3).upper()


def test_newest_orders_as_loomcycles_modelver() -> None:
    assert newest(["qwen3.6:latest", "qwen3.10:8b", "qwen3:8b"]) == "qwen3.10:8b"  # [3,10] > [3,6] > [3]
    assert newest(["claude-haiku-4-5", "claude-haiku-4-5-20251001"]) == "claude-haiku-4-5-20251001"
    assert newest(["claude-sonnet-5", "claude-sonnet-5-20260401"], bare_is_newer=True) == "claude-sonnet-5"
    assert newest(["gpt-oss", "gpt-oss-preview"]) is None  # digit-less: cannot be ordered
    assert newest(["gpt-oss"]) == "gpt-oss" and newest([]) is None
    assert compare("gemini-2.5-flash", "gemini-3-pro") == -1


def test_model_and_model_pattern_are_exclusive() -> None:
    with pytest.raises(ConfigError, match="name one"):
        parse_config({"models": {"m": {"provider": "mock", "model": "echo", "model_pattern": "e*"}},
                      "agents": {"a": {"model": "echo"}}})


@pytest.fixture
async def vendor(monkeypatch: pytest.MonkeyPatch) -> Any:
    fake = FakeOpenAI()
    async with fake:
        monkeypatch.setenv(KEY_ENV, fake.key)
        yield fake


async def test_a_pattern_calls_the_newest_listed_model_and_a_dead_one_falls_through(db_url: str,
                                                                                   vendor: FakeOpenAI) -> None:
    config = {
        "providers": {"oa": {"driver": "openai", "base_url": vendor.url + "/v1", "api_key_env": KEY_ENV,
                             "retries": 0}},
        "models": {"latest-gpt": {"provider": "oa", "model_pattern": "gpt-4*"},
                   "nothing": {"provider": "oa", "model_pattern": "claude-*"}},
        "tiers": {"main": ["latest-gpt"], "fallback": ["nothing", {"provider": "mock", "model": "echo"}]},
        "agents": {"asker": {"tier": "main"}, "falls": {"tier": "fallback"}},
    }
    async with substrate_runtime(db_url, config, provider_retries=0) as (rt, disp):
        vendor.then(text("from the newest"))
        done = await run_agent(rt, disp, "asker")
        assert done.status == "completed"
        assert [c["model"] for c in vendor.calls] == ["gpt-4.1"]  # gpt-4.1 ([4,1]) is newer than gpt-4o-mini ([4])
        fell = await run_agent(rt, disp, "falls", text="hello there")
        assert fell.status == "completed" and len(vendor.calls) == 1  # no call reached the vendor
        types = [e.type for e in await rt.runs.events(fell.tenant_id, fell.id)]
        assert "provider_fallback" in types, types
