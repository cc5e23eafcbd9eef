"""A stalled worker's late S3 write never undoes a later committed Edit — with a real process.

The S3 twin of tests/chaos/test_stalled_file_write.py (the host volume). Worker A is a real
process (`lambda_sim.py worker-once`: one worker Lambda environment taking one SQS batch) whose
volumes are S3 prefixes on moto's server; it is SIGSTOPped for certain between journaling a Write
(`volume_effects`) and its PutObject: a trigger makes A's journal insert sleep (A only, by
`PGAPPNAME`) and the stop is sent once pg_stat_activity shows A inside that sleep. A's lease
expires, the maintenance function sweeps it, and worker B (another environment) re-runs the Write,
commits it, runs the later Edit and the Read: the run completes. A is continued: its stale attempt
must write nothing (builtins/files/common.py: the committed result is checked after journaling,
and the PutObject is conditional — If-None-Match: * for a new object, If-Match for an existing
one — so S3 itself refuses a stale writer), and the object still holds the Edit.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from tests.cloud.test_cloud_path import all_terminal, call, events_of, start_run
from tests.support import lambda_sim
from tests.support.e2e import slow_trigger
from tests.support.lambda_sim import EventSourceMapping, LambdaEnv
from tests.support.localcloud import AGENTS

BUCKET = "treadle-volumes-stalled"
SLOW_S = 1.5
START = "title: draft\nend\n"
EDITED = b"title: final\nend\n"
FILER = {"model": "script", "tools": ["Write", "Edit", "Read"], "volumes": ["shared"], "mock": {"script": [
    {"tool": "Write", "input": {"path": "doc.md", "content": START}},
    {"tool": "Edit", "input": {"path": "doc.md", "old_string": "draft", "new_string": "final"}},
    {"tool": "Read", "input": {"path": "doc.md"}},
    {"text": "done"},
]}}
#: A's journal insert sleeps: A is inside it, after choosing to write and before its PutObject
SLOW_JOURNAL = slow_trigger("stalled_s3_journal", SLOW_S, "INSERT ON volume_effects",
                            when="current_setting('application_name') = 'worker-a'")


@pytest.fixture(scope="module")
def config_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cloudstalledcfg") / "treadle.yaml"
    path.write_text(yaml.safe_dump({"agents": {**AGENTS, "filer": FILER},
                                    "volumes": {"shared": {"mode": "rw", "default": True}}}))
    return path


@pytest.fixture
def s3(aws: dict[str, str], cloud_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    import boto3

    client = boto3.client("s3")
    client.create_bucket(Bucket=BUCKET)
    monkeypatch.setenv("TREADLE_VOLUMES_BUCKET", BUCKET)
    yield client


def a_in_journal(db: str) -> bool:
    with psycopg.connect(db) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'worker-a' AND state = 'active'"
            " AND wait_event = 'PgSleep' AND strpos(query, 'volume_effects') > 0").fetchone() == (1,)


def doc_keys(s3: Any) -> list[str]:
    return [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", []) if o["Key"].endswith("/doc.md")]


def test_a_stalled_s3_write_does_not_undo_a_later_edit(
    s3: Any, sqs: Any, queue: dict[str, str], cloud_db: str, cloud_env: dict[str, str]
) -> None:
    api, b, maintenance = LambdaEnv("api"), LambdaEnv("worker"), LambdaEnv("maintenance")
    try:
        run_id = start_run(api, "filer", "write then edit")  # the api's cold start migrated the database
        with psycopg.connect(cloud_db, autocommit=True) as conn:
            conn.execute(SLOW_JOURNAL)
        env = {**os.environ, **cloud_env, "TREADLE_VOLUMES_BUCKET": BUCKET, "PGAPPNAME": "worker-a"}
        with subprocess.Popen([sys.executable, lambda_sim.__file__, "worker-once", queue["url"], queue["arn"]],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) as a:
            try:
                assert a.stdout is not None
                assert a.stdout.readline().strip() == "ready"
                deadline = time.monotonic() + 30
                while not a_in_journal(cloud_db):
                    assert time.monotonic() < deadline, "worker A never reached the Write's journal insert"
                    time.sleep(0.02)
                a.send_signal(signal.SIGSTOP)
                assert doc_keys(s3) == [], "A wrote before the stop"

                # B: the message comes back, A's lease expires and is swept, B re-runs the Write
                esm = EventSourceMapping(sqs, queue["url"], queue["arn"], [b], batch_size=1)
                esm.run_until(lambda: all_terminal(cloud_db, [run_id]), timeout_s=60,
                              idle=lambda: maintenance.invoke({}))
                [key] = doc_keys(s3)
                assert s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == EDITED
                _, run, _ = call(api, "GET", f"/v1/runs/{run_id}")
                assert run["status"] == "completed", run
                results = [e for e in events_of(api, run_id) if e["type"] == "tool_result"]
                assert [r["is_error"] for r in results] == [False] * 3, results
                assert "title: final" in results[2]["text"]

                # A resumes inside its journal insert: its attempt must end without writing
                a.send_signal(signal.SIGCONT)
                rest, _ = a.communicate(timeout=60)
                assert "survived" in rest, rest  # its invocation returned (its step's commit was refused)
            finally:
                if a.poll() is None:
                    a.send_signal(signal.SIGCONT)
                    a.kill()
                    a.wait()
        assert doc_keys(s3) == [key]
        assert s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == EDITED, "A's late write undid the Edit"
        assert [e["type"] for e in events_of(api, run_id)].count("tool_result") == 3  # A's attempt recorded nothing
    finally:
        for env_ in (api, b, maintenance):
            env_.close()
