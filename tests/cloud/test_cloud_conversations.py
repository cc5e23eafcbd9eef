"""Sessions and compaction in the cloud shape (issue 34): the API function continues a session,
SQS-driven worker invocations step the runs (every message delivered twice), the continuation
reads its session's history in place, auto-compaction commits its event once per iteration and
the replay of the transcript keeps every tool_use beside its tool_result; a manual compaction of
an ended run appends the marker (or is a noop on a short one); a replayed session continues."""

from __future__ import annotations

from collections import Counter
from typing import Any

from tests.cloud.test_cloud_path import all_terminal, call, envs, events_of
from tests.support.lambda_sim import EventSourceMapping, LambdaEnv
from tests.unit.test_replay import assert_pairing
from treadle.engine.replay import replay

__all__ = ["envs"]  # the fixture, shared with test_cloud_path


def test_a_session_continues_and_a_long_run_compacts(
    envs: dict[str, LambdaEnv], sqs: Any, queue: dict[str, str], cloud_db: str
) -> None:
    api = envs["api"]
    esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [envs["worker"], envs["worker#2"]], duplicate=True)
    status, first, _ = call(api, "POST", "/v1/runs", {"agent": "convo", "prompt": "hi", "user_id": "ada"})
    assert status == 202, first
    long_status, long_run, _ = call(api, "POST", "/v1/runs", {"agent": "long", "prompt": "the task"})
    assert long_status == 202, long_run
    esm.run_until(lambda: all_terminal(cloud_db, [first["run_id"], long_run["run_id"]]), timeout_s=90)
    sid = first["session_id"]
    status, second, _ = call(api, "POST", f"/v1/sessions/{sid}/messages", {"prompt": "and?"})
    assert status == 202 and second["session_id"] == sid, second
    status, busy, _ = call(api, "POST", f"/v1/sessions/{sid}/messages", {"prompt": "again"})
    assert status == 409 and busy["code"] == "session_busy"
    esm.run_until(lambda: all_terminal(cloud_db, [second["run_id"]]), timeout_s=60)
    assert [e["text"] for e in events_of(api, second["run_id"]) if e["type"] == "text"] == ["two"]
    status, transcript, _ = call(api, "GET", f"/v1/sessions/{sid}/transcript")
    assert status == 200
    assert [e["event"]["text"] for e in transcript["events"] if e["type"] == "text"] == ["one", "two"]

    # loomcycle's replay: a new session seeded with the conversation (one statement in the API
    # function), continued by the workers like any session; compress summarizes in the API function
    status, seeded, _ = call(api, "POST", f"/v1/sessions/{sid}/replay", {"agent": "convo"})
    assert status == 200 and seeded["events_copied"] == 4 and not seeded["compacted"], seeded
    status, third, _ = call(api, "POST", f"/v1/sessions/{seeded['new_session_id']}/messages", {"prompt": "so?"})
    assert status == 202, third
    esm.run_until(lambda: all_terminal(cloud_db, [third["run_id"]]), timeout_s=60)
    assert [e["text"] for e in events_of(api, third["run_id"]) if e["type"] == "text"] == ["three"]
    status, squeezed, _ = call(api, "POST", f"/v1/sessions/{sid}/replay", {"agent": "long", "compress": True})
    assert status == 200 and squeezed["compacted"], squeezed
    assert events_of(api, squeezed["seed_run_id"])[-2]["type"] == "context_compaction"
    # History op=recap: the API function summarizes the chat with its agent's model and stores it
    status, recapped, _ = call(api, "POST", "/v1/_history", {"op": "recap", "session_id": sid})
    assert status == 200 and recapped["summary"].startswith("summary of"), recapped
    status, session, _ = call(api, "GET", f"/v1/sessions/{sid}")
    assert status == 200 and session["summary"] == recapped["summary"]

    events = events_of(api, long_run["run_id"])
    marks = Counter(e["iteration"] for e in events if e["type"] == "context_compaction")
    assert marks and max(marks.values()) == 1, marks
    stored = [(e["seq"], e["type"], {k: v for k, v in e.items() if k not in ("seq", "type", "ts")}) for e in events]
    assert_pairing(replay(stored).messages)

    status, compacted, _ = call(api, "POST", f"/v1/runs/{second['run_id']}/compact", {})
    assert status == 200 and compacted["applied"] == "noop", compacted  # 4 messages, keep_last_n 4
    status, compacted, _ = call(api, "POST", f"/v1/runs/{long_run['run_id']}/compact", {})
    assert status == 200 and compacted["applied"] == "marker", compacted
    assert events_of(api, long_run["run_id"])[-1]["type"] == "context_compaction"
