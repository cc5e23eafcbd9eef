"""File tools and an application tool under chaos, bounded: two `treadle serve` replicas on one
database and one volumes directory, a few dozen runs that Write, Edit (a replace_all whose new
text holds its old one), call an application tool the test answers over HTTP, Edit again and
Read; one replica is SIGKILLed (then restarted) and the other SIGSTOPped past its lease (then
continued) while the runs are in flight.

Every run must complete (no lost wake: an answer whose wake died with a replica is done by the
sweeper, and the test's retried answer wakes a run at once), and its final Read must show every
edit exactly once (no lost, doubled or undone file effect: a stalled worker's late write is
refused, builtins/files/common.py). TREADLE_CHAOS_FILE_RUNS sets how many runs (default 24)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path

import httpx
import pytest

from tests.support.chaos import Replica, write_config
from tests.support.e2e import check_paired, query

pytestmark = pytest.mark.e2e

N_RUNS = int(os.environ.get("TREADLE_CHAOS_FILE_RUNS") or 24)
LEASE_S = 2.0
START = "title: draft\nbeta\nend\n"
EXPECTED_READ = "     1\ttitle: final\n     2\tbeta beta\n     3\tthe end"
LOOKUP = {"name": "lookup_order", "description": "Look an order up",
          "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}}}}
CONFIG = {
    "volumes": {"scratch": {"mode": "rw", "ephemeral": True, "default": True}},
    "agents": {"filer": {
        "model": "script", "tools": ["Write", "Edit", "Read"], "volumes": ["scratch"],
        "mock": {"latency_ms": 300, "script": [
            {"tool": "Write", "input": {"path": "doc.md", "content": START}},
            {"tool": "Edit", "input": {"path": "doc.md", "old_string": "draft", "new_string": "final"}},
            {"tool": "Edit", "input": {"path": "doc.md", "old_string": "beta", "new_string": "beta beta",
                                       "replace_all": True}},
            {"tool": "lookup_order", "input": {"order_id": "A-17"}},
            {"tool": "Edit", "input": {"path": "doc.md", "old_string": "end", "new_string": "the end"}},
            {"tool": "Read", "input": {"path": "doc.md"}},
            {"text": "done"},
        ]},
    }},
}
ENV = {"TREADLE_LEASE_SECONDS": str(LEASE_S), "TREADLE_SWEEP_INTERVAL_SECONDS": "0.25",
       "TREADLE_REQUEUE_AFTER_SECONDS": "2", "TREADLE_WORKERS": "4", "TREADLE_CHAIN_STEPS": "1"}
TERMINAL = ("completed", "failed", "cancelled")


async def answer_waiting(db: str, replicas: list[Replica], answered: dict[str, int]) -> None:
    """Answer every parked application tool call through a live replica; a call still parked a
    while after its answer gets the same answer again (a client's retry)."""
    rows = await query(db, "SELECT run_id, tool_use_id FROM run_waits WHERE kind = 'client_tool'")
    live = [r for r in replicas if r.running and not r.stopped]
    for row in rows:
        key = f"{row['run_id']}/{row['tool_use_id']}"
        if not live or time.monotonic() - answered.get(key, -1e9) < 1.0:
            continue
        answered[key] = int(time.monotonic())
        srv = live[len(answered) % len(live)]
        with contextlib.suppress(httpx.HTTPError):
            async with httpx.AsyncClient(base_url=srv.url, timeout=5) as c:
                await c.post(f"/v1/runs/{row['run_id']}/tool_results",
                             json={"tool_use_id": row["tool_use_id"], "content": "shipped"})


async def tool_results(db: str) -> int:
    return int((await query(db, "SELECT count(*) AS n FROM events WHERE type = 'tool_result'"))[0]["n"])


async def test_file_and_application_tools_under_kill_and_stall(migrated_db_url: str, tmp_path: Path) -> None:
    db = migrated_db_url
    config = write_config(tmp_path / "treadle.yaml", CONFIG)
    a = Replica(name="a", database_url=db, config_path=config, workdir=tmp_path, env=ENV)
    b = Replica(name="b", database_url=db, config_path=config, workdir=tmp_path, env=ENV)
    replicas = [a, b]
    run_ids: list[str] = []
    answered: dict[str, int] = {}
    faults: list[str] = []
    base = await tool_results(db)
    for r in replicas:
        r.start()
    try:
        for r in replicas:
            await r.wait_ready()
        async with httpx.AsyncClient(base_url=a.url, timeout=10) as c:
            for i in range(N_RUNS):
                resp = await c.post("/v1/runs", json={"agent": "filer", "prompt": f"edit {i}",
                                                      "client_tools": [LOOKUP]})
                assert resp.status_code == 202, resp.text
                run_ids.append(resp.json()["run_id"])
        total = N_RUNS * 6
        plan = [("kill", total // 8), ("stop", total // 4), ("kill", total // 2), ("stop", 2 * total // 3)]
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            await answer_waiting(db, replicas, answered)
            done = await tool_results(db) - base
            if plan and done >= plan[0][1]:
                kind, _ = plan.pop(0)
                if kind == "kill":
                    a.kill9()
                    faults.append(f"kill a at {done}")
                    a.start()
                    await a.wait_ready()
                else:
                    b.sigstop()
                    faults.append(f"stop b at {done}")
                    await asyncio.sleep(LEASE_S * 2.5)  # past its lease: a takes its runs over
                    await answer_waiting(db, replicas, answered)
                    b.sigcont()
            rows = await query(db, "SELECT count(*) AS n FROM runs WHERE id = ANY(%s) AND status = ANY(%s)",
                               (run_ids, list(TERMINAL)))
            if rows[0]["n"] == N_RUNS:
                break
            await asyncio.sleep(0.1)
    finally:
        for r in replicas:
            if r.stopped:
                r.sigcont()
            r.stop()

    runs = await query(db, "SELECT id, status, stop_reason FROM runs WHERE id = ANY(%s)", (run_ids,))
    unfinished = [r for r in runs if r["status"] != "completed"]
    assert not unfinished, (f"{len(unfinished)} run(s) not completed (lost wakes?) {unfinished[:5]} {faults}",
                            a.log_tail(), b.log_tail())
    wrong = []
    for run_id in run_ids:
        events = await query(db, "SELECT seq, type, payload, tool_use_id FROM events WHERE run_id = %s ORDER BY seq",
                             (run_id,))
        results = [e["payload"] for e in events if e["type"] == "tool_result"]
        texts = [r["text"] for r in results]
        if [r["is_error"] for r in results] != [False] * 6 or texts[-1] != EXPECTED_READ or texts[3] != "shipped":
            wrong.append((run_id, texts))
        paired = check_paired([{"seq": e["seq"], "type": e["type"], "_tuid": e["tool_use_id"], **e["payload"]}
                               for e in events])
        if paired:
            wrong.append((run_id, paired))
    assert not wrong, (f"{len(wrong)} of {N_RUNS} runs with a lost, doubled or undone effect: {wrong[:3]}", faults)
    print(f"{N_RUNS} runs completed, every effect once; faults: {faults}")
