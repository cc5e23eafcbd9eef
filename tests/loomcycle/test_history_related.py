"""History op=related by meaning (issue 34 item 2): with an embedder configured (the local one), a
chat's title, summary and description are embedded — lazily, by `related` itself, again when the
text changed — and the nearest chats rank first; the tool's call and POST /v1/_history alike."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from typing import Any

import httpx
import psycopg
import pytest

from tests.support.sidecar import sidecar_client, sidecar_settings
from treadle.config import parse_config
from treadle.testing import until as wait_for

CONFIG = {
    "memory": {"embedder": {"driver": "local"}},
    "agents": {
        "chat": {"model": "echo"},
        "finder": {
            "model": "script",
            "tools": ["History"],
            "history_scope": ["user"],
            "mock": {
                "script": [
                    {"tool": "History", "input": {"op": "related", "scope": "user", "query": "holiday in France"}},
                    {"text": "done"},
                ]
            },
        },
    },
}


@pytest.fixture(scope="module")
async def http(db_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with sidecar_client(sidecar_settings(db_url, provider_retries=0), parse_config(CONFIG), timeout=120) as c:
        yield c


async def chat(http: httpx.AsyncClient, agent: str, prompt: str, user: str) -> dict[str, Any]:
    resp = await http.post("/v1/runs", json={"agent": agent, "prompt": prompt, "user_id": user})
    assert resp.status_code == 202, resp.text
    started = resp.json()

    async def ended() -> dict[str, Any] | None:
        r = (await http.get(f"/v1/runs/{started['run_id']}")).json()
        return r if r["status"] in ("completed", "failed", "cancelled") else None

    await wait_for(ended, 60, interval=0.05, what=started["run_id"])
    return dict(started)


async def op(http: httpx.AsyncClient, status: int = 200, **body: Any) -> Any:
    resp = await http.post("/v1/_history", json=body)
    assert resp.status_code == status, resp.text
    return resp.json()


async def test_related_ranks_by_meaning_and_reembeds_a_changed_chat(http: httpx.AsyncClient, db_url: str) -> None:
    user, tag = "u_" + secrets.token_hex(4), "t" + secrets.token_hex(4)  # the tag keeps other tests' chats out
    titles = {
        "paris": "A week in Paris: hotels, museums and cafés",
        "france": "Planning a summer vacation in France",
        "pipe": "Fixing the leaking kitchen sink pipe",
        "taxes": "Filing the yearly income tax return",
    }
    ids: dict[str, str] = {}
    for key, title in titles.items():
        ids[key] = (await chat(http, "chat", title, user))["session_id"]
        await op(http, op="rename", session_id=ids[key], title=title)
        await op(http, op="annotate", session_id=ids[key], tags=[tag])
    out = await op(http, op="related", session_id=ids["paris"], tag=tag)
    assert out["ranking"] == "embedding" and out["source_session_id"] == ids["paris"]
    ranked = [c["id"] for c in out["chats"]]
    assert ids["paris"] not in ranked and ranked[0] == ids["france"], (ranked, ids)
    assert all("score" in c for c in out["chats"])
    async with await psycopg.AsyncConnection.connect(db_url) as conn:
        stored: dict[str, str] = dict(
            await (
                await conn.execute(
                    "SELECT session_id, source_text FROM session_embeddings WHERE session_id = ANY(%s)",
                    (list(ids.values()),),
                )
            ).fetchall()
        )
    assert stored[ids["pipe"]] == titles["pipe"] and ids["paris"] not in stored  # the source: not a candidate
    # a changed text is embedded again: the pipe chat becomes a trip
    await op(http, op="rename", session_id=ids["pipe"], title="Weekend trip to Lyon and the Alps in France")
    again = await op(http, op="related", query="travel and holidays in France", tag=tag)
    assert again["query"] and [c["id"] for c in again["chats"]][-1] == ids["taxes"], again["chats"]
    async with await psycopg.AsyncConnection.connect(db_url) as conn:
        row = await (
            await conn.execute("SELECT source_text FROM session_embeddings WHERE session_id = %s", (ids["pipe"],))
        ).fetchone()
    assert row is not None and row[0].startswith("Weekend trip")
    # search with an embedder: full-text and meaning fused — a query sharing no word still finds
    hybrid = await op(http, op="search", query="vacation", tag=tag)
    assert hybrid["ranking"] == "hybrid" and hybrid["chats"][0]["id"] == ids["france"], hybrid["chats"]
    abroad = await op(http, op="search", query="holidays abroad sightseeing", tag=tag)
    assert abroad["chats"][0]["id"] in (ids["france"], ids["paris"], ids["pipe"]), abroad["chats"]  # no word shared
    # a chat with nothing to match on
    bare = (await chat(http, "chat", "x", user))["session_id"]
    assert "recap or annotate" in (await op(http, 422, op="related", session_id=bare))["error"]
    # the tool: related is an external call (the embedder), with the run's user as the scope
    done = await chat(http, "finder", "find my trips", user)
    events = (await http.get(f"/v1/runs/{done['run_id']}/events")).json()["events"]
    found = json.loads(next(e for e in events if e["type"] == "tool_result")["text"])
    assert found["ranking"] == "embedding" and found["chats"][0]["id"] in (ids["france"], ids["paris"], ids["pipe"])
