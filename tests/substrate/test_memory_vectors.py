"""Vector Memory: embed on set, ranked search (local model and a wire-faithful OpenAI server),
quotas, the failure modes (no embedder, no pgvector) and tenant isolation — tool and HTTP."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.support.db import create_database, drop_database
from tests.support.fake_embeddings import FakeOpenAIEmbeddings
from tests.support.substrate import TENANT, client_for, ok_results, run_agent, scripted, substrate_runtime, tool_results
from treadle.store.migrate import migrate

DOCS = {
    "cat": "The cat sat on the mat and purred all afternoon.",
    "revenue": "Quarterly revenue grew twelve percent on strong cloud sales.",
    "pg": "Postgres does vector similarity search with the pgvector extension and HNSW indexes.",
}
QUESTION = "which database extension does vector search?"
LOCAL = {"memory": {"embedder": {"driver": "local"}}}


def _sets(scope: str = "agent") -> list[tuple[str, dict[str, Any]]]:
    return [("Memory", {"op": "set", "scope": scope, "key": f"notes/{k}", "value": {"text": v}, "embed": True,
                        "embed_text": v}) for k, v in DOCS.items()]


async def test_search_through_the_tool_ranks_the_relevant_entry_first(open_rt: Any) -> None:
    agent = scripted(*_sets(), ("Memory", {"op": "set", "scope": "agent", "key": "plain", "value": "not embedded"}),
                     ("Memory", {"op": "search", "scope": "agent", "query": QUESTION, "k": 3}),
                     ("Memory", {"op": "search", "scope": "agent", "query": QUESTION, "k": 3, "min_score": 0.8}),
                     ("Memory", {"op": "search", "scope": "agent", "query": QUESTION, "prefix": "notes/c",
                                 "include_values": False}),
                     memory_scopes=["agent"])
    rt, disp = await open_rt({"agents": {"librarian": agent}, **LOCAL})
    run = await run_agent(rt, disp, "librarian")
    *sets, plain, ranked, strict, prefixed = await ok_results(rt, run.id)
    assert all(s["embedding"] == {"model": "multilingual-e5-small-q4", "dimension": 384} for s in sets)
    assert "embedding" not in plain
    keys = [r["key"] for r in ranked["results"]]
    assert keys[0] == "notes/pg" and set(keys) == {"notes/pg", "notes/cat", "notes/revenue"}
    scores = [r["score"] for r in ranked["results"]]
    assert scores == sorted(scores, reverse=True) and scores[0] > scores[1]
    assert ranked["results"][0]["value"] == {"text": DOCS["pg"]} and ranked["model"] == "multilingual-e5-small-q4"
    assert [r["key"] for r in strict["results"]] == ["notes/pg"]
    assert [r["key"] for r in prefixed["results"]] == ["notes/cat"] and "value" not in prefixed["results"][0]


async def test_memory_over_http(open_rt: Any) -> None:
    rt, _ = await open_rt({"agents": {"a": {"model": "echo"}}, **LOCAL})
    base = "/v1/_memory/scopes"
    async with client_for(rt) as c:
        for key, text in DOCS.items():
            put = await c.put(f"{base}/tenant/_/keys/kb/{key}", json={"value": text, "embed": True})
            assert put.status_code == 200 and put.json()["embedded"], put.text
        plain = await c.put(f"{base}/user/u1/keys/pref", json={"value": {"lang": "en"}, "ttl_seconds": 60})
        assert plain.status_code == 200 and plain.json()["embedded"] is False

        got = (await c.get(f"{base}/tenant/_/keys/kb/pg")).json()
        assert got["value"] == DOCS["pg"] and got["embedding"]["dimension"] == 384
        user = (await c.get(f"{base}/user/u1/keys/pref")).json()
        assert user["value"] == {"lang": "en"} and user["expires_at"] and user["embedding"] is None
        listing = (await c.get(f"{base}/tenant/_/keys", params={"prefix": "kb/", "limit": 2})).json()
        assert [e["key"] for e in listing["entries"]] == ["kb/cat", "kb/pg"]

        found = await c.post("/v1/_memory/search", json={"scope": "tenant", "scope_id": "_", "query": QUESTION,
                                                         "k": 2})
        assert found.status_code == 200 and found.json()["results"][0]["key"] == "kb/pg"

        assert (await c.delete(f"{base}/tenant/_/keys/kb/pg")).json()["deleted"]
        missing = await c.get(f"{base}/tenant/_/keys/kb/pg")
        assert missing.status_code == 404 and missing.json()["code"] == "not_found"
        assert (await c.delete(f"{base}/tenant/_/keys/kb/pg")).status_code == 404
        search = {"scope": "tenant", "scope_id": "_", "query": QUESTION}
        after = (await c.post("/v1/_memory/search", json=search)).json()
        assert "kb/pg" not in [r["key"] for r in after["results"]]  # the embedding went with the row

        bad = [
            (c.get(f"{base}/tenant/someone/keys/x"), 422),
            (c.get(f"{base}/global/x/keys/x"), 422),
            (c.put(f"{base}/agent/a/keys/x", json={"embed": True}), 422),
            (c.post("/v1/_memory/search", json={"scope": "agent", "scope_id": "a", "query": "q", "k": 51}), 422),
        ]
        for request, status in bad:
            resp = await request
            assert resp.status_code == status, resp.text


async def test_openai_wire_embedder_ranks_and_the_hnsw_path_agrees(open_rt: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("TREADLE_TEST_EMBED_KEY", "sk-test")
    async with FakeOpenAIEmbeddings() as fake:
        for exact_limit in (20_000, 0):  # exact scan, then through the HNSW index
            embedder = {"driver": "openai", "base_url": fake.url, "api_key_env": "TREADLE_TEST_EMBED_KEY",
                        "model": "fake-embed-384"}
            memory = {"embedder": embedder, "search": {"exact_scan_limit": exact_limit}}
            agent = scripted(*_sets(), ("Memory", {"op": "search", "scope": "agent", "query": QUESTION, "k": 2}),
                             memory_scopes=["agent"])
            rt, disp = await open_rt({"agents": {f"oa{exact_limit}": agent}, "memory": memory})
            results = await ok_results(rt, (await run_agent(rt, disp, f"oa{exact_limit}")).id)
            ranked = results[-1]["results"]
            assert ranked[0]["key"] == "notes/pg" and ranked[0]["similarity"] > ranked[1]["similarity"]
        req = fake.requests[0]
        assert req["model"] == "fake-embed-384" and req["encoding_format"] == "float" and req["input"] == [DOCS["cat"]]
        assert fake.requests[-1]["input"] == [QUESTION]

        monkeypatch.setenv("TREADLE_TEST_EMBED_KEY", "sk-wrong")
        async with client_for(rt) as c:
            denied = await c.put("/v1/_memory/scopes/agent/x/keys/k", json={"value": "v", "embed": True})
            assert denied.status_code == 502 and denied.json()["code"] == "embedder_auth"
            assert "sk-wrong" not in denied.text


async def test_recency_weighting_prefers_the_fresher_of_two_matches(open_rt: Any) -> None:
    rt, _ = await open_rt({"agents": {"a": {"model": "echo"}}, **LOCAL})
    async with client_for(rt) as c:
        for key in ("old", "new"):
            await c.put(f"/v1/_memory/scopes/agent/a/keys/{key}", json={"value": "The deploy runbook for Postgres",
                                                                      "embed": True})
        async with rt.pool.connection() as conn:
            await conn.execute("UPDATE memory SET updated_at = now() - interval '30 days' WHERE key = 'old'")
        body = {"scope": "agent", "scope_id": "a", "query": "postgres deploy runbook"}
        plain = (await c.post("/v1/_memory/search", json=body)).json()["results"]
        assert plain[0]["score"] == plain[1]["score"]
        recent = (await c.post("/v1/_memory/search", json={**body, "recency_weight": 0.5,
                                                           "recency_half_life_hours": 24})).json()["results"]
        assert [r["key"] for r in recent] == ["new", "old"] and recent[0]["score"] > recent[1]["score"]


async def test_quotas(open_rt: Any) -> None:
    memory = {"max_value_bytes": 64, "max_scope_bytes": 100}
    agent = scripted(("Memory", {"op": "set", "scope": "agent", "key": "a", "value": "x" * 40}),
                     ("Memory", {"op": "set", "scope": "agent", "key": "b", "value": "x" * 40}),
                     ("Memory", {"op": "set", "scope": "agent", "key": "a", "value": "y" * 40}),
                     memory_scopes=["agent"], memory_quota_bytes=70)
    rt, disp = await open_rt({"agents": {"small": agent, "echo": {"model": "echo"}}, "memory": memory})
    first, second, replace = await tool_results(rt, (await run_agent(rt, disp, "small")).id)
    assert not first[0] and not replace[0]  # replacing a key counts its new size only
    assert second[0] and "memory_quota_exceeded" in second[1] and "quota is 70" in second[1]
    async with client_for(rt) as c:
        big = await c.put("/v1/_memory/scopes/user/u/keys/k", json={"value": "z" * 80})
        assert big.status_code == 413 and big.json()["code"] == "value_too_large"
        for key in ("k1", "k2"):
            assert (await c.put(f"/v1/_memory/scopes/user/u/keys/{key}", json={"value": "z" * 40})).status_code == 200
        full = await c.put("/v1/_memory/scopes/user/u/keys/k3", json={"value": "z" * 40})
        assert full.status_code == 413 and full.json()["code"] == "memory_quota_exceeded"
        assert (await c.get("/v1/_memory/scopes/user/u/keys/k3")).status_code == 404
        other = await c.put("/v1/_memory/scopes/user/v/keys/k3", json={"value": "z" * 40})
        assert other.status_code == 200  # quotas are per scope


async def test_embed_and_search_without_an_embedder(open_rt: Any) -> None:
    agent = scripted(("Memory", {"op": "set", "scope": "agent", "key": "k", "value": "v", "embed": True}),
                     ("Memory", {"op": "search", "scope": "agent", "query": "v"}),
                     ("Memory", {"op": "set", "scope": "agent", "key": "k", "value": "v"}),
                     memory_scopes=["agent"])
    rt, disp = await open_rt({"agents": {"a": agent}})
    embed, search, plain = await tool_results(rt, (await run_agent(rt, disp, "a")).id)
    assert embed[0] and "embedder_not_configured" in embed[1]
    assert search[0] and "embedder_not_configured" in search[1]
    assert not plain[0]
    async with client_for(rt) as c:
        resp = await c.post("/v1/_memory/search", json={"scope": "agent", "scope_id": "a", "query": "v"})
        assert resp.status_code == 501 and resp.json()["code"] == "embedder_not_configured"
        # the OpenAI route answers 501 in OpenAI's error shape, and its spec lists it
        resp = await c.post("/v1/embeddings", json={"model": "any", "input": "v"})
        assert resp.status_code == 501 and resp.json()["error"]["code"] == "embedder_not_configured", resp.text
        spec = (await c.get("/openapi.json")).json()
        assert "501" in spec["paths"]["/v1/embeddings"]["post"]["responses"]


async def test_another_tenants_memory_is_invisible(open_rt: Any) -> None:
    rt, _ = await open_rt({"agents": {"a": {"model": "echo"}}, **LOCAL})

    await rt.substrate.memory.set("tenant-b", "agent", "a", "secret", DOCS["pg"], None, embed=True)
    async with client_for(rt) as c:
        assert (await c.get("/v1/_memory/scopes/agent/a/keys/secret")).status_code == 404
        assert (await c.get("/v1/_memory/scopes/agent/a/keys")).json()["entries"] == []
        assert (await c.delete("/v1/_memory/scopes/agent/a/keys/secret")).status_code == 404
        found = (await c.post("/v1/_memory/search", json={"scope": "agent", "scope_id": "a", "query": QUESTION}))
        assert found.json()["results"] == []
    assert (await rt.memory.get("tenant-b", "agent", "a", "secret")) == (True, DOCS["pg"])
    assert TENANT != "tenant-b"


async def test_a_server_without_pgvector_says_so(open_rt: Any) -> None:
    server = "postgresql://postgres@127.0.0.1:5432/postgres"
    try:
        with psycopg.connect(server, connect_timeout=3) as conn:
            if conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone():
                pytest.skip("the machine's PostgreSQL has pgvector")
    except psycopg.Error:
        pytest.skip("no PostgreSQL on 127.0.0.1:5432")
    url = create_database(server, "novec")
    try:
        await migrate(url)
        agent = scripted(("Memory", {"op": "set", "scope": "agent", "key": "k", "value": "v", "embed": True}),
                         ("Memory", {"op": "search", "scope": "agent", "query": "v"}),
                         ("Memory", {"op": "set", "scope": "agent", "key": "k", "value": "v"}),
                         memory_scopes=["agent"])
        async with substrate_runtime(url, {"agents": {"a": agent}, **LOCAL}) as (rt, disp):
            embed, search, plain = await tool_results(rt, (await run_agent(rt, disp, "a")).id)
            assert embed[0] and "pgvector_not_installed" in embed[1] and "pgvector not installed" in embed[1]
            assert search[0] and "pgvector not installed" in search[1]
            assert not plain[0]  # plain Memory keeps working
            async with client_for(rt) as c:
                put = await c.put("/v1/_memory/scopes/agent/a/keys/e", json={"value": "v", "embed": True})
                assert put.status_code == 501 and put.json()["code"] == "pgvector_not_installed"
                found = await c.post("/v1/_memory/search", json={"scope": "agent", "scope_id": "a", "query": "v"})
                assert found.status_code == 501 and "pgvector not installed" in found.json()["error"]
                assert (await c.get("/v1/_memory/scopes/agent/a/keys/k")).json()["embedding"] is None
    finally:
        drop_database(server, url)
