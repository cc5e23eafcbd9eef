"""Fork in the cloud shape (issue 36 item 4): the api function forks a finished run mid-way; the
fork's steps go through moto SQS to two worker environments (every batch delivered twice) and it
finishes what the original's history left: the mock tool-caller makes only the calls it has not
seen yet."""

from __future__ import annotations

from typing import Any

import psycopg

from tests.cloud.test_cloud_path import all_terminal, call, envs, events_of, start_run
from tests.support.e2e import check_paired
from tests.support.lambda_sim import EventSourceMapping, LambdaEnv

__all__ = ["envs"]  # the fixture, shared with test_cloud_path


def test_a_fork_of_a_finished_run_continues_on_sqs(
    envs: dict[str, LambdaEnv], sqs: Any, queue: dict[str, str], cloud_db: str
) -> None:
    api = envs["api"]
    esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [envs["worker"], envs["worker#2"]], duplicate=True)
    original = start_run(api, "calc")  # three Memory calls
    esm.run_until(lambda: all_terminal(cloud_db, [original]), timeout_s=60)
    events = events_of(api, original)
    first_result = next(e["seq"] for e in events if e["type"] == "tool_result")
    code, fork, _ = call(api, "POST", f"/v1/runs/{original}/fork", {"at_seq": first_result, "prompt": "go on"})
    assert code == 202 and fork["at_seq"] == first_result, fork
    esm.run_until(lambda: all_terminal(cloud_db, [fork["run_id"]]), timeout_s=60)
    fevents = events_of(api, fork["run_id"])
    assert check_paired(fevents) == [] and fevents[-1]["type"] == "done"
    assert sum(e["type"] == "tool_call" for e in fevents) == 2  # it saw the first call in its history
    assert [e["text"] for e in fevents if e["type"] == "text"] == ["done after 3 tool calls"]


def test_a_replay_fork_answers_from_the_record_on_sqs(
    envs: dict[str, LambdaEnv], sqs: Any, queue: dict[str, str], cloud_db: str
) -> None:
    """`mode: replay` in the cloud shape: the same agent asked the same turn again makes the same
    three Memory calls, each answered from the original's results — the counter is not written."""
    api = envs["api"]
    esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [envs["worker"], envs["worker#2"]], duplicate=True)
    original = start_run(api, "calc")
    esm.run_until(lambda: all_terminal(cloud_db, [original]), timeout_s=60)
    recorded = [e for e in events_of(api, original) if e["type"] == "tool_result"]
    before = _calls(cloud_db)
    code, fork, _ = call(api, "POST", f"/v1/runs/{original}/fork", {"at_seq": 1, "mode": "replay"})
    assert code == 202 and fork["mode"] == "replay", fork
    esm.run_until(lambda: all_terminal(cloud_db, [fork["run_id"]]), timeout_s=60)
    fevents = events_of(api, fork["run_id"])
    assert check_paired(fevents) == [] and fevents[-1]["type"] == "done"
    results = [e for e in fevents if e["type"] == "tool_result"]
    assert [e["text"] for e in results] == [e["text"] for e in recorded]
    assert [e["replayed"] for e in results] == [{"run_id": original, "seq": e["seq"]} for e in recorded]
    assert _calls(cloud_db) == before  # nothing written again


def _calls(db: str) -> Any:
    with psycopg.connect(db) as conn:
        row = conn.execute("SELECT value FROM memory WHERE key = 'calls' AND scope_id = 'calc'").fetchone()
    assert row is not None
    return row[0]
