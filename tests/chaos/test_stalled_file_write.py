"""A stalled worker's late file write never undoes a later committed Edit — with real processes.

Replica A runs a Write and is SIGSTOPped for certain between journaling it (`volume_effects`) and
its rename: a trigger makes A's journal insert sleep (A only, by `PGAPPNAME`), and the test sends
SIGSTOP once pg_stat_activity shows A's session inside that sleep. Replica B then starts, sweeps
A's expired lease, re-runs the Write, commits it, runs the later Edit and the Read, and the run
completes. A is continued: its stale attempt must write nothing, and the file on the shared host
volume still holds the Edit (builtins/files/common.py: the fence is the committed result and the
conditional write). Without the fence A's rename lands START over the Edit, and the test fails.

The S3 adapter: `treadle serve` (the sidecar shape) writes volumes to a host directory only; S3
volumes are the cloud shape's (treadle_cloud/container.py). The same interleaving with a real
worker process on S3 (moto) is tests/cloud/test_cloud_stalled_write.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.chaos import Db, Replica, write_config
from tests.support.e2e import execute
from treadle.client import TreadleClient
from treadle.testing import until

pytestmark = pytest.mark.e2e

LEASE_S = 2.0
SLOW_S = 1.5
START = "title: draft\nend\n"
CONFIG = {
    "volumes": {"shared": {"mode": "rw", "default": True}},
    "agents": {"filer": {
        "model": "script", "tools": ["Write", "Edit", "Read"], "volumes": ["shared"],
        "mock": {"latency_ms": 50, "script": [
            {"tool": "Write", "input": {"path": "doc.md", "content": START}},
            {"tool": "Edit", "input": {"path": "doc.md", "old_string": "draft", "new_string": "final"}},
            {"tool": "Read", "input": {"path": "doc.md"}},
            {"text": "done"},
        ]},
    }},
}
ENV = {"TREADLE_LEASE_SECONDS": str(LEASE_S), "TREADLE_SWEEP_INTERVAL_SECONDS": "0.25",
       "TREADLE_REQUEUE_AFTER_SECONDS": "2", "TREADLE_WORKERS": "2", "TREADLE_CHAIN_STEPS": "1"}

# A's journal insert of the Write sleeps: A is frozen after journaling, before its rename
SLOW_JOURNAL = f"""
CREATE FUNCTION stalled_slow_journal() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('application_name') = 'replica-a' THEN
        PERFORM pg_sleep({SLOW_S});
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER stalled_slow_journal AFTER INSERT ON volume_effects
    FOR EACH ROW EXECUTE FUNCTION stalled_slow_journal();
"""


async def test_a_stalled_write_does_not_undo_a_later_edit(migrated_db_url: str, tmp_path: Path) -> None:
    db_url = migrated_db_url
    await execute(db_url, SLOW_JOURNAL)
    config = write_config(tmp_path / "treadle.yaml", CONFIG)
    # one workdir, so one TREADLE_HOME: both replicas write the same host volumes directory
    a, b = (Replica(name=n, database_url=db_url, config_path=config, workdir=tmp_path,
                    env={**ENV, "PGAPPNAME": f"replica-{n}"}) for n in ("a", "b"))
    db = Db(db_url)
    try:
        a.start()
        await a.wait_ready()
        async with TreadleClient(a.url, timeout=10) as client:
            run_id = (await client.start_run("filer", "write then edit"))["run_id"]

        async def a_in_journal() -> int | None:
            rows = await db.query("SELECT pid FROM pg_stat_activity WHERE application_name = 'replica-a'"
                                  " AND state = 'active' AND wait_event = 'PgSleep'"
                                  " AND strpos(query, 'volume_effects') > 0")
            return rows[0]["pid"] if rows else None

        await until(a_in_journal, timeout=30, interval=0.02, what="replica A inside the Write's journal insert")
        a.sigstop()
        assert await db.scalar("SELECT count(*) FROM events WHERE run_id = %s AND type = 'tool_result'",
                               (run_id,)) == 0, "A got past the Write before the stop"

        b.start()
        await b.wait_ready()

        async def completed() -> bool:
            rows = await db.query("SELECT status FROM runs WHERE id = %s", (run_id,))
            return bool(rows[0]["status"] == "completed")

        await until(completed, timeout=60, interval=0.1, what="replica B to re-run the Write and commit the Edit")
        files = list((tmp_path / ".treadle").rglob("doc.md"))
        assert len(files) == 1, files
        assert files[0].read_text() == "title: final\nend\n"
        read = await db.query("SELECT payload->>'text' AS text FROM events WHERE run_id = %s"
                              " AND type = 'tool_result' ORDER BY seq DESC LIMIT 1", (run_id,))
        assert "title: final" in read[0]["text"]

        # A resumes past its journal insert: its attempt must end without writing
        a.sigcont()

        async def a_attempt_over() -> bool:
            return bool(a.log_grep("FileChanged", "stale attempt", "lease"))

        await until(a_attempt_over, timeout=30, interval=0.1, what="replica A's stale attempt to end")
        assert files[0].read_text() == "title: final\nend\n", "A's late write undid the committed Edit"
        results = await db.scalar("SELECT count(*) FROM events WHERE run_id = %s AND type = 'tool_result'",
                                  (run_id,))
        assert results == 3, results
    finally:
        await db.close()
        for r in (a, b):
            r.stop()
