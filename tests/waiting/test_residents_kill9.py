"""A real `treadle serve` is SIGKILLed while a resident sub-agent is mid-turn on its parent's send:
the parent parked on the send, the child's model call in flight. After a restart (the dead worker's
lease runs out: the clock is moved, nothing sleeps for it) the child's turn runs again, ends,
wakes the parent, and everything happened once: one queued input, one user turn in the child,
one result per call in the parent, and the second resident that sat parked throughout stays parked
until the parent's end closes it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.chaos import Replica, write_config
from tests.support.db import clone_database, drop_database
from tests.support.e2e import execute, query
from treadle.testing import ACCEPT_JSON, until

pytestmark = pytest.mark.e2e

CHILD = "$result.child_run_id"
CONFIG = {"agents": {
    "holder": {"model": "script", "tools": ["Agent"], "mock": {"script": [
        {"tool": "Agent", "input": {"op": "open", "name": "echo", "prompt": "idle one"}},
        {"tool": "Agent", "input": {"op": "open", "name": "slow", "prompt": "hello"}},
        {"tool": "Agent", "input": {"op": "send", "child_run_id": CHILD, "prompt": "pong"}},
        {"text": "done"}]}},
    "echo": {"model": "echo"},
    # its model takes 1.5 s: the kill lands while a turn is in flight
    "slow": {"model": "echo", "mock": {"latency_ms": 1500}},
}}


@pytest.fixture
def db(server_url: str, migrated_template: str) -> Iterator[str]:
    url = clone_database(server_url, migrated_template, "residentkill")
    yield url
    drop_database(server_url, url)


async def one(db: str, sql: str, *args: object) -> dict[str, object] | None:
    rows = await query(db, sql, args)
    return rows[0] if rows else None


async def test_a_kill_mid_turn_of_a_send_loses_nothing_and_repeats_nothing(db: str, tmp_path: Path) -> None:
    srv = Replica(name="rk", database_url=db, config_path=write_config(tmp_path / "treadle.yaml", CONFIG),
                  workdir=tmp_path, env={"TREADLE_SWEEP_INTERVAL_SECONDS": "0.5"})
    srv.start()
    try:
        await srv.wait_ready()
        async with httpx.AsyncClient(headers=ACCEPT_JSON, base_url=srv.url, timeout=30) as c:
            r = await c.post("/v1/runs", json={"agent": "holder", "prompt": "go"})
            assert r.status_code == 202, r.text
            parent = r.json()["run_id"]

            async def send_in_flight() -> str | None:
                """The slow child's id once it took the send's input and holds a lease on its turn."""
                row = await one(db, "SELECT c.id FROM runs c JOIN events e ON e.run_id = c.id"
                                " WHERE c.parent_run_id = %s AND c.agent = 'slow' AND e.type = 'user_input'"
                                " AND e.payload ? 'input_id' AND c.lease_owner IS NOT NULL"
                                " AND NOT EXISTS (SELECT 1 FROM events a WHERE a.run_id = c.id"
                                " AND a.type = 'awaiting_input' AND a.seq > e.seq)", parent)
                return str(row["id"]) if row else None

            slow = await until(send_in_flight, timeout=30, interval=0.02, what="the send's turn to be in flight")
            srv.kill9()
        run = await one(db, "SELECT status FROM runs WHERE id = %s", parent)
        assert run is not None and run["status"] == "waiting"  # parked on the send
        [idle] = [r["id"] for r in await query(db, "SELECT id FROM runs WHERE parent_run_id = %s AND agent = 'echo'",
                                               (parent,))]
        # the dead worker's lease runs out (moved, not waited for)
        await execute(db, f"UPDATE runs SET lease_until = now() - interval '1 second' WHERE id = '{slow}'")
        srv.start()
        await srv.wait_ready()

        async def completed() -> bool:
            row = await one(db, "SELECT status FROM runs WHERE id = %s", parent)
            return row is not None and row["status"] == "completed"

        await until(completed, timeout=30, interval=0.05, what="the parent to complete after the restart")

        async def closed() -> bool:
            rows = await query(db, "SELECT status FROM runs WHERE parent_run_id = %s", (parent,))
            return {r["status"] for r in rows} == {"cancelled"}

        await until(closed, timeout=15, interval=0.05, what="the parent's end to close its residents")
    finally:
        srv.stop()
    results = [json.loads(r["payload"]["text"]) for r in await query(
        db, "SELECT payload FROM events WHERE run_id = %s AND type = 'tool_result' ORDER BY seq", (parent,))]
    assert [r["state"] for r in results] == ["awaiting_input"] * 3
    assert [r["output"] for r in results] == ["idle one", "hello", "pong"]
    child_events = await query(db, "SELECT type, payload FROM events WHERE run_id = %s ORDER BY seq", (slow,))
    steered = [e for e in child_events if e["type"] == "user_input" and "input_id" in e["payload"]]
    assert len(steered) == 1
    assert [e["payload"]["text"] for e in child_events if e["type"] == "text"] == ["hello", "pong"]
    assert len(await query(db, "SELECT id FROM run_inputs WHERE run_id = %s", (slow,))) == 1
    reasons = await query(db, "SELECT close_reason FROM resident_children WHERE parent_run_id = %s", (parent,))
    assert {r["close_reason"] for r in reasons} == {"parent run ended"}
    assert idle != slow
