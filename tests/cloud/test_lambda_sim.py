"""The Lambda simulator behaves like Lambda where the tests rely on it (issue 43 item 1): an
environment is frozen between invocations (what it left running does not run), an invocation
that outlives its timeout is killed (it fails; the next one is a cold start), and the worker's
event source mapping takes batches of the stack's size and returns a failed invocation's batch
to the queue."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.lambda_sim import (
    WORKER_BATCH_SIZE,
    EventSourceMapping,
    FrozenLambdaEnv,
    InvocationFailed,
    LambdaTimeout,
)

HANDLER = '''
import threading, time

INIT_AT = time.time()
ticks = [0]


def _tick():
    while True:
        ticks[0] += 1
        time.sleep(0.01)


threading.Thread(target=_tick, daemon=True).start()


def handler(event, context):
    if event.get("sleep"):
        time.sleep(event["sleep"])
    if event.get("fail"):
        raise RuntimeError("boom")
    if "Records" in event:
        return {"batchItemFailures": []}
    return {"ticks": ticks[0], "init_at": INIT_AT, "remaining_ms": context.get_remaining_time_in_millis()}
'''


@pytest.fixture
def handler_path(tmp_path: Path) -> Path:
    path = tmp_path / "handler.py"
    path.write_text(HANDLER)
    return path


def test_frozen_between_invocations(handler_path: Path) -> None:
    env = FrozenLambdaEnv("sim", timeout_s=5.0, path=handler_path)
    try:
        first = env.invoke({})
        time.sleep(0.5)  # a thawed process would tick ~50 times meanwhile
        second = env.invoke({})
        assert second["ticks"] - first["ticks"] < 10, (first, second)
        assert second["init_at"] == first["init_at"] and env.cold_starts == 1
        assert 0 < second["remaining_ms"] <= 5000
    finally:
        env.close()


def test_killed_at_its_timeout_and_started_again(handler_path: Path) -> None:
    env = FrozenLambdaEnv("sim", timeout_s=1.0, path=handler_path)
    try:
        before = env.invoke({})
        t0 = time.monotonic()
        with pytest.raises(LambdaTimeout):
            env.invoke({"sleep": 30})
        assert time.monotonic() - t0 < 5
        after = env.invoke({})  # a new environment: INIT again
        assert after["init_at"] > before["init_at"] and (env.cold_starts, env.timeouts) == (2, 1)
        with pytest.raises(InvocationFailed):
            env.invoke({"fail": True})
        assert env.invoke({})["init_at"] == after["init_at"]  # an error keeps the environment
    finally:
        env.close()


def test_a_failed_invocation_returns_its_batch(handler_path: Path, sqs: Any, queue: dict[str, str]) -> None:
    assert WORKER_BATCH_SIZE == 1
    for i in range(3):
        sqs.send_message(QueueUrl=queue["url"], MessageBody=json.dumps({"n": i}))
    failing = FrozenLambdaEnv("sim", timeout_s=0.5, path=handler_path)
    try:

        class Sleepy:  # every invocation outlives the timeout
            def invoke(self, event: Any) -> Any:
                return failing.invoke({**event, "sleep": 5})

        esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [Sleepy()])
        assert esm.poll_once() == 1 and esm.failures == 1  # one record per batch, back to the queue
        assert failing.timeouts == 1
    finally:
        failing.close()
    ok = FrozenLambdaEnv("sim", timeout_s=5.0, path=handler_path)
    try:
        esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [ok])
        esm.run_until(lambda: esm.records >= 3 and esm.failures == 0, timeout_s=30)
        assert esm.batches == esm.records  # batches of one
    finally:
        ok.close()
