"""loomcycle's session replay (issue 34 item 1) against a served treadle: `POST
/v1/sessions/{id}/replay {agent, compress?}` makes a NEW session of the target agent seeded with
the source's conversation (one ended seed run; reasoning left out), which then continues like any
session; `compress` summarizes the carried history with the target agent's compaction settings
first. 404 `session_not_found`, 409 `agent_gone`, 400 `empty_source`, 502 on a failed summary
(nothing written)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from tests.support.sidecar import Served, sidecar_client, sidecar_settings
from treadle.config import parse_config
from treadle.engine.replay import history_messages

#: a script model answers by how many assistant turns it sees: a session that lost its carried
#: history answers with an earlier line
SCRIPT = {"model": "script", "mock": {"script": [{"text": "one"}, {"text": "two"}, {"text": "three"}]}}
LINES: list[dict[str, str]] = [{"text": "A"}, {"text": "B"}, {"text": "C"}, {"text": "D"}]
OTHER: dict[str, Any] = {"model": "script", "mock": {"script": LINES}}
COMPACT = {**OTHER, "compaction": {"keep_last_n": 2}}
BROKEN = {**OTHER, "mock": {"script": LINES, "summary_error": True}}


@pytest.fixture(scope="module")
async def served(db_url: str) -> AsyncIterator[Served]:
    config = parse_config({"agents": {"script": SCRIPT, "other": OTHER, "compact": COMPACT, "broken": BROKEN}})
    async with sidecar_client(sidecar_settings(db_url, provider_retries=0), config) as client:
        yield Served(client)


async def _conversation(served: Served, turns: int) -> tuple[str, list[str]]:
    """A session of the script agent with `turns` runs; its session id and run ids."""
    first = await served.post("/v1/runs", {"agent": "script", "prompt": "q1", "user_id": served.user}, 202)
    sid, runs = first["session_id"], [first["run_id"]]
    await served.wait(first["run_id"])
    for k in range(2, turns + 1):
        nxt = await served.post(f"/v1/sessions/{sid}/messages", {"prompt": f"q{k}"}, 202)
        runs.append(nxt["run_id"])
        await served.wait(nxt["run_id"])
    return sid, runs


async def _events(db_url: str, sql: str, *args: Any) -> list[Any]:
    async with await psycopg.AsyncConnection.connect(db_url) as conn:
        return list(await (await conn.execute(sql, args)).fetchall())


async def _answer(served: Served, session_id: str, prompt: str) -> str:
    run = await served.post(f"/v1/sessions/{session_id}/messages", {"prompt": prompt}, 202)
    await served.wait(run["run_id"])
    return await served.final_text(run["run_id"])


async def test_replay_seeds_a_new_session_of_another_agent(served: Served, db_url: str) -> None:
    sid, runs = await _conversation(served, 2)
    # the first run's answer carried a provider's signed reasoning: it must not travel
    async with await psycopg.AsyncConnection.connect(db_url) as conn:
        await conn.execute(
            "WITH r AS (UPDATE runs SET last_seq = last_seq + 1 WHERE id = %s RETURNING id, tenant_id, last_seq)"
            " INSERT INTO events (run_id, seq, tenant_id, type, payload) SELECT id, last_seq, tenant_id, 'thinking',"
            ' \'{"text": "SECRET-THINKING", "signature": "SIG", "iteration": 1}\' FROM r',
            (runs[0],),
        )
    out = await served.post(f"/v1/sessions/{sid}/replay", {"agent": "other"})
    assert set(out) == {"new_session_id", "seed_run_id", "events_copied", "compacted"}, out
    new_sid = out["new_session_id"]
    assert new_sid != sid and out["compacted"] is False
    assert out["events_copied"] == 4  # q1, one, q2, two
    session = await served.get(f"/v1/sessions/{new_sid}")
    assert session["agent"] == "other" and session["user_id"] == served.user
    assert session["runs"] == [out["seed_run_id"]] and session["live_run_id"] is None
    seed = await served.get(f"/v1/runs/{out['seed_run_id']}")
    assert seed["status"] == "completed" and seed["session_id"] == new_sid
    transcript = await served.get(f"/v1/sessions/{new_sid}/transcript")
    types = [e["type"] for e in transcript["events"]]
    assert types == ["started", "user_input", "text", "user_input", "text", "done"], types
    assert "SECRET-THINKING" not in str(transcript)
    assert [e["event"]["text"] for e in transcript["events"] if e["type"] == "text"] == ["one", "two"]
    # the new session continues from the carried conversation (two assistant turns seen: "C")
    assert await _answer(served, new_sid, "q3") == "C"
    # the source is unchanged and continues on its own
    assert (await served.get(f"/v1/sessions/{sid}"))["runs"] == runs
    assert await _answer(served, sid, "q3") == "three"


async def test_replay_refusals(served: Served, db_url: str) -> None:
    sid, _ = await _conversation(served, 1)
    resp = await served.client.post("/v1/sessions/s_nope/replay", json={"agent": "other"})
    assert resp.status_code == 404 and resp.json()["code"] == "session_not_found", resp.text
    resp = await served.client.post(f"/v1/sessions/{sid}/replay", json={"agent": "nobody"})
    assert resp.status_code == 409 and resp.json()["code"] == "agent_gone", resp.text
    for body in ({}, {"agent": ""}, {"agent": "other", "colour": "red"}, {"agent": "other", "compress": "maybe"}):
        resp = await served.client.post(f"/v1/sessions/{sid}/replay", json=body)
        assert resp.status_code == 422, (body, resp.text)
    async with await psycopg.AsyncConnection.connect(db_url) as conn:
        await conn.execute(
            "INSERT INTO sessions (id, tenant_id, agent) VALUES ('s_empty_src', 'default', 'script')"
            " ON CONFLICT DO NOTHING"
        )
    resp = await served.client.post("/v1/sessions/s_empty_src/replay", json={"agent": "other"})
    assert resp.status_code == 400 and resp.json()["code"] == "empty_source", resp.text


async def test_replay_compress_carries_a_summary(served: Served, db_url: str) -> None:
    sid, _ = await _conversation(served, 3)
    out = await served.post(f"/v1/sessions/{sid}/replay", {"agent": "compact", "compress": True})
    assert out["compacted"] is True and out["events_copied"] == 6, out
    rows = await _events(
        db_url, "SELECT seq, type, payload FROM events WHERE run_id = %s ORDER BY seq", out["seed_run_id"]
    )
    assert [r[1] for r in rows][-2:] == ["context_compaction", "done"]
    marker = rows[-2][2]
    assert marker["summary"].startswith("summary of") and marker["keep_n"] == 2 and marker["keep_first"] is True
    # what the next turn sees: [task + summary, ack] + the last exchange — two assistant turns
    history = history_messages([(r[0], r[1], r[2]) for r in rows])
    assert len(history) == 4 and "q1" in history[0].text() and "summary of" in history[0].text()
    assert [m.text() for m in history[2:]] == ["q3", "three"]
    assert await _answer(served, out["new_session_id"], "q4") == "C"
    # a summary that fails: 502, and no session is left behind
    before = await _events(db_url, "SELECT count(*) FROM sessions")
    resp = await served.client.post(f"/v1/sessions/{sid}/replay", json={"agent": "broken", "compress": True})
    assert resp.status_code == 502, resp.text
    assert await _events(db_url, "SELECT count(*) FROM sessions") == before
