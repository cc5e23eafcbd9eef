"""A chunk edit survives kill -9 (issue 41): a real `treadle serve` is SIGKILLed while an agent's
update_chunk sits inside its step's commit (a trigger that sleeps holds the UPDATE; the test waits
until Postgres reports the backend in that sleep). The edit rolled back with the step; after the
restart the step is taken over and applies it once — revision 2, one body revision, one
tool_result, not refused as stale by its own earlier attempt."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.support.chaos import Replica, write_config
from tests.support.e2e import check_paired, execute, query, slow_trigger
from treadle.testing import ACCEPT_JSON, until

pytestmark = pytest.mark.e2e

ENV = {"TREADLE_SWEEP_INTERVAL_SECONDS": "0.3", "TREADLE_LEASE_SECONDS": "2", "TREADLE_REQUEUE_AFTER_SECONDS": "3"}
SLEEPING = "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND datname = current_database()"


async def test_an_edit_killed_inside_its_commit_lands_once_after_the_restart(
    migrated_db_url: str, tmp_path: Path
) -> None:
    db, cfg = migrated_db_url, tmp_path / "treadle.yaml"
    write_config(cfg, {"agents": {"echo": {"model": "echo"}}})
    srv = Replica(name="docs", database_url=db, config_path=cfg, workdir=tmp_path, env=ENV)
    srv.start()
    try:
        await srv.wait_ready()
        async with httpx.AsyncClient(headers=ACCEPT_JSON, timeout=60) as c:
            base, browse = srv.url, {"scope_id": "editor"}
            made = (
                await c.post(
                    f"{base}/v1/_document",
                    params=browse,
                    json={"op": "create_document", "scope": "agent", "title": "Board"},
                )
            ).json()
            chunk = (
                await c.post(
                    f"{base}/v1/_document",
                    params=browse,
                    json={
                        "op": "create_chunk",
                        "scope": "agent",
                        "document_id": made["document_id"],
                        "title": "c",
                        "body": "first",
                    },
                )
            ).json()
            srv.stop()
            edit = {"op": "update_chunk", "scope": "agent", "id": chunk["id"], "revision": 1, "body": "by editor"}
            write_config(
                cfg,
                {
                    "agents": {
                        "editor": {
                            "model": "script",
                            "tools": ["Document"],
                            "mock": {"script": [{"tool": "Document", "input": edit}, {"text": "done"}]},
                        }
                    }
                },
            )
            await execute(db, slow_trigger("doc_slow_edit", 4, "UPDATE ON chunks", when="NEW.revision > OLD.revision"))
            await srv.restart()
            base = srv.url
            r = await c.post(f"{base}/v1/runs", json={"agent": "editor", "prompt": "edit"})
            assert r.status_code == 202, r.text
            run_id = r.json()["run_id"]

            async def in_commit() -> bool:
                return bool((await query(db, SLEEPING))[0]["n"] >= 1)

            await until(in_commit, timeout=30, interval=0.05, what="the edit inside its slow UPDATE")
            srv.kill9()
            await execute(db, "DROP TRIGGER doc_slow_edit ON chunks")
            [row] = await query(db, "SELECT revision, body FROM chunks WHERE id = %s", (chunk["id"],))
            assert (row["revision"], row["body"]) == (1, "first")  # rolled back with the step

            await srv.restart()
            base = srv.url

            async def ended() -> bool:
                [run] = await query(db, "SELECT status FROM runs WHERE id = %s", (run_id,))
                return bool(run["status"] in ("completed", "failed"))

            await until(ended, timeout=60, interval=0.1, what="the run after the restart")
            events = (await c.get(f"{base}/v1/runs/{run_id}/events")).json()["events"]
            assert check_paired(events) == []
            results = [e for e in events if e["type"] == "tool_result"]
            assert len(results) == 1 and not results[0]["is_error"], results
            assert json.loads(results[0]["text"])["revision"] == 2
            got = (
                await c.post(
                    f"{base}/v1/_document", params=browse, json={"op": "history", "scope": "agent", "id": chunk["id"]}
                )
            ).json()
            assert [h["revision"] for h in got["revisions"]] == [2, 1]
            [row] = await query(db, "SELECT revision, body FROM chunks WHERE id = %s", (chunk["id"],))
            assert (row["revision"], row["body"]) == (2, "by editor")
    finally:
        srv.stop()
