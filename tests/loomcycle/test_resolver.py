"""loomcycle's resolver and provider introspection (issue 39 item 5): GET /v1/_resolver (the
availability matrix: excluded, reachable, models listed/stalled, last_check, last_error), POST
/v1/_resolve/probe (every provider's model list fetched now), GET /v1/_providers/{id}/models (one
vendor's list, with loomcycle's 404/503/502 codes) and GET /v1/config (the instance, its features,
providers and models at the caller's disclosure level) — against fake vendors on loopback that
answer their own `GET …/models` wire."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.support.e2e import free_port
from tests.support.substrate import client_for, run_agent, substrate_runtime
from tests.support.vendors.anthropic import MODELS as CLAUDES
from tests.support.vendors.anthropic import FakeAnthropic
from tests.support.vendors.base import Fail, text
from tests.support.vendors.gemini import MODELS as GEMINIS
from tests.support.vendors.gemini import FakeGemini
from tests.support.vendors.openai import FakeOpenAI

SUFFIX = secrets.token_hex(3).upper()
ENV = {k: f"TREADLE_TEST_RESOLVER_{k.upper()}_{SUFFIX}" for k in ("openai", "anthropic", "gemini", "dead", "none")}


def config(oa: str, an: str, ge: str) -> dict[str, Any]:
    return {
        "providers": {
            "oa": {"driver": "openai", "base_url": oa + "/v1", "api_key_env": ENV["openai"], "retries": 0},
            "claude": {"driver": "anthropic", "base_url": an, "api_key_env": ENV["anthropic"]},
            "gem": {"driver": "gemini", "base_url": ge, "api_key_env": ENV["gemini"]},
            "dead": {"driver": "openai", "base_url": f"http://127.0.0.1:{free_port()}/v1", "api_key_env": ENV["dead"]},
            "keyless": {"driver": "anthropic", "api_key_env": ENV["none"]},
        },
        "models": {"gpt": {"provider": "oa", "model": "gpt-4o-mini"},
                   "gone": {"provider": "oa", "model": "gpt-retired"},
                   "sonnet": {"provider": "claude", "model": "claude-sonnet-4-5"},
                   "never": {"provider": "keyless", "model": "claude-opus-4-1"}},
        "tiers": {"high": ["never", "sonnet", "gpt"], "low": ["gpt"]},
        "agents": {"asker": {"model": "gpt"}},
    }


@pytest.fixture
async def served(db_url: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[Any, FakeOpenAI]]:
    oa, an, ge = FakeOpenAI(), FakeAnthropic(), FakeGemini()
    async with oa, an, ge:
        for name, fake in (("openai", oa), ("anthropic", an), ("gemini", ge)):
            monkeypatch.setenv(ENV[name], fake.key)
        monkeypatch.setenv(ENV["dead"], "sk-dead-0123456789abcdef")
        monkeypatch.delenv(ENV["none"], raising=False)
        runtime = substrate_runtime(db_url, config(oa.url, an.url, ge.url), provider_retries=0)
        async with runtime as (rt, disp), client_for(rt) as client:
            yield (client, rt, disp), oa


async def test_the_matrix_before_and_after_a_probe(served: tuple[Any, FakeOpenAI]) -> None:
    (client, _, _), _ = served
    before = (await client.get("/v1/_resolver")).json()
    assert before["generated_at"].endswith("Z")
    ps = before["providers"]
    # loomcycle's stub probe: a provider holding its key is reachable with its configured models listed
    assert ps["oa"]["reachable"] and not ps["oa"]["excluded"]
    assert ps["oa"]["models"] == {"gpt-4o-mini": {"listed": True, "stalled": False},
                                  "gpt-retired": {"listed": True, "stalled": False}}
    assert ps["keyless"] == {"excluded": True, "reachable": False, "last_check": ps["keyless"]["last_check"],
                             "models": {"claude-opus-4-1": {"listed": False, "stalled": False}},
                             "last_error": f"{ENV['none']} not set"}
    assert "last_error" not in ps["oa"]  # omitted when empty, as loomcycle's omitempty

    resp = await client.post("/v1/_resolve/probe")
    assert resp.status_code == 200, resp.text
    ps = resp.json()["providers"]
    assert ps["oa"]["reachable"] and ps["oa"]["models"]["gpt-4.1"] == {"listed": True, "stalled": False}
    assert ps["oa"]["models"]["gpt-retired"]["listed"] is False  # configured, not in the vendor's list
    assert {m for m, st in ps["claude"]["models"].items() if st["listed"]} == CLAUDES  # paged, one per page
    assert {m for m, st in ps["gem"]["models"].items() if st["listed"]} == GEMINIS  # without "models/"
    assert ps["dead"]["reachable"] is False and ps["dead"]["last_error"], ps["dead"]
    assert "sk-dead" not in ps["dead"]["last_error"]
    assert ps["keyless"]["excluded"] is True  # never probed
    assert ps["mock"]["reachable"] and ps["mock"]["models"]["echo"]["listed"]
    assert ps["oa"]["last_check"] > before["providers"]["oa"]["last_check"]


async def test_one_providers_models_and_its_errors(served: tuple[Any, FakeOpenAI], monkeypatch: Any) -> None:
    (client, _, _), oa = served
    resp = await client.get("/v1/_providers/oa/models")
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["provider"] == "oa" and sorted(body["models"]) == sorted(oa.models)
    assert isinstance(body["duration_ms"], int) and body["fetched_at"].endswith("Z")
    assert (await client.get("/v1/_providers/claude/models")).json()["models"] == sorted(CLAUDES)
    unknown = await client.get("/v1/_providers/nope/models")
    assert (unknown.status_code, unknown.json()["code"]) == (404, "provider_unknown")
    keyless = await client.get("/v1/_providers/keyless/models")
    assert (keyless.status_code, keyless.json()["code"]) == (503, "provider_unavailable")
    assert ENV["none"] in keyless.json()["error"]
    dead = await client.get("/v1/_providers/dead/models")
    assert (dead.status_code, dead.json()["code"]) == (502, "provider_list_failed")
    wrong = "sk-proj-wrong0123456789abcdefWRONGKEY"
    monkeypatch.setenv(ENV["openai"], wrong)
    refused = await client.get("/v1/_providers/oa/models")
    assert (refused.status_code, refused.json()["code"]) == (502, "provider_list_failed")
    assert "401" in refused.json()["error"] and wrong not in refused.text


async def test_a_failed_call_stalls_its_model_until_the_next_answer(served: tuple[Any, FakeOpenAI]) -> None:
    (client, rt, disp), oa = served

    async def stalled() -> bool:
        return bool((await client.get("/v1/_resolver")).json()["providers"]["oa"]["models"]["gpt-4o-mini"]["stalled"])

    assert not await stalled()
    oa.then(Fail("server"))
    failed = await run_agent(rt, disp, "asker")
    assert failed.status == "failed"
    assert await stalled()
    oa.then(text("back again"))
    done = await run_agent(rt, disp, "asker")
    assert done.status == "completed"
    assert not await stalled()


async def test_config_at_each_disclosure_level(served: tuple[Any, FakeOpenAI], monkeypatch: Any) -> None:
    (client, _, _), _ = served
    view = (await client.get("/v1/config")).json()
    assert view["view"] == "admin" and view["instance"]["version"]
    assert view["features"]["code_js"] == {"available": False}
    assert view["features"]["vector_memory"]["available"] is False
    assert {p["provider"]: p["active"] for p in view["providers"]}["keyless"] is False
    models = {(m["provider"], m["model"]): m for m in view["models"]}
    assert models[("keyless", "claude-opus-4-1")]["active"] is False
    assert models[("claude", "claude-sonnet-4-5")] == {"provider": "claude", "model": "claude-sonnet-4-5",
                                                       "tiers": ["high"], "active": True, "selected": True}
    assert models[("oa", "gpt-4o-mini")]["tiers"] == ["high", "low"] and models[("oa", "gpt-4o-mini")]["selected"]
    assert view["user_tiers"] == [] and view["limits"]["max_request_bytes"] > 0
    # no bearer: 401, unless the operator opted in to the public view
    app = client._transport.app  # the same app, without the client's bearer
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://treadle.test") as anon:
        assert (await anon.get("/v1/config")).status_code == 401
        monkeypatch.setenv("TREADLE_PUBLIC_CONFIG", "1")
        public = (await anon.get("/v1/config")).json()
        assert public["view"] == "public" and "user_tiers" not in public and "limits" not in public
        assert all(isinstance(v, bool) for v in public["features"].values()), public["features"]
        bad = await anon.get("/v1/config", headers={"authorization": "Bearer wrong"})
        assert bad.status_code == 401  # a presented bearer is checked, never downgraded
