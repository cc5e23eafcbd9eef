"""History op=recap survives kill -9 (issue 34): an agent's recap call (an external call: the
summary is a model call, outside the step's transaction) is SIGKILLed while the chat's agent
writes the summary. After the restart the run re-runs the call and completes: one tool_result for
the call, the chat's summary stored once."""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from tests.support.e2e import query
from treadle.client import TreadleClient
from treadle.testing import until

pytestmark = pytest.mark.e2e

TARGET = "s_recap_crash_" + secrets.token_hex(4)
AGENTS = {
    # the chat's agent: its summary call takes 1.5 s (the mock's latency), so the kill lands in it
    "chat": {"model": "echo", "mock": {"latency_ms": 1500}},
    "recapper": {
        "model": "script",
        "tools": ["History"],
        "history_scope": ["tenant"],
        "mock": {
            "script": [
                {"tool": "History", "input": {"op": "recap", "scope": "tenant", "session_id": TARGET}},
                {"text": "done"},
            ]
        },
    },
}
ENV = {"TREADLE_LEASE_SECONDS": "1.5", "TREADLE_SWEEP_INTERVAL_SECONDS": "0.3"}


async def _ended(url: str, run_id: str) -> bool:
    rows = await query(url, "SELECT status FROM runs WHERE id = %s", (run_id,))
    return bool(rows) and rows[0]["status"] in ("completed", "failed", "cancelled")


async def test_recap_survives_sigkill(make_db: Any, start_server: Any) -> None:
    url = make_db("recapcrash", migrated=True)
    srv = await start_server(url, AGENTS, name="recapcrash", **ENV)
    async with TreadleClient(srv.url, timeout=10) as client:
        chat = await client.start_run("chat", "the roof needs new tiles before winter", user_id="ada")
        await until(lambda: _ended(url, chat["run_id"]), timeout=30, interval=0.05, what="the chat")
        await query(url, "UPDATE runs SET session_id = %s WHERE session_id = %s", (TARGET, chat["session_id"]))
        await query(url, "UPDATE sessions SET id = %s WHERE id = %s", (TARGET, chat["session_id"]))
        recap = await client.start_run("recapper", "recap the roof chat", user_id="ada")

    async def calling() -> bool:
        rows = await query(
            url, "SELECT count(*) AS n FROM events WHERE run_id = %s AND type = 'tool_call'", (recap["run_id"],)
        )
        return int(rows[0]["n"]) == 1

    await until(calling, timeout=30, interval=0.01, what="the recap call to start")
    srv.kill9()
    summary = await query(url, "SELECT summary FROM sessions WHERE id = %s", (TARGET,))
    assert summary[0]["summary"] is None, "the kill landed after the summary was written"
    await srv.restart()
    await until(lambda: _ended(url, recap["run_id"]), timeout=60, interval=0.1, what="the recap run")
    rows = await query(url, "SELECT type, payload FROM events WHERE run_id = %s ORDER BY seq", (recap["run_id"],))
    results = [r["payload"] for r in rows if r["type"] == "tool_result"]
    assert len(results) == 1 and not results[0]["is_error"], results
    run = await query(url, "SELECT status FROM runs WHERE id = %s", (recap["run_id"],))
    assert run[0]["status"] == "completed"
    stored = await query(url, "SELECT summary FROM sessions WHERE id = %s", (TARGET,))
    assert stored[0]["summary"] and "before winter" in stored[0]["summary"], stored
