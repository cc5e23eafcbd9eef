"""Snapshots between the shapes (issue 36 item 3): a sidecar's snapshot (a run ended, one queued, one
mid-way, one parked on its question) restores into the local cloud (the api function; moto SQS; two
worker environments, every batch delivered twice), where every run finishes — the parked one once
answered through the api function — and a snapshot of the cloud restores back into a sidecar,
where its parked run goes on the same way."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.cloud.test_cloud_path import all_terminal, call, envs, events_of, start_run
from tests.support.db import clone_database, drop_database
from tests.support.e2e import check_paired
from tests.support.lambda_sim import EventSourceMapping, LambdaEnv
from tests.support.localcloud import AGENTS
from tests.support.tenancy import api as sidecar_api
from tests.support.waiting import answer, status
from tests.waiting.test_snapshots import source_with_runs_in_every_state

__all__ = ["envs"]  # the fixture, shared with test_cloud_path


def _pending_interrupt(db: str, run_id: str) -> str:
    with psycopg.connect(db) as conn:
        row = conn.execute("SELECT id FROM interrupts WHERE run_id = %s AND status = 'pending'", (run_id,)).fetchone()
    assert row is not None
    return str(row[0])


def _statuses(db: str, run_ids: list[str]) -> dict[str, str]:
    with psycopg.connect(db) as conn:
        return dict(conn.execute("SELECT id, status FROM runs WHERE id = ANY(%s)", (run_ids,)).fetchall())


@pytest.fixture
def back_db(server_url: str, migrated_template: str) -> Iterator[str]:
    """The sidecar's database the cloud's snapshot goes back to (requested before `open_runtime`,
    so dropped after the runtime on it closed)."""
    url = clone_database(server_url, migrated_template, "snapback")
    yield url
    drop_database(server_url, url)


async def test_a_sidecar_snapshot_finishes_in_the_cloud_and_a_cloud_snapshot_back_in_a_sidecar(
    back_db: str,
    open_runtime: Any,
    migrated_db_url: str,
    envs: dict[str, LambdaEnv],
    sqs: Any,
    queue: dict[str, str],
    cloud_db: str,
) -> None:
    src, _disp, runs = await source_with_runs_in_every_state(open_runtime, migrated_db_url, looper="calc")
    async with sidecar_api(src) as c:
        snap = (await c.post("/v1/_snapshots", json={"label": "to the cloud", "include_history": True})).json()
        doc = (await c.get(f"/v1/_snapshots/{snap['id']}/export")).json()

    api = envs["api"]
    esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [envs["worker"], envs["worker#2"]], duplicate=True)
    code, out, _ = call(api, "POST", "/v1/_snapshots/any/restore", {"json": doc, "include_history": True})
    assert code == 200, out
    assert out["restored"]["runs"] == 4 and out["paused_runs_restored"] == 1 and out["paused_runs_resumed"] == 2
    ids = list(runs.values())
    esm.run_until(lambda: all_terminal(cloud_db, [runs["queued"], runs["midway"]]), timeout_s=60)
    assert _statuses(cloud_db, [runs["parked"]]) == {runs["parked"]: "waiting"}
    iid = _pending_interrupt(cloud_db, runs["parked"])
    code, out, _ = call(api, "POST", f"/v1/runs/{runs['parked']}/interrupts/{iid}/resolve", {"answer": "yes"})
    assert code == 200, out
    esm.run_until(lambda: all_terminal(cloud_db, ids), timeout_s=60)
    assert set(_statuses(cloud_db, ids).values()) == {"completed"}
    for run_id in ids:
        events = events_of(api, run_id)
        assert check_paired(events) == [] and [e["type"] for e in events].count("done") == 1, run_id
    mid = events_of(api, runs["midway"])
    assert [e["iteration"] for e in mid if e["type"] == "tool_call"] == [1, 2, 3]  # went on where it was

    # and back: a run parked in the cloud, a snapshot of it, restored into a sidecar of its own
    parked = start_run(api, "asker")
    esm.run_until(lambda: _statuses(cloud_db, [parked]) == {parked: "waiting"}, timeout_s=60)
    code, snap, _ = call(api, "POST", "/v1/_snapshots", {"label": "and back"})
    assert code == 201, snap
    code, cloud_doc, hdrs = call(api, "GET", f"/v1/_snapshots/{snap['id']}/export")
    assert code == 200 and hdrs["content-disposition"] == f'attachment; filename="{snap["id"]}.json"'
    assert [r["id"] for r in cloud_doc["sections"]["runs"]["entries"]] == [parked]  # ended runs: no history asked
    dst, disp = await open_runtime({"asker": AGENTS["asker"]}, url=back_db)
    async with sidecar_api(dst) as c:
        r = await c.post("/v1/_snapshots/any/restore", json={"json": cloud_doc})
        assert r.status_code == 200 and r.json()["paused_runs_restored"] == 1, r.text
        await disp.drain()
        assert await status(dst, parked) == "waiting"  # parked on the same question
        await answer(dst, parked, "yes")
        await disp.drain()
        assert await status(dst, parked) == "completed"
        events = (await c.get(f"/v1/runs/{parked}/events")).json()["events"]
        assert check_paired(events) == [] and events[-1]["type"] == "done"
