"""Embedder drivers: each vendor's request shape and answer, errors mapped to stable codes, and
the offline local model (no network)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from treadle.embeddings.registry import build_embedder
from treadle.errors import EmbedderError
from treadle.specs.memory import EmbedderConfig


def transport(answer: Any, seen: list[httpx.Request], status: int = 200) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        body = json.loads(request.content)
        doc = answer(body) if callable(answer) else answer
        return httpx.Response(status, json=doc)

    return httpx.MockTransport(handler)


async def test_ollama_request_and_answer(monkeypatch: Any) -> None:
    seen: list[httpx.Request] = []
    cfg = EmbedderConfig(driver="ollama", model="nomic-embed-text")
    emb = build_embedder(cfg, transport(lambda b: {"model": b["model"], "embeddings": [[0.1, 0.2]] * len(b["input"])},
                                        seen))
    assert emb is not None
    assert await emb.embed(["a", "b"], "document") == [[0.1, 0.2], [0.1, 0.2]]
    assert str(seen[0].url) == "http://127.0.0.1:11434/api/embed"
    assert json.loads(seen[0].content) == {"model": "nomic-embed-text", "input": ["a", "b"]}
    assert "authorization" not in seen[0].headers


async def test_gemini_request_uses_task_types_and_the_key_header(monkeypatch: Any) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", "g-key")
    seen: list[httpx.Request] = []
    cfg = EmbedderConfig(driver="gemini", dimensions=3)
    emb = build_embedder(cfg, transport(lambda b: {"embeddings": [{"values": [1.0, 0.0, 0.5]} for _ in b["requests"]]},
                                        seen))
    assert emb is not None
    assert await emb.embed(["q"], "query") == [[1.0, 0.0, 0.5]]
    req = seen[0]
    assert str(req.url).endswith("/v1beta/models/gemini-embedding-001:batchEmbedContents")
    assert req.headers["x-goog-api-key"] == "g-key"
    assert json.loads(req.content) == {"requests": [{"model": "models/gemini-embedding-001", "content": {
        "parts": [{"text": "q"}]}, "taskType": "RETRIEVAL_QUERY", "outputDimensionality": 3}]}


async def test_voyage_request_orders_by_index(monkeypatch: Any) -> None:
    monkeypatch.setenv("VOYAGE_API_KEY", "v-key")
    seen: list[httpx.Request] = []
    answer = {"object": "list", "data": [{"object": "embedding", "embedding": [0.0, 2.0], "index": 1},
                                         {"object": "embedding", "embedding": [1.0, 0.0], "index": 0}],
              "model": "voyage-3.5", "usage": {"total_tokens": 2}}
    emb = build_embedder(EmbedderConfig(driver="voyage"), transport(answer, seen))
    assert emb is not None
    assert await emb.embed(["first", "second"], "document") == [[1.0, 0.0], [0.0, 2.0]]
    assert seen[0].headers["authorization"] == "Bearer v-key"
    assert json.loads(seen[0].content) == {"model": "voyage-3.5", "input": ["first", "second"],
                                           "input_type": "document"}


async def test_openai_batches_and_never_sends_a_key_to_a_custom_server(monkeypatch: Any) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-real")
    seen: list[httpx.Request] = []
    answer = lambda b: {"data": [{"index": i, "embedding": [1.0, float(i)]} for i in range(len(b["input"]))]}  # noqa: E731
    cfg = EmbedderConfig(driver="openai", base_url="http://127.0.0.1:9/v1", batch_size=2)
    emb = build_embedder(cfg, transport(answer, seen))
    assert emb is not None
    assert len(await emb.embed(["a", "b", "c"], "document")) == 3
    assert [json.loads(r.content)["input"] for r in seen] == [["a", "b"], ["c"]]
    assert all("authorization" not in r.headers for r in seen)


@pytest.mark.parametrize(
    ("status", "answer", "code"),
    [
        (401, {"error": {"message": "bad key"}}, "embedder_auth"),
        (429, {"error": {"message": "slow down"}}, "embedder_rate_limited"),
        (500, {"error": {"message": "boom"}}, "embedder_error"),
        (200, {"data": []}, "embedder_protocol"),
        (200, {"nothing": 1}, "embedder_protocol"),
        (200, {"data": [{"index": 0, "embedding": [0.0, 0.0]}]}, "embedder_protocol"),
    ],
)
async def test_openai_failures_have_stable_codes(monkeypatch: Any, status: int, answer: Any, code: str) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-real")
    emb = build_embedder(EmbedderConfig(driver="openai"), transport(answer, [], status))
    assert emb is not None
    with pytest.raises(EmbedderError) as info:
        await emb.embed(["a"], "document")
    assert info.value.code == code and "sk-real" not in info.value.message


async def test_missing_key_and_unreachable_server(monkeypatch: Any) -> None:
    monkeypatch.delenv("VOYAGE_API_KEY", raising=False)
    emb = build_embedder(EmbedderConfig(driver="voyage"))
    assert emb is not None
    with pytest.raises(EmbedderError) as info:
        await emb.embed(["a"], "query")
    assert info.value.code == "embedder_missing_api_key" and "VOYAGE_API_KEY" in info.value.message
    down = build_embedder(EmbedderConfig(driver="ollama", base_url="http://127.0.0.1:9", timeout_seconds=2))
    assert down is not None
    with pytest.raises(EmbedderError) as info:
        await down.embed(["a"], "query")
    assert info.value.code == "embedder_unreachable"


async def test_local_model_is_offline_and_meaningful() -> None:
    emb = build_embedder(EmbedderConfig(driver="local"))
    assert emb is not None and emb.model == "multilingual-e5-small-q4"
    docs = await emb.embed(["A recipe for tomato soup.", "How to rotate TLS certificates."], "document")
    [query] = await emb.embed(["cooking dinner with vegetables"], "query")
    sims = [sum(a * b for a, b in zip(d, query, strict=True)) for d in docs]
    assert len(query) == 384 and sims[0] > sims[1]
