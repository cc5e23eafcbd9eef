"""Sessions (issue 34 item 1) against a served treadle: a session holds many runs of one agent and
user; `POST /v1/runs` with `session_id` and `POST /v1/sessions/{id}/messages` continue it (the
earlier runs are the new run's history, read in place), 404 `session_not_found`, 409
`session_busy`; the transcript spans the runs; sessions are listed per user."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import psycopg
import pytest

from tests.support.sidecar import Served, sidecar_client, sidecar_settings
from treadle.config import parse_config

#: a script model answers by how many assistant turns it sees: a continuation sees the earlier runs'
SCRIPT = {"model": "script", "mock": {"script": [{"text": "one"}, {"text": "two"}, {"text": "three"}]}}


@pytest.fixture(scope="module")
async def served(db_url: str) -> AsyncIterator[Served]:
    config = parse_config({"agents": {
        "script": SCRIPT,
        "echo": {"model": "echo"},
        "slow": {"model": "echo", "mock": {"latency_ms": 400}},
    }})
    async with sidecar_client(sidecar_settings(db_url, provider_retries=0), config) as client:
        yield Served(client)


async def test_a_session_continues_with_its_history(served: Served, db_url: str) -> None:
    first = await served.post("/v1/runs", {"agent": "script", "prompt": "hi", "user_id": served.user}, 202)
    session_id = first["session_id"]
    assert session_id == "s_" + first["run_id"].removeprefix("r_")
    await served.wait(first["run_id"])
    assert await served.final_text(first["run_id"]) == "one"
    # loomcycle's POST /v1/runs with session_id: the new run sees the first run's turns
    second = await served.post("/v1/runs", {"agent": "script", "prompt": "and?", "session_id": session_id}, 202)
    assert second["session_id"] == session_id and second["run_id"] != first["run_id"]
    await served.wait(second["run_id"])
    assert await served.final_text(second["run_id"]) == "two"
    run = await served.get(f"/v1/runs/{second['run_id']}")
    assert run["user_id"] == served.user  # the session's user
    # loomcycle's continuation route: agent and user from the session; it streams like /v1/runs
    frames = await served.stream("POST", f"/v1/sessions/{session_id}/messages", json={
        "segments": [{"role": "user", "content": [{"type": "trusted-text", "text": "more"}]}]})
    assert frames[0].event == "session" and frames[0].data["text"] == session_id
    assert frames[1].event == "agent" and frames[1].data["session_id"] == session_id
    assert [f.data["text"] for f in frames if f.event == "text"] == ["three"]
    # the earlier runs' events are read in place: no run holds another's events
    async with await psycopg.AsyncConnection.connect(db_url) as conn:
        cur = await conn.execute(
            "SELECT r.id, count(e.*) FROM runs r JOIN events e ON e.run_id = r.id WHERE r.session_id = %s"
            " GROUP BY r.id, r.session_seq ORDER BY r.session_seq", (session_id,))
        counts = [n for _, n in await cur.fetchall()]
    assert len(counts) == 3 and max(counts) == min(counts)  # each run: its own turn only
    # the transcript spans the session's runs in order
    out = await served.get(f"/v1/sessions/{session_id}/transcript")
    assert out["session"]["id"] == session_id and out["session"]["agent"] == "script"
    texts = [e["event"]["text"] for e in out["events"] if e["type"] == "text"]
    assert texts == ["one", "two", "three"]
    assert len({e["run_id"] for e in out["events"]}) == 3
    inputs = [e["payload"][0]["content"][0]["text"] for e in out["events"] if e["type"] == "user_input"]
    assert inputs == ["hi", "and?", "more"]
    # the session: its runs in order, listed per user
    session = await served.get(f"/v1/sessions/{session_id}")
    assert session["run_count"] == 3 and len(session["runs"]) == 3 and session["runs"][0] == first["run_id"]
    assert session["live_run_id"] is None
    listed = await served.get(f"/v1/users/{served.user}/sessions")
    assert session_id in [s["id"] for s in listed["sessions"]]
    assert all(s["user_id"] == served.user for s in listed["sessions"])


async def test_unknown_busy_and_mismatched_sessions_are_refused(served: Served) -> None:
    resp = await served.client.post("/v1/runs", json={"agent": "echo", "prompt": "x", "session_id": "s_nope"})
    assert resp.status_code == 404 and resp.json()["code"] == "session_not_found", resp.text
    resp = await served.client.post("/v1/sessions/s_nope/messages", json={"prompt": "x"})
    assert resp.status_code == 404 and resp.json()["code"] == "session_not_found", resp.text
    live = await served.post("/v1/runs", {"agent": "slow", "prompt": "x", "user_id": served.user}, 202)
    sid = live["session_id"]
    # another run of the session is live: 409 session_busy, on both routes
    resp = await served.client.post(f"/v1/sessions/{sid}/messages", json={"prompt": "y"})
    assert resp.status_code == 409 and resp.json()["code"] == "session_busy", resp.text
    resp = await served.client.post("/v1/runs", json={"agent": "slow", "prompt": "y", "session_id": sid})
    assert resp.status_code == 409 and resp.json()["code"] == "session_busy", resp.text
    # another agent, another user: refused by name / not found
    resp = await served.client.post("/v1/runs", json={"agent": "echo", "prompt": "y", "session_id": sid})
    assert resp.status_code == 400 and resp.json()["code"] == "session_agent_mismatch", resp.text
    resp = await served.client.post("/v1/runs", json={"agent": "slow", "prompt": "y", "session_id": sid,
                                                      "user_id": "someone_else"})
    assert resp.status_code == 404 and resp.json()["code"] == "session_not_found", resp.text
    # the continuation route takes neither agent nor user_id nor session_id
    for field, value in (("agent", "echo"), ("user_id", "u"), ("session_id", sid)):
        resp = await served.client.post(f"/v1/sessions/{sid}/messages", json={"prompt": "y", field: value})
        assert resp.status_code == 422, resp.text
        assert field in resp.text
    await served.wait(live["run_id"])
    # the run ended: the session is free again
    again = await served.post(f"/v1/sessions/{sid}/messages", {"prompt": "z"}, 202)
    assert again["session_id"] == sid
    await served.wait(again["run_id"])


async def test_concurrent_continuations_start_one_run(served: Served) -> None:
    first = await served.post("/v1/runs", {"agent": "slow", "prompt": "a", "user_id": served.user}, 202)
    await served.wait(first["run_id"])
    sid = first["session_id"]
    answers = await asyncio.gather(*(served.client.post(f"/v1/sessions/{sid}/messages", json={"prompt": str(i)})
                                     for i in range(6)))
    codes = sorted(r.status_code for r in answers)
    assert codes.count(202) == 1 and codes.count(409) == 5, codes
    started = next(r.json()["run_id"] for r in answers if r.status_code == 202)
    await served.wait(started)


async def test_session_metadata_and_listing(served: Served) -> None:
    run = await served.post("/v1/runs", {"agent": "echo", "prompt": "x", "user_id": served.user}, 202)
    sid = run["session_id"]
    await served.wait(run["run_id"])
    patched = await served.client.patch(f"/v1/sessions/{sid}", json={
        "title": "Trip planning", "tags": ["travel"], "pinned": True})
    assert patched.status_code == 200, patched.text
    body = patched.json()
    assert body["title"] == "Trip planning" and body["tags"] == ["travel"] and body["pinned"] is True
    bad = await served.client.patch(f"/v1/sessions/{sid}", json={"colour": "red"})
    assert bad.status_code == 422 and "colour" in bad.text
    archived = await served.client.patch(f"/v1/sessions/{sid}", json={"archived": True})
    assert archived.json()["archived"] is True
    listed = await served.get(f"/v1/sessions?user_id={served.user}")
    assert sid not in [s["id"] for s in listed["sessions"]]
    listed = await served.get(f"/v1/sessions?user_id={served.user}&archived=true")
    assert sid in [s["id"] for s in listed["sessions"]]
    missing = await served.client.patch("/v1/sessions/s_nope", json={"title": "x"})
    assert missing.status_code == 404 and missing.json()["code"] == "session_not_found"
