"""Resident sub-agents in the cloud shape (issue 36 item 1): the api function starts a run that
opens two residents and sends to one, the worker function steps every run from SQS (each turn's end
wakes the parked parent through SQS), `GET /v1/_resident` lists them from another api environment,
`POST /v1/_resident/{id}/close` ends one, the maintenance function closes the other at its idle TTL
(the clocks are moved, nothing sleeps), and the parent's cancel takes what is left."""

from __future__ import annotations

import json
from typing import Any

import psycopg

from tests.cloud.test_cloud_path import all_terminal, call, envs, events_of, queue_is_empty, start_run
from tests.support.lambda_sim import EventSourceMapping, LambdaEnv

__all__ = ["envs"]  # the fixture, shared with test_cloud_path


def _status(db: str, run_id: str) -> str:
    with psycopg.connect(db) as conn:
        row = conn.execute("SELECT status FROM runs WHERE id = %s", (run_id,)).fetchone()
    assert row is not None
    return str(row[0])


def test_residents_on_sqs_list_close_and_idle_ttl(
    envs: dict[str, LambdaEnv], sqs: Any, queue: dict[str, str], cloud_db: str
) -> None:
    api, api2, maintenance = envs["api"], envs["api#2"], envs["maintenance"]
    esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [envs["worker"], envs["worker#2"]], duplicate=True)
    parent = start_run(api, "holder")
    esm.run_until(lambda: _status(cloud_db, parent) == "waiting" and queue_is_empty(sqs, queue["url"])
                  and any(e["type"] == "interruption_pending" for e in events_of(api, parent)), timeout_s=60)
    results = [json.loads(e["text"]) for e in events_of(api, parent) if e["type"] == "tool_result"]
    first, second, sent = results
    assert first["state"] == second["state"] == sent["state"] == "awaiting_input"
    assert (first["output"], second["output"], sent["output"]) == ("hello", "ping", "pong")
    assert sent["child_run_id"] == second["child_run_id"]

    status, listed, _ = call(api2, "GET", "/v1/_resident")
    assert status == 200, listed
    by_id = {r["child_run_id"]: r for r in listed["resident"]}
    assert set(by_id) == {first["child_run_id"], second["child_run_id"]}
    assert {r["state"] for r in by_id.values()} == {"awaiting_input"}
    assert by_id[first["child_run_id"]]["idle_ttl_seconds"] == 60
    assert all(r["parent_run_id"] == parent for r in by_id.values())

    status, closed, _ = call(api2, "POST", f"/v1/_resident/{second['child_run_id']}/close")
    assert status == 200 and closed == {"run_id": second["child_run_id"], "closed": True}, closed
    esm.run_until(lambda: _status(cloud_db, second["child_run_id"]) == "cancelled", timeout_s=30)
    status, missing, _ = call(api, "POST", "/v1/_resident/r_nope/cancel")
    assert status == 404 and missing["code"] == "resident_not_found", missing

    # 61 s go by: the maintenance function closes the first at its TTL; its cancel goes over SQS
    with psycopg.connect(cloud_db) as conn:
        conn.execute("UPDATE resident_children SET last_used_at = last_used_at - interval '61 s' WHERE run_id = %s",
                     (first["child_run_id"],))
        conn.execute("UPDATE runs SET updated_at = updated_at - interval '61 s' WHERE id = %s",
                     (first["child_run_id"],))
    maintenance.invoke({"source": "aws.scheduler"})
    esm.run_until(lambda: _status(cloud_db, first["child_run_id"]) == "cancelled", timeout_s=30)
    status, listed, _ = call(api, "GET", "/v1/_resident", query="include_closed=true")
    assert status == 200, listed
    reasons = {r["child_run_id"]: r.get("close_reason") for r in listed["resident"]}
    assert reasons == {first["child_run_id"]: "idle timeout", second["child_run_id"]: "closed by operator"}
    assert call(api, "GET", "/v1/_resident")[1] == {"resident": []}

    status, _, _ = call(api, "POST", f"/v1/runs/{parent}/cancel", {"reason": "enough", "scope": "run"})
    assert status == 200
    esm.run_until(lambda: all_terminal(cloud_db, [parent]), timeout_s=30)
