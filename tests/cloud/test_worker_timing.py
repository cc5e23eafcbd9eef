"""The worker against its invocation's deadline, and chaining a run's steps within one
invocation: the real worker module, moto's SQS, a real Postgres."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.support.lambda_sim import EventSourceMapping, LambdaEnv, http_event, sqs_event
from tests.support.localcloud import API_TOKEN

AUTH = {"authorization": f"Bearer {API_TOKEN}"}


def start_run(api: LambdaEnv, agent: str) -> str:
    resp = api.invoke(http_event("POST", "/v1/runs", headers=AUTH, body={"agent": agent, "prompt": "hi"}))
    assert resp["statusCode"] == 202, resp
    import json

    return str(json.loads(resp["body"])["run_id"])


def run_row(db: str, run_id: str) -> dict[str, Any]:
    with psycopg.connect(db, row_factory=psycopg.rows.dict_row) as conn:
        row = conn.execute("SELECT status, step_no, lease_owner, step_failures, iterations FROM runs WHERE id = %s",
                           (run_id,)).fetchone()
    assert row is not None
    return row


def event_types(db: str, run_id: str) -> list[str]:
    with psycopg.connect(db) as conn:
        return [r[0] for r in conn.execute("SELECT type FROM events WHERE run_id = %s ORDER BY seq", (run_id,))]


def receive(sqs: Any, queue: dict[str, str]) -> list[dict[str, Any]]:
    msgs = sqs.receive_message(QueueUrl=queue["url"], MaxNumberOfMessages=10, WaitTimeSeconds=1,
                               MessageSystemAttributeNames=["All"]).get("Messages", [])
    return list(msgs)


def test_a_model_call_that_outlasts_the_invocation_is_handed_back(
    api: LambdaEnv, sqs: Any, queue: dict[str, str], cloud_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TREADLE_STEP_SAFETY_SECONDS", "0")
    monkeypatch.setenv("TREADLE_MIN_STEP_SECONDS", "0.5")
    worker = LambdaEnv("worker")
    try:
        run_id = start_run(api, "glacial")  # its model answers after 4 s
        [msg] = receive(sqs, queue)
        sqs.delete_message(QueueUrl=queue["url"], ReceiptHandle=msg["ReceiptHandle"])
        # an invocation with 2 s left: the model call cannot finish in it
        out = worker.invoke(sqs_event([msg], queue["arn"]), timeout_s=2.0)
        assert out == {"batchItemFailures": []}  # acknowledged: the step was handed back, not failed
        assert worker.handler.results == {"handed_back": 1}
        row = run_row(cloud_db, run_id)
        assert row["status"] == "running" and row["lease_owner"] is None and row["step_no"] == 0
        assert event_types(cloud_db, run_id) == ["user_input", "started"]  # nothing of the abandoned turn was written
        # the step is enqueued again at once; an invocation with time enough completes it
        [again] = receive(sqs, queue)
        assert again["Body"] == msg["Body"]
        out = worker.invoke(sqs_event([again], queue["arn"]), timeout_s=60.0)
        assert out == {"batchItemFailures": []}
        assert run_row(cloud_db, run_id)["status"] == "completed"
        types = event_types(cloud_db, run_id)
        assert types[-1] == "done" and types.count("text") == 1
    finally:
        worker.close()


def test_steps_of_one_run_chain_within_the_invocation(
    api: LambdaEnv, sqs: Any, queue: dict[str, str], cloud_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TREADLE_CHAIN_RESERVE_SECONDS", "5")  # a 60 s invocation may chain for 50 s
    worker = LambdaEnv("worker")
    try:
        run_id = start_run(api, "calc")  # 3 tool calls: 4 steps
        esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [worker], batch_size=1)
        esm.run_until(lambda: run_row(cloud_db, run_id)["status"] == "completed", timeout_s=60)
        assert esm.records == 1  # one message, one invocation: the other three steps chained
        assert worker.handler.results == {"finished": 1}  # what the chain ended with
        assert run_row(cloud_db, run_id)["iterations"] == 4
    finally:
        worker.close()


def test_the_http_api_stream_ends_soon_after_new_events_not_at_its_budget(
    api: LambdaEnv, sqs: Any, queue: dict[str, str], cloud_db: str
) -> None:
    """Behind API Gateway a response reaches the client only once it ends: a stream that waited
    for its budget would hold the run's first events back for ~25 s."""
    import time

    run_id = start_run(api, "calc")  # not stepped: the run stays where it started
    started = time.monotonic()
    resp = api.invoke(http_event("GET", f"/v1/runs/{run_id}/stream", headers={**AUTH, "accept": "text/event-stream"}),
                      timeout_s=60.0)  # a budget of min(25 s, 60 s - margin)
    elapsed = time.monotonic() - started
    body = resp["body"]
    assert resp["statusCode"] == 200 and "event: user_input" in body and "event: started" in body
    assert body.endswith(": budget exhausted; resume with from_seq\n\n")
    assert run_row(cloud_db, run_id)["status"] in ("queued", "running")
    assert elapsed < 12.5, elapsed  # half the budget; the linger is 1 s
