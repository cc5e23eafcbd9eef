"""The cloud path end to end on a local cloud: moto's SQS, a real Postgres, and the real handler
modules (`functions/*/handler.py`) fed API Gateway HTTP API events and SQS batches the way
Lambda feeds them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.support import lambda_sim
from tests.support.lambda_sim import EventSourceMapping, LambdaEnv, http_event, sqs_event
from tests.support.localcloud import API_TOKEN

AUTH = {"authorization": f"Bearer {API_TOKEN}"}


@pytest.fixture
def envs(cloud_env: dict[str, str]) -> Iterator[dict[str, LambdaEnv]]:
    """Lambda environments by name, created on first use and closed after the test."""
    opened: dict[str, LambdaEnv] = {}

    class Envs(dict[str, LambdaEnv]):
        def __missing__(self, key: str) -> LambdaEnv:
            name = key.split("#", 1)[0]
            opened[key] = self[key] = LambdaEnv(name)
            return opened[key]

    yield Envs()
    for env in opened.values():
        env.close()


def call(api: LambdaEnv, method: str, path: str, body: Any = None, **kw: Any) -> tuple[int, Any, dict[str, str]]:
    headers = {**AUTH, **kw.pop("headers", {})}
    resp = api.invoke(http_event(method, path, headers=headers, body=body, **kw))
    assert set(resp) >= {"statusCode", "headers", "body"}, resp
    hdrs = {k.lower(): v for k, v in resp["headers"].items()}
    payload = resp["body"]
    if hdrs.get("content-type", "").startswith("application/json"):
        payload = json.loads(payload)
    return resp["statusCode"], payload, hdrs


def start_run(api: LambdaEnv, agent: str, prompt: str = "hello") -> str:
    status, body, _ = call(api, "POST", "/v1/runs", {"agent": agent, "prompt": prompt})
    assert status == 202, body
    return str(body["run_id"])


def run_rows(db: str, run_ids: list[str]) -> dict[str, dict[str, Any]]:
    with psycopg.connect(db, row_factory=psycopg.rows.dict_row) as conn:
        rows = conn.execute(
            "SELECT id, status, step_no, lease_owner, iterations, stop_reason FROM runs WHERE id = ANY(%s)",
            (run_ids,),
        ).fetchall()
    return {r["id"]: r for r in rows}


def all_terminal(db: str, run_ids: list[str]) -> bool:
    rows = run_rows(db, run_ids)
    return len(rows) == len(run_ids) and all(
        r["status"] in ("completed", "failed", "cancelled") for r in rows.values()
    )


def events_of(api: LambdaEnv, run_id: str) -> list[dict[str, Any]]:
    status, body, _ = call(api, "GET", f"/v1/runs/{run_id}/events")
    assert status == 200, body
    return list(body["events"])


def assert_exactly_once(events: list[dict[str, Any]], tool_calls: int) -> None:
    """One transcript: contiguous seqs, every tool_use answered exactly once, one ending."""
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    calls = [e["tool_use"]["id"] for e in events if e["type"] == "tool_call"]
    results = [e["tool_use"]["id"] for e in events if e["type"] == "tool_result"]
    assert len(calls) == tool_calls and len(set(calls)) == tool_calls
    assert results == calls
    assert [e["type"] for e in events].count("done") == 1
    assert events[-1]["type"] == "done" and events[-1]["stop_reason"] == "end_turn"


def shape(events: list[dict[str, Any]]) -> list[tuple[int, str]]:
    return [(e["seq"], e["type"]) for e in events]


def queue_is_empty(sqs: Any, url: str) -> bool:
    attrs = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return bool(attrs["ApproximateNumberOfMessages"] == "0" and attrs["ApproximateNumberOfMessagesNotVisible"] == "0")


def sse_frames(body: str) -> list[tuple[int, str, dict[str, Any]]]:
    frames = []
    for block in body.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if line and not line.startswith(":"))
        if "event" in fields and "id" in fields:  # loomcycle's first `session`/`agent` frames carry no id
            frames.append((int(fields["id"]), fields["event"], json.loads(fields["data"])))
    return frames


def test_run_with_several_tool_calls_completes(
    envs: dict[str, LambdaEnv], sqs: Any, queue: dict[str, str], cloud_db: str
) -> None:
    api, worker = envs["api"], envs["worker"]
    status, health, _ = call(api, "GET", "/healthz")
    assert status == 200 and health["ok"] is True
    run_id = start_run(api, "calc")
    esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [worker])
    esm.run_until(lambda: all_terminal(cloud_db, [run_id]), timeout_s=60)

    status, run, _ = call(api, "GET", f"/v1/runs/{run_id}")
    assert status == 200
    assert run["status"] == "completed" and run["stop_reason"] == "end_turn" and run["iterations"] == 4
    events = events_of(api, run_id)
    assert_exactly_once(events, tool_calls=3)
    assert [e["text"] for e in events if e["type"] == "text"] == ["done after 3 tool calls"]
    assert esm.records >= 4 and esm.failures == 0
    assert worker.handler.results.get("continued") == 3 and worker.handler.results.get("finished") == 1

    # the stream of a finished run: every frame, then the response ends
    status, body, hdrs = call(api, "GET", f"/v1/runs/{run_id}/stream", headers={"accept": "text/event-stream"})
    assert status == 200 and hdrs["content-type"].startswith("text/event-stream")
    frames = sse_frames(body)
    assert [(i, t) for i, t, _ in frames] == shape(events)
    # resumable from any seq
    status, body, _ = call(api, "GET", f"/v1/runs/{run_id}/stream", query="from_seq=5")
    assert [i for i, _, _ in sse_frames(body)] == list(range(6, len(events) + 1))
    assert queue_is_empty(sqs, queue["url"])


def test_an_application_tool_parks_the_run_and_the_answer_resumes_it_through_sqs(
    envs: dict[str, LambdaEnv], sqs: Any, queue: dict[str, str], cloud_db: str
) -> None:
    api, worker = envs["api"], envs["worker"]
    tool = {"name": "lookup_order", "input_schema": {"type": "object"}}
    status, body, _ = call(api, "POST", "/v1/runs", {"agent": "shopper", "prompt": "where?", "client_tools": [tool]})
    assert status == 202, body
    run_id = str(body["run_id"])
    esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [worker])

    def waiting() -> bool:
        return bool(run_rows(cloud_db, [run_id])[run_id]["status"] == "waiting")

    esm.run_until(waiting, timeout_s=60)  # parked: no message left, no Lambda held
    assert queue_is_empty(sqs, queue["url"])
    [pending] = [e for e in events_of(api, run_id) if e["type"] == "tool_pending"]
    status, answered, _ = call(api, "POST", f"/v1/runs/{run_id}/tool_results",
                               {"tool_use_id": pending["tool_use"]["id"], "content": "shipped"})
    assert status == 200 and answered["woke"] == 1, answered
    esm.run_until(lambda: all_terminal(cloud_db, [run_id]), timeout_s=60)  # the answer sent the step to SQS
    [result] = [e for e in events_of(api, run_id) if e["type"] == "tool_result"]
    assert (result["text"], result["is_error"]) == ("shipped", False)
    assert run_rows(cloud_db, [run_id])[run_id]["status"] == "completed"


def test_every_message_delivered_twice_gives_one_transcript(
    envs: dict[str, LambdaEnv], sqs: Any, queue: dict[str, str], cloud_db: str
) -> None:
    api = envs["api"]
    once = start_run(api, "calc")
    EventSourceMapping(sqs, queue["url"], queue["arn"], [envs["worker"]]).run_until(
        lambda: all_terminal(cloud_db, [once]), timeout_s=60
    )
    twice = [start_run(api, "calc") for _ in range(2)]
    a, b = envs["worker#a"], envs["worker#b"]
    esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [a, b], duplicate=True)
    esm.run_until(lambda: all_terminal(cloud_db, twice), timeout_s=90)

    reference = shape(events_of(api, once))
    for run_id in twice:
        events = events_of(api, run_id)
        assert_exactly_once(events, tool_calls=3)
        assert shape(events) == reference
    handled = [a.handler.results, b.handler.results]
    executed = sum(r.get("continued", 0) + r.get("finished", 0) for r in handled)
    assert executed == 2 * 4  # every step ran once, whichever worker won it
    assert sum(r.get("dropped", 0) for r in handled) >= 2 * 4  # and its duplicate was dropped
    assert queue_is_empty(sqs, queue["url"])


def test_worker_dies_mid_batch_and_every_run_completes_once(
    envs: dict[str, LambdaEnv], sqs: Any, queue: dict[str, str], cloud_db: str, cloud_env: dict[str, str]
) -> None:
    api = envs["api"]
    run_ids = [start_run(api, "slow", f"job {i}") for i in range(3)]  # three messages waiting
    with subprocess.Popen(  # closes the pipe and reaps the process however the test ends
        [sys.executable, lambda_sim.__file__, "worker-once", queue["url"], queue["arn"]],
        env={**os.environ, **cloud_env},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
            line = proc.stdout.readline().strip()
            assert line.startswith("invoking ") and int(line.split()[1]) >= 2, line
            deadline = time.monotonic() + 30
            while True:  # kill it once one record has committed and the next one holds its lease
                rows = run_rows(cloud_db, run_ids).values()
                if any(r["step_no"] >= 1 for r in rows) and any(r["lease_owner"] for r in rows):
                    break
                assert time.monotonic() < deadline, "the worker never got mid-batch"
                time.sleep(0.05)
            proc.kill()
            proc.wait(timeout=10)
            rest = proc.stdout.read()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert "survived" not in rest
    assert not all_terminal(cloud_db, run_ids)

    # its batch comes back after the visibility timeout; the run it held a lease on comes back
    # when the lease expires, through the maintenance function
    maintenance = envs["maintenance"]
    esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [envs["worker"]])
    esm.run_until(lambda: all_terminal(cloud_db, run_ids), timeout_s=90, idle=lambda: maintenance.invoke({}))
    for run_id in run_ids:
        _, run, _ = call(api, "GET", f"/v1/runs/{run_id}")
        assert run["status"] == "completed" and run["iterations"] == 3, run
        assert_exactly_once(events_of(api, run_id), tool_calls=2)


def test_the_worker_sizes_leases_from_its_remaining_time(
    envs: dict[str, LambdaEnv], sqs: Any, queue: dict[str, str], cloud_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TREADLE_LEASE_SECONDS", "30")
    api, worker = envs["api"], envs["worker"]
    run_id = start_run(api, "echo")
    esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [worker])
    [msg] = esm.receive(wait_s=1)
    # 12 s left, 5 s kept back: less than the 10 s a step may need, so it is not started …
    resp = worker.invoke(sqs_event([msg], queue["arn"]), timeout_s=12)
    assert resp == {"batchItemFailures": [{"itemIdentifier": msg["MessageId"]}]}
    assert run_rows(cloud_db, [run_id])[run_id]["status"] == "queued"
    # … and is visible again at once, not after the queue's visibility timeout
    [again] = esm.receive(wait_s=1)
    assert again["MessageId"] == msg["MessageId"]
    assert worker.invoke(sqs_event([again], queue["arn"]), timeout_s=20) == {"batchItemFailures": []}
    assert all_terminal(cloud_db, [run_id])
    # the lease it took: not the configured 30 s, but what the invocation had left (20 - 5)
    assert worker.handler.container.runtime().steps.lease_s == pytest.approx(15, abs=1)


def test_sse_ends_on_its_time_budget_and_resumes_from_seq(
    envs: dict[str, LambdaEnv], sqs: Any, queue: dict[str, str], cloud_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TREADLE_SSE_BUDGET_SECONDS", "1")
    api = envs["api"]
    # API Gateway buffers: POST /v1/runs answers JSON by default here (the sidecar streams), and
    # streams when asked, as loomcycle's client asks (docs/loomcycle.md)
    status, started, _ = call(api, "POST", "/v1/runs", {"agent": "calc", "prompt": "json"}, headers={"accept": "*/*"})
    assert status == 202, started
    status, body, hdrs = call(api, "POST", "/v1/runs", {"agent": "calc", "prompt": "stream me"},
                              headers={"accept": "text/event-stream, application/json"})
    assert status == 200 and hdrs["content-type"].startswith("text/event-stream")
    first = sse_frames(body)
    assert [t for _, t, _ in first] == ["user_input", "started"]  # no worker yet: the budget ran out
    assert body.rstrip().endswith(": budget exhausted; resume with from_seq")
    run_id = first[1][2]["run_id"]

    EventSourceMapping(sqs, queue["url"], queue["arn"], [envs["worker"]]).run_until(
        lambda: all_terminal(cloud_db, [run_id]), timeout_s=60
    )
    status, body, _ = call(
        api, "GET", f"/v1/runs/{run_id}/stream", headers={"accept": "text/event-stream", "last-event-id": "2"}
    )
    rest = sse_frames(body)
    assert rest[0][0] == 3 and rest[-1][1] == "done"
    assert [i for i, _, _ in first + rest] == list(range(1, len(first) + len(rest) + 1))
    # a stream that ended on its budget is no client leaving: the run was not cancelled
    status, run, _ = call(api, "GET", f"/v1/runs/{run_id}")
    assert (status, run["status"]) == (200, "completed"), run


def test_http_functions_answer_errors_not_500(envs: dict[str, LambdaEnv]) -> None:
    api, webhook, mcp = envs["api"], envs["webhook"], envs["mcp"]
    status, body, _ = call(api, "GET", "/v1/runs/r_doesnotexist")
    assert (status, body["code"]) == (404, "run_not_found")
    status, body, _ = call(api, "POST", "/v1/runs", {"agent": "nope", "prompt": "x"})
    assert (status, body["code"]) == (400, "unknown_agent")
    status, body, _ = call(api, "GET", "/v1/runs", headers={"authorization": "Bearer wrong"})
    assert (status, body["code"]) == (401, "unauthorized")

    route = "ANY /v1/_webhooks/{proxy+}"
    status, body, _ = call(webhook, "POST", "/v1/_webhooks/github", {"action": "opened"}, route_key=route)
    assert (status, body["code"]) == (404, "unknown_webhook")
    status, body, _ = call(webhook, "POST", "/v1/_webhooks/acme/github", {"x": 1}, route_key=route)
    assert (status, body["code"]) == (404, "unknown_webhook")

    status, body, _ = call(mcp, "POST", "/v1/_mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                           route_key="ANY /v1/_mcp", headers={"authorization": "Bearer wrong"})
    assert (status, body["code"]) == (401, "unauthorized")  # the MCP server itself: tests/cloud/test_mcp_function.py
    status, body, _ = call(mcp, "GET", "/v1/_mcp/unknown", route_key="ANY /v1/_mcp")
    assert (status, body["code"]) == (404, "not_found")


def test_maintenance_reenqueues_an_expired_lease(
    envs: dict[str, LambdaEnv], sqs: Any, queue: dict[str, str], cloud_db: str
) -> None:
    api = envs["api"]
    run_id = start_run(api, "echo")
    sqs.purge_queue(QueueUrl=queue["url"])  # the message is lost …
    with psycopg.connect(cloud_db, autocommit=True) as conn:  # … and a dead worker held the lease
        conn.execute(
            "UPDATE runs SET status = 'running', lease_owner = 'dead-worker',"
            " lease_until = now() - interval '1 second' WHERE id = %s",
            (run_id,),
        )
    assert envs["maintenance"].invoke({"source": "aws.scheduler"}) == {"requeued": 1}
    messages = sqs.receive_message(QueueUrl=queue["url"], MaxNumberOfMessages=10, WaitTimeSeconds=1)["Messages"]
    assert [json.loads(m["Body"]) for m in messages] == [{"run_id": run_id, "step_no": 0}]
    sqs.change_message_visibility(QueueUrl=queue["url"], ReceiptHandle=messages[0]["ReceiptHandle"],
                                  VisibilityTimeout=0)
    EventSourceMapping(sqs, queue["url"], queue["arn"], [envs["worker"]]).run_until(
        lambda: all_terminal(cloud_db, [run_id]), timeout_s=30
    )
    events = events_of(api, run_id)
    assert events[-1]["type"] == "done" and [e["text"] for e in events if e["type"] == "text"] == ["hello"]
    assert envs["maintenance"].invoke({}) == {"requeued": 0}


def test_scheduler_function_fires_by_id(envs: dict[str, LambdaEnv]) -> None:
    scheduler = envs["scheduler"]
    out = scheduler.invoke({"schedule_id": "nightly", "scheduled_time": "2025-01-01T00:00:00Z"})
    assert out == {"schedule_id": "nightly", "fired": False, "reason": "unknown_schedule",
                   "scheduled_for": "2025-01-01T00:00:00+00:00"}
    with pytest.raises(ValueError, match="schedule_id"):
        scheduler.invoke({"detail": {}})


def test_poison_message_is_reported_failed_and_ends_in_the_dlq(
    envs: dict[str, LambdaEnv], sqs: Any, queue: dict[str, str]
) -> None:
    sqs.set_queue_attributes(
        QueueUrl=queue["url"],
        Attributes={"RedrivePolicy": json.dumps(
            {"deadLetterTargetArn": sqs.get_queue_attributes(
                QueueUrl=queue["dlq_url"], AttributeNames=["QueueArn"])["Attributes"]["QueueArn"],
             "maxReceiveCount": "1"})},
    )
    sqs.send_message(QueueUrl=queue["url"], MessageBody='{"not": "a step"}')
    esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [envs["worker"]])
    assert esm.poll_once(wait_s=1) == 1 and esm.failures == 1
    # once its visibility timeout (2 s) passes, the next receive moves it to the DLQ instead
    deadline = time.monotonic() + 15
    while not (dead := sqs.receive_message(QueueUrl=queue["dlq_url"]).get("Messages", [])):
        assert esm.receive(wait_s=0) == []  # never delivered to the worker again
        assert time.monotonic() < deadline, "the poison message never reached the DLQ"
        time.sleep(0.1)
    assert [m["Body"] for m in dead] == ['{"not": "a step"}']


async def test_the_client_follows_a_run_across_budgeted_responses(
    envs: dict[str, LambdaEnv], sqs: Any, queue: dict[str, str], cloud_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio
    import base64
    import threading

    import httpx

    from treadle.client.http import TreadleClient

    monkeypatch.setenv("TREADLE_SSE_BUDGET_SECONDS", "1")
    api = envs["api"]
    esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [envs["worker"]])
    stop = threading.Event()

    def poll() -> None:  # Lambda's event source mapping, running beside the client
        while not stop.is_set():
            if esm.poll_once(wait_s=0) == 0:
                time.sleep(0.1)

    responses: list[int] = []

    async def via_api_gateway(request: httpx.Request) -> httpx.Response:
        event = http_event(request.method, request.url.path, query=request.url.query.decode(),
                           headers=dict(request.headers), body=request.content.decode() or None)
        resp = await asyncio.to_thread(api.invoke, event)
        responses.append(resp["statusCode"])
        body = base64.b64decode(resp["body"]) if resp.get("isBase64Encoded") else resp["body"].encode()
        return httpx.Response(resp["statusCode"], headers=resp["headers"], content=body)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        async with TreadleClient("https://abc123defg.execute-api.us-east-1.amazonaws.com", token=API_TOKEN,
                                 transport=httpx.MockTransport(via_api_gateway)) as client:
            events = [ev async for ev in client.run_streaming("slow", "take your time")]
    finally:
        stop.set()
        poller.join()
    assert len(responses) >= 2  # the first response ran out of budget; the client resumed
    assert [ev.event for ev in events[:2]] == ["session", "agent"]  # loomcycle's first frames, once
    events = events[2:]
    assert [ev.id for ev in events] == list(range(1, len(events) + 1))
    assert events[-1].event == "done" and events[-1].data["stop_reason"] == "end_turn"


def test_connections_closed_while_the_environment_was_frozen_are_replaced(
    envs: dict[str, LambdaEnv], cloud_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import treadle_cloud.container

    api = envs["api"]
    assert call(api, "GET", "/v1/runs")[0] == 200
    with psycopg.connect(cloud_db, autocommit=True) as conn:  # what RDS Proxy does to idle clients
        [(closed,)] = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    assert closed >= 1
    monkeypatch.setattr(treadle_cloud.container, "CHECK_IDLE_AFTER_S", 0.0)
    status, body, _ = call(api, "GET", "/v1/runs")
    assert status == 200, body
