"""loomcycle's introspection routes: GET /v1/_models (the aliases), /v1/_routing (each user tier and
tier's cascade, decided by engine/model_routes.py) and /v1/_runnable-agents (yaml + the tenant's
AgentDefs), in loomcycle's wire shape (internal/api/http/models_admin.go, routing.go,
runnable_agents.go)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.substrate import TENANT, client_for, substrate_runtime

CONFIG: dict[str, Any] = {
    "providers": {"claude": {"driver": "anthropic", "api_key_env": "TREADLE_TEST_NO_SUCH_KEY"},
                  "alt": {"driver": "mock"}},
    "models": {"fast": {"provider": "mock", "model": "echo"}, "smart": {"provider": "claude", "model": "opus"}},
    "tiers": {"high": ["smart", "fast"], "low": ["fast"], "extra": [{"provider": "alt", "model": "echo"}]},
    "user_tiers": {"default": {}, "free": {"provider_priority": ["mock"], "fallback_on_error": False}},
    "agents": {"writer": {"tier": "low"}, "echo": {"model": "echo"}},
}


@pytest.fixture
async def client(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.delenv("TREADLE_TEST_NO_SUCH_KEY", raising=False)
    async with substrate_runtime(db_url, CONFIG) as (rt, _), client_for(rt) as c:
        await rt.substrate.agents.dispatch(TENANT, {"op": "create", "name": "reviewer", "overlay": {"model": "echo"}})
        await rt.substrate.agents.dispatch("tenant-b", {"op": "create", "name": "theirs", "overlay": {"model": "echo"}})
        yield c


async def test_models_lists_the_aliases(client: Any) -> None:
    resp = await client.get("/v1/_models")
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"aliases": {"fast": {"provider": "mock", "model": "echo"},
                                       "smart": {"provider": "claude", "model": "opus"}}}


async def test_routing_shows_each_user_tiers_cascades(client: Any) -> None:
    resp = await client.get("/v1/_routing")
    assert resp.status_code == 200, resp.text
    view = resp.json()
    assert view["admin"] is True and view["generated_at"].endswith("Z")
    assert {p["provider"]: p["reachable"] for p in view["providers"]} == {"mock": True, "alt": True, "claude": False}
    tiers = {ut["name"]: {t["tier"]: t["cascade"] for t in ut["tiers"]} for ut in view["user_tiers"]}
    assert list(tiers) == ["default", "free"]
    assert list(tiers["default"]) == ["low", "high", "extra"]  # loomcycle's order, then by name
    high = tiers["default"]["high"]
    assert [(c["provider"], c["model"], c["primary"], c["available"], c["selected"]) for c in high] == [
        ("claude", "opus", True, False, False),  # its key is not set: the first available one runs
        ("mock", "echo", False, True, True)]
    # `free`: mock only, no fallback — what a run of that user tier would walk
    assert [(c["provider"], c["model"]) for c in tiers["free"]["high"]] == [("mock", "echo")]
    assert tiers["free"]["extra"] == []


async def test_runnable_agents_are_the_yaml_ones_and_the_tenants_defs(client: Any) -> None:
    resp = await client.get("/v1/_runnable-agents")
    assert resp.status_code == 200, resp.text
    agents = resp.json()["agents"]
    assert agents == sorted(agents, key=lambda a: a["name"])
    sources = {a["name"]: a["source"] for a in agents}  # (the test database's tenant holds other tests' defs)
    assert (sources["echo"], sources["writer"], sources["reviewer"]) == ("bundled", "bundled", "tenant")
    assert "theirs" not in sources  # never another tenant's
