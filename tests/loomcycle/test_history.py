"""The History tool and POST /v1/_history (issue 34 item 2) against a served treadle: past chats
(sessions) listed, searched (full-text), read, renamed, annotated, pinned, archived, resumed,
related, recapped (a fresh summary by the chat's agent's model, stored as its summary) — folded to
the caller's scope (default-deny), another user's chat not found."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from typing import Any

import httpx
import psycopg
import pytest

from tests.support.sidecar import sidecar_client, sidecar_settings
from treadle.builtins.history import HistoryTool
from treadle.config import parse_config
from treadle.testing import until as wait_for
from treadle.tools.base import effects_of

#: the chat the recapper's script names (a test renames a session to it)
RECAP_TARGET = "s_recap_target_" + secrets.token_hex(4)
AGENTS = {
    "chat": {"model": "echo"},
    "historian": {"model": "script", "tools": ["History"], "history_scope": ["user"], "mock": {"script": [
        {"tool": "History", "input": {"op": "list", "scope": "user"}},
        {"tool": "History", "input": {"op": "search", "scope": "user", "query": "paris"}},
        {"tool": "History", "input": {"op": "list", "scope": "tenant"}},
        {"text": "done"}]}},
    "nosy": {"model": "script", "tools": ["History"], "mock": {"script": [
        {"tool": "History", "input": {"op": "list"}}, {"text": "done"}]}},
    "mute": {"model": "echo", "mock": {"summary_error": True}},
    "recapper": {"model": "script", "tools": ["History"], "history_scope": ["tenant"], "mock": {"script": [
        {"tool": "History", "input": {"op": "recap", "scope": "tenant", "session_id": RECAP_TARGET}},
        {"tool": "History", "input": {"op": "recap", "scope": "tenant", "session_id": "s_nope"}},
        {"text": "done"}]}},
}


@pytest.fixture(scope="module")
async def http(db_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with sidecar_client(sidecar_settings(db_url, provider_retries=0), parse_config({"agents": AGENTS})) as client:
        yield client


async def run(http: httpx.AsyncClient, agent: str, prompt: str, user: str) -> dict[str, Any]:
    resp = await http.post("/v1/runs", json={"agent": agent, "prompt": prompt, "user_id": user})
    assert resp.status_code == 202, resp.text
    run_id = resp.json()["run_id"]

    async def ended() -> dict[str, Any] | None:
        r = (await http.get(f"/v1/runs/{run_id}")).json()
        return r if r["status"] in ("completed", "failed", "cancelled") else None

    out: dict[str, Any] = await wait_for(ended, 20, interval=0.05, what=run_id)
    out["session_id"] = resp.json()["session_id"]
    return out


async def test_the_history_tool_reads_the_users_chats(http: httpx.AsyncClient) -> None:
    user, other = "u_" + secrets.token_hex(4), "u_" + secrets.token_hex(4)
    paris = await run(http, "chat", "a weekend trip to Paris in spring", user)
    await run(http, "chat", "cooking fresh pasta", user)
    await run(http, "chat", "paris for someone else", other)
    done = await run(http, "historian", "what did we talk about?", user)
    assert done["status"] == "completed", done
    events = (await http.get(f"/v1/runs/{done['run_id']}/events")).json()["events"]
    answers = [e for e in events if e["type"] == "tool_result"]
    listed, found, refused = json.loads(answers[0]["text"]), json.loads(answers[1]["text"]), answers[2]
    assert {c["user_id"] for c in listed["chats"]} == {user} and listed["count"] == 3  # its own chat too
    assert [c["id"] for c in found["chats"]] == [paris["session_id"]]  # not the other user's paris
    assert found["chats"][0]["run_count"] == 1 and found["ranking"] == "full-text"
    assert refused["is_error"] and "history_scope" in refused["text"]  # tenant is not in its scope
    nosy = await run(http, "nosy", "x", user)
    events = (await http.get(f"/v1/runs/{nosy['run_id']}/events")).json()["events"]
    result = next(e for e in events if e["type"] == "tool_result")
    assert result["is_error"] and "default-deny" in result["text"]


async def test_history_over_http(http: httpx.AsyncClient) -> None:
    user = "u_" + secrets.token_hex(4)
    first = await run(http, "chat", "planning a garden with tomatoes", user)
    second = await run(http, "chat", "tomatoes need sun and water", user)
    sid = first["session_id"]

    async def op(status: int = 200, **body: Any) -> Any:
        resp = await http.post("/v1/_history", json=body)
        assert resp.status_code == status, resp.text
        return resp.json()

    renamed = await op(op="rename", session_id=sid, title="Garden")
    assert renamed["title"] == "Garden"
    annotated = await op(op="annotate", session_id=sid, description="tomatoes plot", tags=["garden", "spring"])
    assert annotated["tags"] == ["garden", "spring"] and annotated["description"] == "tomatoes plot"
    assert (await op(op="pin", session_id=sid))["pinned"] is True
    listed = await op(op="list", scope="tenant", limit=100)
    assert listed["chats"][0]["pinned"] is True  # pinned first
    tagged = await op(op="list", tag="garden")
    assert [c["id"] for c in tagged["chats"]] == [sid]
    got = await op(op="get", session_id=sid)
    assert got["events"][0]["type"] == "user_input"
    markdown = (await op(op="get", session_id=sid, format="markdown"))["markdown"]
    assert markdown.startswith("# Garden") and "**user:** planning a garden" in markdown
    related = await op(op="related", session_id=sid)
    near = [c["id"] for c in related["chats"]]
    assert second["session_id"] in near and sid not in near
    resumed = await op(op="resume", session_id=sid)
    assert resumed["status"] == "idle" and f"/v1/sessions/{sid}/messages" in resumed["hint"]
    assert (await op(op="archive", session_id=sid))["archived"] is True
    assert sid not in [c["id"] for c in (await op(op="list", limit=100))["chats"]]
    assert sid in [c["id"] for c in (await op(op="list", include_archived=True, limit=100))["chats"]]
    missing = await op(404, op="get", session_id="s_nope")
    assert missing["code"] == "session_not_found"
    # the caller's own chats (scope user: the principal's subject) do not include this user's
    mine = await op(op="list", scope="user")
    assert sid not in [c["id"] for c in mine["chats"]]
    resp = await http.post("/v1/_history", json={"op": "list", "scope": "global"})
    assert resp.status_code in (400, 422), resp.text
    resp = await http.post("/v1/_history", json={"op": "list", "colour": "red"})
    assert resp.status_code == 422 and "colour" in resp.text


async def test_recap_writes_the_chats_summary(http: httpx.AsyncClient, db_url: str) -> None:
    user = "u_" + secrets.token_hex(4)
    first = await run(http, "chat", "the budget for the kitchen is 8000 euros", user)
    sid = first["session_id"]
    resp = await http.post(f"/v1/sessions/{sid}/messages", json={"prompt": "and the tiles are blue"})
    assert resp.status_code == 202, resp.text
    await wait_for(lambda: _ended(http, resp.json()["run_id"]), 20, interval=0.05, what="the second turn")
    out = (await http.post("/v1/_history", json={"op": "recap", "session_id": sid})).json()
    assert set(out) >= {"scope", "summary", "chat"} and out["scope"] == "tenant", out
    # the whole chat was summarized (the mock's summary ends with the span's last words)
    assert out["summary"].startswith("summary of") and "tiles are blue" in out["summary"], out
    assert out["chat"]["summary"] == out["summary"]
    session = (await http.get(f"/v1/sessions/{sid}")).json()
    assert session["summary"] == out["summary"] and session["summary_updated_at"]
    # recap again: idempotent, the summary replaced (the same here: the chat did not change)
    again = (await http.post("/v1/_history", json={"op": "recap", "session_id": sid})).json()
    assert again["summary"] == out["summary"]
    # refusals: not found, a failing summary (nothing stored)
    resp = await http.post("/v1/_history", json={"op": "recap", "session_id": "s_nope"})
    assert resp.status_code == 404 and resp.json()["code"] == "session_not_found"
    mute = await run(http, "mute", "hello", user)
    resp = await http.post("/v1/_history", json={"op": "recap", "session_id": mute["session_id"]})
    assert resp.status_code == 502, resp.text
    assert (await http.get(f"/v1/sessions/{mute['session_id']}")).json()["summary"] == ""


async def test_the_history_tool_recaps_a_chat(http: httpx.AsyncClient, db_url: str) -> None:
    user = "u_" + secrets.token_hex(4)
    chat = await run(http, "chat", "we chose oak for the floor", user)
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        await conn.execute("UPDATE runs SET session_id = %s WHERE session_id = %s", (RECAP_TARGET, chat["session_id"]))
        await conn.execute("UPDATE sessions SET id = %s WHERE id = %s", (RECAP_TARGET, chat["session_id"]))
    done = await run(http, "recapper", "recap it", user)
    assert done["status"] == "completed", done
    events = (await http.get(f"/v1/runs/{done['run_id']}/events")).json()["events"]
    results = [e for e in events if e["type"] == "tool_result"]
    recapped = json.loads(results[0]["text"])
    assert recapped["chat"]["id"] == RECAP_TARGET and "oak for the floor" in recapped["summary"]
    assert results[1]["is_error"] and "not found" in results[1]["text"]
    assert (await http.get(f"/v1/sessions/{RECAP_TARGET}")).json()["summary"] == recapped["summary"]
    # a recap calls a model: it runs outside the step's transaction; the other ops inside it
    assert effects_of(HistoryTool(), {"op": "recap"}) == "external"
    assert effects_of(HistoryTool(), {"op": "rename"}) == "transactional"


async def _ended(http: httpx.AsyncClient, run_id: str) -> bool:
    return (await http.get(f"/v1/runs/{run_id}")).json()["status"] in ("completed", "failed", "cancelled")
