"""Memory `add` with `infer` survives kill -9 (issue 41 item 4): a real `treadle serve` is
SIGKILLed while the facts the model extracted are being written (a trigger that sleeps holds the
second fact's INSERT; the test waits until Postgres reports the backend in that sleep). `add` runs
outside the step's transaction (a model call must not hold it open), so the first fact may
outlive the kill; after the restart the step is taken over, the model asked again, and each fact
is written under the digest of its text — three facts, none twice, one tool_result."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.support.chaos import Replica, write_config
from tests.support.e2e import check_paired, execute, query
from treadle.testing import ACCEPT_JSON, until

pytestmark = pytest.mark.e2e

ENV = {"TREADLE_SWEEP_INTERVAL_SECONDS": "0.3", "TREADLE_LEASE_SECONDS": "2", "TREADLE_REQUEUE_AFTER_SECONDS": "3"}
SLEEPING = "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND datname = current_database()"
SAID = "I prefer dark mode in every editor. I live in Berlin with my cat. My team ships on Thursdays."
FACTS = ("SELECT key, value, provenance FROM memory WHERE scope = 'agent' AND scope_id = 'rememberer'"
         " AND key LIKE 'fact:%%'")


async def test_an_infer_add_killed_inside_its_commit_lands_once_after_the_restart(
    migrated_db_url: str, tmp_path: Path
) -> None:
    db, cfg = migrated_db_url, tmp_path / "treadle.yaml"
    add = {"op": "add", "scope": "agent", "messages": [{"role": "user", "content": SAID}]}
    write_config(cfg, {"agents": {"rememberer": {
        "model": "script", "tools": ["Memory"], "memory_scopes": ["agent"],
        "mock": {"script": [{"tool": "Memory", "input": add}, {"text": "done"}]}}}})
    # the second fact's INSERT sleeps: the kill falls between two facts of one add, every time
    # (the function then stays, inert: the trigger is dropped after the kill)
    await execute(db, """
CREATE FUNCTION mem_slow_fact() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM memory m WHERE m.key LIKE 'fact:%' AND m.scope_id = NEW.scope_id) THEN
        PERFORM pg_sleep(4);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER mem_slow_fact BEFORE INSERT ON memory FOR EACH ROW WHEN (NEW.key LIKE 'fact:%')
    EXECUTE FUNCTION mem_slow_fact();""")
    srv = Replica(name="memadd", database_url=db, config_path=cfg, workdir=tmp_path, env=ENV)
    srv.start()
    try:
        await srv.wait_ready()
        async with httpx.AsyncClient(headers=ACCEPT_JSON, timeout=60) as c:
            r = await c.post(f"{srv.url}/v1/runs", json={"agent": "rememberer", "prompt": "remember"})
            assert r.status_code == 202, r.text
            run_id = r.json()["run_id"]

            async def in_commit() -> bool:
                return bool((await query(db, SLEEPING))[0]["n"] >= 1)

            await until(in_commit, timeout=30, interval=0.05, what="the add inside its second fact's INSERT")
            srv.kill9()
            await execute(db, "DROP TRIGGER mem_slow_fact ON memory")
            assert len(await query(db, FACTS)) == 1  # the first fact, committed on its own

            await srv.restart()

            async def ended() -> bool:
                [run] = await query(db, "SELECT status FROM runs WHERE id = %s", (run_id,))
                return bool(run["status"] in ("completed", "failed"))

            await until(ended, timeout=60, interval=0.1, what="the run after the restart")
            events = (await c.get(f"{srv.url}/v1/runs/{run_id}/events")).json()["events"]
            assert check_paired(events) == []
            results = [e for e in events if e["type"] == "tool_result"]
            assert len(results) == 1 and not results[0]["is_error"], results
            added = json.loads(results[0]["text"])
            rows = await query(db, FACTS)
            assert sorted(r["value"] for r in rows) == sorted(f["memory"] for f in added["facts"])
            assert len(rows) == 3 and len({r["key"] for r in rows}) == 3
            assert {r["provenance"]["source_run_id"] for r in rows} == {run_id}
    finally:
        srv.stop()
