"""loomcycle's embedding maintenance (issue 39 item 3; its 1.57-1.58 routes): GET
/v1/_memory/embed_stats, POST /v1/_memory/reembed and /v1/_memory/backfill_embeddings, against
real Postgres (pgvector) and an embedder speaking OpenAI's wire on loopback — a change of model
re-embedded in batches, entries without an embedding backfilled page by page, a bad entry
failing alone and staying a candidate, the previews, and loomcycle's refusals."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.support.fake_embeddings import FakeOpenAIEmbeddings
from tests.support.substrate import TENANT, client_for

POISON = "poison"


class PickyEmbeddings(FakeOpenAIEmbeddings):
    """Refuses any batch holding the word `poison` (400), as a vendor refuses one bad input."""

    def answer(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        if POISON.encode() in body:
            self.requests.append({"refused": True})
            return 400, {"error": {"message": "bad input", "type": "invalid_request_error", "param": None,
                                   "code": None}}
        return super().answer(method, path, headers, body)


@pytest.fixture
async def fake(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[PickyEmbeddings]:
    monkeypatch.setenv("FAKE_EMBED_KEY", "sk-test")
    server = PickyEmbeddings()
    async with server:
        yield server


def embedder(fake: PickyEmbeddings, model: str) -> dict[str, Any]:
    return {"embedder": {"driver": "openai", "base_url": fake.url, "api_key_env": "FAKE_EMBED_KEY", "model": model}}


Q = {"tenant": TENANT}


async def test_reembed_after_a_change_of_model(open_rt: Any, fake: PickyEmbeddings) -> None:
    old, _ = await open_rt({"memory": embedder(fake, "fake-embed-384")})
    for i in range(70):  # more than one batch of 64
        await old.substrate.memory.set(TENANT, "agent", "lib", f"k{i:02d}", f"note number {i}", None, embed=True)
    await old.substrate.memory.set(TENANT, "agent", "lib", "custom", {"a": 1}, None, embed_text="about alpha")
    await old.substrate.memory.set(TENANT, "agent", "other", "x", "elsewhere", None, embed=True)

    new, _ = await open_rt({"memory": embedder(fake, "text-embedding-3-small")})
    async with client_for(new) as c:
        stats = (await c.get("/v1/_memory/embed_stats", params={"scope": "agent", **Q})).json()
        assert stats["scope"] == "agent" and stats["tenant"] == TENANT
        assert stats["models"] == [{"provider": "openai", "model": "fake-embed-384", "dimension": 384,
                                    "row_count": 72}]
        assert stats["total_embedding_bytes"] == 72 * 384 * 4

        params = {"scope": "agent", "scope_id": "lib", **Q}
        preview = (await c.post("/v1/_memory/reembed", params=params)).json()  # a bare POST previews
        assert preview["dry_run"] is True and preview["rows_to_reembed"] == preview["rows_total"] == 71
        assert preview["sample_keys"] == ["custom", *(f"k{i:02d}" for i in range(19))] and preview["sample_keys_capped"]
        assert preview["current_embedder"] == {"provider": "openai", "model": "text-embedding-3-small",
                                               "dimension": 0}
        calls = len(fake.requests)

        done = (await c.post("/v1/_memory/reembed", params={**params, "dry_run": "false"})).json()
        assert done["rows_reembedded"] == 71 and done["rows_failed"] == 0 and "failed_keys" not in done
        assert done["current_embedder"]["dimension"] == 1536
        batches = fake.requests[calls:]
        assert [len(b["input"]) for b in batches] == [64, 7]  # loomcycle's batches of 64
        assert "about alpha" in batches[0]["input"]  # the text it was embedded from, not the value

        again = (await c.post("/v1/_memory/reembed", params={**params, "dry_run": "0"})).json()
        assert again["rows_reembedded"] == 0  # resumable: nothing left
        stats = (await c.get("/v1/_memory/embed_stats", params={"scope": "agent", **Q})).json()
        assert [(m["model"], m["row_count"]) for m in stats["models"]] == [("fake-embed-384", 1),
                                                                            ("text-embedding-3-small", 71)]
    found = await new.substrate.memory.search(TENANT, "agent", "lib", "note number 7", k=1)
    assert found["results"][0]["key"] == "k07"  # searchable under the new model


async def test_backfill_pages_past_what_it_cannot_embed(open_rt: Any, fake: PickyEmbeddings) -> None:
    rt, _ = await open_rt({"memory": embedder(fake, "fake-embed-384")})
    mem = rt.memory
    for i in range(6):
        await mem.set(TENANT, "user", "u1", f"doc.chunk:{i}", {"body": f"chunk body {i}", "fields": {"n": i}}, None)
    await mem.set(TENANT, "user", "u1", "doc.chunk:0a", "", None)  # nothing to embed
    await mem.set(TENANT, "user", "u1", f"doc.chunk:{POISON}", f"a {POISON} entry", None)
    await mem.set(TENANT, "user", "u1", "plain", "not under the prefix", None)
    await rt.substrate.memory.set(TENANT, "user", "u1", "doc.chunk:done", "already embedded", None, embed=True)

    params = {"scope": "user", "scope_id": "u1", "prefix": "doc.chunk:", **Q}
    async with client_for(rt) as c:
        preview = (await c.post("/v1/_memory/backfill_embeddings", params=params)).json()
        assert preview["dry_run"] and preview["candidates"] == 8 and preview["prefix"] == "doc.chunk:"
        assert "doc.chunk:done" not in preview["sample_keys"] and "plain" not in preview["sample_keys"]

        first = (await c.post("/v1/_memory/backfill_embeddings",
                              params={**params, "dry_run": "false", "limit": "3"})).json()
        assert (first["embedded"], first["failed"], first["more"]) == (3, 0, True)
        assert first["skipped_empty"] == 1  # doc.chunk:0a, passed over within the page
        rest = (await c.post("/v1/_memory/backfill_embeddings", params={**params, "dry_run": "false"})).json()
        assert (rest["embedded"], rest["failed"], rest["failed_keys"]) == (3, 1, [f"doc.chunk:{POISON}"])
        assert rest.get("more") is False and rest["skipped_empty"] == 1
        left = (await c.post("/v1/_memory/backfill_embeddings", params=params)).json()
        assert sorted(left["sample_keys"]) == ["doc.chunk:0a", f"doc.chunk:{POISON}"]  # still candidates
    entry = await mem.entry(TENANT, "user", "u1", "doc.chunk:2")
    assert entry is not None and entry["embedding"]["model"] == "fake-embed-384"
    found = await rt.substrate.memory.search(TENANT, "user", "u1", "chunk body 4", k=1, prefix="doc.chunk:")
    assert found["results"][0]["key"] == "doc.chunk:4"  # the body was embedded, not the envelope


async def test_refusals_as_loomcycle_words_them(open_rt: Any, fake: PickyEmbeddings) -> None:
    rt, _ = await open_rt({})
    async with client_for(rt) as c:
        for path in ("/v1/_memory/reembed", "/v1/_memory/backfill_embeddings"):
            r = await c.post(path, params={"scope": "team", "scope_id": "x", **Q})
            assert (r.status_code, r.json()["code"]) == (400, "invalid_scope")
            r = await c.post(path, params={"scope": "user", **Q})
            assert (r.status_code, r.json()["code"]) == (400, "missing_scope_id")
            r = await c.post(path, params={"scope": "user", "scope_id": "u"})  # an operator names the tenant
            assert (r.status_code, r.json()["code"]) == (400, "tenant_required")
            r = await c.post(path, params={"scope": "tenant", **Q})  # no embedder configured
            assert (r.status_code, r.json()["code"]) == (503, "embedder_not_configured")
        r = await c.get("/v1/_memory/embed_stats", params={"scope": "nope"})
        assert (r.status_code, r.json()["code"]) == (400, "invalid_scope")
        r = await c.get("/v1/_memory/embed_stats", params={"scope": "tenant"})
        assert r.status_code == 200 and r.json()["models"] == [] and len(r.json()["notes"]) == 2
