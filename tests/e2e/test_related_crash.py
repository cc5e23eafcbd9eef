"""History op=related survives kill -9 (issue 34): an agent's `related` call embeds the chats it
ranks (an external call: the embedder, outside the step's transaction). The server is SIGKILLed
while its request to the embedder (an OpenAI-wire fake on loopback, held open by the test) is in
flight. After the restart the run re-runs the call and completes: one tool_result for the call,
ranked by meaning, and each chat's embedding stored once for its current text."""

from __future__ import annotations

import asyncio
import json
import secrets
from functools import partial
from typing import Any

import pytest

from tests.support.e2e import query
from tests.support.fake_embeddings import FakeOpenAIEmbeddings
from treadle.client import TreadleClient
from treadle.testing import until

pytestmark = pytest.mark.e2e

KEY_ENV = "TREADLE_TEST_RELATED_KEY_" + secrets.token_hex(3).upper()
AGENTS = {
    "chat": {"model": "echo"},
    "finder": {
        "model": "script",
        "tools": ["History"],
        "history_scope": ["tenant"],
        "mock": {"script": [{"tool": "History", "input": {"op": "related", "scope": "tenant",
                                                         "query": "holiday in France"}},
                            {"text": "done"}]},
    },
}
ENV = {"TREADLE_LEASE_SECONDS": "1.5", "TREADLE_SWEEP_INTERVAL_SECONDS": "0.3"}
TITLES = ["Planning a summer vacation in France", "Fixing the leaking kitchen sink pipe"]


async def _ended(url: str, run_id: str) -> bool:
    rows = await query(url, "SELECT status FROM runs WHERE id = %s", (run_id,))
    return bool(rows) and rows[0]["status"] in ("completed", "failed", "cancelled")


async def test_related_survives_sigkill_during_the_embedding(make_db: Any, start_server: Any) -> None:
    url = make_db("relatedcrash", migrated=True)
    async with FakeOpenAIEmbeddings("sk-related-" + secrets.token_hex(4)) as emb:
        extra = {"memory": {"embedder": {"driver": "openai", "model": "fake-embed-384", "base_url": emb.url,
                                         "api_key_env": KEY_ENV}}}
        srv = await start_server(url, AGENTS, name="relatedcrash", extra_config=extra,
                                 **{**ENV, KEY_ENV: emb.api_key})
        async with TreadleClient(srv.url, timeout=10) as client:
            sessions = []
            for title in TITLES:
                chat = await client.start_run("chat", title, user_id="ada")
                await until(partial(_ended, url, chat["run_id"]), timeout=30, interval=0.05, what="a chat")
                await query(url, "UPDATE sessions SET title = %s WHERE id = %s", (title, chat["session_id"]))
                sessions.append(chat["session_id"])
            emb.hold = asyncio.Event()  # the next embedding request waits until the kill
            finder = await client.start_run("finder", "find the trips", user_id="ada")

        async def embedding() -> bool:
            return emb.arrived >= 1

        await until(embedding, timeout=30, interval=0.01, what="the embedder request")
        srv.kill9()
        stored = await query(url, "SELECT count(*) AS n FROM session_embeddings")
        assert stored[0]["n"] == 0, "the kill landed after the embeddings were stored"
        emb.hold.set()
        await srv.restart()
        await until(lambda: _ended(url, finder["run_id"]), timeout=60, interval=0.1, what="the finder run")

    rows = await query(url, "SELECT type, payload FROM events WHERE run_id = %s ORDER BY seq", (finder["run_id"],))
    results = [r["payload"] for r in rows if r["type"] == "tool_result"]
    assert len(results) == 1 and not results[0]["is_error"], results
    found = json.loads(results[0]["text"])
    assert found["ranking"] == "embedding" and found["chats"][0]["id"] == sessions[0], found
    run = await query(url, "SELECT status FROM runs WHERE id = %s", (finder["run_id"],))
    assert run[0]["status"] == "completed"
    embedded = await query(url, "SELECT session_id, source_text FROM session_embeddings ORDER BY session_id")
    assert {r["session_id"]: r["source_text"] for r in embedded} == dict(zip(sessions, TITLES, strict=True))
    assert emb.arrived >= 2  # the call ran again after the restart
