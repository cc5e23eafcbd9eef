"""The SQS dispatcher (core, boto3-free) and the cloud settings that feed it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from treadle.dispatch.sqs import MAX_DELAY_S, SqsDispatcher, decode_step_message, encode_step_message
from treadle.domain.runs import StepMessage


class RecordingClient:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def send_message(self, **kwargs: Any) -> dict[str, str]:
        self.calls.append(kwargs)
        return {"MessageId": str(len(self.calls))}


class AsyncClient(RecordingClient):
    async def send_message(self, **kwargs: Any) -> dict[str, str]:  # type: ignore[override]
        self.calls.append(kwargs)
        return {"MessageId": str(len(self.calls))}


def test_round_trip_and_malformed_bodies() -> None:
    msg = StepMessage("r_abc", 7)
    assert json.loads(encode_step_message(msg)) == {"run_id": "r_abc", "step_no": 7}
    assert decode_step_message(encode_step_message(msg)) == msg
    for bad in ("", "[]", "{}", '{"run_id": "r"}', '{"run_id": 1, "step_no": 0}', '{"run_id": "r", "step_no": "1"}',
                '{"run_id": "r", "step_no": true}', '{"run_id": "r", "step_no": -1}', '{"run_id": "", "step_no": 0}'):
        with pytest.raises(ValueError):
            decode_step_message(bad)


async def test_delays_up_to_900_s_go_to_sqs_longer_ones_to_the_database() -> None:
    client = RecordingClient()
    d = SqsDispatcher(client, "https://sqs.example/q")
    assert d.jobs_in_db is False
    await d.enqueue(StepMessage("r_1", 0))
    await d.enqueue(StepMessage("r_1", 1), delay_s=0.2)
    await d.enqueue(StepMessage("r_1", 2), delay_s=MAX_DELAY_S)
    await d.enqueue(StepMessage("r_1", 3), delay_s=MAX_DELAY_S + 1)
    assert [c["DelaySeconds"] for c in client.calls] == [0, 1, 900]
    assert {c["QueueUrl"] for c in client.calls} == {"https://sqs.example/q"}
    assert (d.sent, d.deferred) == (3, 1)


async def test_an_async_client_is_awaited() -> None:
    client = AsyncClient()
    await SqsDispatcher(client, "q").enqueue(StepMessage("r_2", 4))
    assert json.loads(client.calls[0]["MessageBody"]) == {"run_id": "r_2", "step_no": 4}


async def test_against_moto(sqs: Any, queue: dict[str, str]) -> None:
    d = SqsDispatcher(sqs, queue["url"])
    await d.enqueue(StepMessage("r_moto", 0))
    await d.enqueue(StepMessage("r_moto", 1), delay_s=30)
    got = sqs.receive_message(QueueUrl=queue["url"], MaxNumberOfMessages=10, WaitTimeSeconds=1)["Messages"]
    assert [decode_step_message(m["Body"]) for m in got] == [StepMessage("r_moto", 0)]  # the other is delayed


def test_the_core_never_imports_boto3_mangum_or_uvicorn() -> None:
    import subprocess
    import sys

    code = (
        "import sys, treadle.runtime, treadle.api.app, treadle.api.runs, treadle.api.webhooks, treadle.api.mcp,"
        " treadle.dispatch.sqs, treadle_sidecar.app\n"
        "adapters = ('boto3', 'botocore', 'mangum', 'uvicorn', 'aws_lambda_powertools')\n"
        "bad = sorted(m for m in adapters if m in sys.modules)\n"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""
