"""A database outage in the cloud shape: the worker rides it out without dead-lettering the steps
in flight (treadle_cloud/outage.py). The real worker module, moto's SQS, a real Postgres made
unreachable by pointing the worker at a closed loopback port."""

from __future__ import annotations

import socket
import time
from typing import Any

import psycopg
import pytest

from tests.cloud.test_worker_timing import run_row, start_run
from tests.support.lambda_sim import EventSourceMapping, LambdaEnv, sqs_event
from treadle_cloud import outage


def closed_port_url() -> str:
    """A libpq URL to a loopback port nothing listens on (connections are refused at once)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"postgresql://treadle@127.0.0.1:{port}/treadle?connect_timeout=2"


def receive_one(sqs: Any, queue: dict[str, str]) -> dict[str, Any]:
    msgs = sqs.receive_message(
        QueueUrl=queue["url"],
        MaxNumberOfMessages=10,
        WaitTimeSeconds=2,
        MessageSystemAttributeNames=["All"],
        MessageAttributeNames=["All"],
    ).get("Messages", [])
    assert len(msgs) == 1, msgs
    return dict(msgs[0])


def dead_letters(sqs: Any, queue: dict[str, str]) -> int:
    attrs = sqs.get_queue_attributes(QueueUrl=queue["dlq_url"], AttributeNames=["ApproximateNumberOfMessages"])
    return int(attrs["Attributes"]["ApproximateNumberOfMessages"])


def test_an_outage_longer_than_ten_receives_dead_letters_nothing_and_the_run_completes(
    api: LambdaEnv, sqs: Any, queue: dict[str, str], cloud_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = start_run(api, "calc")  # the API reached the database; then it goes away
    monkeypatch.setenv("DATABASE_URL", closed_port_url())
    # the real schedule is 2, 4 … 900 s (test_the_delays_cover_an_hour_within_sqs_limits): no waiting here
    monkeypatch.setattr(outage, "FIRST_DELAY_S", 0)
    worker = LambdaEnv("worker")
    try:
        for attempt in range(1, 13):  # the queue dead-letters after 10 receives
            msg = receive_one(sqs, queue)
            assert msg["Attributes"]["ApproximateReceiveCount"] == "1"  # a new message each time
            if attempt > 1:
                assert msg["MessageAttributes"][outage.ATTEMPTS_ATTR]["StringValue"] == str(attempt - 1)
            out = worker.invoke(sqs_event([msg], queue["arn"]))
            assert out == {"batchItemFailures": []}, out  # acknowledged: sent again, not failed
            sqs.delete_message(QueueUrl=queue["url"], ReceiptHandle=msg["ReceiptHandle"])
        assert worker.handler.results == {"db_unreachable": 12}
        assert dead_letters(sqs, queue) == 0
        assert run_row(cloud_db, run_id)["status"] in ("queued", "running")
        # the database is back: the same environment opens its runtime and the run completes
        monkeypatch.setenv("DATABASE_URL", cloud_db)
        esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [worker], batch_size=1)
        esm.run_until(lambda: run_row(cloud_db, run_id)["status"] == "completed", timeout_s=60)
        assert esm.failures == 0 and dead_letters(sqs, queue) == 0
    finally:
        worker.close()


def test_an_outage_past_the_ride_counts_toward_the_dead_letter_queue(
    api: LambdaEnv, sqs: Any, queue: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    start_run(api, "calc")
    monkeypatch.setenv("DATABASE_URL", closed_port_url())
    msg = receive_one(sqs, queue)
    # the first failure 13 h ago (the ride is 12 h): the record fails as any other
    msg["MessageAttributes"] = {
        outage.SINCE_ATTR: {"DataType": "String", "StringValue": f"{time.time() - 13 * 3600:.0f}"}
    }
    worker = LambdaEnv("worker")
    try:
        out = worker.invoke(sqs_event([msg], queue["arn"]))
        assert out == {"batchItemFailures": [{"itemIdentifier": msg["MessageId"]}]}
        assert worker.handler.results == {}
    finally:
        worker.close()


def test_a_warm_worker_whose_database_goes_away_sends_the_step_again(
    api: LambdaEnv, sqs: Any, queue: dict[str, str], cloud_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step-level path: the runtime is open, then every connection to the database dies and
    none can be made (the pool times out). The same warm environment takes the step 12 times
    (past the queue's 10 receives) with nothing dead-lettered, then the database is back and the
    run completes there."""
    monkeypatch.setattr(outage, "FIRST_DELAY_S", 0)
    worker = LambdaEnv("worker")
    try:
        run_id = start_run(api, "glacial")
        msg = receive_one(sqs, queue)
        sqs.delete_message(QueueUrl=queue["url"], ReceiptHandle=msg["ReceiptHandle"])
        container = worker.handler.container
        rt = worker._thread.submit(container.runtime).result()  # warm: open on the real database
        inner = rt.pool.inner
        conninfo, timeout, sizes = inner.conninfo, inner.timeout, (inner.min_size, inner.max_size)
        # the database goes away: new connections are refused (a pool waits 1 s, 30 s in
        # production) and the ones it holds are killed by the server
        inner.conninfo, inner.timeout = closed_port_url(), 1.0
        worker._thread.submit(container.run, inner.resize(0, inner.max_size)).result()
        with psycopg.connect(cloud_db, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        worker._thread.submit(container.run, inner.check()).result()
        out = worker.invoke(sqs_event([msg], queue["arn"]))
        assert out == {"batchItemFailures": []}, out
        assert worker.handler.results == {"db_unreachable": 1}
        again = receive_one(sqs, queue)
        assert again["Body"] == msg["Body"]
        assert again["MessageAttributes"][outage.ATTEMPTS_ATTR]["StringValue"] == "1"
        assert run_row(cloud_db, run_id)["status"] in ("queued", "running")
        for attempt in range(2, 13):  # the queue dead-letters after 10 receives
            sqs.delete_message(QueueUrl=queue["url"], ReceiptHandle=again["ReceiptHandle"])
            assert worker.invoke(sqs_event([again], queue["arn"])) == {"batchItemFailures": []}
            again = receive_one(sqs, queue)
            assert again["Attributes"]["ApproximateReceiveCount"] == "1"
            assert again["MessageAttributes"][outage.ATTEMPTS_ATTR]["StringValue"] == str(attempt)
        assert worker.handler.results == {"db_unreachable": 12}
        assert dead_letters(sqs, queue) == 0
        # the database is back: the warm environment's pool connects again and the run goes on
        inner.conninfo, inner.timeout = conninfo, timeout
        worker._thread.submit(container.run, inner.resize(*sizes)).result()
        sqs.change_message_visibility(QueueUrl=queue["url"], ReceiptHandle=again["ReceiptHandle"],
                                      VisibilityTimeout=0)
        esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [worker], batch_size=1)
        esm.run_until(lambda: run_row(cloud_db, run_id)["status"] == "completed", timeout_s=90)
        assert esm.failures == 0 and dead_letters(sqs, queue) == 0
    finally:
        worker.close()


def test_the_delays_cover_an_hour_within_sqs_limits() -> None:
    delays = [outage.outage_delay_s(n) for n in range(1, 13)]
    assert delays[:3] == [2, 4, 8] and max(delays) == 900  # SQS's DelaySeconds ceiling
    assert sum(delays) >= 3600  # 12 re-sends: more than an hour, none of them a receive


def test_only_connection_failures_count_as_an_outage(server_url: str) -> None:
    with pytest.raises(psycopg.OperationalError) as refused:
        psycopg.connect(closed_port_url())
    assert outage.database_unreachable(refused.value)
    wrapped = RuntimeError("step failed")
    wrapped.__cause__ = refused.value
    assert outage.database_unreachable(wrapped)
    with psycopg.connect(server_url) as conn, pytest.raises(psycopg.Error) as bad:
        conn.execute("SELECT 1/0")
    assert not outage.database_unreachable(bad.value)  # a statement's failure is not an outage
    assert not outage.database_unreachable(ValueError("not a treadle step message"))
    assert not outage.database_unreachable(TimeoutError("a model call timed out"))
