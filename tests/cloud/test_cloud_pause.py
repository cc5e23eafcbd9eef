"""The runtime's pause in the cloud shape (issue 36 item 2): the api function declares the pause and
waits while two worker environments (every SQS batch delivered to both) step the runs; each run
parks at an iteration boundary (never between a tool_use and its result), the queue drains and
nothing more is taken, new runs answer 503 `runtime_paused`, and the resume re-enqueues each run
on SQS, where it goes on where it was and finishes with every tool call once."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg

from tests.cloud.test_cloud_path import (
    all_terminal,
    assert_exactly_once,
    call,
    envs,
    events_of,
    queue_is_empty,
    start_run,
)
from tests.support.e2e import check_paired
from tests.support.lambda_sim import EventSourceMapping, LambdaEnv

__all__ = ["envs"]  # the fixture, shared with test_cloud_path


def _statuses(db: str, run_ids: list[str]) -> dict[str, str]:
    with psycopg.connect(db) as conn:
        rows = conn.execute("SELECT id, status FROM runs WHERE id = ANY(%s)", (run_ids,)).fetchall()
    return {r[0]: r[1] for r in rows}


def test_pause_quiesces_the_workers_and_resume_continues_every_run_on_sqs(
    envs: dict[str, LambdaEnv], sqs: Any, queue: dict[str, str], cloud_db: str
) -> None:
    api, api2 = envs["api"], envs["api#2"]
    esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [envs["worker"], envs["worker#2"]], duplicate=True)
    runs = [start_run(api, "calc") for _ in range(4)] + [start_run(api, "slow") for _ in range(2)]
    esm.poll_once()  # every run has taken a step or two: some are mid-way, none done
    with ThreadPoolExecutor(1) as pool:
        pausing = pool.submit(call, api, "POST", "/v1/_pause", {"timeout_ms": 60_000})
        esm.run_until(
            lambda: (
                set(_statuses(cloud_db, runs).values()) <= {"waiting", "completed"}
                and queue_is_empty(sqs, queue["url"])
            ),
            timeout_s=60,
        )
        status, out, _ = pausing.result(timeout=30)
    assert status == 200, out
    assert out["state"] == "paused" and out["force_cancelled_count"] == 0 and "warnings" not in out, out
    parked = [r for r, s in _statuses(cloud_db, runs).items() if s == "waiting"]
    assert parked and out["paused_runs_count"] == len(parked)
    for run_id in parked:
        events = events_of(api2, run_id)
        assert events[-1]["type"] == "runtime_paused", events[-1]
        assert check_paired(events) == []  # no tool_use without its result

    status, state, _ = call(api2, "GET", "/v1/_state")  # another api environment: the state is the database's
    assert status == 200 and state == {"state": "paused", "paused_runs_count": len(parked), "active_runs_count": 0}
    status, refused, _ = call(api2, "POST", "/v1/runs", {"agent": "calc", "prompt": "new"})
    assert status == 503 and refused["code"] == "runtime_paused", refused
    assert esm.poll_once() == 0  # nothing waits on SQS while paused

    status, resumed, _ = call(api, "POST", "/v1/_resume")
    assert status == 200 and resumed == {"state": "running", "resumed_runs_count": len(parked)}, resumed
    esm.run_until(lambda: all_terminal(cloud_db, runs), timeout_s=60)
    for run_id in runs:
        events = events_of(api, run_id)
        assert_exactly_once(events, 3 if run_id in runs[:4] else 2)
    assert sum(e["type"] == "runtime_paused" for r in parked for e in events_of(api, r)) == len(parked)
    assert call(api, "GET", "/v1/_state")[1] == {"state": "running", "paused_runs_count": 0, "active_runs_count": 0}
